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

from gapscope.errors import GapscopeError
from gapscope.trace.column_cache import ColumnCache
from gapscope.trace.cached_reads import cached_table, finish
from gapscope.trace.frames import fits_narrow
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

#: A frame's columns: values, and the Cell code per row (None where every cell was read).
Columns = dict[str, tuple[np.ndarray, np.ndarray | None]]


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
        plans = {key: _chunks(self._conn, r, self._most_rows) for key, r in reads.items()}
        tasks = [(key, lo, hi) for key, (bounds, _) in plans.items() for lo, hi in bounds]
        workers = max(1, min(4, os.cpu_count() or 1, len(tasks)))
        chunks = {key: len(bounds) for key, (bounds, _) in plans.items()}
        out = {}
        filling: dict[str, _Filling | None] = {}
        seen = dict.fromkeys(reads, 0)
        with ThreadPoolExecutor(workers) as pool:
            # Chunks come back in task order, a table's together: each is copied into its table's
            # columns (allocated once, for the most rows the read can give) and let go, while the
            # next ones are read; a table is done when its last chunk is in.
            for (key, _, _), table in zip(tasks, pool.map(
                    lambda t: self._chunk(reads[t[0]], t[1], t[2], typed=False), tasks)):
                r = reads[key]
                if key not in filling:
                    filling[key] = _Filling(r, plans[key][1])
                fill = filling[key]
                if fill is not None and table is None:  # values of the wrong type somewhere: read it typed
                    filling[key] = fill = None
                if fill is not None:
                    fill.add_table(table)
                del table  # the driver's batches: the next chunk's reuse their blocks
                seen[key] += 1
                if seen[key] < chunks[key]:
                    continue
                del filling[key]
                if fill is None:
                    fill = _Filling(r, plans[key][1])
                    for k, lo, hi in tasks:
                        if k == key:
                            fill.add_columns(self._chunk(r, lo, hi, typed=True))
                out[key] = _frame(fill.columns(), r)
                del fill
        return out

    @property
    def _most_rows(self) -> int:
        """The most rows any table of the export can hold: one per 16 bytes of the file."""
        return self._source.path.stat().st_size // 16

    def _chunk(self, r: Read, lo: int | None, hi: int | None, *, typed: bool):
        """One chunk: read typed, its columns; read as is, its Arrow table, or None when it met a
        value of another type than its column's (or failed at all: the typed read then says why,
        or reads it)."""
        try:
            table = self._fetch(r.sql(lo, hi, typed=typed))
            return _typed_columns(table, r) if typed else _checked(table, r)
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
    return _chunks(conn, r, 0)[0]


