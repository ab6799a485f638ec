"""Reading an Nsight Systems SQLite export into typed frames (gapscope.trace.frames).

The file is opened read-only (SQLite URI ``mode=ro``), checked to be an nsys export, and only
the columns the analysis needs are selected. Bulk tables go through ADBC's SQLite driver into
Arrow (several times faster than ``pandas.read_sql``); the standard ``sqlite3`` module is the
fallback when ADBC is not installed. Optional tables that are absent (nsys exports lazily: an
empty table is usually missing) give empty frames.

:class:`NsysSqlite` owns the export's connection: its name lookups (kernel names, API names)
answer until it is closed, then raise ClosedTraceError.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gapscope.errors import GapscopeError
from gapscope.trace.cuda_api import QUIET_CALLS
from gapscope.trace.frames import (
    ACTIVITY_COLUMNS, API_COLUMNS, NVTX_COLUMNS, NVTX_DOMAIN_CREATE, NVTX_PUSH_POP, NVTX_START_END,
    SYNC_COLUMNS, ActivityKind, ClosedTraceError, TraceFrames, TraceMeta,
)
from gapscope.trace.nsys_schema import (
    EVENT_CLASS_BACKTRACE, GRAPH_TABLE, KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, NVTX_TABLE,
    RUNTIME_TABLE, SYNC_TABLE, SYNC_TYPE_STREAM_WAIT_EVENT, assemble_frames,
)

FORMAT = "nsys-sqlite"
SQLITE_MAGIC = b"SQLite format 3\x00"

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
        self._conn: sqlite3.Connection | None = _open(p)
        self._cache: dict[int, str] = {}
        try:
            tables = _tables(self._conn)
            if not tables:
                raise GapscopeError(f"{p}: an empty SQLite database, not an nsys export")
            self.meta = _read_meta(self._conn, p, tables)
            if not ({KERNEL_TABLE, GRAPH_TABLE} & tables):
                raise GapscopeError(
                    f"{p}: no CUDA kernels in this export (no {KERNEL_TABLE} table); record with "
                    "`nsys profile -t cuda,nvtx` and make sure the program launches GPU work"
                )
        except BaseException:
            self.close()
            raise
        self._present = "StringIds" in tables

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

    # -- frames -----------------------------------------------------------------------------
    def load(self, *, syncs: bool = False, all_calls: bool = False) -> TraceFrames:
        """The frames an analysis needs (``syncs``: also the stream-wait synchronization records,
        for gap attribution; ``all_calls``: every CUDA API call, not only those that can launch
        or synchronize). Every activity's name id is read either way."""
        conn = self._live()
        reader = _Reader(self.path, conn)
        try:
            frames = _load_frames(conn, reader, self.meta, syncs, all_calls, self)
        finally:
            reader.close()
        return frames

    # -- names (gapscope.trace.frames.Names) --------------------------------------------------
    def lookup(self, ids: Iterable[int]) -> dict[int, str]:
        """Map each StringIds id to its string ('[unknown]' where the export has none)."""
        conn = self._live()
        ids = [int(i) for i in ids]
        wanted = set(ids) - self._cache.keys()
        if wanted and self._present:
            todo = sorted(wanted)
            for chunk in range(0, len(todo), 900):
                part = todo[chunk : chunk + 900]
                marks = ",".join("?" * len(part))
                rows = _sql(conn, f"SELECT id, value FROM StringIds WHERE id IN ({marks})", part)
                self._cache.update({int(i): str(v) for i, v in rows})
        for i in wanted:
            self._cache.setdefault(i, "[unknown]")
        return {i: self._cache[i] for i in ids}

    def activity_name_ids(self, kind: ActivityKind, rows: np.ndarray) -> np.ndarray:
        """The name id (kernels: shortName, else demangledName) or graph id of activities by
        their rowids in their table; -1 where the export has none."""
        conn = self._live()
        table = {ActivityKind.KERNEL: KERNEL_TABLE, ActivityKind.GRAPH: GRAPH_TABLE}.get(kind)
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(rows.size, -1, dtype=np.int64)
        if table is None or table not in self.meta.tables:
            return out
        column = _name_column(_columns(conn, table), kind)
        if column == "NULL":
            return out
        found: dict[int, int] = {}
        todo = sorted({int(r) for r in rows})
        for chunk in range(0, len(todo), 900):
            part = todo[chunk : chunk + 900]
            marks = ",".join("?" * len(part))
            for r, v in _sql(conn, f"SELECT rowid, {column} FROM {table} WHERE rowid IN ({marks})", part):
                found[int(r)] = -1 if v is None else int(v)
        return np.array([found.get(int(r), -1) for r in rows.tolist()], dtype=np.int64)

    # -- extra columns ----------------------------------------------------------------------
    def kernel_shapes(self, activities: pd.DataFrame) -> pd.DataFrame:
        """Launch configuration per activity row (SHAPE_COLUMNS: grid, block, dynamic shared
        memory); -1 for rows that are not kernels or columns the export lacks.

        The frames carry no launch configuration; the case figures need it. Kernels come first
        in the activity frame, in the table's rowid order, which is checked on (start, end,
        device, stream); if that ever fails, rows are matched on those four columns instead."""
        conn = self._live()
        n = len(activities)
        out = pd.DataFrame({c: np.full(n, -1, dtype=np.int64) for c in SHAPE_COLUMNS})
        if KERNEL_TABLE not in self.meta.tables:
            return out
        cols = _columns(conn, KERNEL_TABLE)
        exprs = [c if c in cols else "-1" for c in _SHAPE_SOURCE]
        rows = _sql(conn, f"SELECT start, end, deviceId, streamId, {', '.join(exprs)} "
                          f"FROM {KERNEL_TABLE} ORDER BY rowid")
        shapes = pd.DataFrame(rows, columns=[*_SHAPE_KEYS, *SHAPE_COLUMNS]).fillna(-1).astype(np.int64)
        kern = np.flatnonzero(activities["kind"].to_numpy() == ActivityKind.KERNEL)
        mine = activities.iloc[kern]
        if len(shapes) == kern.size and all(
                np.array_equal(shapes[k].to_numpy(), mine[k].to_numpy()) for k in _SHAPE_KEYS):
            picked = shapes[list(SHAPE_COLUMNS)].to_numpy()
        else:  # pragma: no cover - a reader that reorders rows
            keyed = mine[list(_SHAPE_KEYS)].reset_index(drop=True).merge(
                shapes.drop_duplicates(list(_SHAPE_KEYS)), on=list(_SHAPE_KEYS), how="left")
            picked = keyed[list(SHAPE_COLUMNS)].fillna(-1).astype(np.int64).to_numpy()
        out.iloc[kern, :] = picked
        return out


