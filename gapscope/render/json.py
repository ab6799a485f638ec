"""JSON output of any result (docs/schema.md): strict JSON, never NaN or Infinity; compact (no
whitespace) unless an indent is asked for (``--indent N``)."""

from __future__ import annotations

import json
import math
from typing import Any, TextIO

#: Separators of compact output: no space after a comma or a colon.
COMPACT = (",", ":")


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(data: Any, indent: int | None = None) -> str:
    """``data`` as JSON text, compact or indented by ``indent`` spaces; non-finite floats become
    null."""
    options: dict[str, Any] = {"indent": indent} if indent is not None else {"separators": COMPACT}
    try:
        return json.dumps(data, allow_nan=False, **options)
    except ValueError:  # a NaN or an infinity somewhere: only then walk the whole object
        return json.dumps(_finite(data), allow_nan=False, **options)


#: Rows of a result's row section made JSON-safe and written at a time.
ROW_SLICE = 4096


def _write_compact(result: Any, file: TextIO) -> None:
    """The compact JSON of a result with ROW_SECTIONS (an analysis), written a piece at a time:
    each key's value, and each row section ROW_SLICE rows at a time, so that neither a JSON-safe
    copy of every row nor the whole text is ever held (at 30M kernels they are each some
    hundreds of MB). The text is the same as ``dumps(result.to_dict())``."""
    from gapscope.analysis.result import clean_rows, is_row_table

    file.write("{")
    for i, (key, value) in enumerate(result.to_dict(clean=False).items()):
        file.write(("," if i else "") + json.dumps(key) + ":")
        if key not in result.ROW_SECTIONS:
            file.write(dumps(value))
            continue
        # A RowTable is written column by column (row_texts), a slice at a time; a loaded
        # result's lists are cleaned and dumped one slice's dicts at a time.
        table = is_row_table(value)
        if table:
            from gapscope.render.json_rows import row_texts
        file.write("[")
        for lo in range(0, len(value), ROW_SLICE):
            hi = min(lo + ROW_SLICE, len(value))
            text = ",".join(row_texts(value, lo, hi)) if table else dumps(clean_rows(value[lo:hi]))[1:-1]
            file.write(("," if lo else "") + text)
        file.write("]")
    file.write("}")


def render(result: Any, file: TextIO, *, indent: int | None = None, **_: Any) -> None:
    """Write any result with a ``to_dict()`` (analysis, many-trace, comparison, run) as JSON:
    compact (an analysis written a piece at a time), or indented by ``indent`` spaces."""
    if indent is None and hasattr(result, "ROW_SECTIONS"):
        _write_compact(result, file)
    else:
        file.write(dumps(result.to_dict(), indent))
    file.write("\n")