def _chunks(conn: sqlite3.Connection, r: Read, most: int) -> tuple[list[tuple[int | None, int | None]], int]:
    """(:func:`_bounds`, the rows the read can give at most): its table's rowid span, and at most
    ``most`` (a damaged table's rowids can span far more rows than the file holds)."""
    lo, hi = sql_rows(conn, f"SELECT (SELECT min(rowid) FROM {r.table}), (SELECT max(rowid) FROM {r.table})")[0]
    if lo is None or hi is None:
        return [(None, None)], 0
    width = hi - lo + 1  # a Python int: no overflow for any pair of int64 rowids
    rows = min(width, most)
    n = min(MAX_CHUNKS, -(-width // CHUNK_ROWS))
    if n <= 1:
        return [(None, None)], rows
    cuts = [lo + i * (width // n) for i in range(1, n)]
    return [(None, cuts[0]), *zip(cuts[:-1], cuts[1:]), (cuts[-1], None)], rows


def _checked(table, r: Read):
    """A chunk read as is, or None when a column came back as another type than integers (or
    valid UTF-8 text), which only a damaged table gives."""
    import pyarrow as pa

    for name, col in zip(r.names, table.columns):
        t = col.type
        if pa.types.is_null(t) or (pa.types.is_integer(t) and name not in TEXT_COLUMNS):
            continue
        if name not in TEXT_COLUMNS or not (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return None
        try:
            col.validate(full=True)
        except pa.ArrowInvalid:
            return None
    return table


class _Filling:
    """One read's columns, filled chunk after chunk (in the read's order) into arrays allocated
    once, for the most rows the read can give (:func:`_chunks`: pages never written cost no
    memory), and cut to the rows read at the end: no chunk is held as columns of its own and no
    column is joined from pieces. Id columns (``Read.narrow``) are int32 until a value does not
    fit (frames.narrow_ids), then int64; other integer columns int64; text is kept as each chunk's
    object array and joined at the end (only NVTX names). A read that gives more rows than its
    bound (a join that repeats rows) grows the arrays."""

    def __init__(self, r: Read, most: int) -> None:
        self._r = r
        self._size = max(int(most), 0)
        self._rows = 0
        self._values: dict[str, np.ndarray] = {
            name: np.empty(self._size, dtype=np.int32 if name in r.narrow else np.int64)
            for name in r.names if name not in TEXT_COLUMNS}
        self._text: dict[str, list[np.ndarray]] = {name: [] for name in r.names if name in TEXT_COLUMNS}
        self._cells: dict[str, np.ndarray] = {}

    def _room(self, rows: int) -> int:
        """Where ``rows`` more rows go, the arrays grown to hold them."""
        at = self._rows
        if at + rows > self._size:
            self._size = max(at + rows, 2 * self._size)
            for values in (*self._values.values(), *self._cells.values()):
                values.resize(self._size, refcheck=False)  # realloc: the new part zeros, the rows kept
        self._rows += rows
        return at

    def _cell(self, name: str) -> np.ndarray:
        if name not in self._cells:
            self._cells[name] = np.zeros(self._size, dtype=np.uint8)
        return self._cells[name]

    def _put(self, name: str, at: int, values: np.ndarray) -> None:
        out = self._values[name]
        # An id past 32 bits: int64 from now.
        if out.dtype == np.int32 and values.dtype != np.int32 and not fits_narrow(values):
            wide = np.empty(self._size, dtype=np.int64)
            wide[:at] = out[:at]
            self._values[name] = out = wide
        out[at:at + values.size] = values

    def add_table(self, table) -> None:
        """Copy a chunk's Arrow table (:func:`_checked`) in, batch by batch."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = table.num_rows
        at = self._room(n)
        for name, col in zip(self._r.names, table.columns):
            if pa.types.is_null(col.type):
                if name in TEXT_COLUMNS:
                    self._text[name].append(np.full(n, None, dtype=object))
                else:
                    self._values[name][at:at + n] = -1
                self._cell(name)[at:at + n] = Cell.NULL
            elif name in TEXT_COLUMNS:
                self._text[name].append(col.to_pandas().to_numpy(dtype=object))
            else:
                pos = at
                for c in col.chunks:
                    if c.null_count:
                        self._cell(name)[pos:pos + len(c)] = pc.is_null(c).to_numpy(zero_copy_only=False)
                        self._cell(name)[pos:pos + len(c)] *= np.uint8(Cell.NULL)
                        c = pc.fill_null(c, -1)
                    self._put(name, pos, c.to_numpy())
                    pos += len(c)

    def add_columns(self, columns: Columns) -> None:
        """Copy a chunk's columns (:func:`_typed_columns`) in."""
        n = len(columns[self._r.names[0]][0]) if self._r.names else 0
        at = self._room(n)
        for name in self._r.names:
            values, cells = columns[name]
            if name in TEXT_COLUMNS:
                self._text[name].append(values)
            else:
                self._put(name, at, values)
            if cells is not None:
                self._cell(name)[at:at + n] = cells

    def columns(self) -> Columns:
        """The read's columns, cut to the rows read (realloc: the pages past them go back)."""
        out: Columns = {}
        for name in self._r.names:
            if name in TEXT_COLUMNS:
                pieces = self._text.pop(name)
                values = np.concatenate(pieces) if pieces else np.zeros(0, dtype=object)
            else:
                values = self._values.pop(name)
                values.resize(self._rows, refcheck=False)
            cells = self._cells.pop(name, None)
            if cells is not None:
                cells.resize(self._rows, refcheck=False)
            out[name] = (values, cells)
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


def _frame(columns: Columns, r: Read) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    frame = pd.DataFrame({name: v for name, (v, _) in columns.items()}, copy=False)
    return frame, {name: c for name, (_, c) in columns.items() if c is not None}
