"""CSV output: one row per range instance, range name, device and stream, told apart by `level`."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from itertools import repeat
from typing import Any, TextIO

from gapscope.analysis.result import AnalysisResult, clean_rows, is_row_table
from gapscope.schema import STATS_FIELDS

KEY_FIELDS = ("level", "id", "name", "count", "domain", "pid", "thread", "device", "stream",
              "start_ns", "end_ns", "depth")


def _cells(level: str, rows: Sequence[dict[str, Any]], fields: list[str]) -> Any:
    """The CSV rows of one section: ``level``, then each field's value ("" where a row has none,
    as csv.DictWriter's restval). A RowTable is read column by column, with no dict per row."""
    if is_row_table(rows):
        have = set(rows.fields)
        columns = [rows.values(f) if f in have else repeat("", len(rows)) for f in fields[1:]]
        return zip(repeat(level, len(rows)), *columns)
    return ([level, *(row.get(f, "") for f in fields[1:])] for row in clean_rows(list(rows)))


def render(result: AnalysisResult, file: TextIO, **_: Any) -> None:
    """Write every timeline row of the result with the STATS columns of docs/schema.md."""
    fields = [*KEY_FIELDS, *STATS_FIELDS]
    writer = csv.writer(file, lineterminator="\n")
    writer.writerow(fields)
    for level, rows in (("range", result.ranges), ("name", result.by_name),
                        ("device", result.devices), ("stream", result.streams)):
        writer.writerows(_cells(level, rows, fields))
