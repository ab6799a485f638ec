"""CSV output of a FleetResult: one row per rank (whole-device timeline) and per rank and range
name, told apart by `level`; steps, spread and stragglers are in the JSON."""

from __future__ import annotations

import csv
from typing import Any, TextIO

from gapscope.fleet.result import FleetResult
from gapscope.analysis.metrics import STATS_FIELDS
from gapscope.analysis.result import clean_rows

KEY_FIELDS = ("level", "rank", "label", "file", "device", "name", "count")
MERGED_FIELDS = ("excess_gap_ns", "slowest_steps", "worst_step", "worst_step_excess_ns")


def render(fleet: FleetResult, file: TextIO, **_: Any) -> None:
    """Write the ranks and the rank x range name rows with the STATS columns of docs/schema.md
    and the straggler columns of docs/metrics.md."""
    writer = csv.DictWriter(file, fieldnames=[*KEY_FIELDS, *STATS_FIELDS, *MERGED_FIELDS],
                            extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    files = {r["rank"]: r["file"] for r in fleet.devices}
    for row in clean_rows(fleet.devices):
        writer.writerow({"level": "rank", **row})
    for row in clean_rows(fleet.rank_names):
        writer.writerow({"level": "rank_name", "file": files.get(row["rank"]), **row})
