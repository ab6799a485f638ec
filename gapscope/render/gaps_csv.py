"""The per-gap table as CSV (`gapscope analyze --gaps-csv FILE`): one row per device-level gap
with the columns of docs/schema.md ("Tables"), a missing value (no activity before the gap, a gap
no range holds) left empty."""

from __future__ import annotations

from typing import Any, TextIO

from gapscope.analysis.tables import ActivityTables


def render(tables: ActivityTables, file: TextIO, **_: Any) -> None:
    """Write every gap of ``tables`` as one CSV row, with a header."""
    tables.gaps.to_csv(file, index=False, lineterminator="\n")
