"""Reading nsys's columnar exports into typed frames (gapscope.trace.frames): ``nsys export
--type parquetdir`` (one Parquet file per table) and ``--type arrowdir`` (one Arrow IPC stream
per table), nsys 2024 on.

The tables and columns are those of the SQLite export (gapscope.trace.nsys_schema), in the same
row order, so a report gives the same frames from any of its three exports. Only the columns the
analysis needs are read: Parquet through ``pyarrow.parquet`` (column projection), Arrow
memory-mapped (the table's buffers are the file's pages, nothing is copied until a column is
converted). Files are only ever opened for reading.

Every column is checked against the type the reader expects before it is used (:data:`INTEGER`
or :data:`TEXT` columns, :meth:`NsysColumnar._schema`): a table the reader needs that lacks a
required column, or holds a column of another type, is an unknown schema, refused in one line,
as the SQLite reader refuses it. Cells are then read as the SQLite reader reads them: a NULL
integer is handed to gapscope.trace.validation as a Cell.NULL (the row left out or the value
read as unknown, warned), text that is not UTF-8 is kept with U+FFFD (Cell.NOT_TEXT), and a
NULL name reads as empty.

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
from gapscope.text import printable
from gapscope.trace.cuda_api import QUIET_CALLS
from gapscope.trace.frames import (
    ACTIVITY_COLUMNS, NVTX_COLUMNS, NVTX_DOMAIN_CREATE, NVTX_PUSH_POP, NVTX_START_END, ActivityKind,
    ClosedTraceError, RowCounts, TraceFrames, TraceMeta,
)
from gapscope.trace.nsys_schema import (
    ACTIVITY_REQUIRED, ACTIVITY_SOURCE, ACTIVITY_TABLES, API_SOURCE, CONTEXT_REQUIRED, CONTEXT_SOURCE, CONTEXT_TABLE,
    ENV_TABLE, EVENT_CLASS_BACKTRACE, GPU_INFO, GPU_TABLE, GRAPH_TABLE, KERNEL_TABLE, META_TABLES, NVTX_TABLE,
    RUNTIME_TABLE, STREAM_REQUIRED, STREAM_SOURCE, STREAM_TABLE, STRINGS_TABLE, SYNC_SOURCE, SYNC_TABLE,
    SYNC_TYPE_STREAM_WAIT_EVENT, assemble_frames, gpu_info_names, name_column,
)
from gapscope.trace.validation import Cell

#: The table that records the session's end (stopTime, duration), which bounds valid times.
SESSION_TABLE = "ANALYSIS_DETAILS"

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
        self._schema(meta_table, text=("name", "value"), required=("name", "value"))
        meta = self._read(meta_table, ("name", "value"))
        values = dict(zip(self._texts(meta_table, meta, "name")[0], self._texts(meta_table, meta, "value")[0]))
        gpu_names: dict[int, str] = {}
        if GPU_TABLE in tables and {"id", "name"} <= set(self._columns(GPU_TABLE)):
            self._schema(GPU_TABLE, ints=("id",), text=("name",))
            gpus = self._read(GPU_TABLE, ("id", "name"))
            ids, nulls = self._ints(GPU_TABLE, gpus, "id")
            names = self._texts(GPU_TABLE, gpus, "name")[0]
            gpu_names = {i: n or "" for i, n, null in zip(ids.tolist(), names, nulls.tolist()) if not null}
        if not gpu_names and ENV_TABLE in tables and {"name", "value"} <= set(self._columns(ENV_TABLE)):
            env = self._read(ENV_TABLE, ("name", "value"))
            info = [v for n, v in zip(env.column("name").to_pylist(), env.column("value").to_pylist())
                    if n == GPU_INFO]
            gpu_names = gpu_info_names(info[0]) if info else {}
        self.meta = TraceMeta(path=str(self.path), format=format,
                              nsys_version=values.get("EXPORT_PRODUCT_VERSION"),
                              export_schema=values.get("EXPORT_SCHEMA_VERSION"),
                              tables=tables, gpu_names=gpu_names, session_end_ns=self._session_end())

    def _session_end(self) -> int | None:
        """The session's end as ANALYSIS_DETAILS records it (the larger of stopTime and duration),
        as the SQLite reader reads it; None when the export does not record it as integers."""
        if SESSION_TABLE not in self._tables:
            return None
        have = self._columns(SESSION_TABLE)
        found = []
        for column in ("stopTime", "duration"):
            if column in have and _is_integer(have[column]):
                values, nulls = _ints(self._read(SESSION_TABLE, (column,)).column(column))
                found += [v for v, null in zip(values.tolist(), nulls.tolist()) if not null and v > 0]
        return max(found) if found else None

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

    def _columns(self, table: str) -> dict[str, pa.DataType]:
        """The table's columns and their types, from its schema (the Parquet footer, the Arrow
        stream's first message): nothing else is read."""
        try:
            if self.format == "nsys-parquet":
                import pyarrow.parquet as pq

                schema = pq.read_schema(self._file(table))
            else:
                schema = _arrow_reader(self._file(table)).schema
        except (pa.ArrowException, OSError) as exc:
            raise self._failed(table, exc) from None
        return {field.name: field.type for field in schema}

    def _schema(self, table: str, *, ints: Sequence[str] = (), text: Sequence[str] = (),
                required: Sequence[str] = ()) -> dict[str, pa.DataType]:
        """The table's columns, checked against what the reader expects of those it reads:
        ``required`` present, once each, and each of ``ints`` (``text``) present an integer
        (text) column; GapscopeError (an unknown schema, one line) otherwise."""
        have = self._columns(table)
        missing = [c for c in required if c not in have]
        if missing:
            raise GapscopeError(f"{self._file(table)}: unknown export schema: {table} lacks column(s) "
                                f"{', '.join(missing)}")
        for column, kind, ok in [*((c, "integers", _is_integer) for c in ints),
                                 *((c, "text", _is_text) for c in text)]:
            if column in have and not ok(have[column]):
                raise GapscopeError(f"{self._file(table)}: unknown export schema: {table}.{column} holds "
                                    f"{printable(have[column], 60)} where {kind} belong")
        return have

    def _read(self, table: str, columns: Sequence[str]) -> pa.Table:
        """Just these columns of a table (they must exist)."""
        try:
            if self.format == "nsys-parquet":
                import pyarrow.parquet as pq

                read = pq.read_table(self._file(table), columns=list(columns), memory_map=True)
            else:
                read = _arrow_reader(self._file(table)).read_all().select(list(columns))
            # Every offset and length checked before a value is touched: a damaged Arrow file's
            # buffers are the file's pages as they are (memory-mapped, not decoded).
            read.validate(full=True)
        except (pa.ArrowException, OSError, KeyError) as exc:
            raise self._failed(table, exc) from None
        if read.column_names != list(columns):  # a column named twice in the file
            raise GapscopeError(f"{self._file(table)}: unknown export schema: {table} does not hold "
                                f"{', '.join(columns)} once each")
        return read

    def _frame(self, table: str, source: dict[str, str], required: Sequence[str] = (),
               ) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        """A frame with one int64 column per key of ``source`` (frame column -> table column);
        a table column the export lacks reads as -1, a required one is an unknown schema; and the
        gapscope.trace.validation Cell codes of the columns that hold NULLs."""
        have = self._schema(table, ints=[c for c in source.values() if c], required=required)
        present = [c for c in dict.fromkeys(source.values()) if c in have]
        read = self._read(table, present)
        n = read.num_rows
        columns, cells = {}, {}
        for key, col in source.items():
            if col in have:
                columns[key], nulls = self._ints(table, read, col)
                if nulls.any():
                    cells[key] = np.where(nulls, np.uint8(Cell.NULL), np.uint8(Cell.OK))
            else:
                columns[key] = np.full(n, -1, np.int64)
        return pd.DataFrame(columns, copy=False), cells

    def _ints(self, table: str, read: pa.Table, column: str) -> tuple[np.ndarray, np.ndarray]:
        """An integer column as int64 (NULL as -1) and where it is NULL."""
        try:
            return _ints(read.column(column))
        except (TypeError, pa.ArrowException) as exc:
            raise GapscopeError(f"{self._file(table)}: unknown export schema: {table}.{column} {exc}") from None

    def _texts(self, table: str, read: pa.Table, column: str) -> tuple[list[str | None], np.ndarray | None]:
        """A text column as str (None where NULL), bytes that are not UTF-8 read as U+FFFD, and
        where that happened (None when nowhere)."""
        try:
            return _texts(read.column(column))
        except (TypeError, pa.ArrowException) as exc:
            raise GapscopeError(f"{self._file(table)}: unknown export schema: {table}.{column} {exc}") from None

    def row_counts(self) -> RowCounts:
        """The rows of the GPU activity tables (kernels, graph executions, copies, memsets), of
        the CUDA API table, of the synchronization records and of NVTX_EVENTS, without reading
        them: a parquetdir's Parquet footers, an arrowdir's record batch headers (the file is
        memory-mapped, so the batches' bodies are not read)."""
        self._live()
        groups = {"activities": tuple(ACTIVITY_TABLES), "api": (RUNTIME_TABLE,), "syncs": (SYNC_TABLE,),
                  "nvtx": (NVTX_TABLE,)}
        return RowCounts(self.format, **{key: sum(self._rows(t) for t in tables if t in self._tables)
                                          for key, tables in groups.items()})

    def _rows(self, table: str) -> int:
        """A table's rows from its Parquet footer or its Arrow batch headers."""
        try:
            if self.format == "nsys-parquet":
                import pyarrow.parquet as pq

                return pq.read_metadata(self._file(table)).num_rows
            return sum(batch.num_rows for batch in _arrow_reader(self._file(table)))
        except (pa.ArrowException, OSError) as exc:
            raise self._failed(table, exc) from None

    # -- frames -----------------------------------------------------------------------------
    def load(self, *, syncs: bool = False, all_calls: bool = False) -> TraceFrames:
        """The frames an analysis needs (``syncs``: also the stream-wait synchronization records;
        ``all_calls``: every CUDA API call; every activity's name id either way), as the SQLite
        reader reads them from the same report."""
        self._live()
        got: dict[str, pd.DataFrame] = {}
        cells: dict[str, dict[str, np.ndarray]] = {}
        for table, kind in ACTIVITY_TABLES.items():
            if table in self._tables:
                source = dict(ACTIVITY_SOURCE)
                # Every row's name id (a table without a name column gives -1: no such column).
                source["name_id"] = name_column(self._columns(table), kind) or ""
                df, cells[table] = self._frame(table, source, ACTIVITY_REQUIRED)
                df.insert(0, "row", np.arange(len(df), dtype=np.int64))
                got[table] = df[[*ACTIVITY_COLUMNS, "name_id"]]
        if RUNTIME_TABLE in self._tables:
            got["api"], cells["api"] = self._api(all_calls)
        if NVTX_TABLE in self._tables:
            got["nvtx"], cells["nvtx"] = self._nvtx()
        if syncs and SYNC_TABLE in self._tables:
            got["syncs"], cells["syncs"] = self._syncs()
        if syncs and {STREAM_TABLE, CONTEXT_TABLE} <= self._tables:
            self._stream_kinds(got, cells)
        return assemble_frames(self.meta, got, self, cells={k: v for k, v in cells.items() if v})

    def _api(self, all_calls: bool) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        have = self._columns(RUNTIME_TABLE)
        source = dict(API_SOURCE)
        if "eventClass" in have:
            source["event_class"] = "eventClass"
        df, cells = self._frame(RUNTIME_TABLE, source, ("start", "end", "globalTid"))
        keep = np.ones(len(df), dtype=bool)
        if "event_class" in df:  # as SQL's `eventClass IS NOT 67`: a NULL class (-1 here) is kept
            cells.pop("event_class", None)
            keep &= df.pop("event_class").to_numpy() != EVENT_CLASS_BACKTRACE
        if not all_calls and self._strings_present():
            quiet = self._quiet_ids()
            if quiet.size:  # a NULL nameId is kept (and warned about as damaged), as the SQLite reader keeps it
                keep &= ~np.isin(df["name_id"].to_numpy(), quiet) | (cells.get("name_id", 0) != 0)
        return _kept_rows(df, cells, keep)

    def _nvtx(self) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        have = self._schema(NVTX_TABLE, ints=("start", "end", "globalTid", "eventType", "domainId", "textId"),
                            text=("text",), required=("start", "eventType", "globalTid"))
        wanted = [c for c in ("start", "end", "globalTid", "eventType", "domainId", "text", "textId") if c in have]
        t = self._read(NVTX_TABLE, wanted)
        event_type, _ = self._ints(NVTX_TABLE, t, "eventType")
        t = t.filter(pa.array(np.isin(event_type, [NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE])))
        n = t.num_rows
        text, bad_text = self._texts(NVTX_TABLE, t, "text") if "text" in have else ([None] * n, None)
        if "textId" in have and self._strings_present():
            strings = self._string_table()
            ids, id_nulls = self._ints(NVTX_TABLE, t, "textId")
            missing = [i for i, s in enumerate(text) if s is None]  # COALESCE(text, StringIds.value)
            for i in missing:
                if not id_nulls[i]:
                    text[i] = strings.get(int(ids[i]))
        columns = {"start": "start", "end": "end", "tid": "globalTid", "event_type": "eventType",
                   "domain_id": "domainId"}
        out, cells = {}, {}
        for key, col in columns.items():
            if col in have:
                out[key], nulls = self._ints(NVTX_TABLE, t, col)
                if nulls.any():
                    cells[key] = np.where(nulls, np.uint8(Cell.NULL), np.uint8(Cell.OK))
            else:
                out[key] = np.full(n, -1 if key == "end" else 0, np.int64)
        out["name"] = np.array(text, dtype=object) if n else np.zeros(0, dtype=object)
        if bad_text is not None:
            cells["name"] = np.where(bad_text, np.uint8(Cell.NOT_TEXT), np.uint8(Cell.OK))
        return pd.DataFrame(out, copy=False)[list(NVTX_COLUMNS)], cells

    def _syncs(self) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        have = self._columns(SYNC_TABLE)
        source = dict(SYNC_SOURCE)
        if "syncType" in have:
            source["sync_type"] = "syncType"
        df, cells = self._frame(SYNC_TABLE, source, ("start", "deviceId", "streamId"))
        if "sync_type" not in df:
            return df, cells
        cells.pop("sync_type", None)  # as SQL's `syncType = 2`: a NULL type (-1 here) is no wait
        waits = df.pop("sync_type").to_numpy() == SYNC_TYPE_STREAM_WAIT_EVENT
        return _kept_rows(df, cells, waits)

    def _stream_kinds(self, got: dict[str, pd.DataFrame], cells: dict[str, dict[str, np.ndarray]]) -> None:
        """The stream and context tables' rows into ``got`` (nsys_schema.stream_kinds), as the
        SQLite reader reads them: ``hwId`` and ``vmId`` 0 where absent, nothing where a table
        lacks a column it needs (every stream then reads as of unknown kind)."""
        parts = (("stream_info", STREAM_TABLE, STREAM_SOURCE, STREAM_REQUIRED),
                 ("contexts", CONTEXT_TABLE, CONTEXT_SOURCE, CONTEXT_REQUIRED))
        if not all(set(required) <= set(self._columns(table)) for _, table, _, required in parts):
            return
        for key, table, source, required in parts:
            have = self._columns(table)
            df, cells[key] = self._frame(table, {k: c for k, c in source.items() if c in have}, required)
            for k in source:
                if k not in df:
                    df[k] = np.zeros(len(df), dtype=np.int64)
            got[key] = df[list(source)]

    # -- names (gapscope.trace.frames.Names) --------------------------------------------------
    def _strings_present(self) -> bool:
        """Whether the export has a StringIds table (which must then have integer ids and text
        values: an unknown schema otherwise)."""
        if STRINGS_TABLE not in self._tables:
            return False
        self._schema(STRINGS_TABLE, ints=("id",), text=("value",), required=("id", "value"))
        return True

    def _string_table(self) -> dict[int, str | None]:
        """StringIds as a dict (a NULL value as None; a row whose id is NULL left out)."""
        if self._strings is None:
            if self._strings_present():
                t = self._read(STRINGS_TABLE, ("id", "value"))
                ids, nulls = self._ints(STRINGS_TABLE, t, "id")
                values = self._texts(STRINGS_TABLE, t, "value")[0]
                self._strings = {i: v for i, v, null in zip(ids.tolist(), values, nulls.tolist()) if not null}
            else:
                self._strings = {}
        return self._strings

    def _quiet_ids(self) -> np.ndarray:
        """StringIds of the API calls in QUIET_CALLS, under any _vNNNN suffix (none of those
        names holds ``_v``, so a name's part before its first ``_v`` is its base name)."""
        strings = self._string_table()
        ids = np.fromiter(strings.keys(), dtype=np.int64, count=len(strings))
        values = pa.array(list(strings.values()), pa.large_string())
        base = pc.replace_substring_regex(values, pattern="_v.*$", replacement="", max_replacements=1)
        hit = pc.is_in(base, pa.array(sorted(QUIET_CALLS), base.type))
        return ids[hit.to_numpy(zero_copy_only=False)]

    def lookup(self, ids: Iterable[int]) -> dict[int, str]:
        """Map each StringIds id to its string ('[unknown]' where the export has none)."""
        self._live()
        strings = self._string_table()
        out = {int(i): strings.get(int(i), "[unknown]") for i in ids}
        return {i: "" if v is None else v for i, v in out.items()}  # a NULL name is empty, as in SQLite

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
            if col:
                self._schema(table, ints=(col,))
                self._name_ids[kind] = self._ints(table, self._read(table, (col,)), col)[0]
            else:
                self._name_ids[kind] = np.full(0, -1, dtype=np.int64)
        ids = self._name_ids[kind]
        inside = (rows >= 0) & (rows < ids.size)
        return np.where(inside, ids[np.clip(rows, 0, max(ids.size - 1, 0))] if ids.size else -1, -1)


