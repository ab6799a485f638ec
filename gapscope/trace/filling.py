"""A frame's columns filled a record batch at a time into numpy arrays allocated once, so that the
columnar reader (gapscope.trace.nsys_columnar) never holds a whole table as Arrow and as numpy at
once, nor joins batches or tables at the end.

A :class:`Filling` is sized from the rows its tables hold (a Parquet footer, an Arrow stream's
batch headers); each batch's columns are converted and copied into place, only the rows a keep
mask selects (calls and records the analysis drops are never stored), and the arrays are cut to
the rows kept at the end (``realloc``: the tail goes back to the heap, pages never written were
never resident). Integer columns come out as int64, NULL as -1; id columns (``narrow``) as int32
while every value fits (gapscope.trace.frames.fits_narrow), as build_frames keeps them, int64 from
the first batch that does not. Where a column held NULLs, its gapscope.trace.validation Cell
codes come out beside it. Text columns are dictionary-encoded batch by batch and their
dictionaries unified at the end: each distinct text becomes one Python str, each row an int32 id
into them (-1: NULL), with the ids whose bytes were not UTF-8 (read with U+FFFD, Cell.NOT_TEXT).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gapscope.trace.frames import fits_narrow
from gapscope.trace.validation import Cell

#: What a batch's text column is held as until the end: int32 ids into its own distinct values.
_DICTIONARY = pa.dictionary(pa.int32(), pa.large_binary())


def batch_ints(arr: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """One batch's integer column as numpy, and where it is NULL (None: nowhere). Without NULLs
    the values keep their own width (no copy where Arrow's buffer is numpy's); 64-bit unsigned
    values are read as int64, wrapping as SQLite stores them. With NULLs, int64 with -1 there.
    TypeError for a column that holds no integers."""
    t = arr.type
    if pa.types.is_null(t):
        return np.full(len(arr), -1, dtype=np.int64), np.ones(len(arr), dtype=bool)
    if pa.types.is_dictionary(t):
        arr = arr.cast(t.value_type)
        t = arr.type
    if not (pa.types.is_integer(t) or pa.types.is_boolean(t)):
        raise TypeError(f"holds {t} where integers belong")
    if arr.null_count:
        nulls = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        return pc.fill_null(arr.cast(pa.int64(), safe=False), -1).to_numpy(), nulls
    values = arr.to_numpy(zero_copy_only=False)
    if values.dtype == np.uint64:
        values = values.view(np.int64)
    elif values.dtype == np.bool_:
        values = values.astype(np.int64)
    return values, None


@dataclass
class Texts:
    """A text column read through :class:`Filling`: ``ids`` per row into ``values`` (-1: NULL),
    and ``not_utf8``: per id, whether its bytes were not UTF-8 (None: every one was)."""

    ids: np.ndarray
    values: list[str | None]
    not_utf8: np.ndarray | None

    def objects(self) -> np.ndarray:
        """One str per row (None where NULL), each distinct text one object."""
        table = np.empty(len(self.values) + 1, dtype=object)
        table[:-1] = self.values
        return table[self.ids]  # -1 picks the last slot: None

    def nulls(self) -> np.ndarray:
        """Where a row's text is NULL."""
        empty = np.array([v is None for v in self.values] + [True], dtype=bool)  # one per distinct text
        return empty[self.ids]

    def cells(self) -> np.ndarray | None:
        """The Cell codes of the rows (NOT_TEXT where the bytes were not UTF-8), None when none."""
        if self.not_utf8 is None:
            return None
        bad = np.append(self.not_utf8, False)[self.ids]
        return np.where(bad, np.uint8(Cell.NOT_TEXT), np.uint8(Cell.OK))


