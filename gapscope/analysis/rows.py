"""A result section's rows held as columns: :class:`RowTable`, a read-only sequence of dicts.

The pipeline measures every figure of a section (ranges, names, devices, streams) as a column;
a row becomes a dict only when it is read (by index, slice or iteration), so a result with
380,000 range rows holds some 300 bytes a row, not the 2.5 KB of a dict of Python numbers
(docs/performance.md, "Result rows"). A row read out is the dict the pipeline
built before: the same keys in the same order, the same values and types (ints, floats, str,
None; NaN reads as None), ``gap_by_category_ns`` a dict of its own.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from gapscope.analysis.result import clean_value


@dataclass(frozen=True)
class Nested:
    """A column whose cells are dicts with the same ``keys``: row i's dict maps each key to
    ``values[i]``'s entry (an integer array of shape (rows, keys))."""

    keys: tuple[str, ...]
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def cells(self, lo: int, hi: int) -> list[dict[str, Any]]:
        keys = self.keys
        return [dict(zip(keys, row)) for row in self.values[lo:hi].tolist()]


Column = np.ndarray | Nested


def _plain(value: Any) -> Any:
    """A cell of a text column as a Python value: result.clean_value's (numpy scalars become
    Python ones, NaN None), and numpy's str_ a plain str."""
    if value is None or type(value) is str:
        return value
    return str(value) if isinstance(value, str) else clean_value(value)


def _column(values: Any) -> Column:
    """``values`` as a column: a Nested as it is, numbers as a numpy array, anything else (text,
    None) as an object array of Python values."""
    if isinstance(values, Nested):
        return values
    array = np.asarray(values)
    if array.dtype.kind in "iubf":
        return array
    out = np.empty(len(array), dtype=object)
    out[:] = [_plain(v) for v in array.tolist()]
    return out


def _cells(column: Column, lo: int, hi: int) -> list[Any]:
    """Rows ``lo..hi-1`` of a column as Python values."""
    if isinstance(column, Nested):
        return column.cells(lo, hi)
    part = column[lo:hi]
    values = part.tolist()
    if part.dtype.kind == "f":
        for i in np.flatnonzero(np.isnan(part)).tolist():
            values[i] = None
    return values


class RowTable(Sequence):
    """Rows of one result section, one column per field (in the rows' key order). Read-only: a
    row read out is a new dict, and changing it changes nothing here. Equal to any sequence of
    the same dicts (a saved result's list of rows)."""

    #: Rows made into dicts at a time when iterating.
    SLICE = 4096

    def __init__(self, columns: Mapping[str, Any], rows: int | None = None) -> None:
        """``columns``: field name to values (one per row: numbers, text or None, or a Nested);
        ``rows``: the number of rows, needed only when there are no columns."""
        self._columns = {name: _column(values) for name, values in columns.items()}
        lengths = {len(c) for c in self._columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        self._n = lengths.pop() if lengths else int(rows or 0)

    @property
    def fields(self) -> tuple[str, ...]:
        """The rows' keys, in order."""
        return tuple(self._columns)

    def column(self, name: str) -> Column:
        """One field's column as held (a read-only view of a numpy array, or a Nested)."""
        column = self._columns[name]
        if isinstance(column, np.ndarray):
            column = column.view()
            column.flags.writeable = False
        return column

    def __len__(self) -> int:
        return self._n

    def values(self, name: str) -> list[Any]:
        """One field of every row as Python values (what the rows would hold), no row made."""
        return _cells(self._columns[name], 0, self._n)

    def rows(self, lo: int = 0, hi: int | None = None) -> list[dict[str, Any]]:
        """Rows ``lo..hi-1`` as dicts (to the end when ``hi`` is None)."""
        lo, hi, _ = slice(lo, hi).indices(self._n)
        if hi <= lo:
            return []
        names = list(self._columns)
        if not names:
            return [{} for _ in range(hi - lo)]
        # The dicts hold numbers, text and dicts of numbers, no cycle: the collector, which would
        # run every 700 new dicts and walk the older ones, is held off while they are made (at
        # 100,000 rows that halves the time, benchmarks/bench_rows.py).
        collecting = gc.isenabled()
        gc.disable()
        try:
            return [dict(zip(names, cells)) for cells in zip(*(_cells(c, lo, hi) for c in self._columns.values()))]
        finally:
            if collecting:
                gc.enable()

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            lo, hi, step = index.indices(self._n)
            if step == 1:
                return self.rows(lo, hi)
            return [self[i] for i in range(lo, hi, step)]
        i = index.__index__()
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("row index out of range")
        return self.rows(i, i + 1)[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for lo in range(0, self._n, self.SLICE):
            yield from self.rows(lo, lo + self.SLICE)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RowTable({self._n} rows: {', '.join(self._columns)})"


def rows_of(columns: Mapping[str, Any]) -> int:
    """The number of rows of a section's columns (its first column's length; 0 without any)."""
    return len(next(iter(columns.values()))) if columns else 0
