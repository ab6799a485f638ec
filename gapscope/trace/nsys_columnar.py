"""Reading nsys's columnar exports into typed frames (gapscope.trace.frames): ``nsys export
--type parquetdir`` (one Parquet file per table) and ``--type arrowdir`` (one Arrow IPC stream
per table), nsys 2024 on.

The tables and columns are those of the SQLite export (gapscope.trace.nsys_schema), in the same
row order, so a report gives the same frames from any of its three exports. Only the columns the
analysis needs are read: Parquet through ``pyarrow.parquet`` (column projection), Arrow
memory-mapped (the table's buffers are the file's pages, nothing is copied until a column is
converted). Files are only ever opened for reading.

:class:`NsysColumnar` answers name lookups (StringIds, kernel and graph ids by row) until it is
closed, then raises ClosedTraceError.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gapscope.errors import GapscopeError
from gapscope.inputs import READS
from gapscope.trace.cuda_api import QUIET_CALLS
from gapscope.trace.frames import (
    ACTIVITY_COLUMNS, NVTX_COLUMNS, NVTX_DOMAIN_CREATE, NVTX_PUSH_POP, NVTX_START_END, ActivityKind,
    ClosedTraceError, TraceFrames, TraceMeta,
)
from gapscope.trace.nsys_schema import (
    ACTIVITY_REQUIRED, ACTIVITY_SOURCE, ACTIVITY_TABLES, API_SOURCE, ENV_TABLE, EVENT_CLASS_BACKTRACE, GPU_INFO,
    GPU_TABLE, GRAPH_TABLE, KERNEL_TABLE, META_TABLES, NVTX_TABLE, RUNTIME_TABLE, STRINGS_TABLE, SYNC_SOURCE,
    SYNC_TABLE, SYNC_TYPE_STREAM_WAIT_EVENT, assemble_frames, gpu_info_names, name_column,
)

#: The formats this module reads (the resolver's names) and the suffix of their table files.
SUFFIXES = {"nsys-parquet": ".parquet", "nsys-arrow": ".arrow"}
#: What each format is, in words, for messages.
WORDS = {"nsys-parquet": "nsys parquetdir export", "nsys-arrow": "nsys arrowdir export"}


class NsysColumnar:
    """An open ``parquetdir`` or ``arrowdir`` export: its meta data, its frames on demand, and the
    name lookups that stay answerable until :meth:`close`."""

    def __init__(self, path: str | Path, format: str = "nsys-parquet") -> None:
        if format not in SUFFIXES:
            raise ValueError(f"not a columnar nsys format: {format}")
        self.format = format
        self.path = Path(path)
        self._suffix = SUFFIXES[format]
        self._closed = False
        self._strings: dict[int, str] | None = None
        self._name_ids: dict[ActivityKind, np.ndarray] = {}
        if not self.path.is_dir():
            raise GapscopeError(f"{self.path}: not a folder; a {WORDS[format]} is a folder of "
                                f"{self._suffix} files")
        tables = frozenset(p.name[: -len(self._suffix)] for p in self.path.iterdir()
                           if p.name.endswith(self._suffix) and p.is_file())
        self._tables = tables
        meta_table = next((t for t in META_TABLES if t in tables), None)
        if meta_table is None:
            raise GapscopeError(f"{self.path}: not a complete {WORDS[format]} (no "
                                f"META_DATA_EXPORT{self._suffix} in it); make one with `nsys export "
                                f"--type {format.split('-')[1]}dir -o DIR REPORT.nsys-rep` (gapscope "
                                f"reads {READS})")
        if not ({KERNEL_TABLE, GRAPH_TABLE} & tables):
            raise GapscopeError(
                f"{self.path}: no CUDA kernels in this export (no {KERNEL_TABLE}{self._suffix}); record "
                "with `nsys profile -t cuda,nvtx` and make sure the program launches GPU work")
        meta = self._read(meta_table, ("name", "value"))
        values = dict(zip(meta.column("name").to_pylist(), meta.column("value").to_pylist()))
        gpu_names: dict[int, str] = {}
        if GPU_TABLE in tables and {"id", "name"} <= set(self._columns(GPU_TABLE)):
            gpus = self._read(GPU_TABLE, ("id", "name"))
            gpu_names = {int(i): str(n) for i, n in zip(gpus.column("id").to_pylist(),
                                                        gpus.column("name").to_pylist())}
        if not gpu_names and ENV_TABLE in tables and {"name", "value"} <= set(self._columns(ENV_TABLE)):
            env = self._read(ENV_TABLE, ("name", "value"))
            info = [v for n, v in zip(env.column("name").to_pylist(), env.column("value").to_pylist())
                    if n == GPU_INFO]
            gpu_names = gpu_info_names(info[0]) if info else {}
        self.meta = TraceMeta(path=str(self.path), format=format,
                              nsys_version=values.get("EXPORT_PRODUCT_VERSION"),
                              export_schema=values.get("EXPORT_SCHEMA_VERSION"),
                              tables=tables, gpu_names=gpu_names)

    # -- files ------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._strings = None
        self._name_ids.clear()

    def _live(self) -> None:
        if self._closed:
            raise ClosedTraceError(f"{self.path}: the trace is closed; read it inside its `with` block")

    def _file(self, table: str) -> Path:
        return self.path / f"{table}{self._suffix}"

    def _failed(self, table: str, exc: BaseException) -> GapscopeError:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return GapscopeError(f"{self._file(table)}: cannot read the {table} table ({first}): the "
                             f"{WORDS[self.format]} is truncated or corrupt (gapscope reads {READS})")

    def _columns(self, table: str) -> list[str]:
        """The table's column names, from its schema (the Parquet footer, the Arrow stream's
        first message): nothing else is read."""
        try:
            if self.format == "nsys-parquet":
                import pyarrow.parquet as pq

                return list(pq.read_schema(self._file(table)).names)
            return list(_arrow_reader(self._file(table)).schema.names)
        except (pa.ArrowException, OSError) as exc:
            raise self._failed(table, exc) from None

    def _read(self, table: str, columns: Sequence[str]) -> pa.Table:
        """Just these columns of a table (they must exist)."""
        try:
            if self.format == "nsys-parquet":
                import pyarrow.parquet as pq

                return pq.read_table(self._file(table), columns=list(columns), memory_map=True)
            return _arrow_reader(self._file(table)).read_all().select(list(columns))
        except (pa.ArrowException, OSError) as exc:
            raise self._failed(table, exc) from None

    def _frame(self, table: str, source: dict[str, str], required: Sequence[str] = ()) -> pd.DataFrame:
        """A frame with one int64 column per key of ``source`` (frame column -> table column);
        a table column the export lacks reads as -1, a required one is an unknown schema."""
        have = set(self._columns(table))
        missing = [c for c in required if c not in have]
        if missing:
            raise GapscopeError(f"{self._file(table)}: unknown export schema: {table} lacks column(s) "
                                f"{', '.join(missing)}")
        present = [c for c in dict.fromkeys(source.values()) if c in have]
        read = self._read(table, present)
        n = read.num_rows
        return pd.DataFrame({key: self._ints(table, read, col) if col in have else np.full(n, -1, np.int64)
                             for key, col in source.items()}, copy=False)

    def _ints(self, table: str, read: pa.Table, column: str) -> np.ndarray:
        try:
            return _ints(read.column(column))
        except TypeError as exc:
            raise GapscopeError(f"{self._file(table)}: unknown export schema: {table}.{column} {exc}") from None

    def activity_rows(self) -> int:
        """The number of GPU activity rows (kernels, graph executions, copies, memsets), without
        reading them: a parquetdir's Parquet footers, an arrowdir's record batch headers (the
        file is memory-mapped, so the batches' bodies are not read)."""
        self._live()
        total = 0
        for table in ACTIVITY_TABLES:
            if table in self._tables:
                try:
                    if self.format == "nsys-parquet":
                        import pyarrow.parquet as pq

                        total += pq.read_metadata(self._file(table)).num_rows
                    else:
                        total += sum(batch.num_rows for batch in _arrow_reader(self._file(table)))
                except (pa.ArrowException, OSError) as exc:
                    raise self._failed(table, exc) from None
        return total

    # -- frames -----------------------------------------------------------------------------
    def load(self, *, syncs: bool = False, all_calls: bool = False) -> TraceFrames:
        """The frames an analysis needs (``syncs``: also the stream-wait synchronization records;
        ``all_calls``: every CUDA API call; every activity's name id either way), as the SQLite
        reader reads them from the same report."""
        self._live()
        got: dict[str, pd.DataFrame] = {}
        for table, kind in ACTIVITY_TABLES.items():
            if table in self._tables:
                source = dict(ACTIVITY_SOURCE)
                # Every row's name id (a table without a name column gives -1: no such column).
                source["name_id"] = name_column(self._columns(table), kind) or ""
                df = self._frame(table, source, ACTIVITY_REQUIRED)
                df.insert(0, "row", np.arange(len(df), dtype=np.int64))
                got[table] = df[[*ACTIVITY_COLUMNS, "name_id"]]
        if RUNTIME_TABLE in self._tables:
            got["api"] = self._api(all_calls)
        if NVTX_TABLE in self._tables:
            got["nvtx"] = self._nvtx()
        if syncs and SYNC_TABLE in self._tables:
            got["syncs"] = self._syncs()
        return assemble_frames(self.meta, got, self)

    def _api(self, all_calls: bool) -> pd.DataFrame:
        have = set(self._columns(RUNTIME_TABLE))
        source = dict(API_SOURCE)
        if "eventClass" in have:
            source["event_class"] = "eventClass"
        df = self._frame(RUNTIME_TABLE, source, ("start", "end", "globalTid"))
        keep = np.ones(len(df), dtype=bool)
        if "event_class" in df:
            keep &= df.pop("event_class").to_numpy() != EVENT_CLASS_BACKTRACE
        if not all_calls and STRINGS_TABLE in self._tables:
            quiet = self._quiet_ids()
            if quiet.size:
                keep &= ~np.isin(df["name_id"].to_numpy(), quiet)
        return df if keep.all() else df[keep].reset_index(drop=True)

    def _nvtx(self) -> pd.DataFrame:
        have = set(self._columns(NVTX_TABLE))
        missing = [c for c in ("start", "eventType", "globalTid") if c not in have]
        if missing:
            raise GapscopeError(f"{self._file(NVTX_TABLE)}: unknown export schema: {NVTX_TABLE} lacks "
                                f"column(s) {', '.join(missing)}")
        wanted = [c for c in ("start", "end", "globalTid", "eventType", "domainId", "text", "textId") if c in have]
        t = self._read(NVTX_TABLE, wanted)
        t = t.filter(pc.is_in(t.column("eventType"), pa.array([NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE],
                                                               t.schema.field("eventType").type)))
        n = t.num_rows
        text = t.column("text").to_pylist() if "text" in have else [None] * n
        if "textId" in have and STRINGS_TABLE in self._tables:
            strings = self._string_table()
            ids = self._ints(NVTX_TABLE, t, "textId")
            text = [s if s is not None else strings.get(i) if i >= 0 else None for s, i in zip(text, ids.tolist())]
        columns = {"start": "start", "end": "end", "tid": "globalTid", "event_type": "eventType",
                   "domain_id": "domainId"}
        out = {key: self._ints(NVTX_TABLE, t, col) if col in have else np.full(n, -1 if key == "end" else 0, np.int64)
               for key, col in columns.items()}
        out["name"] = np.array(text, dtype=object) if n else np.zeros(0, dtype=object)
        return pd.DataFrame(out, copy=False)[list(NVTX_COLUMNS)]

    def _syncs(self) -> pd.DataFrame:
        have = set(self._columns(SYNC_TABLE))
        source = dict(SYNC_SOURCE)
        if "syncType" in have:
            source["sync_type"] = "syncType"
        df = self._frame(SYNC_TABLE, source, ("start", "deviceId", "streamId"))
        if "sync_type" not in df:
            return df
        waits = df.pop("sync_type").to_numpy() == SYNC_TYPE_STREAM_WAIT_EVENT
        return df[waits].reset_index(drop=True)

    # -- names (gapscope.trace.frames.Names) --------------------------------------------------
    def _string_table(self) -> dict[int, str]:
        if self._strings is None:
            if STRINGS_TABLE in self._tables:
                t = self._read(STRINGS_TABLE, ("id", "value"))
                self._strings = dict(zip(self._ints(STRINGS_TABLE, t, "id").tolist(), t.column("value").to_pylist()))
            else:
                self._strings = {}
        return self._strings

    def _quiet_ids(self) -> np.ndarray:
        """StringIds of the API calls in QUIET_CALLS, under any _vNNNN suffix (none of those
        names holds ``_v``, so a name's part before its first ``_v`` is its base name)."""
        t = self._read(STRINGS_TABLE, ("id", "value"))
        base = pc.replace_substring_regex(t.column("value"), pattern="_v.*$", replacement="", max_replacements=1)
        hit = pc.is_in(base, pa.array(sorted(QUIET_CALLS), base.type))
        return self._ints(STRINGS_TABLE, t, "id")[hit.to_numpy(zero_copy_only=False)]

    def lookup(self, ids: Iterable[int]) -> dict[int, str]:
        """Map each StringIds id to its string ('[unknown]' where the export has none)."""
        self._live()
        strings = self._string_table()
        return {int(i): strings.get(int(i), "[unknown]") for i in ids}

    def activity_name_ids(self, kind: ActivityKind, rows: np.ndarray) -> np.ndarray:
        """The name id (kernels: shortName, else demangledName) or graph id of activities by
        their row numbers in their table; -1 where the export has none."""
        self._live()
        rows = np.asarray(rows, dtype=np.int64)
        table = {ActivityKind.KERNEL: KERNEL_TABLE, ActivityKind.GRAPH: GRAPH_TABLE}.get(kind)
        if table is None or table not in self._tables:
            return np.full(rows.size, -1, dtype=np.int64)
        if kind not in self._name_ids:
            col = name_column(self._columns(table), kind)
            self._name_ids[kind] = (self._ints(table, self._read(table, (col,)), col) if col
                                    else np.full(0, -1, dtype=np.int64))
        ids = self._name_ids[kind]
        inside = (rows >= 0) & (rows < ids.size)
        return np.where(inside, ids[np.clip(rows, 0, max(ids.size - 1, 0))] if ids.size else -1, -1)


def _ints(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """An integer column as int64 with nulls as -1 (unsigned values wrap as SQLite stores them)."""
    if pa.types.is_null(col.type):
        return np.full(len(col), -1, dtype=np.int64)
    if not (pa.types.is_integer(col.type) or pa.types.is_boolean(col.type)):
        raise TypeError(f"holds {col.type} where integers belong")
    if col.type != pa.int64():
        col = col.cast(pa.int64(), safe=False)
    if col.null_count:
        col = pc.fill_null(col, -1)
    return np.asarray(col.to_numpy(), dtype=np.int64)


def _arrow_reader(path: Path):
    """A reader over a memory-mapped Arrow IPC file: the stream format nsys's arrowdir writes,
    or the random-access file format (which starts with ``ARROW1``)."""
    source = pa.memory_map(str(path), "r")
    if source.read(6) == b"ARROW1":
        source.seek(0)
        return pa.ipc.open_file(source)
    source.seek(0)
    return pa.ipc.open_stream(source)
