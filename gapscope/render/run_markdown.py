"""`gapscope run`'s report as GitHub Markdown (what docs/run.md shows): the sweep table, then
each case's figures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TextIO

from gapscope.render.run_sections import HEADERS, column_header, case_tables, floors_line, row_cells

if TYPE_CHECKING:
    from gapscope.run.runner import RunResult


def render(result: RunResult, file: TextIO, **_: Any) -> None:
    """The sweep table as GitHub markdown (what docs/run.md shows), then each case's figures."""
    lines: list[str] = []
    if result.rows:
        lines = ["| " + " | ".join(HEADERS) + " |",
                 "| " + " | ".join("---" if h == "path" else "---:" for h in HEADERS) + " |"]
        lines += ["| " + " | ".join(row_cells(r)) + " |" for r in result.rows]
    for title, cols, cells, summary in case_tables(result.cases):
        if not cols:
            lines += ["" if lines else None, f"**case {title}**: no ranges of this case in the trace"]
            continue
        lines += ["" if lines else None, f"**case {title}**", "",
                  "| " + " | ".join(column_header(c) for c in cols) + " |",
                  "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(cols))) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
        lines += [""] + [f"- {s}" for s in summary]
    lines = [ln for ln in lines if ln is not None]
    line = floors_line(result.calibration)
    file.write("\n".join(lines) + ("\n\n" + line if line else "") + "\n")