def _uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"


def _sql(conn: sqlite3.Connection, query: str, params: Iterable = ()) -> list[tuple]:
    try:
        return conn.execute(query, tuple(params)).fetchall()
    except sqlite3.DatabaseError as exc:
        raise GapscopeError(f"cannot read the export ({exc}): the file is truncated or corrupt") from None


def check_file(path: str | Path) -> Path:
    """Fail with one clear line unless ``path`` is an existing SQLite file."""
    p = Path(path)
    if not p.exists():
        raise GapscopeError(f"{p}: no such file")
    if p.is_dir():
        raise GapscopeError(f"{p}: is a directory, not an nsys SQLite export")
    try:
        with p.open("rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        raise GapscopeError(f"{p}: cannot read ({exc.strerror})") from None
    if p.suffix == ".nsys-rep" or p.suffix == ".qdrep":
        raise GapscopeError(
            f"{p}: is an Nsight Systems report, not its SQLite export; "
            f"run `nsys export --type sqlite {p}` first"
        )
    if not head.startswith(SQLITE_MAGIC):
        raise GapscopeError(f"{p}: not a SQLite file (expected an nsys SQLite export)")
    if len(head) < 100:
        raise GapscopeError(f"{p}: truncated SQLite file ({len(head)} bytes)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    size = p.stat().st_size
    if pages and page_size and size < pages * page_size:
        raise GapscopeError(
            f"{p}: truncated export: {size} bytes on disk, the SQLite header promises "
            f"{pages * page_size}"
        )
    return p


def _open(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(_uri(path), uri=True, check_same_thread=False)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise GapscopeError(f"{path}: cannot open as SQLite ({exc})") from None
    return conn


def _tables(conn: sqlite3.Connection) -> frozenset[str]:
    return frozenset(r[0] for r in _sql(conn, "SELECT name FROM sqlite_master WHERE type='table'"))


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in _sql(conn, f"PRAGMA table_info({table})")}


def _read_meta(conn: sqlite3.Connection, path: Path, tables: frozenset[str]) -> TraceMeta:
    meta_table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in tables), None)
    if meta_table is None:
        raise GapscopeError(
            f"{path}: a SQLite file but not an nsys export (no META_DATA_EXPORT table); "
            "make one with `nsys export --type sqlite REPORT.nsys-rep`"
        )
    meta = dict(_sql(conn, f"SELECT name, value FROM {meta_table}"))
    gpu_names: dict[int, str] = {}
    if "TARGET_INFO_GPU" in tables and {"id", "name"} <= _columns(conn, "TARGET_INFO_GPU"):
        gpu_names = {int(i): str(n) for i, n in _sql(conn, "SELECT id, name FROM TARGET_INFO_GPU")}
    return TraceMeta(
        path=str(path),
        format=FORMAT,
        nsys_version=meta.get("EXPORT_PRODUCT_VERSION"),
        export_schema=meta.get("EXPORT_SCHEMA_VERSION"),
        tables=tables,
        gpu_names=gpu_names,
    )


