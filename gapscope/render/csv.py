"""CSV output: one row per range instance, range name, device and stream, told apart by `level`."""

from __future__ import annotations

import csv
from typing import Any, TextIO

from gapscope.analysis.result import AnalysisResult, clean_rows
from gapscope.schema import STATS_FIELDS

KEY_FIELDS = ("level", "id", "name", "count", "domain", "pid", "thread", "device", "stream",
              "start_ns", "end_ns", "depth")


def render(result: AnalysisResult, file: TextIO, **_: Any) -> None:
    """Write every timeline row of the result with the STATS columns of docs/schema.md."""
    writer = csv.DictWriter(file, fieldnames=[*KEY_FIELDS, *STATS_FIELDS], extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for level, rows in (("range", result.ranges), ("name", result.by_name),
                        ("device", result.devices), ("stream", result.streams)):
        for row in clean_rows(rows):
            writer.writerow({"level": level, **row})
