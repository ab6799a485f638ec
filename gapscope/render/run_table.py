"""`gapscope run`'s terminal report: the sweep table, the cases' tables, floors, files, warnings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TextIO

from rich.table import Table

from gapscope.render.console import Console
from gapscope.render.run_sections import HEADERS, case_tables, column_header, floors_line, row_cells

if TYPE_CHECKING:
    from gapscope.run.runner import RunResult


def render(result: RunResult, file: TextIO, *, width: int | None = None, **_: Any) -> None:
    """The sweep table as a rich table (when launch paths ran), the cases' tables, then floors,
    files and warnings."""
    console = Console(file=file, width=width or 120, highlight=False, markup=False)  # text, never markup
    if result.rows:
        table = Table(title="gapscope run: launch gaps per path and kernel time",
                      title_justify="left")
        for h in HEADERS:
            table.add_column(h, justify="left" if h == "path" else "right")
        last = None
        for row in result.rows:
            if last is not None and row.kernel_us != last:
                table.add_section()
            table.add_row(*row_cells(row))
            last = row.kernel_us
        console.print(table)
    render_cases(result.cases, console)
    line = floors_line(result.calibration)
    if line:
        console.print(line)
    if result.files:
        console.print(f"output folder {result.options.out_dir}: gapscope_run.sqlite, "
                      "gapscope_run.nsys-rep, run.json, analysis.json, command.txt, environment.json")
    for w in result.warnings:
        console.print(f"warning: {w}")


def render_cases(cases: dict[str, Any], console: Console) -> None:
    """Each case's figures as a rich table and its summary lines."""
    for title, cols, cells, lines in case_tables(cases):
        if not cols:
            console.print(f"case {title}: no ranges of this case in the trace")
            continue
        table = Table(title=f"case {title}", title_justify="left")
        for i, c in enumerate(cols):
            table.add_column(column_header(c), justify="left" if i == 0 else "right")
        for row in cells:
            table.add_row(*row)
        console.print(table)
        for line in lines:
            console.print(f"  {line}")