@dataclass(frozen=True)
class Read:
    """One bulk SELECT: ``SELECT {select} FROM {source} [WHERE {where}]`` into columns ``names``.

    ``rowid`` names the rowid of the table being split (``n.rowid`` when it has an alias).
    """

    table: str
    select: str
    names: tuple[str, ...]
    source: str = ""
    where: str = ""
    rowid: str = "rowid"

    def sql(self, lo: int | None = None, hi: int | None = None) -> str:
        conds = [c for c in (self.where,) if c]
        if lo is not None:
            conds.append(f"{self.rowid} > {lo} AND {self.rowid} <= {hi}")
        where = f" WHERE {' AND '.join(f'({c})' for c in conds)}" if conds else ""
        return f"SELECT {self.select} FROM {self.source or self.table}{where}"


#: Columns of the frames that hold text; every other column is an integer.
TEXT_COLUMNS = frozenset({"name"})

#: Rows per parallel chunk of a bulk read.
CHUNK_ROWS = 400_000


class _Reader:
    """Runs bulk SELECTs into DataFrames: through ADBC into Arrow when it is installed, split
    into rowid chunks read on a small thread pool (SQLite decoding is the bottleneck and ADBC
    releases the GIL); through the stdlib sqlite3 module otherwise."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self._path = path
        self._conn = conn
        try:
            import adbc_driver_sqlite.dbapi  # noqa: F401

            self._adbc = True
        except ImportError:
            self._adbc = False
        self._local = threading.local()
        self._opened: list = []
        self._lock = threading.Lock()

    def frames(self, reads: dict[str, Read]) -> dict[str, pd.DataFrame]:
        """Run every read; integer columns come back as int64 with NULL as -1, text as object."""
        try:
            if not self._adbc:
                return {key: self._frame_sqlite(r) for key, r in reads.items()}
            tasks = []
            for key, r in reads.items():
                top = _sql(self._conn, f"SELECT max(rowid) FROM {r.table}")[0][0] or 0
                if top <= CHUNK_ROWS:
                    tasks.append((key, r.sql()))
                else:
                    for lo in range(0, top, CHUNK_ROWS):
                        tasks.append((key, r.sql(lo, min(lo + CHUNK_ROWS, top))))
            workers = max(1, min(4, os.cpu_count() or 1, len(tasks)))
            with ThreadPoolExecutor(workers) as pool:
                tables = list(pool.map(lambda t: self._fetch(t[1]), tasks))
            import pyarrow as pa

            out = {}
            for key, r in reads.items():
                parts = [tb for (k, _), tb in zip(tasks, tables) if k == key]
                out[key] = _to_frame(pa.concat_tables(parts, promote_options="permissive"), r.names)
            return out
        except GapscopeError:
            raise
        except Exception as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise GapscopeError(
                f"cannot read the export ({first}): the file is truncated, corrupt, or of an unknown schema"
            ) from None

    def _fetch(self, query: str):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            import adbc_driver_sqlite.dbapi as adbc

            conn = self._local.conn = adbc.connect(_uri(self._path))
            cur = conn.cursor()
            cur.execute("PRAGMA mmap_size = 4294967296")  # read pages in place, no copies
            cur.fetchall()
            cur.close()
            with self._lock:
                self._opened.append(conn)
        cur = conn.cursor()
        try:
            cur.execute(query)
            return cur.fetch_arrow_table()
        finally:
            cur.close()

    def _frame_sqlite(self, r: Read) -> pd.DataFrame:
        rows = _sql(self._conn, r.sql())
        df = pd.DataFrame.from_records(rows, columns=list(r.names))
        for name in r.names:
            if name not in TEXT_COLUMNS:
                df[name] = df[name].fillna(-1).astype(np.int64)
        return df

    def close(self) -> None:
        for conn in self._opened:
            conn.close()
        self._opened.clear()


def _to_frame(table, names: tuple[str, ...]) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.compute as pc

    out = {}
    for name, col in zip(names, table.columns):
        if pa.types.is_null(col.type):
            out[name] = np.full(len(col), -1, dtype=np.int64)
        elif pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
            out[name] = pc.fill_null(col, -1).to_numpy().astype(np.int64, copy=False)
        else:
            out[name] = col.to_pandas().to_numpy(dtype=object)
    return pd.DataFrame(out, copy=False)


def _col(cols: set[str], name: str, fallback: str = "NULL") -> str:
    return name if name in cols else fallback


def _name_column(cols: set[str], kind: ActivityKind) -> str:
    """The column that names an activity of this kind (a StringIds id, or a graph id)."""
    if kind is ActivityKind.KERNEL:
        return _col(cols, "shortName", _col(cols, "demangledName"))
    if kind is ActivityKind.GRAPH:
        return _col(cols, "graphId")
    return "NULL"


def _activity_read(conn: sqlite3.Connection, table: str, kind: ActivityKind) -> Read:
    """The bulk read of one activity table, with every row's name id (kernels: the short name's
    StringIds id; graph executions: the graph id; -1 for copies): one int column more than the
    frames need for the metrics, read in bulk because gapscope.analysis.communication asks
    every kernel's name."""
    cols = _columns(conn, table)
    missing = {"start", "end", "deviceId", "streamId"} - cols
    if missing:
        raise GapscopeError(
            f"unknown export schema: {table} lacks column(s) {', '.join(sorted(missing))}"
        )
    exprs = ["rowid", "start", "end", "deviceId", "streamId", _col(cols, "globalPid"),
             _col(cols, "correlationId"), _name_column(cols, kind)]
    columns = (*ACTIVITY_COLUMNS, "name_id")
    return Read(table, _aliased(exprs, columns), columns)


