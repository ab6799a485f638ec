"""Reading an Nsight Systems SQLite export into typed frames (gapscope.trace.frames).

The file is opened truly read-only: SQLite's ``immutable=1`` URI, which takes no lock and
creates no ``-wal``, ``-shm`` or ``-journal`` file beside the export, so it reads from a
read-only folder and beside other readers. An export left with a write in flight (a
non-empty ``-wal`` file, or a hot ``-journal``) is read from a private snapshot: the file and
its journal are copied to a folder of our own, where SQLite applies or rolls back the write;
the user's files are never changed.

Only the columns the analysis needs are selected. Bulk tables go through ADBC's SQLite driver
into Arrow (several times faster than ``pandas.read_sql``), in chunks of rowid ranges that
cover every rowid whatever its value; the standard ``sqlite3`` module is the fallback when ADBC
is not installed. When a column holds anything but integers (text, blobs, reals: a damaged
export) that table is read again with each value's SQLite type beside it, and
gapscope.trace.validation decides, per documented rule, which rows are left out.

:class:`NsysSqlite` owns the export's connection: its name lookups (kernel names, API names)
answer until it is closed, then raise ClosedTraceError.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import tempfile
import threading
import urllib.parse
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gapscope.errors import GapscopeError
from gapscope import heap
from gapscope.text import printable
from gapscope.trace.column_cache import ColumnCache
from gapscope.trace.cuda_api import QUIET_CALLS
from gapscope.trace.frames import (
    ACTIVITY_COLUMNS, API_COLUMNS, NARROW_COLUMNS, NVTX_COLUMNS, NVTX_DOMAIN_CREATE, NVTX_PUSH_POP,
    NVTX_START_END, SYNC_COLUMNS, ActivityKind, ClosedTraceError, TraceFrames, TraceMeta, narrow_ids,
)
from gapscope.trace.nsys_schema import (
    ACTIVITY_REQUIRED, ACTIVITY_TABLES, EVENT_CLASS_BACKTRACE, GRAPH_TABLE, KERNEL_TABLE, NVTX_TABLE,
    RUNTIME_TABLE, SYNC_TABLE, SYNC_TYPE_STREAM_WAIT_EVENT, assemble_frames,
)
from gapscope.trace.validation import Cell

FORMAT = "nsys-sqlite"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: The first bytes of a rollback journal with a transaction in it (SQLite's file format).
JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")

SESSION_TABLE = "ANALYSIS_DETAILS"

#: Columns without which a table cannot be read (an older or damaged schema is refused by name).
REQUIRED_COLUMNS = {
    "activity": ACTIVITY_REQUIRED,
    RUNTIME_TABLE: ("start", "end", "globalTid"),
    NVTX_TABLE: ("start", "eventType", "globalTid"),
    SYNC_TABLE: ("start", "deviceId", "streamId"),
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
        self._source = _Source(p)
        self._conn: sqlite3.Connection | None = None
        self._cache: dict[int, str] = {}
        try:
            self._conn = self._source.connect()
            tables = _tables(self._conn)
            if not tables:
                raise GapscopeError(f"{p}: an empty SQLite database, not an nsys export")
            self.meta = _read_meta(self._conn, p, tables)
            if not ({KERNEL_TABLE, GRAPH_TABLE} & tables):
                raise GapscopeError(
                    f"{p}: no CUDA kernels in this export (no {KERNEL_TABLE} table); record with "
                    "`nsys profile -t cuda,nvtx` and make sure the program launches GPU work"
                )
            self._present = "StringIds" in tables and {"id", "value"} <= _columns(self._conn, "StringIds")
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
        reader = _Reader(self._source, conn, self._source.column_cache())
        try:
            frames = _load_frames(conn, reader, self.meta, syncs, all_calls, self)
        finally:
            reader.close()
        heap.give_back_for(max(len(frames.activities), len(frames.api)))
        return frames

    def activity_rows(self) -> int:
        """The number of GPU activity rows (kernels, graph executions, copies, memsets) the
        export holds, from each table's rowid span (no row is read; nsys numbers rows from 1
        without holes), at most one per 16 bytes of the file whatever a damaged table's rowids say."""
        conn = self._live()
        tables = [t for t in ACTIVITY_TABLES if t in self.meta.tables]
        rows = sum(int(n or 0) for n in _sql(conn, rowid_spans_sql(tables))[0]) if tables else 0
        return min(rows, self.path.stat().st_size // 16)

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
                rows = _sql(conn, "SELECT id, CAST(value AS TEXT) FROM StringIds "
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
        column = _name_column(_columns(conn, table), kind)
        if column == "-1":
            return out
        found: dict[int, int] = {}
        todo = sorted({int(r) for r in rows})
        for chunk in range(0, len(todo), 900):
            part = todo[chunk : chunk + 900]
            marks = ",".join("?" * len(part))
            for r, v in _sql(conn, f"SELECT rowid, {_integer(column)} FROM {table} WHERE rowid IN ({marks})", part):
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
        cols = _columns(conn, KERNEL_TABLE)
        exprs = [_integer(c) if c in cols else "-1" for c in ("start", "end", "deviceId", "streamId", *_SHAPE_SOURCE)]
        rows = _sql(conn, f"SELECT {', '.join(exprs)} FROM {KERNEL_TABLE} ORDER BY rowid")
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
# opening


#: What a read of a damaged file can raise (an undecodable SQLite message is a UnicodeDecodeError).
_DB_ERRORS = (sqlite3.Error, UnicodeDecodeError, OverflowError)


class _Connection(sqlite3.Connection):
    """A connection that knows which file it reads, for error messages."""

    path: str = ""


def _sql(conn: sqlite3.Connection, query: str, params: Iterable = ()) -> list[tuple]:
    try:
        return conn.execute(query, tuple(params)).fetchall()
    except _DB_ERRORS as exc:
        raise _read_error(getattr(conn, "path", ""), exc) from None


def _read_error(path: str, exc: BaseException) -> GapscopeError:
    """One line for a read that failed: a missing table or column is an unknown schema,
    anything else a damaged file."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = printable(text.removeprefix("[SQLite] "), 200)
    where = f"{path}: " if path else ""
    if text.startswith(("no such column", "no such table")):
        return GapscopeError(f"{where}unknown export schema ({text}); gapscope reads nsys exports "
                             "of schema 2.x and 3.x")
    return GapscopeError(f"{where}cannot read the export (SQLite: {text}); the file is truncated "
                         "or damaged")


def check_file(path: str | Path) -> Path:
    """Fail with one clear line unless ``path`` is a regular file holding a SQLite database
    (checked before it is opened: a pipe or a device is refused, not read)."""
    from gapscope.inputs import NSYS_REPORT_SUFFIXES, regular_file

    p = Path(path)
    st = regular_file(p)
    if p.suffix in NSYS_REPORT_SUFFIXES:
        raise GapscopeError(
            f"{p}: is an Nsight Systems report, not its SQLite export; "
            f"run `nsys export --type sqlite {p}` first"
        )
    try:
        with p.open("rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        raise GapscopeError(f"{p}: cannot read ({exc.strerror})") from None
    if not head.startswith(SQLITE_MAGIC):
        raise GapscopeError(f"{p}: not a SQLite file (expected an nsys SQLite export)")
    if len(head) < 100:
        raise GapscopeError(f"{p}: truncated SQLite file ({len(head)} bytes)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    if pages and page_size and st.st_size < pages * page_size:
        raise GapscopeError(
            f"{p}: truncated export: {st.st_size} bytes on disk, the SQLite header promises "
            f"{pages * page_size}"
        )
    return p


def _pending(path: Path) -> tuple[str, Path] | None:
    """('wal' | 'journal', file) when the export has a write in flight beside it: a non-empty
    ``-wal`` file, or a rollback journal that starts with a transaction header (hot)."""
    for kind, suffix in (("wal", "-wal"), ("journal", "-journal")):
        side = path.with_name(path.name + suffix)
        try:
            st = os.stat(side)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            continue  # SQLite ignores anything but a regular file there too
        if kind == "journal":
            try:
                with open(side, "rb") as fh:
                    if fh.read(len(JOURNAL_MAGIC)) != JOURNAL_MAGIC:
                        continue
            except OSError:
                continue
        return kind, side
    return None


class _Source:
    """Where the export is read from: the file itself, immutable, or a private snapshot (copied
    with its pending ``-wal`` or ``-journal``) in a temporary folder that :meth:`close` removes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.warnings: list[str] = []
        self._snapshot: Path | None = None
        pending = _pending(path)
        if pending is None:
            self.uri = "file:" + urllib.parse.quote(os.fsencode(path.resolve())) + "?mode=ro&immutable=1"
            return
        kind, side = pending
        self._snapshot = Path(tempfile.mkdtemp(prefix="gapscope-snapshot-"))
        copy = self._snapshot / "export.sqlite"
        try:
            shutil.copyfile(path, copy)
            shutil.copyfile(side, copy.with_name(copy.name + side.name[len(path.name):]))
        except OSError as exc:
            self.close()
            raise GapscopeError(f"{path}: cannot copy the export to read it with its {side.name} "
                                f"({exc.strerror or exc})") from None
        self.uri = "file:" + urllib.parse.quote(os.fsencode(copy))
        if kind == "journal":
            self.warnings.append(
                f"the export was left with an unfinished write ({side.name} beside it): read from a "
                "private copy with that write rolled back, as SQLite would; the files were not changed")

    def connect(self) -> sqlite3.Connection:
        """The reader's own connection (stdlib sqlite3); undecodable text reads as U+FFFD."""
        try:
            conn = sqlite3.connect(self.uri, uri=True, check_same_thread=False, factory=_Connection)
        except _DB_ERRORS as exc:
            raise _read_error(str(self.path), exc) from None
        conn.path = str(self.path)
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except _DB_ERRORS as exc:
            conn.close()
            raise GapscopeError(f"{self.path}: cannot open as SQLite "
                                f"({printable(str(exc).splitlines()[0] if str(exc) else exc, 200)})") from None
        return conn

    def column_cache(self) -> ColumnCache | None:
        """The columnar cache entry of the export's content (gapscope.trace.column_cache), None when the
        cache is off or the export is read from a snapshot (its content is the file and the
        write in flight together)."""
        return None if self._snapshot is not None else ColumnCache.for_file(self.path)

    def close(self) -> None:
        if self._snapshot is not None:
            shutil.rmtree(self._snapshot, ignore_errors=True)
            self._snapshot = None


def _tables(conn: sqlite3.Connection) -> frozenset[str]:
    return frozenset(r[0] for r in _sql(conn, "SELECT name FROM sqlite_master WHERE type='table'"))


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in _sql(conn, f"PRAGMA table_info({table})")}


def _integer(expr: str) -> str:
    """``expr`` where it holds an integer, else NULL."""
    return f"CASE typeof({expr}) WHEN 'integer' THEN {expr} END"


def rowid_spans_sql(tables: Iterable[str]) -> str:
    """One SELECT of each table's rowid span (max - min + 1, 0 when empty). Each end is its own
    subquery: SQLite finds a lone min() or max() of the rowid at an end of the table's b-tree,
    while both in one SELECT scan every row (0.13 s at 1M kernels, some seconds at 30M)."""
    return "SELECT " + ", ".join(f"coalesce((SELECT max(rowid) FROM {t}) - (SELECT min(rowid) FROM {t}) + 1, 0)"
                                 for t in tables)


def _session_end(conn: sqlite3.Connection, tables: frozenset[str]) -> int | None:
    """The session's end as ANALYSIS_DETAILS records it (the larger of stopTime and duration),
    or None when the export does not record it as integers."""
    if SESSION_TABLE not in tables:
        return None
    cols = _columns(conn, SESSION_TABLE) & {"stopTime", "duration"}
    if not cols:
        return None
    exprs = ", ".join(f"max({_integer(c)})" for c in sorted(cols))
    found = [v for v in _sql(conn, f"SELECT {exprs} FROM {SESSION_TABLE}")[0] if v is not None and v > 0]
    return max(found) if found else None


def _read_meta(conn: sqlite3.Connection, path: Path, tables: frozenset[str]) -> TraceMeta:
    meta_table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in tables), None)
    if meta_table is None or not {"name", "value"} <= _columns(conn, meta_table):
        raise GapscopeError(
            f"{path}: a SQLite file but not an nsys export (no META_DATA_EXPORT table); "
            "make one with `nsys export --type sqlite REPORT.nsys-rep`"
        )
    meta = dict(_sql(conn, f"SELECT CAST(name AS TEXT), CAST(value AS TEXT) FROM {meta_table}"))
    gpu_names: dict[int, str] = {}
    if "TARGET_INFO_GPU" in tables and {"id", "name"} <= _columns(conn, "TARGET_INFO_GPU"):
        gpu_names = {int(i): str(n) for i, n in _sql(
            conn, "SELECT id, CAST(name AS TEXT) FROM TARGET_INFO_GPU WHERE typeof(id) = 'integer'")}
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
# bulk reads