def _is_integer(t: pa.DataType) -> bool:
    """Whether a column of this type holds integers as the reader reads them (NULL-only too)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_null(t)


def _is_text(t: pa.DataType) -> bool:
    """Whether a column of this type holds text (or bytes read as UTF-8; NULL-only too)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_null(t))


def _ints(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as int64 with nulls as -1 (unsigned values wrap as SQLite stores them),
    and where it is NULL."""
    if pa.types.is_null(col.type):
        return np.full(len(col), -1, dtype=np.int64), np.ones(len(col), dtype=bool)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if not (pa.types.is_integer(col.type) or pa.types.is_boolean(col.type)):
        raise TypeError(f"holds {col.type} where integers belong")
    nulls = np.zeros(len(col), dtype=bool)
    if col.null_count:
        nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if col.type != pa.int64():
        col = col.cast(pa.int64(), safe=False)
    if col.null_count:
        col = pc.fill_null(col, -1)
    return np.asarray(col.to_numpy(), dtype=np.int64), nulls


def _texts(col: pa.ChunkedArray | pa.Array) -> tuple[list[str | None], np.ndarray | None]:
    """A text column as str (None where NULL), bytes that are not UTF-8 read with U+FFFD in their
    place, and where that happened (None when nowhere)."""
    if pa.types.is_null(col.type):
        return [None] * len(col), None
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if not _is_text(col.type):
        raise TypeError(f"holds {col.type} where text belongs")
    raw = col.cast(pa.large_binary())
    try:
        return raw.cast(pa.large_string()).to_pylist(), None  # checks that every value is UTF-8
    except (pa.ArrowInvalid, UnicodeDecodeError):
        values = raw.to_pylist()
        bad = np.zeros(len(values), dtype=bool)
        out: list[str | None] = []
        for i, v in enumerate(values):  # only for a column that holds bytes that are not UTF-8
            if v is None:
                out.append(None)
                continue
            try:
                out.append(v.decode("utf-8"))
            except UnicodeDecodeError:
                out.append(v.decode("utf-8", "replace"))
                bad[i] = True
        return out, bad


def _kept_rows(df: pd.DataFrame, cells: dict[str, np.ndarray], keep: np.ndarray,
               ) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """The rows ``keep`` selects, of the frame and of its Cell codes."""
    if keep.all():
        return df, cells
    return df[keep].reset_index(drop=True), {k: v[keep] for k, v in cells.items()}


def _arrow_reader(path: Path):
    """A reader over a memory-mapped Arrow IPC file: the stream format nsys's arrowdir writes,
    or the random-access file format (which starts with ``ARROW1``)."""
    source = pa.memory_map(str(path), "r")
    if source.read(6) == b"ARROW1":
        source.seek(0)
        return pa.ipc.open_file(source)
    source.seek(0)
    return pa.ipc.open_stream(source)
