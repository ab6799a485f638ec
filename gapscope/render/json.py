"""JSON output of any result (docs/schema.md): strict JSON, never NaN or Infinity."""

from __future__ import annotations

import json
import math
from typing import Any, TextIO


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(data: Any) -> str:
    """``data`` as indented JSON text; non-finite floats become null."""
    try:
        return json.dumps(data, indent=2, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere: only then walk the whole object
        return json.dumps(_finite(data), indent=2, allow_nan=False)


def render(result: Any, file: TextIO, **_: Any) -> None:
    """Write any result with a ``to_dict()`` (analysis, many-trace, comparison, run) as JSON."""
    file.write(dumps(result.to_dict()))
    file.write("\n")