#: Columns of the frames that hold text; every other column is an integer.
TEXT_COLUMNS = frozenset({"name"})


@dataclass(frozen=True)
class Read:
    """One bulk SELECT of ``columns`` (frame column name, SQL expression) ``FROM {source}
    [WHERE {where}]``.

    ``rowid`` names the rowid of the table being split (``n.rowid`` when it has an alias).
    ``typed`` SQL adds, after each integer column, its :class:`Cell` code, and reads text as
    bytes, for a table whose values are not all of their column's type. ``narrow``: id columns
    kept in 32 bits as they are read, each batch whose values all fit (frames.narrow_ids), so
    that a read never holds them in 64 bits; build_frames narrows them anyway.
    """

    table: str
    columns: tuple[tuple[str, str], ...]
    source: str = ""
    where: str = ""
    rowid: str = "rowid"
    narrow: frozenset[str] = frozenset()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    def sql(self, lo: int | None = None, hi: int | None = None, *, typed: bool = False) -> str:
        """The SELECT of rowids in ``[lo, hi)`` (an open side when None)."""
        conds = [self.where] if self.where else []
        if lo is not None:
            conds.append(f"{self.rowid} >= {lo}")
        if hi is not None:
            conds.append(f"{self.rowid} < {hi}")
        where = f" WHERE {' AND '.join(f'({c})' for c in conds)}" if conds else ""
        return f"SELECT {self._select(typed)} FROM {self.source or self.table}{where}"

    def _select(self, typed: bool) -> str:
        out = []
        for name, expr in self.columns:
            if not typed:
                out.append(f"{expr} AS {name}")
            elif name in TEXT_COLUMNS:
                out.append(f"CAST({expr} AS BLOB) AS {name}")
            else:
                out.append(f"{_integer(expr)} AS {name}, CASE typeof({expr}) WHEN 'integer' THEN "
                           f"{int(Cell.OK)} WHEN 'null' THEN {int(Cell.NULL)} ELSE {int(Cell.NOT_INTEGER)} "
                           f"END AS {name}__cell")
        return ", ".join(out)


