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


def render(result: Any, file: TextIO, *, indent: int | None = None, **_: Any) -> None:
    """Write any result with a ``to_dict()`` (analysis, many-trace, comparison, run) as JSON:
    compact, or indented by ``indent`` spaces."""
    file.write(dumps(result.to_dict(), indent))
    file.write("\n")
