"""Reading an Nsight Systems SQLite export into typed frames.

The file is opened read-only (SQLite URI ``mode=ro``), checked to be an nsys export, and only
the columns the analysis needs are selected. Bulk tables go through ADBC's SQLite driver into
Arrow (several times faster than ``pandas.read_sql``); the standard ``sqlite3`` module is the
fallback when ADBC is not installed. Optional tables that are absent (nsys exports lazily: an
empty table is usually missing) give empty frames.
"""

from __future__ import annotations

import enum
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from gapscope.errors import GapscopeError

SQLITE_MAGIC = b"SQLite format 3\x00"

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC_TABLE = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX_TABLE = "NVTX_EVENTS"

# NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE).
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75
# CUPTI_ACTIVITY_KIND_RUNTIME.eventClass of rows that repeat a call for its backtrace.
EVENT_CLASS_BACKTRACE = 67
# CUPTI_ACTIVITY_KIND_SYNCHRONIZATION.syncType of cudaStreamWaitEvent records.
SYNC_TYPE_STREAM_WAIT_EVENT = 2

#: Export schema major versions this reader was checked against.
KNOWN_SCHEMA_MAJORS = (2, 3)


class ActivityKind(enum.IntEnum):
    """What a row of the GPU activity frame is."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    GRAPH = 3  # one whole graph launch, as nsys records it with --cuda-graph-trace=graph


@dataclass(frozen=True)
class TraceMeta:
    """Facts about the export itself."""

    path: str
    nsys_version: str | None
    export_schema: str | None
    tables: frozenset[str]
    gpu_names: dict[int, str] = field(default_factory=dict)


@dataclass
class TraceFrames:
    """The typed frames an analysis needs, all times in integer nanoseconds.

    ``activities``: one row per kernel, memcpy, memset or graph-level execution with columns
    row (its rowid in its table), start, end, device, stream, proc, corr, kind (ActivityKind), and
    name_id when loaded with ``all_calls`` (else names come from ``activity_names``).
    ``api``: CUDA runtime and driver calls: start, end, proc, tid (globalTid), corr, name_id.
    ``nvtx``: NVTX push/pop and start/end ranges: start, end, tid, event_type, name, domain.
    ``syncs``: CUPTI stream-wait-event records: start (inside the cudaStreamWaitEvent call that
    issued the wait), device, stream, proc.
    ``proc`` is the export's globalPid/globalTid with the thread bits dropped (``>> 24``): the
    key that makes correlation ids unique across processes.
    """

    meta: TraceMeta
    activities: pd.DataFrame
    api: pd.DataFrame
    nvtx: pd.DataFrame
    syncs: pd.DataFrame
    strings: "StringTable"

    def activity_names(self, idx: np.ndarray) -> list[str]:
        """A readable name per activity index: the kernel's short name, ``graph <id>``,
        ``memcpy`` or ``memset``. Name ids are read for just these rows when not loaded."""
        a = self.activities
        idx = np.asarray(idx, dtype=np.int64)
        kind = a["kind"].to_numpy()[idx]
        if "name_id" in a:
            name_id = a["name_id"].to_numpy()[idx]
        else:
            name_id = np.full(idx.size, -1, dtype=np.int64)
            rows = a["row"].to_numpy()[idx]
            for k, table in ((ActivityKind.KERNEL, KERNEL_TABLE), (ActivityKind.GRAPH, GRAPH_TABLE)):
                sel = np.flatnonzero(kind == k)
                if sel.size:
                    found = self.strings.column_by_rowid(table, _name_column(set(self.strings.columns(table)), k),
                                                         rows[sel])
                    name_id[sel] = [found.get(int(r), -1) for r in rows[sel]]
        kernel_names = self.strings.lookup(int(i) for i in name_id[kind == ActivityKind.KERNEL])
        labels = {ActivityKind.MEMCPY: "memcpy", ActivityKind.MEMSET: "memset"}
        return [kernel_names.get(n, "?") if k == ActivityKind.KERNEL else f"graph {n}"
                if k == ActivityKind.GRAPH else labels[ActivityKind(k)]
                for k, n in zip(kind.tolist(), name_id.tolist())]


class StringTable:
    """Lazy lookup of StringIds values: fetches only the ids asked for."""

    def __init__(self, conn: sqlite3.Connection | None, present: bool) -> None:
        self._conn = conn
        self._present = present
        self._cache: dict[int, str] = {}

    def lookup(self, ids: Iterable[int]) -> dict[int, str]:
        """Map each id to its string ('[unknown]' where the export has none)."""
        ids = [int(i) for i in ids]
        wanted = set(ids) - self._cache.keys()
        if wanted and self._present and self._conn is not None:
            todo = sorted(wanted)
            for chunk in range(0, len(todo), 900):
                part = todo[chunk : chunk + 900]
                marks = ",".join("?" * len(part))
                rows = _sql(self._conn, f"SELECT id, value FROM StringIds WHERE id IN ({marks})", part)
                self._cache.update({int(i): str(v) for i, v in rows})
        for i in wanted:
            self._cache.setdefault(i, "[unknown]")
        return {i: self._cache[i] for i in ids}

    def columns(self, table: str) -> set[str]:
        """The columns of a table of the export (empty once closed)."""
        return _columns(self._conn, table) if self._conn is not None else set()

    def column_by_rowid(self, table: str, column: str, rowids: np.ndarray) -> dict[int, int]:
        """``column`` of the rows with these rowids, as {rowid: value}."""
        if self._conn is None or column == "NULL":
            return {}
        out: dict[int, int] = {}
        todo = sorted({int(r) for r in rowids})
        for chunk in range(0, len(todo), 900):
            part = todo[chunk : chunk + 900]
            marks = ",".join("?" * len(part))
            for r, v in _sql(self._conn, f"SELECT rowid, {column} FROM {table} WHERE rowid IN ({marks})", part):
                out[int(r)] = -1 if v is None else int(v)
        return out

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


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


#: CUDA API calls that never launch GPU work nor block on it, left out of the ``api`` frame
#: unless every call is asked for: in PyTorch and CuPy traces they are up to half of all calls.
#: (A stream wait's issue time is read from its SYNCHRONIZATION record instead.)
QUIET_CALLS = frozenset({
    "cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord", "cuEventRecordWithFlags",
    "cudaStreamWaitEvent", "cuStreamWaitEvent", "cudaEventQuery", "cuEventQuery",
    "cudaEventCreate", "cudaEventCreateWithFlags", "cuEventCreate", "cudaEventDestroy", "cuEventDestroy",
    "cudaEventElapsedTime", "cuEventElapsedTime",
    "cudaGetDevice", "cudaSetDevice", "cudaGetDeviceCount", "cudaGetLastError", "cudaPeekAtLastError",
    "cudaStreamIsCapturing", "cudaStreamGetCaptureInfo", "cuStreamIsCapturing", "cuStreamGetCaptureInfo",
    "cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxGetDevice", "cuDevicePrimaryCtxGetState",
    "cuKernelGetName", "cuKernelGetAttribute", "cuKernelGetFunction", "cuGetProcAddress",
    "cudaFuncGetAttributes", "cudaFuncSetAttribute", "cuFuncGetAttribute", "cuFuncSetAttribute",
    "cudaDeviceGetAttribute", "cuDeviceGetAttribute", "cudaPointerGetAttributes", "cuPointerGetAttribute",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuModuleGetFunction", "cuLibraryGetKernel", "cuLibraryGetModule",
})

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


def _activity_read(conn: sqlite3.Connection, table: str, kind: ActivityKind, names: bool) -> Read:
    cols = _columns(conn, table)
    missing = {"start", "end", "deviceId", "streamId"} - cols
    if missing:
        raise GapscopeError(
            f"unknown export schema: {table} lacks column(s) {', '.join(sorted(missing))}"
        )
    exprs = ["rowid", "start", "end", "deviceId", "streamId", _col(cols, "globalPid"),
             _col(cols, "correlationId")]
    columns = ACTIVITY_COLUMNS
    if names:
        exprs.append(_name_column(cols, kind))
        columns = (*ACTIVITY_COLUMNS, "name_id")
    return Read(table, _aliased(exprs, columns), columns)


def _aliased(exprs: list[str], names: tuple[str, ...]) -> str:
    return ", ".join(f"{e} AS {n}" for e, n in zip(exprs, names))


ACTIVITY_COLUMNS = ("row", "start", "end", "device", "stream", "proc", "corr")
API_COLUMNS = ("start", "end", "tid", "corr", "name_id")
NVTX_COLUMNS = ("start", "end", "tid", "event_type", "domain_id", "name")
SYNC_COLUMNS = ("start", "device", "stream", "proc")


def _empty(names: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: np.zeros(0, dtype=object if c == "name" else np.int64) for c in names})


def load_trace(path: str | Path, *, syncs: bool = False, all_calls: bool = False) -> TraceFrames:
    """Open an nsys SQLite export read-only and load the frames an analysis needs
    (``syncs``: also the stream-wait synchronization records, for gap attribution;
    ``all_calls``: every CUDA API call, not only those that can launch or synchronize, and
    every activity's name id).

    Raises GapscopeError (exit 2) for anything that is not a readable nsys export with CUDA
    activity in it.
    """
    p = check_file(path)
    conn = _open(p)
    try:
        tables = _tables(conn)
        if not tables:
            raise GapscopeError(f"{p}: an empty SQLite database, not an nsys export")
        meta = _read_meta(conn, p, tables)
        if not ({KERNEL_TABLE, GRAPH_TABLE} & tables):
            raise GapscopeError(
                f"{p}: no CUDA kernels in this export (no {KERNEL_TABLE} table); record with "
                "`nsys profile -t cuda,nvtx` and make sure the program launches GPU work"
            )
        reader = _Reader(p, conn)
        try:
            frames = _load_frames(conn, reader, meta, syncs, all_calls)
        finally:
            reader.close()
        if not (frames.activities["kind"].isin([ActivityKind.KERNEL, ActivityKind.GRAPH])).any():
            raise GapscopeError(f"{p}: the export holds no kernel executions: nothing to analyze")
    except BaseException:
        conn.close()
        raise
    return frames


def _quiet_call_ids(conn: sqlite3.Connection) -> list[int]:
    """StringIds of the API calls in QUIET_CALLS, under any _vNNNN suffix."""
    marks = " OR ".join(["value = ? OR value LIKE ? ESCAPE '!'"] * len(QUIET_CALLS))
    params = [x for name in sorted(QUIET_CALLS) for x in (name, name + "!_v%")]
    return [int(r[0]) for r in _sql(conn, f"SELECT id FROM StringIds WHERE {marks}", params)]


def _load_frames(conn: sqlite3.Connection, reader: _Reader, meta: TraceMeta, with_syncs: bool,
                 all_calls: bool) -> TraceFrames:
    tables = meta.tables
    reads: dict[str, Read] = {}
    kinds = {KERNEL_TABLE: ActivityKind.KERNEL, GRAPH_TABLE: ActivityKind.GRAPH,
             MEMCPY_TABLE: ActivityKind.MEMCPY, MEMSET_TABLE: ActivityKind.MEMSET}
    for table, kind in kinds.items():
        if table in tables:
            reads[table] = _activity_read(conn, table, kind, names=all_calls)
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
    got = reader.frames(reads)

    parts = []
    for table, kind in kinds.items():
        if table in got:
            df = got[table]
            df["kind"] = np.full(len(df), int(kind), dtype=np.int8)
            parts.append(df)
    activities = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    activities["proc"] = activities["proc"].to_numpy() >> 24
    api = got.get("api", _empty(API_COLUMNS))
    api["proc"] = api["tid"].to_numpy() >> 24
    syncs = got.get("syncs", _empty(SYNC_COLUMNS))
    syncs["proc"] = syncs["proc"].to_numpy() >> 24
    return TraceFrames(
        meta=meta,
        activities=activities,
        api=api,
        nvtx=got.get("nvtx", _empty(NVTX_COLUMNS)),
        syncs=syncs,
        strings=StringTable(conn, "StringIds" in tables),
    )
