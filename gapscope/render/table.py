"""Terminal tables for an AnalysisResult (rich): the report sections of gapscope.render.sections.

Text from the trace (range, kernel and API names, paths) is printed as text, never as markup.
"""

from __future__ import annotations

from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gapscope.analysis.result import AnalysisResult
from gapscope.analysis.verdicts import AMORTIZED, LAUNCH_BOUND
from gapscope.render import sections
from gapscope.render.sections import Name, Section, Share

#: The order of the sections on the terminal.
ORDER = ("by_name", "domains", "ranges", "devices", "streams", "idle", "launch", "payoff", "top_gaps")


def share_text(f: float | None) -> Text:
    """A gap fraction as a percentage, coloured by the design text's criterion."""
    if f is None:
        return Text("-")
    style = "bold red" if f >= LAUNCH_BOUND else "yellow" if f >= AMORTIZED else "green"
    return Text(f"{100 * f:.1f}%", style=style)


def _cell(cell: Any) -> Text:
    if isinstance(cell, Share):
        return share_text(cell.value)
    return Text(str(cell))


def section_table(section: Section) -> Table:
    """A rich Table of one report section."""
    t = Table(title=section.title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")
    texts = {i for i, c in enumerate(section.columns) if not c.number}
    for i, col in enumerate(section.columns):
        name_like = i in texts and any(isinstance(r[i], Name) for r in section.rows)
        t.add_column(col.header, justify="right" if col.number else "left",
                     overflow="fold" if name_like else "ellipsis", max_width=48 if name_like else None,
                     no_wrap=not name_like)
    for row in section.rows:
        t.add_row(*(_cell(c) for c in row))
    return t


def header_text(result: AnalysisResult) -> Text:
    """The report's first line: trace, tool versions, graph tracing, GPUs."""
    tr = result.trace
    gpus = ", ".join(sorted(set((tr.get("gpus") or {}).values()))) or "?"
    return Text.assemble(
        ("gapscope", "bold"),
        f" {tr.get('name')}  nsys {tr.get('nsys_version') or '?'}  export schema "
        f"{tr.get('export_schema') or '?'}  graphs traced: {tr.get('graph_trace')}  GPU: {gpus}",
    )


def render(result: AnalysisResult, file: TextIO, *, limit: int = 20, width: int | None = None,
           **_: Any) -> None:
    """Write the human report: header, warnings, then every section in ORDER (``limit``: range
    names and instances shown)."""
    if width is None and not (hasattr(file, "isatty") and file.isatty()):
        width = 160  # a file or a pipe: wide enough for every table
    console = Console(file=file, width=width, highlight=False, soft_wrap=False)
    console.print(header_text(result))
    for w in result.warnings:
        console.print(Text.assemble(("warning:", "yellow"), f" {w}"))
    for key in ORDER:
        section = sections.build(key, result, limit)
        if section is not None:
            console.print(section_table(section))
