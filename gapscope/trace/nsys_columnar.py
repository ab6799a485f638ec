"""Reading nsys's columnar exports into typed frames (gapscope.trace.frames): ``nsys export
--type parquetdir`` (one Parquet file per table) and ``--type arrowdir`` (one Arrow IPC stream
per table), nsys 2024 on.

The tables and columns are those of the SQLite export (gapscope.trace.nsys_schema), in the same
row order, so a report gives the same frames from any of its three exports. Only the columns the
analysis needs are read, a record batch at a time (gapscope.trace.filling: each table's columns
allocated once for its rows, from the Parquet footer or the Arrow batch headers, and filled batch
by batch, the calls and records the analysis drops never stored, ids in 32 bits where they fit):
Parquet through ``pyarrow.parquet`` (column projection, :data:`BATCH_ROWS` rows decoded at a
time), Arrow memory-mapped (the batches' buffers are the file's pages, nothing is copied until a
slice of a column is converted). No table is held whole, as Arrow or as numpy. Files are only
ever opened for reading.

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

import mmap
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
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
    ACTIVITY_COLUMNS, NVTX_COLUMNS, NVTX_DOMAIN_CREATE, NVTX_PUSH_POP, NVTX_START_END,
    ActivityKind, ClosedTraceError, RowCounts, TraceFrames, TraceMeta, id_dtype,
)
from gapscope.trace.nsys_schema import (
    ACTIVITY_REQUIRED, ACTIVITY_SOURCE, ACTIVITY_TABLES, API_SOURCE, CONTEXT_REQUIRED, CONTEXT_SOURCE, CONTEXT_TABLE,
    ENV_TABLE, EVENT_CLASS_BACKTRACE, GPU_INFO, GPU_TABLE, GRAPH_TABLE, KERNEL_TABLE, META_TABLES, NVTX_TABLE,
    READ_NARROW, RUNTIME_TABLE, STREAM_REQUIRED, STREAM_SOURCE, STREAM_TABLE, STRINGS_TABLE, SYNC_SOURCE,
    SYNC_TABLE, SYNC_TYPE_STREAM_WAIT_EVENT, assemble_frames, gpu_info_names, name_column,
)
from gapscope.trace.filling import Filling, batch_ints

#: The table that records the session's end (stopTime, duration), which bounds valid times.
SESSION_TABLE = "ANALYSIS_DETAILS"

#: The formats this module reads (the resolver's names) and the suffix of their table files.
SUFFIXES = {"nsys-parquet": ".parquet", "nsys-arrow": ".arrow"}
#: What each format is, in words, for messages.
WORDS = {"nsys-parquet": "nsys parquetdir export", "nsys-arrow": "nsys arrowdir export"}
#: Rows converted at a time: a Parquet read decodes this many rows of its columns at once (its
#: columns side by side on pyarrow's threads), an Arrow batch larger than this is taken in slices
#: of it (the temporaries of one slice, not of the table). 256Ki and 1Mi rows measured no faster
#: at 10M kernels, and hold more at once.
BATCH_ROWS = 1 << 16
#: A batch's columns by name, and what a table's read keeps of them (None: every row).
Columns = dict[str, pa.Array]
Keep = Callable[[Columns], "np.ndarray | None"]


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
        meta = self._fill(meta_table, texts=("name", "value"))
        values = dict(zip(meta.texts("name").objects().tolist(), meta.texts("value").objects().tolist()))
        gpu_names: dict[int, str] = {}
        if GPU_TABLE in tables and {"id", "name"} <= set(self._columns(GPU_TABLE)):
            self._schema(GPU_TABLE, ints=("id",), text=("name",))
            gpus = self._fill(GPU_TABLE, ("id",), texts=("name",))
            ids, cells = gpus.ints("id")
            names = gpus.texts("name").objects().tolist()
            gpu_names = {i: n or "" for i, n, null in zip(ids.tolist(), names, _nulls(cells, len(ids)).tolist())
                         if not null}
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
                values, cells = self._fill(SESSION_TABLE, (column,)).ints(column)
                found += [v for v, null in zip(values.tolist(), _nulls(cells, len(values)).tolist())
                          if not null and v > 0]
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
                schema = _ArrowFile(self._file(table)).reader.schema
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
        """Just these columns of a small table, whole (they must exist)."""
        try:
            if self.format == "nsys-parquet":
                import pyarrow.parquet as pq

                read = pq.read_table(self._file(table), columns=list(columns), memory_map=True)
            else:
                read = _ArrowFile(self._file(table)).reader.read_all().select(list(columns))
            # Every offset and length checked before a value is touched: a damaged Arrow file's
            # buffers are the file's pages as they are (memory-mapped, not decoded).
            read.validate(full=True)
        except (pa.ArrowException, OSError, KeyError) as exc:
            raise self._failed(table, exc) from None
        self._once_each(table, read.column_names, columns)
        return read

    def _once_each(self, table: str, got: Sequence[str], columns: Sequence[str]) -> None:
        """An unknown schema where the file names one of ``columns`` twice (``got``: the file's
        columns that bear their names)."""
        if sorted(got) != sorted(columns):
            raise GapscopeError(f"{self._file(table)}: unknown export schema: {table} does not hold "
                                f"{', '.join(columns)} once each")

    def _batches(self, table: str, columns: Sequence[str]) -> Iterator[Columns]:
        """These columns of a table (they must exist), :data:`BATCH_ROWS` rows at a time, each
        batch checked whole (offsets and lengths, text's UTF-8) before a value is touched: a
        damaged Arrow file's buffers are the file's pages as they are."""
        columns = list(columns)
        arrow = None
        try:
            with ExitStack() as files:
                if self.format == "nsys-parquet":
                    import pyarrow.parquet as pq

                    parquet = files.enter_context(pq.ParquetFile(self._file(table), memory_map=True))
                    self._once_each(table, [n for n in parquet.schema_arrow.names if n in columns], columns)
                    batches = parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns)
                else:
                    arrow = _ArrowFile(self._file(table))
                    batches = (part for batch in arrow.reader for part in _slices(batch))
                for batch in batches:
                    if self.format == "nsys-arrow":
                        self._once_each(table, [n for n in batch.schema.names if n in columns], columns)
                        batch = batch.select(columns)
                    batch.validate(full=True)
                    yield dict(zip(columns, batch.columns))
                    if arrow is not None:
                        arrow.hand_back()  # the slice is stored: its pages need not stay resident
        except (pa.ArrowException, OSError, KeyError) as exc:
            raise self._failed(table, exc) from None

    def _fill(self, table: str, ints: Mapping[str, str] | Sequence[str] = (), *, texts: Sequence[str] = (),
              narrow: Collection[str] = frozenset(), also: Sequence[str] = (), keep: Keep | None = None,
              into: Filling | None = None) -> Filling:
        """A table's columns (gapscope.trace.filling) read batch by batch: ``ints`` (frame column
        -> table column, or the table's column names; one the table lacks reads as -1) and
        ``texts`` stored, ``narrow``: those of ``ints`` in 32 bits while they fit; ``also`` read
        besides for ``keep``, which says which rows of each batch to store. ``into``: a filling
        that more tables go into, one after the other (sized for all of them)."""
        ints = dict(ints) if isinstance(ints, Mapping) else {c: c for c in ints}
        fill = into or Filling(self._rows(table), list(ints), narrow=narrow, texts=texts)
        have = self._columns(table)
        source = {key: col for key, col in ints.items() if col in have}
        for batch in self._batches(table, list(dict.fromkeys([*source.values(), *texts, *also]))):
            rows = len(next(iter(batch.values())))
            try:
                fill.add({key: batch[col] for key, col in source.items()} | {c: batch[c] for c in texts}, rows,
                         keep(batch) if keep else None)
            except TypeError as exc:
                raise GapscopeError(f"{self._file(table)}: unknown export schema: {table}.{exc}") from None
        return fill

    def _frame(self, table: str, source: dict[str, str], required: Sequence[str] = (), *,
               narrow: Collection[str] = frozenset(), also: Sequence[str] = (), keep: Keep | None = None,
               ) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        """A frame with one integer column per key of ``source`` (frame column -> table column;
        int64, or int32 for the keys in ``narrow`` while their values fit), the rows ``keep``
        selects (:meth:`_fill`); a table column the export lacks reads as -1, a required one is
        an unknown schema; and the gapscope.trace.validation Cell codes of the columns that hold
        NULLs."""
        have = self._schema(table, ints=[c for c in (*source.values(), *also) if c], required=required)
        fill = self._fill(table, source, narrow=narrow, also=[c for c in also if c in have], keep=keep)
        return _frame_of(fill, source)

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
            return sum(batch.num_rows for batch in _ArrowFile(self._file(table)).reader)
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
        if ACTIVITY_TABLES.keys() & self._tables:
            got["activities"], cells["activities"] = self._activities()
        if RUNTIME_TABLE in self._tables:
            got["api"], cells["api"] = self._api(all_calls)
        if NVTX_TABLE in self._tables:
            got["nvtx"], cells["nvtx"] = self._nvtx()
        if syncs and SYNC_TABLE in self._tables:
            got["syncs"], cells["syncs"] = self._syncs()
        if syncs and {STREAM_TABLE, CONTEXT_TABLE} <= self._tables:
            self._stream_kinds(got, cells)
        return assemble_frames(self.meta, got, self, cells={k: v for k, v in cells.items() if v})

    def _activities(self) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        """The GPU activity tables' rows, stacked as nsys_schema.assemble_frames stacks them (in
        ACTIVITY_TABLES' order), each table's batches filled straight into the one frame's
        columns: no table is held apart and joined. ``row`` is the row's number in its table;
        ``name_id`` its name column (nsys_schema.name_column; -1 for a table without one)."""
        sources, sizes = {}, {}
        for table, kind in ACTIVITY_TABLES.items():
            if table in self._tables:
                source = {**ACTIVITY_SOURCE, "name_id": name_column(self._columns(table), kind) or ""}
                self._schema(table, ints=[c for c in source.values() if c], required=ACTIVITY_REQUIRED)
                sources[table], sizes[table] = source, self._rows(table)
        keys = [*ACTIVITY_SOURCE, "name_id"]
        fill = Filling(sum(sizes.values()), keys, narrow=READ_NARROW["activities"])
        for table, source in sources.items():
            self._fill(table, source, into=fill)
        total = fill.rows
        row = np.empty(total, dtype=id_dtype(0, max(sizes.values()) - 1))
        kind = np.empty(total, dtype=np.int8)
        at = 0
        for table, n in sizes.items():  # a table's rows are all read: no activity row is left out here
            row[at:at + n] = np.arange(n)
            kind[at:at + n] = ACTIVITY_TABLES[table]
            at += n
        frame, cells = _frame_of(fill, keys, row=row, kind=kind)
        return frame[[*ACTIVITY_COLUMNS, "name_id", "kind"]], cells

    def _api(self, all_calls: bool) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        """The CUDA API calls, backtrace rows and (unless ``all_calls``) quiet calls left out batch
        by batch, as the SQLite reader's WHERE leaves them out."""
        have = self._columns(RUNTIME_TABLE)
        name = API_SOURCE["name_id"]
        quiet = self._quiet_ids() if not all_calls and self._strings_present() else np.zeros(0, np.int64)

        def keep(columns: Columns) -> np.ndarray | None:
            n = len(next(iter(columns.values())))
            out = None
            if "eventClass" in columns:  # as SQL's `eventClass IS NOT 67`: a NULL class (-1 here) is kept
                out = batch_ints(columns["eventClass"])[0] != EVENT_CLASS_BACKTRACE
            if quiet.size:  # a NULL nameId is kept (and warned about as damaged), as the SQLite reader keeps it
                ids, nulls = batch_ints(columns[name]) if name in columns else (np.full(n, -1), None)
                loud = ~np.isin(ids, quiet)
                if nulls is not None:
                    loud |= nulls
                out = loud if out is None else out & loud
            return out

        return self._frame(RUNTIME_TABLE, API_SOURCE, ("start", "end", "globalTid"), narrow=READ_NARROW["api"],
                           also=[c for c in ("eventClass",) if c in have], keep=keep)

    def _nvtx(self) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        """The NVTX ranges and domain creations (other event types left out batch by batch), each
        name its text, else its textId's string (SQL's ``COALESCE(text, StringIds.value)``)."""
        have = self._schema(NVTX_TABLE, ints=("start", "end", "globalTid", "eventType", "domainId", "textId"),
                            text=("text",), required=("start", "eventType", "globalTid"))
        columns = {"start": "start", "end": "end", "tid": "globalTid", "event_type": "eventType",
                   "domain_id": "domainId"}
        by_id = "textId" in have and self._strings_present()
        ints = [c for c in (*columns.values(), *(["textId"] if by_id else [])) if c in have]
        kinds = np.array([NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE])
        fill = self._fill(NVTX_TABLE, ints, texts=[c for c in ("text",) if c in have],
                          keep=lambda batch: np.isin(batch_ints(batch["eventType"])[0], kinds))
        n = fill.rows
        out, cells = {}, {}
        for key, col in columns.items():
            if col in have:
                out[key], codes = fill.ints(col)
                if codes is not None:
                    cells[key] = codes
            else:
                out[key] = np.full(n, -1 if key == "end" else 0, np.int64)
        names = np.full(n, None, dtype=object)
        if "text" in have:
            text = fill.texts("text")
            names = text.objects()
            bad = text.cells()
            if bad is not None:
                cells["name"] = bad
        if by_id:
            ids, id_cells = fill.ints("textId")
            missing = ~_nulls(id_cells, n)
            if "text" in have:
                missing &= text.nulls()
            if missing.any():  # each distinct textId looked up once
                distinct, at = np.unique(ids[missing], return_inverse=True)
                strings = self._string_table()
                found = np.empty(distinct.size, dtype=object)
                found[:] = [strings.get(i) for i in distinct.tolist()]
                names[missing] = found[at]
        out["name"] = names
        return pd.DataFrame(out, copy=False)[list(NVTX_COLUMNS)], cells

    def _syncs(self) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
        """The stream-wait records (as SQL's ``syncType = 2``: a NULL type is no wait)."""
        if "syncType" not in self._columns(SYNC_TABLE):
            return self._frame(SYNC_TABLE, SYNC_SOURCE, ("start", "deviceId", "streamId"))
        return self._frame(SYNC_TABLE, SYNC_SOURCE, ("start", "deviceId", "streamId"), also=("syncType",),
                           keep=lambda batch: batch_ints(batch["syncType"])[0] == SYNC_TYPE_STREAM_WAIT_EVENT)

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
                fill = self._fill(STRINGS_TABLE, ("id",), texts=("value",))
                ids, cells = fill.ints("id")
                values = fill.texts("value").objects().tolist()
                self._strings = {i: v for i, v, null in zip(ids.tolist(), values, _nulls(cells, len(ids)).tolist())
                                 if not null}
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
                self._name_ids[kind] = self._fill(table, (col,)).ints(col)[0].astype(np.int64)
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


def _frame_of(fill: Filling, keys: Iterable[str], **more: np.ndarray) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """A frame of a filling's integer columns ``keys`` and the columns ``more``, made at once (a
    column set into a frame is copied), and the Cell codes of the columns that hold NULLs."""
    columns, cells = dict(more), {}
    for key in keys:
        columns[key], codes = fill.ints(key)
        if codes is not None:
            cells[key] = codes
    return pd.DataFrame(columns, copy=False), cells


def _nulls(cells: np.ndarray | None, n: int) -> np.ndarray:
    """Where a column read through gapscope.trace.filling is NULL, from its Cell codes."""
    return np.zeros(n, dtype=bool) if cells is None else cells != 0


def _slices(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """A record batch in slices of at most BATCH_ROWS rows (views: nothing is copied)."""
    for at in range(0, max(batch.num_rows, 1), BATCH_ROWS):
        yield batch.slice(at, BATCH_ROWS)


class _ArrowFile:
    """A memory-mapped Arrow IPC file and a ``reader`` over it: the stream format nsys's
    arrowdir writes, or the random-access file format (which starts with ``ARROW1``).
    :meth:`hand_back` takes the file's pages read so far out of the process's resident memory,
    so that a table read slice by slice (nsys writes a table as one batch) never holds the
    pages of the columns already stored beside them: a 10M-kernel table's some 700 MB."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            # (an empty file cannot be mapped: its reader fails as any damaged file's does)
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        source = pa.BufferReader(pa.py_buffer(self._map) if self._map is not None else b"")
        if source.read(6) == b"ARROW1":
            source.seek(0)
            self.reader = pa.ipc.open_file(source)
        else:
            source.seek(0)
            self.reader = pa.ipc.open_stream(source)

    def hand_back(self) -> None:
        """Drop the mapped pages from the resident memory: they stay in the page cache, and a
        page read again is mapped again (the file is only ever read)."""
        if self._map is not None and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)
