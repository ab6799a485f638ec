"""Terminal tables for an AnalysisResult (rich): the report sections of gapscope.render.sections.

Each table fits the terminal (gapscope.render.layout: columns chosen by priority, short headers,
names shortened in the middle, never a number cut); ``wide=True``, or output that is not a
terminal (a file, a pipe), gets every column. Text from the trace (range, kernel and API names,
paths) is printed as text, never as markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from gapscope.analysis import answer
from gapscope.analysis.result import AnalysisResult
from gapscope.analysis.verdicts import AMORTIZED, LAUNCH_BOUND
from gapscope.render import sections
from gapscope.render.console import console_for
from gapscope.render.layout import Column, fit_columns, shorten_names
from gapscope.render.sections import Name, Section, Share
from gapscope.text import printable

#: The order of the sections on the terminal.
ORDER = ("answer", "by_name", "domains", "ranges", "devices", "streams", "idle", "communication", "launch", "payoff",
         "top_gaps")


def share_text(f: float | None) -> Text:
    """A gap fraction as a percentage, coloured by whether the gaps matter (docs/metrics.md,
    "Verdicts": red from LAUNCH_BOUND on, green below AMORTIZED)."""
    if f is None:
        return Text("-")
    style = "bold red" if f >= LAUNCH_BOUND else "yellow" if f >= AMORTIZED else "green"
    return Text(f"{100 * f:.1f}%", style=style)


def _cell(cell: Any) -> Text:
    if isinstance(cell, Share):
        return share_text(cell.value)
    return Text(printable(cell))


def fitted_table(title: str, columns: tuple[Column, ...], rows: list[list[Any]], width: int | None) -> Group:
    """A rich Table of these columns and rows (cells: str, Share, Name or rich Text) laid out for
    ``width`` characters (None: every column), under its title; a note under it names what the
    layout changed. Title and note are lines of their own, as wide as the terminal, not folded to
    the width of a narrow table."""
    names = frozenset(i for i in range(len(columns)) if any(isinstance(r[i], Name) for r in rows))
    lay = fit_columns(columns, [[c.plain if isinstance(c, Text) else str(c) for c in r] for r in rows],
                      width, names)
    note = lay.note()
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for i, header, w in zip(lay.shown, lay.headers, lay.widths):
        col = columns[i]
        t.add_column(header, justify="right" if col.number else "left", width=w, no_wrap=not col.wrap,
                     overflow="fold")
    # Names are shortened column by column, so that different names never look the same.
    short = {i: iter(shorten_names([str(r[i]) for r in rows if isinstance(r[i], Name)], w))
             for i, w in zip(lay.shown, lay.widths) if i in names}
    for row in rows:
        t.add_row(*(row[i] if isinstance(row[i], Text) else Text(next(short[i])) if isinstance(row[i], Name)
                    else _cell(row[i]) for i in lay.shown))
    parts = [Text(printable(title), style="bold")] if title else []
    return Group(*parts, t, *([Text(note, style="dim")] if note else []))


def section_table(section: Section, width: int | None = None) -> Group:
    """A rich Table of one report section, fitted to ``width`` (None: every column)."""
    return fitted_table(section.title, section.columns, section.rows, width)


def header_text(result: AnalysisResult, read_seconds: float | None = None, cached: bool = False) -> Text:
    """The report's first line: trace, its format and read time (or that the result is cached),
    tool versions, graph tracing, GPUs."""
    facts = "  ".join(sections.fact_text(what, value)
                      for what, value in sections.facts(result, read_seconds, cached) if what != "gapscope")
    return Text.assemble(("gapscope", "bold"), printable(f" {result.trace.get('name')}  {facts}"))


def _answer(console: Any, result: AnalysisResult) -> None:
    """The answer block (gapscope.analysis.answer), before any table."""
    entries = result.answers()
    if not entries:
        return
    console.print()
    console.print(Text(answer.TITLE, style="bold"))
    for entry in entries:
        for i, line in enumerate(answer.lines(entry)):
            console.print(Text(printable(line), style="bold" if i == 0 else ""))


def render(result: AnalysisResult, file: TextIO, *, limit: int = 20, width: int | None = None,
           wide: bool = False, read_seconds: float | None = None, keys: Sequence[str] = ORDER,
           cached: bool = False, warnings: bool = True, **_: Any) -> None:
    """Write the human report: header, warnings, then every section in ORDER (``limit``: range
    instances shown), each table fitted to ``width`` (default: the terminal's; every column
    with ``wide`` or when ``file`` is not a terminal); ``read_seconds``: how long reading the
    trace took, for the header (``cached``: the result came from the result cache); ``keys``: only these sections (``repr`` of gapscope.Analysis
    shows the by-name table); ``warnings=False``: the result's warnings are left out (the command
    line writes them on stderr)."""
    console, fit = console_for(file, width, wide)
    console.print(header_text(result, read_seconds, cached))
    for w in result.warnings if warnings else ():
        console.print(Text.assemble(("warning:", "yellow"), f" {printable(w)}"))
    if "answer" in keys:
        _answer(console, result)
    for key in keys:
        if key == "answer":
            continue
        section = sections.build(key, result, limit)
        if section is not None:
            console.print()
            console.print(section_table(section, fit))
