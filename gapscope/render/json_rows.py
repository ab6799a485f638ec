"""The compact JSON text of a RowTable's rows (gapscope.analysis.rows), made column by column
with no dict per row: the text ``json.dumps(rows, separators=(",", ":"))`` writes of the rows
read out, NaN and infinities null (gapscope.render.json's strict JSON), in about half the time
of making the dicts and dumping them (docs/performance.md)."""

from __future__ import annotations

import math
from json.encoder import encode_basestring_ascii
from typing import Any

import numpy as np

from gapscope.analysis.rows import Column, Nested, RowTable
from gapscope.render.json import dumps


def _cell_text(value: Any) -> str:
    """One JSON-safe cell (a Python number, str, None, bool, or anything else json takes) as
    ``json.dumps`` writes it in compact output, a non-finite float as null."""
    if value is None:
        return "null"
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is float:
        return float.__repr__(value) if math.isfinite(value) else "null"
    if kind is int:
        return int.__repr__(value)
    return dumps(value)


def _column_texts(column: Column, lo: int, hi: int) -> list[str]:
    """Rows ``lo..hi-1`` of one RowTable column (gapscope.analysis.rows: a numpy array of
    numbers, an object array of Python values, or a Nested) as their JSON text, one column at a
    time instead of one dict per row: NaN and infinities null, as the rows read out and
    :func:`dumps` make them."""
    if isinstance(column, Nested):
        return _objects(column.keys, [_column_texts(c, 0, c.size) for c in column.values[lo:hi].T], hi - lo)
    part = column[lo:hi]
    kind = part.dtype.kind
    if kind == "b":
        return ["true" if v else "false" for v in part.tolist()]
    if kind in "iu":
        return list(map(int.__repr__, part.tolist()))
    if kind == "f":
        texts = list(map(float.__repr__, part.tolist()))
        for i in np.flatnonzero(~np.isfinite(part)).tolist():
            texts[i] = "null"
        return texts
    return [_cell_text(v) for v in part.tolist()]


def _objects(keys: tuple[str, ...], texts: list[list[str]], n: int) -> list[str]:
    """``n`` JSON objects, object i mapping each of ``keys`` to its column's text i (``texts``:
    one list per key), put together from one ``%`` template."""
    if not keys:
        return ["{}"] * n
    template = "{" + ",".join(encode_basestring_ascii(k).replace("%", "%%") + ":%s" for k in keys) + "}"
    return [template % cells for cells in zip(*texts)]


def row_texts(table: RowTable, lo: int, hi: int) -> list[str]:
    """Rows ``lo..hi-1`` of a RowTable (gapscope.analysis.rows) as the compact JSON text of
    each row's dict, column by column: the same text as ``dumps(table[lo:hi])``'s rows, with
    no dict made."""
    names = table.fields
    return _objects(names, [_column_texts(table.column(name), lo, hi) for name in names], hi - lo)
