"""JSON output: the result's documented schema (docs/schema.md)."""

from __future__ import annotations

import json
from typing import TextIO

from gapscope.result import AnalysisResult


def render_json(result: AnalysisResult, file: TextIO) -> None:
    """Write the result as indented JSON."""
    json.dump(result.to_dict(), file, indent=2, allow_nan=False)
    file.write("\n")