#: Rows per parallel chunk of a bulk read, and the most chunks one table is split into.
CHUNK_ROWS = 400_000
MAX_CHUNKS = 16

#: Rows per Arrow batch the ADBC driver returns (its default, 1,024, makes a million-row chunk
#: hundreds of pieces).
BATCH_ROWS = 16_384

#: A frame's columns: values (one array, or a chunk's pieces in order, which _concat joins), and
#: the Cell code per row (None where every cell was read).
Columns = dict[str, tuple[np.ndarray | list[np.ndarray], np.ndarray | None]]


class _Typed(Exception):
    """A chunk held values of another type than its column's: read the table typed."""


class _Reader:
    """Runs bulk SELECTs into DataFrames: through ADBC into Arrow when it is installed, split
    into rowid chunks read on a small thread pool (SQLite decoding is the bottleneck and ADBC
    releases the GIL); through the stdlib sqlite3 module otherwise. With a ``cache``
    (gapscope.trace.column_cache), each ADBC query's Arrow table is taken from it when kept there,
    and kept there when read from the export."""

    def __init__(self, source: _Source, conn: sqlite3.Connection, cache: ColumnCache | None = None) -> None:
        self._source = source
        self._conn = conn
        self._cache = cache
        try:
            import adbc_driver_sqlite.dbapi  # noqa: F401

            self._adbc = True
        except ImportError:
            self._adbc = False
        self._local = threading.local()
        self._opened: list = []
        self._lock = threading.Lock()

    def frames(self, reads: dict[str, Read]) -> dict[str, tuple[pd.DataFrame, dict[str, np.ndarray]]]:
        """Run every read: (frame, Cell codes of the columns that have damaged cells) per key.
        Integer columns come back as int64 (-1 where the cell held no integer), text as object."""
        if not self._adbc:
            return {key: _frame(self._sqlite_columns(r), r) for key, r in reads.items()}
        tasks = [(key, lo, hi) for key, r in reads.items() for lo, hi in _bounds(self._conn, r)]
        workers = max(1, min(4, os.cpu_count() or 1, len(tasks)))
        chunks = {key: sum(1 for k, _, _ in tasks if k == key) for key in reads}
        big = len(tasks) > len(reads)  # some table was split: a read of CHUNK_ROWS rows or more
        out = {}
        waiting: dict[str, list[Columns | None]] = {}
        with ThreadPoolExecutor(workers) as pool:
            # Chunks come back in task order, a table's together: each table is joined (and its
            # chunks let go) as soon as its last chunk is in, while the next ones are read.
            for (key, _, _), part in zip(tasks, pool.map(
                    lambda t: self._chunk(reads[t[0]], t[1], t[2], typed=False), tasks)):
                mine = waiting.setdefault(key, [])
                mine.append(part)
                del part
                if big:  # the driver's batches, freed as each chunk became columns, scattered over the heap
                    heap.give_back_freed_pages()
                if len(mine) < chunks[key]:
                    continue
                del waiting[key]
                r = reads[key]
                if any(p is None for p in mine):  # values of the wrong type somewhere: read it typed
                    mine = [self._chunk(r, lo, hi, typed=True) for k, lo, hi in tasks if k == key]
                out[key] = _frame(_concat(mine, r), r)
                del mine
        return out

    def _chunk(self, r: Read, lo: int | None, hi: int | None, *, typed: bool) -> Columns | None:
        """One chunk's columns; None when a fast read met a value of another type than its
        column's (or failed at all: the typed read then says why, or reads it)."""
        try:
            table = self._fetch(r.sql(lo, hi, typed=typed))
            return _typed_columns(table, r) if typed else _fast_columns(table, r)
        except GapscopeError:
            raise
        except Exception as exc:
            if not typed:
                return None
            raise _read_error(str(self._source.path), exc) from None

    def _fetch(self, query: str):
        if self._cache is not None:
            table = self._cache.table(query)
            if table is None:
                table = self._query(query)
                self._cache.keep(query, table)
            return table
        return self._query(query)

    def _query(self, query: str):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            import adbc_driver_sqlite.dbapi as adbc

            conn = self._local.conn = adbc.connect(self._source.uri)
            with self._lock:
                self._opened.append(conn)
            cur = conn.cursor()
            # No memory map: mapped pages of the file count as the process's resident memory
            # (the whole file, up to the map's size); read through SQLite's small page cache.
            cur.execute("PRAGMA mmap_size = 0")
            cur.fetchall()
            cur.close()
        cur = conn.cursor()
        try:
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            cur.execute(query)
            return cur.fetch_arrow_table()
        finally:
            cur.close()

    def _sqlite_columns(self, r: Read) -> Columns:
        """All of a read through the stdlib sqlite3 module, typed (the fallback without ADBC)."""
        rows = _sql(self._conn, r.sql(typed=True))
        out: Columns = {}
        i = 0
        for name in r.names:
            col = [row[i] for row in rows]
            if name in TEXT_COLUMNS:
                out[name] = _decoded(col)
                i += 1
            else:
                values = pd.Series(col, dtype=object).fillna(-1).to_numpy(dtype=np.int64)
                cells = np.array([row[i + 1] for row in rows], dtype=np.uint8)
                out[name] = (values, cells if cells.any() else None)
                i += 2
        return out

    def close(self) -> None:
        for conn in self._opened:
            conn.close()
        self._opened.clear()
        if self._cache is not None:
            self._cache.finish()




