"""Reading an Nsight Systems SQLite export into typed frames (gapscope.trace.frames).

The export is opened read-only, or from a private snapshot when a write is in flight
(gapscope.trace.sqlite_source); its bulk tables are read in rowid chunks into columns
(gapscope.trace.sqlite_reads), through the column cache (gapscope.trace.cached_reads). This
module says what is read: the export's meta data, which tables and columns make each frame, and
the name lookups.

:class:`NsysSqlite` owns the export's connection: its name lookups (kernel names, API names)
answer until it is closed, then raise ClosedTraceError.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from gapscope.errors import GapscopeError
from gapscope.trace.cached_reads import entry_of
from gapscope.trace.cuda_api import QUIET_CALLS
from gapscope.trace.frames import (
    ACTIVITY_COLUMNS, API_COLUMNS, NVTX_COLUMNS, NVTX_DOMAIN_CREATE, NVTX_PUSH_POP,
    NVTX_START_END, SYNC_COLUMNS, ActivityKind, ClosedTraceError, RowCounts, TraceFrames, TraceMeta,
)
from gapscope.trace.nsys_schema import (
    ACTIVITY_REQUIRED, ACTIVITY_TABLES, CONTEXT_REQUIRED, CONTEXT_SOURCE, CONTEXT_TABLE, ENV_TABLE,
    EVENT_CLASS_BACKTRACE, GPU_INFO, GRAPH_TABLE, KERNEL_TABLE, NVTX_TABLE, READ_NARROW, RUNTIME_TABLE,
    STREAM_REQUIRED, STREAM_SOURCE, STREAM_TABLE, SYNC_TABLE, SYNC_TYPE_STREAM_WAIT_EVENT, assemble_frames,
    gpu_info_names,
)
from gapscope.trace.sqlite_reads import BulkReader, Read, integer_sql
from gapscope.trace.sqlite_source import Source, check_file, columns_of, sql_rows, tables_of

FORMAT = "nsys-sqlite"

SESSION_TABLE = "ANALYSIS_DETAILS"

#: Columns without which a table cannot be read (an older or damaged schema is refused by name).
REQUIRED_COLUMNS = {
    "activity": ACTIVITY_REQUIRED,
    RUNTIME_TABLE: ("start", "end", "globalTid"),
    NVTX_TABLE: ("start", "eventType", "globalTid"),
    SYNC_TABLE: ("start", "deviceId", "streamId"),
    STREAM_TABLE: STREAM_REQUIRED,
    CONTEXT_TABLE: CONTEXT_REQUIRED,
}

#: Kernel launch configuration columns (kernel_shapes) and their export columns.
SHAPE_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "shared_bytes")
_SHAPE_SOURCE = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "dynamicSharedMemory")
_SHAPE_KEYS = ("start", "end", "device", "stream")


class NsysSqlite:
    """An open nsys SQLite export: its meta data, its frames on demand, and the name lookups
    (StringIds, kernel and graph ids by row) that stay answerable until :meth:`close`."""

    format = FORMAT

    def __init__(self, path: str | Path) -> None:
        p = check_file(path)
        self.path = p
        self._source = Source(p)
        self._conn: sqlite3.Connection | None = None
        self._cache: dict[int, str] = {}
        try:
            self._conn = self._source.connect()
            tables = tables_of(self._conn)
            if not tables:
                raise GapscopeError(f"{p}: an empty SQLite database, not an nsys export")
            self.meta = _read_meta(self._conn, p, tables)
            if not ({KERNEL_TABLE, GRAPH_TABLE} & tables):
                raise GapscopeError(
                    f"{p}: no CUDA kernels in this export (no {KERNEL_TABLE} table); record with "
                    "`nsys profile -t cuda,nvtx` and make sure the program launches GPU work"
                )
            self._present = "StringIds" in tables and {"id", "value"} <= columns_of(self._conn, "StringIds")
        except BaseException:
            self.close()
            raise

    # -- the connection ---------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._conn is None

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ClosedTraceError(f"{self.path}: the trace is closed; read it inside its `with` block")
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._source.close()

    # -- frames -----------------------------------------------------------------------------
    def load(self, *, syncs: bool = False, all_calls: bool = False) -> TraceFrames:
        """The frames an analysis needs (``syncs``: also the stream-wait synchronization records,
        for gap attribution; ``all_calls``: every CUDA API call, not only those that can launch
        or synchronize), damaged rows left out with a warning (gapscope.trace.validation). Every
        activity's name id is read either way."""
        conn = self._live()
        reader = BulkReader(self._source, conn, entry_of(self._source))
        try:
            frames = _load_frames(conn, reader, self.meta, syncs, all_calls, self)
        finally:
            reader.close()
        return frames

    def row_counts(self) -> RowCounts:
        """The rows of the GPU activity tables (kernels, graph executions, copies, memsets), of
        the CUDA API table, of the synchronization records and of NVTX_EVENTS, from each table's
        rowid span (no row is read: two b-tree searches a table; nsys numbers rows from 1
        without holes), each at most one per 16 bytes of the file whatever a damaged table's
        rowids say."""
        conn = self._live()
        groups = {"activities": [t for t in ACTIVITY_TABLES if t in self.meta.tables]}
        groups |= {key: [t] for key, t in (("api", RUNTIME_TABLE), ("syncs", SYNC_TABLE), ("nvtx", NVTX_TABLE))
                   if t in self.meta.tables}
        tables = [t for ts in groups.values() for t in ts]
        spans = dict(zip(tables, sql_rows(conn, rowid_spans_sql(tables))[0])) if tables else {}
        most = self.path.stat().st_size // 16
        found = {key: min(sum(int(spans[t] or 0) for t in ts), most) for key, ts in groups.items()}
        return RowCounts(FORMAT, **{"activities": 0, "api": 0, "syncs": 0, "nvtx": 0, **found})

    # -- names (gapscope.trace.frames.Names) --------------------------------------------------
    def lookup(self, ids: Iterable[int]) -> dict[int, str]:
        """Map each StringIds id to its string ('[unknown]' where the export has none; bytes
        that are not UTF-8 read as U+FFFD)."""
        conn = self._live()
        ids = [int(i) for i in ids]
        wanted = set(ids) - self._cache.keys()
        if wanted and self._present:
            todo = sorted(wanted)
            for chunk in range(0, len(todo), 900):
                part = todo[chunk : chunk + 900]
                marks = ",".join("?" * len(part))
                rows = sql_rows(conn, "SELECT id, CAST(value AS TEXT) FROM StringIds "
                                  f"WHERE typeof(id) = 'integer' AND id IN ({marks})", part)
                self._cache.update({int(i): "" if v is None else str(v) for i, v in rows})
        for i in wanted:
            self._cache.setdefault(i, "[unknown]")
        return {i: self._cache[i] for i in ids}

    def activity_name_ids(self, kind: ActivityKind, rows: np.ndarray) -> np.ndarray:
        """The name id (kernels: shortName, else demangledName) or graph id of activities by
        their rowids in their table; -1 where the export has none (or holds no integer)."""
        conn = self._live()
        table = {ActivityKind.KERNEL: KERNEL_TABLE, ActivityKind.GRAPH: GRAPH_TABLE}.get(kind)
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(rows.size, -1, dtype=np.int64)
        if table is None or table not in self.meta.tables:
            return out
        column = _name_column(columns_of(conn, table), kind)
        if column == "-1":
            return out
        found: dict[int, int] = {}
        todo = sorted({int(r) for r in rows})
        for chunk in range(0, len(todo), 900):
            part = todo[chunk : chunk + 900]
            marks = ",".join("?" * len(part))
            for r, v in sql_rows(conn, f"SELECT rowid, {integer_sql(column)} FROM {table} WHERE rowid IN ({marks})", part):
                found[int(r)] = -1 if v is None else int(v)
        return np.array([found.get(int(r), -1) for r in rows.tolist()], dtype=np.int64)

    # -- extra columns ----------------------------------------------------------------------
    def kernel_shapes(self, activities: pd.DataFrame) -> pd.DataFrame:
        """Launch configuration per activity row (SHAPE_COLUMNS: grid, block, dynamic shared
        memory); -1 for rows that are not kernels, columns the export lacks, or values that
        are not integers.

        The frames carry no launch configuration; the case figures need it. Kernels come first
        in the activity frame, in the table's rowid order, which is checked on (start, end,
        device, stream); if that fails (rows left out as damaged), rows are matched on those
        four columns instead."""
        conn = self._live()
        n = len(activities)
        out = pd.DataFrame({c: np.full(n, -1, dtype=np.int64) for c in SHAPE_COLUMNS})
        if KERNEL_TABLE not in self.meta.tables:
            return out
        cols = columns_of(conn, KERNEL_TABLE)
        exprs = [integer_sql(c) if c in cols else "-1" for c in ("start", "end", "deviceId", "streamId", *_SHAPE_SOURCE)]
        rows = sql_rows(conn, f"SELECT {', '.join(exprs)} FROM {KERNEL_TABLE} ORDER BY rowid")
        shapes = pd.DataFrame(rows, columns=[*_SHAPE_KEYS, *SHAPE_COLUMNS]).fillna(-1).astype(np.int64)
        kern = np.flatnonzero(activities["kind"].to_numpy() == ActivityKind.KERNEL)
        mine = activities.iloc[kern]
        if len(shapes) == kern.size and all(
                np.array_equal(shapes[k].to_numpy(), mine[k].to_numpy()) for k in _SHAPE_KEYS):
            picked = shapes[list(SHAPE_COLUMNS)].to_numpy()
        else:
            keyed = mine[list(_SHAPE_KEYS)].reset_index(drop=True).merge(
                shapes.drop_duplicates(list(_SHAPE_KEYS)), on=list(_SHAPE_KEYS), how="left")
            picked = keyed[list(SHAPE_COLUMNS)].fillna(-1).astype(np.int64).to_numpy()
        out.iloc[kern, :] = picked
        return out