class Filling:
    """A frame's columns (``ints``, ``texts``: their names), filled batch by batch (from one table,
    or from several one after the other) into arrays of ``rows`` rows allocated once; ``narrow``:
    those of ``ints`` held in 32 bits while they fit."""

    def __init__(self, rows: int, ints: Sequence[str] = (), *, narrow: Collection[str] = (),
                 texts: Sequence[str] = ()) -> None:
        self._size = max(int(rows), 0)
        self.rows = 0
        self._values = {name: np.empty(self._size, dtype=np.int32 if name in narrow else np.int64)
                        for name in ints}
        self._cells: dict[str, np.ndarray] = {}
        self._texts: dict[str, list[pa.DictionaryArray]] = {name: [] for name in texts}

    def add(self, columns: Mapping[str, pa.Array], rows: int, keep: np.ndarray | None = None) -> None:
        """Copy one batch of ``rows`` rows in: its columns by name (others are ignored; an integer
        column absent reads as -1, as a column the table lacks), only the rows ``keep`` selects
        (every row when None). More rows than allocated is a reader's bug (ValueError)."""
        n = rows
        kept = n if keep is None else int(np.count_nonzero(keep))
        at = self.rows
        if at + kept > self._size:
            raise ValueError(f"{at + kept} rows where {self._size} were counted")
        self.rows += kept
        if keep is not None and kept == n:
            keep = None
        for name, out in self._values.items():
            if name not in columns:
                out[at:at + kept] = -1
                continue
            try:
                values, nulls = batch_ints(columns[name])
            except (TypeError, pa.ArrowException) as exc:
                raise TypeError(f"{name} {exc}") from None
            if keep is not None:
                values = values[keep]
                nulls = None if nulls is None else nulls[keep]
            if out.dtype == np.int32 and not fits_narrow(values):
                wide = np.empty(self._size, dtype=np.int64)  # an id past 32 bits: int64 from now
                wide[:at] = out[:at]
                self._values[name] = out = wide
            out[at:at + kept] = values
            if nulls is not None and nulls.any():
                if name not in self._cells:
                    self._cells[name] = np.zeros(self._size, dtype=np.uint8)
                self._cells[name][at:at + kept] = nulls * np.uint8(Cell.NULL)
        for name, pieces in self._texts.items():
            try:
                pieces.append(_encoded(columns[name], keep))
            except (TypeError, pa.ArrowException) as exc:
                raise TypeError(f"{name} {exc}") from None

    def ints(self, name: str) -> tuple[np.ndarray, np.ndarray | None]:
        """An integer column cut to the rows kept, and its Cell codes (None: no NULL in it).
        Each column is handed out once."""
        values = self._values.pop(name)
        values.resize(self.rows, refcheck=False)  # realloc: the pages past the rows go back
        cells = self._cells.pop(name, None)
        if cells is not None:
            cells.resize(self.rows, refcheck=False)
        return values, cells

    def texts(self, name: str) -> Texts:
        """A text column's ids and distinct values (handed out once)."""
        pieces = self._texts.pop(name)
        if not pieces:
            return Texts(np.zeros(0, dtype=np.int32), [], None)
        joined = pa.chunked_array(pieces, type=_DICTIONARY).unify_dictionaries()
        ids = np.empty(self.rows, dtype=np.int32)
        at = 0
        for chunk in joined.chunks:
            ids[at:at + len(chunk)] = pc.fill_null(chunk.indices, -1).to_numpy()
            at += len(chunk)
        values, not_utf8 = _decoded(joined.chunks[0].dictionary if joined.num_chunks else pa.array([], pa.large_binary()))
        return Texts(ids, values, not_utf8)


def _encoded(arr: pa.Array, keep: np.ndarray | None) -> pa.DictionaryArray:
    """One batch's text column as ids into its own distinct values (bytes), the rows ``keep``
    selects; TypeError for a column that holds no text."""
    t = arr.type
    if pa.types.is_null(t):
        arr = pa.DictionaryArray.from_arrays(pa.nulls(len(arr), pa.int32()), pa.array([], pa.large_binary()))
    elif pa.types.is_dictionary(t) and _is_text(t.value_type):
        arr = pa.DictionaryArray.from_arrays(arr.indices.cast(pa.int32()), arr.dictionary.cast(pa.large_binary()))
    elif _is_text(t):
        arr = pc.dictionary_encode(arr.cast(pa.large_binary()))
    else:
        raise TypeError(f"holds {t} where text belongs")
    return arr if keep is None else arr.filter(pa.array(keep))


def _is_text(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def _decoded(dictionary: pa.Array) -> tuple[list[str | None], np.ndarray | None]:
    """Distinct texts (bytes) as str, bytes that are not UTF-8 read with U+FFFD in their place,
    and which those were (None when none: a loop per distinct value only for such a column)."""
    try:
        return dictionary.cast(pa.large_string()).to_pylist(), None  # checks that every value is UTF-8
    except (pa.ArrowInvalid, UnicodeDecodeError):
        raw = dictionary.to_pylist()
        bad = np.zeros(len(raw), dtype=bool)
        out = []
        for i, v in enumerate(raw):
            if v is None:  # a NULL among a dictionary's values
                out.append(None)
                continue
            try:
                out.append(v.decode("utf-8"))
            except UnicodeDecodeError:
                out.append(v.decode("utf-8", "replace"))
                bad[i] = True
        return out, bad
