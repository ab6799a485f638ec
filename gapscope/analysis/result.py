"""The one serializable analysis result, and its JSON form (schema ``gapscope.analysis/2``).

An AnalysisResult is built once, by the pipeline (gapscope.analysis.pipeline), and never changed
afterwards; renderers take it, and ``to_dict``/``from_dict`` round-trip it through JSON so a
saved result can be re-rendered or compared without the trace. docs/schema.md documents it.
A result of the previous schema (``gapscope.analysis/1``: one category per gap, ``launch``
holding all the host-side time) still loads, keeps its schema name and reads as it did.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gapscope import __version__
from gapscope.errors import GapscopeError
from gapscope.schema import ANALYSIS_SCHEMA as SCHEMA
from gapscope.schema import check_result, require_fields

#: Optional sections, in the order the JSON writes them (docs/schema.md).
SECTIONS = ("answer", "launch", "payoff", "top_gaps")
_CORE = ("schema", "gapscope_version", "trace", "nsys_version", "options", "warnings",
         "ranges", "by_name", "devices", "streams")


def clean_value(value: Any) -> Any:
    """JSON-safe scalars: NaN becomes None, numpy scalars become Python ones."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


#: Types :func:`clean_value` returns as they are (a float too, unless it is NaN).
_PLAIN = frozenset({int, str, bool, type(None), list, dict})


def is_row_table(rows: Any) -> bool:
    """Whether a result section is a RowTable (gapscope.analysis.rows), told without importing
    that module (nor numpy with it) where none was ever made: a result loaded from JSON holds
    lists, and a renderer of a cached result imports no numpy."""
    module = sys.modules.get("gapscope.analysis.rows")
    return module is not None and isinstance(rows, module.RowTable)


def clean_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with every value made JSON-safe (:func:`clean_value`; the values that need nothing, most
    of them, are told by their type alone, without a call per value)."""
    return [{k: v if type(v) in _PLAIN or (type(v) is float and v == v) else clean_value(v) for k, v in row.items()}
            for row in rows]


@dataclass(frozen=True)
class AnalysisResult:
    """What `gapscope analyze` learned from one trace.

    ``ranges``: one row per NVTX range instance in start order; ``by_name``: one per range name;
    ``devices`` and ``streams``: the whole trace's timelines. Each is a sequence of rows, each
    row a plain dict of the fields docs/schema.md lists: the pipeline's sections are
    gapscope.analysis.rows.RowTable (columns, a dict made as a row is read), a loaded result's
    lists. ``launch`` (launch statistics per API), ``payoff`` (measured
    graph speedups) and ``top_gaps`` (longest gaps) are None when not computed; ``extras`` keeps
    sections this version does not know (from a newer gapscope's JSON) as they were.
    """

    trace: dict[str, Any]
    options: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    ranges: Sequence[dict[str, Any]] = field(default_factory=list)
    by_name: Sequence[dict[str, Any]] = field(default_factory=list)
    devices: Sequence[dict[str, Any]] = field(default_factory=list)
    streams: Sequence[dict[str, Any]] = field(default_factory=list)
    answer: list[dict[str, Any]] | None = None
    launch: list[dict[str, Any]] | None = None
    payoff: list[dict[str, Any]] | None = None
    top_gaps: list[dict[str, Any]] | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    gapscope_version: str = __version__
    schema: str = SCHEMA

    @property
    def nsys_version(self) -> str | None:
        return self.trace.get("nsys_version")

    def answers(self) -> list[dict[str, Any]]:
        """The answer's entries (gapscope.analysis.answer): the result's own, or made from its rows
        (a result of an older schema has none)."""
        if self.answer is not None:
            return self.answer
        from gapscope.analysis import answer

        return answer.build(self.by_name, self.devices, self.payoff, self.launch, self.trace)

    @property
    def attributed(self) -> bool:
        """True when the gaps carry categories (attribution ran)."""
        return any("gap_by_category_ns" in r for r in self.devices)

    #: The sections of rows that :meth:`to_dict` makes JSON-safe (``clean_rows``).
    ROW_SECTIONS = ("ranges", "by_name", "devices", "streams")

    def listed(self, sections: tuple[str, ...] = ROW_SECTIONS) -> "AnalysisResult":
        """The same result with these row sections as lists of dicts, each row made once: for a
        renderer that reads a section several times (the tables pick, fold and count rows)."""
        listed = {name: list(getattr(self, name)) for name in sections if not isinstance(getattr(self, name), list)}
        return replace(self, **listed) if listed else self

    def to_dict(self, clean: bool = True) -> dict[str, Any]:
        """The JSON object of docs/schema.md; ``clean=False``: the ROW_SECTIONS are the result's
        own sequences, not yet made JSON-safe (the JSON renderer reads them a slice at a time)."""
        rows = clean_rows if clean else (lambda section: section)
        out = {
            "schema": self.schema,
            "gapscope_version": self.gapscope_version,
            "trace": self.trace,
            "nsys_version": self.nsys_version,
            "options": self.options,
            "warnings": list(self.warnings),
            "ranges": rows(self.ranges),
            "by_name": rows(self.by_name),
            "devices": rows(self.devices),
            "streams": rows(self.streams),
        }
        for name in SECTIONS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return {**out, **self.extras}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "result") -> "AnalysisResult":
        """Rebuild a result from its JSON object (``source`` names it in errors); GapscopeError
        if it is not one this gapscope wrote, checked by gapscope.schema before anything is read."""
        if check_result(data, source) != "analysis":
            raise GapscopeError(f"{source}: a many-trace result, not a single analysis")
        require_fields(data, source)
        schema = data["schema"]
        known = {*_CORE, *SECTIONS}
        return cls(
            trace=data.get("trace", {}),
            options=data.get("options", {}),
            warnings=list(data.get("warnings", [])),
            ranges=list(data.get("ranges", [])),
            by_name=list(data.get("by_name", [])),
            devices=list(data.get("devices", [])),
            streams=list(data.get("streams", [])),
            **{name: data.get(name) for name in SECTIONS},
            extras={k: v for k, v in data.items() if k not in known},
            gapscope_version=data.get("gapscope_version", "?"),
            schema=schema,
        )


def load_result(path: str | Path) -> AnalysisResult:
    """Read a result JSON written by `gapscope analyze --format json` or `gapscope run`."""
    from gapscope.inputs import read_json

    return AnalysisResult.from_dict(read_json(Path(path)), str(path))