# ------------------------------------------------------------------------------------------
# the export's meta data


def rowid_spans_sql(tables: Iterable[str]) -> str:
    """One SELECT of each table's rowid span (max - min + 1, 0 when empty). Each end is its own
    subquery: SQLite finds a lone min() or max() of the rowid at an end of the table's b-tree,
    while both in one SELECT scan every row (docs/performance.md)."""
    return "SELECT " + ", ".join(f"coalesce((SELECT max(rowid) FROM {t}) - (SELECT min(rowid) FROM {t}) + 1, 0)"
                                 for t in tables)


def _session_end(conn: sqlite3.Connection, tables: frozenset[str]) -> int | None:
    """The session's end as ANALYSIS_DETAILS records it (the larger of stopTime and duration),
    or None when the export does not record it as integers."""
    if SESSION_TABLE not in tables:
        return None
    cols = columns_of(conn, SESSION_TABLE) & {"stopTime", "duration"}
    if not cols:
        return None
    exprs = ", ".join(f"max({integer_sql(c)})" for c in sorted(cols))
    found = [v for v in sql_rows(conn, f"SELECT {exprs} FROM {SESSION_TABLE}")[0] if v is not None and v > 0]
    return max(found) if found else None


def _read_meta(conn: sqlite3.Connection, path: Path, tables: frozenset[str]) -> TraceMeta:
    meta_table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in tables), None)
    if meta_table is None or not {"name", "value"} <= columns_of(conn, meta_table):
        raise GapscopeError(
            f"{path}: a SQLite file but not an nsys export (no META_DATA_EXPORT table); "
            "make one with `nsys export --type sqlite REPORT.nsys-rep`"
        )
    meta = dict(sql_rows(conn, f"SELECT CAST(name AS TEXT), CAST(value AS TEXT) FROM {meta_table}"))
    gpu_names: dict[int, str] = {}
    if "TARGET_INFO_GPU" in tables and {"id", "name"} <= columns_of(conn, "TARGET_INFO_GPU"):
        gpu_names = {int(i): str(n) for i, n in sql_rows(
            conn, "SELECT id, CAST(name AS TEXT) FROM TARGET_INFO_GPU WHERE typeof(id) = 'integer'")}
    if not gpu_names and ENV_TABLE in tables and {"name", "value"} <= columns_of(conn, ENV_TABLE):
        rows = sql_rows(conn, f"SELECT CAST(value AS TEXT) FROM {ENV_TABLE} WHERE name = ? LIMIT 1", (GPU_INFO,))
        gpu_names = gpu_info_names(rows[0][0]) if rows else {}
    return TraceMeta(
        path=str(path),
        format=FORMAT,
        nsys_version=meta.get("EXPORT_PRODUCT_VERSION"),
        export_schema=meta.get("EXPORT_SCHEMA_VERSION"),
        tables=tables,
        gpu_names=gpu_names,
        session_end_ns=_session_end(conn, tables),
    )



