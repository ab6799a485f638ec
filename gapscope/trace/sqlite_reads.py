"""Bulk reads of an nsys SQLite export into columns: one SELECT per frame (:class:`Read`), split
into chunks of rowid ranges that cover every rowid whatever its value and read side by side.

Only the columns the analysis needs are selected. Bulk tables go through ADBC's SQLite driver
into Arrow (several times faster than ``pandas.read_sql``), through the column cache
(gapscope.trace.cached_reads); the standard ``sqlite3`` module is the fallback when ADBC is not
installed. When a column holds anything but integers (text, blobs, reals: a damaged export)
that table is read again with each value's SQLite type beside it, and
gapscope.trace.validation decides, per documented rule, which rows are left out.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gapscope import heap
from gapscope.errors import GapscopeError
from gapscope.trace.column_cache import ColumnCache
from gapscope.trace.cached_reads import cached_table, finish
from gapscope.trace.frames import narrow_ids
from gapscope.trace.sqlite_source import Source, read_error, sql_rows
from gapscope.trace.validation import Cell


def integer_sql(expr: str) -> str:
    """``expr`` where it holds an integer, else NULL."""
    return f"CASE typeof({expr}) WHEN 'integer' THEN {expr} END"


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
                out.append(f"{integer_sql(expr)} AS {name}, CASE typeof({expr}) WHEN 'integer' THEN "
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


def _adbc_dbapi():
    """ADBC's SQLite DB-API module, imported without polars: ADBC's DB-API imports polars when it
    is installed (for polars parameters and results, which gapscope never uses), some 0.1 s and
    50 MiB at every start. Where the program has polars imported already, it stays."""
    import sys

    if "adbc_driver_sqlite.dbapi" in sys.modules or "polars" in sys.modules:
        import adbc_driver_sqlite.dbapi as adbc

        return adbc
    sys.modules["polars"] = None  # type: ignore[assignment]  # `import polars` raises ImportError
    try:
        import adbc_driver_sqlite.dbapi as adbc
    finally:
        if sys.modules.get("polars", 0) is None:
            del sys.modules["polars"]
    return adbc


def _adbc_importable() -> bool:
    try:
        _adbc_dbapi()
    except ImportError:
        return False
    return True


class BulkReader:
    """Runs bulk SELECTs into DataFrames: through ADBC into Arrow when it is installed, split
    into rowid chunks read on a small thread pool (SQLite decoding is the bottleneck and ADBC
    releases the GIL); through the stdlib sqlite3 module otherwise. With a ``cache``
    (gapscope.trace.column_cache), each ADBC query's Arrow table is taken from it when kept there,
    and kept there when read from the export (gapscope.trace.cached_reads)."""

    def __init__(self, source: Source, conn: sqlite3.Connection, cache: ColumnCache | None = None) -> None:
        self._source = source
        self._conn = conn
        self._cache = cache
        self._adbc = _adbc_importable()
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
            raise read_error(str(self._source.path), exc) from None

    def _fetch(self, query: str):
        return cached_table(self._cache, query, self._query)

    def _query(self, query: str):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            adbc = _adbc_dbapi()
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
        rows = sql_rows(self._conn, r.sql(typed=True))
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
        finish(self._cache)


def _bounds(conn: sqlite3.Connection, r: Read) -> list[tuple[int | None, int | None]]:
    """Rowid ranges ``[lo, hi)`` that together cover every row of the read's table, whatever
    its rowids (negative, huge, sparse): at most MAX_CHUNKS of them, an open range at each end."""
    lo, hi = sql_rows(conn, f"SELECT (SELECT min(rowid) FROM {r.table}), (SELECT max(rowid) FROM {r.table})")[0]
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
    (:func:`_fast_columns`), the join starts from less resident memory (docs/performance.md)."""
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
