"""The files of a recording's output folder (`gapscope run`, `gapscope profile`), written one way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any) -> None:
    """``data`` as indented JSON with a final newline (environment.json, run.json, profile.json)."""
    path.write_text(json.dumps(data, indent=2) + "\n")