def _bounds(conn: sqlite3.Connection, r: Read) -> list[tuple[int | None, int | None]]:
    """Rowid ranges ``[lo, hi)`` that together cover every row of the read's table, whatever
    its rowids (negative, huge, sparse): at most MAX_CHUNKS of them, an open range at each end."""
    lo, hi = _sql(conn, f"SELECT (SELECT min(rowid) FROM {r.table}), (SELECT max(rowid) FROM {r.table})")[0]
    if lo is None or hi is None:
        return [(None, None)]
    width = hi - lo + 1  # a Python int: no overflow for any pair of int64 rowids
    n = min(MAX_CHUNKS, -(-width // CHUNK_ROWS))
    if n <= 1:
        return [(None, None)]
    cuts = [lo + i * (width // n) for i in range(1, n)]
    return [(None, cuts[0]), *zip(cuts[:-1], cuts[1:]), (cuts[-1], None)]


def _fast_columns(table, r: Read) -> Columns | None:
    """Columns of a chunk read as is; None when a column came back as another type than
    integers (or valid UTF-8 text), which only a damaged table gives."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out: Columns = {}
    for name, col in zip(r.names, table.columns):
        t = col.type
        if pa.types.is_null(t):
            out[name] = (np.full(len(col), None if name in TEXT_COLUMNS else -1,
                                 dtype=object if name in TEXT_COLUMNS else np.int64),
                         np.full(len(col), Cell.NULL, dtype=np.uint8))
        elif name in TEXT_COLUMNS:
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                return None
            try:
                col.validate(full=True)
            except pa.ArrowInvalid:
                return None
            out[name] = (col.to_pandas().to_numpy(dtype=object), None)
        elif pa.types.is_integer(t):
            cells = None
            if col.null_count:
                values = pc.fill_null(col, -1).to_numpy().astype(np.int64, copy=False)
                cells = pc.is_null(col).to_numpy(zero_copy_only=False).astype(np.uint8) * np.uint8(Cell.NULL)
            elif name in r.narrow:  # 32-bit copies of each batch where it fits
                values = [narrow_ids(c.to_numpy().astype(np.int64, copy=False)) for c in col.chunks]
            else:
                # One copy of the chunk's batches: a view would hold the driver's whole batch
                # (every column of it is freed at once) until the table is joined.
                values = np.concatenate([c.to_numpy() for c in col.chunks]).astype(np.int64, copy=False) \
                    if col.num_chunks else np.zeros(0, dtype=np.int64)
            out[name] = (values, cells)
        else:
            return None
    return out


def _typed_columns(table, r: Read) -> Columns:
    """Columns of a chunk read with ``Read.sql(typed=True)``: each integer column followed by
    its Cell codes, text as bytes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out: Columns = {}
    cols = iter(table.columns)
    for name in r.names:
        col = next(cols)
        if name in TEXT_COLUMNS:
            try:
                text = pc.cast(col, pa.string()) if not pa.types.is_null(col.type) else col
                out[name] = (text.to_pandas().to_numpy(dtype=object), None)
            except (pa.ArrowInvalid, UnicodeDecodeError):  # bytes that are not UTF-8
                out[name] = _decoded(col.to_pylist())
            continue
        code = next(cols)
        values = np.full(len(col), -1, dtype=np.int64) if pa.types.is_null(col.type) \
            else pc.fill_null(col, -1).to_numpy().astype(np.int64, copy=False)
        cells = np.zeros(0, np.uint8) if len(code) == 0 else code.to_numpy().astype(np.uint8)
        out[name] = (values, cells if cells.any() else None)
    return out


def _decoded(raw: list) -> tuple[np.ndarray, np.ndarray | None]:
    """Text values (str or bytes) as str, bytes that are not UTF-8 replaced by U+FFFD, with
    NOT_TEXT codes where that happened (a damaged file only: this is a loop per value)."""
    values = np.empty(len(raw), dtype=object)
    cells = np.zeros(len(raw), dtype=np.uint8)
    for i, v in enumerate(raw):
        if isinstance(v, bytes):
            try:
                v = v.decode("utf-8")
            except UnicodeDecodeError:
                v = v.decode("utf-8", "replace")
                cells[i] = Cell.NOT_TEXT
        values[i] = v
    return values, cells if cells.any() else None


def _concat(parts: list[Columns], r: Read) -> Columns:
    """The chunks' columns joined, each column's chunks let go as soon as it is joined (so a
    read holds its chunks and one joined column, not two copies of the table). A column's
    pieces (the 32-bit ids are one block per batch, under the mmap threshold) go back to the
    system before the next column is joined (heap.give_back_for), not at the next hand-back
    after the table; with the whole chunks copied out of the driver's batches
    (:func:`_fast_columns`), the kernel table's join at 10M kernels starts at 579 MiB resident,
    not 962."""
    out: Columns = {}
    rows = sum(_length(p[r.names[0]][0]) for p in parts) if r.names else 0
    for name in r.names:
        heap.give_back_for(rows)
        taken = [p.pop(name) for p in parts]
        values = [v if isinstance(v, list) else [v] for v, _ in taken]
        codes = [c for _, c in taken]
        del taken
        cells = None
        if any(c is not None for c in codes):
            cells = np.concatenate([np.zeros(sum(x.size for x in v), np.uint8) if c is None else c
                                    for v, c in zip(values, codes)])
        pieces = [x for v in values for x in v]
        del values
        if not pieces:
            joined = np.zeros(0, dtype=object if name in TEXT_COLUMNS else np.int64)
        elif len(pieces) == 1 and pieces[0].base is None:
            joined = pieces[0]
        else:  # also copies a lone view out of the driver's buffers, which then go; 64-bit if any piece is
            joined = np.concatenate(pieces)
        out[name] = (joined, cells)
    return out


def _length(values: np.ndarray | list[np.ndarray]) -> int:
    """The rows of a chunk's column (one array, or its pieces)."""
    return sum(v.size for v in values) if isinstance(values, list) else values.size


def _frame(columns: Columns, r: Read) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    frame = pd.DataFrame({name: v for name, (v, _) in columns.items()}, copy=False)
    return frame, {name: c for name, (_, c) in columns.items() if c is not None}


# ------------------------------------------------------------------------------------------
# the frames


def _col(cols: set[str], name: str, fallback: str = "-1") -> str:
    return name if name in cols else fallback


def _require(conn: sqlite3.Connection, table: str, needed: tuple[str, ...]) -> set[str]:
    """The table's columns; GapscopeError naming those it lacks of ``needed``."""
    cols = _columns(conn, table)
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


#: The columns each read keeps in 32 bits as it goes: frames.NARROW_COLUMNS but ``proc``, which
#: is read as the whole globalPid and becomes its process part (``>> 24``) only once assembled.
READ_NARROW = {key: frozenset(columns) - {"proc"} for key, columns in NARROW_COLUMNS.items()}


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
    return [int(r[0]) for r in _sql(conn, f"SELECT id FROM StringIds WHERE typeof(id) = 'integer' "
                                          f"AND ({marks})", params)]


def _load_frames(conn: sqlite3.Connection, reader: _Reader, meta: TraceMeta, with_syncs: bool,
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
    got = reader.frames(reads)
    frames = {key: df for key, (df, _) in got.items()}
    cells = {key: c for key, (_, c) in got.items() if c}
    return assemble_frames(meta, frames, names, names._source.warnings, cells)