# ------------------------------------------------------------------------------------------
# the frames


def _col(cols: set[str], name: str, fallback: str = "-1") -> str:
    return name if name in cols else fallback


def _require(conn: sqlite3.Connection, table: str, needed: tuple[str, ...]) -> set[str]:
    """The table's columns; GapscopeError naming those it lacks of ``needed``."""
    cols = columns_of(conn, table)
    missing = [c for c in needed if c not in cols]
    if missing:
        raise GapscopeError(
            f"{getattr(conn, 'path', '')}: unknown export schema: {table} lacks column(s) "
            f"{', '.join(missing)}"
        )
    return cols


def _name_column(cols: set[str], kind: ActivityKind) -> str:
    """The column that names an activity of this kind (a StringIds id, or a graph id)."""
    if kind is ActivityKind.KERNEL:
        return _col(cols, "shortName", _col(cols, "demangledName"))
    if kind is ActivityKind.GRAPH:
        return _col(cols, "graphId")
    return "-1"


def _activity_read(conn: sqlite3.Connection, table: str, kind: ActivityKind) -> Read:
    """The bulk read of one activity table, with every row's name id (kernels: the short name's
    StringIds id; graph executions: the graph id; -1 for copies): one int column more than the
    frames need for the metrics, read in bulk because gapscope.analysis.communication asks
    every kernel's name."""
    cols = _require(conn, table, REQUIRED_COLUMNS["activity"])
    exprs = ["rowid", "start", "end", "deviceId", "streamId", _col(cols, "globalPid"),
             _col(cols, "correlationId"), _name_column(cols, kind)]
    return Read(table, tuple(zip((*ACTIVITY_COLUMNS, "name_id"), exprs)), narrow=READ_NARROW["activities"])


