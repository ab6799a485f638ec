"""The one serializable analysis result, and its JSON form (schema ``gapscope.analysis/1``).

Renderers take an AnalysisResult; ``to_dict``/``from_dict`` round-trip it through JSON so a
saved result can be re-rendered or compared without the trace. docs/schema.md documents it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gapscope import __version__
from gapscope.errors import GapscopeError

SCHEMA = "gapscope.analysis/1"


def _clean(value: Any) -> Any:
    """JSON-safe scalars: NaN becomes None, numpy scalars become Python ones."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def clean_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with every value made JSON-safe."""
    return [{k: _clean(v) for k, v in row.items()} for row in rows]


@dataclass
class AnalysisResult:
    """What `gapscope analyze` learned from one trace.

    ``ranges``: one row per NVTX range instance in start order; ``by_name``: one per range name;
    ``devices`` and ``streams``: the whole trace's timelines. Each row is a plain dict of the
    fields docs/schema.md lists. ``extras`` holds optional sections (gap attribution, launch
    statistics, graph payoff, longest gaps) keyed by name.
    """

    trace: dict[str, Any]
    options: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    ranges: list[dict[str, Any]] = field(default_factory=list)
    by_name: list[dict[str, Any]] = field(default_factory=list)
    devices: list[dict[str, Any]] = field(default_factory=list)
    streams: list[dict[str, Any]] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    gapscope_version: str = __version__

    @property
    def nsys_version(self) -> str | None:
        return self.trace.get("nsys_version")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of docs/schema.md."""
        return {
            "schema": SCHEMA,
            "gapscope_version": self.gapscope_version,
            "trace": self.trace,
            "nsys_version": self.nsys_version,
            "options": self.options,
            "warnings": list(self.warnings),
            "ranges": clean_rows(self.ranges),
            "by_name": clean_rows(self.by_name),
            "devices": clean_rows(self.devices),
            "streams": clean_rows(self.streams),
            **self.extras,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AnalysisResult":
        """Rebuild a result from its JSON object; GapscopeError if it is not one."""
        schema = data.get("schema") if isinstance(data, dict) else None
        if not isinstance(schema, str) or not schema.startswith("gapscope.analysis/"):
            raise GapscopeError("not a gapscope analysis result (no 'schema: gapscope.analysis/N')")
        if schema != SCHEMA:
            raise GapscopeError(f"result schema {schema!r} is not supported (this gapscope reads {SCHEMA})")
        known = {"schema", "gapscope_version", "trace", "nsys_version", "options", "warnings",
                 "ranges", "by_name", "devices", "streams"}
        return cls(
            trace=data.get("trace", {}),
            options=data.get("options", {}),
            warnings=list(data.get("warnings", [])),
            ranges=list(data.get("ranges", [])),
            by_name=list(data.get("by_name", [])),
            devices=list(data.get("devices", [])),
            streams=list(data.get("streams", [])),
            extras={k: v for k, v in data.items() if k not in known},
            gapscope_version=data.get("gapscope_version", "?"),
        )


def load_result(path: str | Path) -> AnalysisResult:
    """Read a result JSON written by `gapscope analyze --format json` or `gapscope run`."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GapscopeError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GapscopeError(f"{p}: not a gapscope result JSON ({exc})") from None
    return AnalysisResult.from_dict(data)
