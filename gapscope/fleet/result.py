"""The merged result of several traces (schema ``gapscope.fleet/2``, docs/schema.md; a
``gapscope.fleet/1`` result, whose gap categories are those of ``gapscope.analysis/1``, still
loads and keeps its schema name)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gapscope import __version__
from gapscope.errors import GapscopeError
from gapscope.schema import FLEET_SCHEMA as SCHEMA
from gapscope.schema import check_result

#: A rank's gap time above the step medians counts as a straggler only from this much per step
#: (its excess at least this times its steps), and an aligned step's difference from its median
#: is listed only from this much: below it, identical work differs as much (docs/metrics.md,
#: "Many traces at once": the same program recorded three times).
STRAGGLER_FLOOR_NS = 2_000


@dataclass
class FleetResult:
    """One report across ranks (schema ``gapscope.fleet/2``, docs/schema.md).

    ``files``: every input in order, failed ones with their error. ``devices``: one row per rank
    (a device of a file) with that device's whole-trace figures. ``rank_names``: per rank and
    range name. ``by_name``: per range name, pooled over ranks. ``spread``: min/median/max across
    ranks. ``steps``: range instances aligned across ranks by name and occurrence.
    ``stragglers``: per range name, the ranks whose gap time is furthest above the step medians.
    ``collectives`` and ``waits`` (gapscope.fleet.collectives; written only when some collective
    ran on two ranks or more): communication kernels paired across ranks, and per rank the time
    it waited for its peers inside them.
    """

    options: dict[str, Any]
    files: list[dict[str, Any]] = field(default_factory=list)
    devices: list[dict[str, Any]] = field(default_factory=list)
    rank_names: list[dict[str, Any]] = field(default_factory=list)
    by_name: list[dict[str, Any]] = field(default_factory=list)
    spread: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    stragglers: list[dict[str, Any]] = field(default_factory=list)
    streams: list[dict[str, Any]] = field(default_factory=list)
    collectives: list[dict[str, Any]] = field(default_factory=list)
    waits: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    gapscope_version: str = __version__
    schema: str = SCHEMA

    SECTIONS = ("files", "devices", "rank_names", "by_name", "spread", "steps", "stragglers", "streams")
    #: Sections written only when they hold rows.
    OPTIONAL = ("collectives", "waits")

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The inputs that could not be analyzed."""
        return [f for f in self.files if f.get("error")]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of docs/schema.md (``gapscope.fleet/2``)."""
        return {
            "schema": self.schema,
            "gapscope_version": self.gapscope_version,
            "options": self.options,
            "warnings": list(self.warnings),
            **{s: list(getattr(self, s)) for s in self.SECTIONS},
            **{s: list(getattr(self, s)) for s in self.OPTIONAL if getattr(self, s)},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "result") -> "FleetResult":
        """Rebuild a fleet result from its JSON object (``source`` names it in errors);
        GapscopeError if it is not one this gapscope wrote (gapscope.schema checks it)."""
        if check_result(data, source) != "fleet":
            raise GapscopeError(f"{source}: a single analysis, not a many-trace result")
        schema = data["schema"]
        return cls(
            options=data.get("options", {}),
            warnings=list(data.get("warnings", [])),
            gapscope_version=data.get("gapscope_version", "?"),
            schema=schema,
            **{s: list(data.get(s, [])) for s in (*cls.SECTIONS, *cls.OPTIONAL)},
        )