def _quiet_call_ids(conn: sqlite3.Connection) -> list[int]:
    """StringIds of the API calls in QUIET_CALLS, under any _vNNNN suffix."""
    marks = " OR ".join(["value = ? OR value LIKE ? ESCAPE '!'"] * len(QUIET_CALLS))
    params = [x for name in sorted(QUIET_CALLS) for x in (name, name + "!_v%")]
    return [int(r[0]) for r in sql_rows(conn, f"SELECT id FROM StringIds WHERE typeof(id) = 'integer' "
                                          f"AND ({marks})", params)]


def _load_frames(conn: sqlite3.Connection, reader: BulkReader, meta: TraceMeta, with_syncs: bool,
                 all_calls: bool, names: NsysSqlite) -> TraceFrames:
    """The frames (gapscope.trace.nsys_schema.assemble_frames), checked with the Cell codes of
    the cells that held no integer (gapscope.trace.validation)."""
    tables = meta.tables
    reads: dict[str, Read] = {}
    for table, kind in ACTIVITY_TABLES.items():
        if table in tables:
            reads[table] = _activity_read(conn, table, kind)
    if RUNTIME_TABLE in tables:
        cols = _require(conn, RUNTIME_TABLE, REQUIRED_COLUMNS[RUNTIME_TABLE])
        conds = [f"eventClass IS NOT {EVENT_CLASS_BACKTRACE}"] if "eventClass" in cols else []
        quiet = [] if all_calls or not names._present or "nameId" not in cols else _quiet_call_ids(conn)
        if quiet:  # a NULL nameId is kept (and warned about as damaged), not filtered away
            conds.append(f"nameId IS NULL OR nameId NOT IN ({', '.join(map(str, quiet))})")
        exprs = ("start", "end", "globalTid", _col(cols, "correlationId"), _col(cols, "nameId"))
        reads["api"] = Read(RUNTIME_TABLE, tuple(zip(API_COLUMNS, exprs)), where=" AND ".join(conds),
                            narrow=READ_NARROW["api"])
    if NVTX_TABLE in tables:
        cols = _require(conn, NVTX_TABLE, REQUIRED_COLUMNS[NVTX_TABLE])
        text = "n.text" if "text" in cols else "NULL"
        join = ""
        if "textId" in cols and names._present:
            text = f"COALESCE({text}, s.value)"
            join = " LEFT JOIN StringIds s ON s.id = n.textId"
        exprs = ("n.start", "n.end" if "end" in cols else "NULL", "n.globalTid", "n.eventType",
                 "n.domainId" if "domainId" in cols else "0", text)
        reads["nvtx"] = Read(
            NVTX_TABLE, tuple(zip(NVTX_COLUMNS, exprs)),
            source=f"{NVTX_TABLE} n{join}",
            where=f"n.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}, {NVTX_DOMAIN_CREATE})",
            rowid="n.rowid",
        )
    if with_syncs and SYNC_TABLE in tables:
        cols = _require(conn, SYNC_TABLE, REQUIRED_COLUMNS[SYNC_TABLE])
        exprs = ("start", "deviceId", "streamId", _col(cols, "globalPid"))
        # Only stream-wait-event records are used (gap attribution's dependency rule).
        reads["syncs"] = Read(SYNC_TABLE, tuple(zip(SYNC_COLUMNS, exprs)),
                              where=f"syncType = {SYNC_TYPE_STREAM_WAIT_EVENT}" if "syncType" in cols else "")
    if with_syncs and {STREAM_TABLE, CONTEXT_TABLE} <= tables:
        # The stream kinds (nsys_schema.stream_kinds), for the legacy default stream's rule.
        # Tables without the columns they need say nothing: every stream reads as of unknown kind.
        parts = (("stream_info", STREAM_TABLE, STREAM_SOURCE), ("contexts", CONTEXT_TABLE, CONTEXT_SOURCE))
        have = {table: columns_of(conn, table) for _, table, _ in parts}
        if all(set(REQUIRED_COLUMNS[table]) <= have[table] for _, table, _ in parts):
            for key, table, source in parts:
                columns = tuple((name, _col(have[table], column, "0")) for name, column in source.items())
                reads[key] = Read(table, columns)
    got = reader.frames(reads)
    frames = {key: df for key, (df, _) in got.items()}
    cells = {key: c for key, (_, c) in got.items() if c}
    return assemble_frames(meta, frames, names, names._source.warnings, cells)