def _aliased(exprs: list[str], names: tuple[str, ...]) -> str:
    return ", ".join(f"{e} AS {n}" for e, n in zip(exprs, names))


def _quiet_call_ids(conn: sqlite3.Connection) -> list[int]:
    """StringIds of the API calls in QUIET_CALLS, under any _vNNNN suffix."""
    marks = " OR ".join(["value = ? OR value LIKE ? ESCAPE '!'"] * len(QUIET_CALLS))
    params = [x for name in sorted(QUIET_CALLS) for x in (name, name + "!_v%")]
    return [int(r[0]) for r in _sql(conn, f"SELECT id FROM StringIds WHERE {marks}", params)]


def _load_frames(conn: sqlite3.Connection, reader: _Reader, meta: TraceMeta, with_syncs: bool,
                 all_calls: bool, names: NsysSqlite) -> TraceFrames:
    tables = meta.tables
    reads: dict[str, Read] = {}
    kinds = {KERNEL_TABLE: ActivityKind.KERNEL, GRAPH_TABLE: ActivityKind.GRAPH,
             MEMCPY_TABLE: ActivityKind.MEMCPY, MEMSET_TABLE: ActivityKind.MEMSET}
    for table, kind in kinds.items():
        if table in tables:
            reads[table] = _activity_read(conn, table, kind)
    if RUNTIME_TABLE in tables:
        cols = _columns(conn, RUNTIME_TABLE)
        conds = [f"eventClass != {EVENT_CLASS_BACKTRACE}"] if "eventClass" in cols else []
        quiet = [] if all_calls or "StringIds" not in tables else _quiet_call_ids(conn)
        if quiet:
            conds.append(f"nameId NOT IN ({', '.join(map(str, quiet))})")
        reads["api"] = Read(
            RUNTIME_TABLE, "start, end, globalTid, correlationId, nameId", API_COLUMNS,
            where=" AND ".join(conds),
        )
    if NVTX_TABLE in tables:
        cols = _columns(conn, NVTX_TABLE)
        text = "n.text" if "text" in cols else "NULL"
        join = ""
        if "textId" in cols and "StringIds" in tables:
            text = f"COALESCE({text}, s.value)"
            join = " LEFT JOIN StringIds s ON s.id = n.textId"
        domain = "n.domainId" if "domainId" in cols else "0"
        reads["nvtx"] = Read(
            NVTX_TABLE,
            f"n.start, COALESCE(n.end, -1), n.globalTid, n.eventType, {domain}, {text}",
            NVTX_COLUMNS,
            source=f"{NVTX_TABLE} n{join}",
            where=f"n.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END}, {NVTX_DOMAIN_CREATE})",
            rowid="n.rowid",
        )
    if with_syncs and SYNC_TABLE in tables:
        cols = _columns(conn, SYNC_TABLE)
        exprs = ["start", "deviceId", "streamId", _col(cols, "globalPid")]
        # Only stream-wait-event records are used (gap attribution's dependency rule).
        reads["syncs"] = Read(SYNC_TABLE, _aliased(exprs, SYNC_COLUMNS), SYNC_COLUMNS,
                              where=f"syncType = {SYNC_TYPE_STREAM_WAIT_EVENT}" if "syncType" in cols else "")
    return assemble_frames(meta, reader.frames(reads), names)
