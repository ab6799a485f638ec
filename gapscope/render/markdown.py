"""A GitHub-flavoured Markdown report of an analysis: the readings, the tables of
`gapscope analyze` and the figures of `gapscope plot` (linked relative to the report), for a
repository page, a pull request or a CI artifact.

Order: header and warnings, one reading per range name, the timeline, range names, why the GPU
sat idle, the CUDA Graph payoff, the gap histogram, a `gapscope run` sweep with its crossover
chart, the longest gaps, launch calls, then devices, streams and range instances folded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TextIO
from urllib.parse import quote

from gapscope.analysis import answer
from gapscope.analysis.result import AnalysisResult
from gapscope.render import sections
from gapscope.render.document import Document, Part, document_of, write_part
from gapscope.render.markdown_text import cell, code, prose
from gapscope.render.sections import Cell, Name, Section

FIGURE_CAPTIONS = {
    "timeline": "GPU timeline: one row per device and stream, kernels dark, device-level gaps "
                "shaded by category, NVTX ranges on top.",
    "histogram": "Gap durations per NVTX range name (log bins, stacked by category; lines at "
                 "p50, p90, p99).",
    "crossover": "Gap fraction per launch path against kernel time, and the graph's speedup "
                 "over eager.",
}


_cell, _code = cell, code


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[bool]) -> str:
    """A table; cells are written as given (text from the trace goes through _cell or _code)."""
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join("---:" if r else "---" for r in right) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n\n"


def _md(cell: Cell) -> str:
    """A section cell in Markdown: names as code spans, everything escaped."""
    if isinstance(cell, Name):
        return _code(cell.text)
    return _cell(cell)


def _section(file: TextIO, section: Section | None, level: str = "##") -> None:
    """One report section as a heading and a table."""
    if section is None:
        return
    file.write(f"{level} {_cell(section.title)}\n\n")
    file.write(_table([_cell(c.header) for c in section.columns], [[_md(c) for c in row] for row in section.rows],
                      [c.number for c in section.columns]))
    if section.note:
        file.write(f"{_cell(section.note)}\n\n")


def _figure(file: TextIO, figures: Mapping[str, str], key: str) -> None:
    if key in figures:
        file.write(f"![{key}]({link_target(figures[key])})\n\n*{FIGURE_CAPTIONS[key]}*\n\n")


def link_target(path: str) -> str:
    """A relative path as a link target that renders in CommonMark and GitHub: percent-encoded
    (``my report_files/x.png`` -> ``my%20report_files/x.png``), slashes kept."""
    return quote(path, safe="/")


def render(
    result: AnalysisResult | Document | None, file: TextIO, *, title: str | None = None, sweep: Sequence[Any] = (),
    calibration: dict[str, Any] | None = None, figures: Mapping[str, str] | None = None,
    limit: int = 20, read_seconds: float | None = None, cached: bool = False, **_: Any,
) -> None:
    """Write the report of a Document (gapscope.render.document), or of one result with these
    options: ``figures`` maps 'timeline', 'histogram', 'crossover' to image paths relative to
    the report; ``sweep`` holds the SweepRow rows of a `gapscope run`; ``title`` defaults to the
    trace's name; ``read_seconds`` (how long reading the trace took) goes in its header, or
    "cached result" with ``cached`` (the result cache's). A
    document of several traces has one section per trace."""
    doc = document_of(result, title=title, sweep=sweep, calibration=calibration, figures=figures,
                      read_seconds=read_seconds, cached=cached)
    file.write(f"# gapscope report: {prose(doc.title)}\n\n")
    many = len(doc.parts) > 1
    for part in doc.parts:
        if many:
            file.write(f"## {prose(part.label)}\n\n")
        _part(file, part, "###" if many else "##", limit)


def _part(file: TextIO, part: Part, h: str, limit: int) -> None:
    """One trace's report, its headings at level ``h``."""
    write_part(part, limit, header=lambda r: _header(file, r, h, part.read_seconds, limit, part.cached), figure=lambda k: _figure(file, part.figures, k),
               sweep=lambda rows: _sweep(file, rows, part.calibration, part.figures, h),
               section=lambda s: _section(file, s, h), folded=lambda ss: _folded(file, ss, h + "#"))


def _folded(file: TextIO, found: list[Section], h: str) -> None:
    """The whole-trace tables, folded in a <details> block."""
    file.write(f"<details><summary>{sections.FOLDED_TITLE}</summary>\n\n")
    for section in found:
        _section(file, section, h)
    file.write("</details>\n")


def _header(file: TextIO, result: AnalysisResult, h: str, read_seconds: float | None = None, limit: int = 20,
            cached: bool = False) -> None:
    file.write(" · ".join(prose(sections.fact_text(what, value))
                          for what, value in sections.facts(result, read_seconds, cached)) + "\n\n")
    for w in result.warnings:
        file.write(f"> ⚠️ {prose(w)}\n\n")
    entries = result.answers()
    if entries:
        items = []
        for entry in entries:
            first, *rest = answer.lines(entry)
            items.append(f"- **{prose(first)}**" + "".join(f"  \n  {prose(line.strip())}" for line in rest) + "\n")
        file.write(f"{h} {answer.TITLE}\n\n{''.join(items)}\n")


def _sweep(file: TextIO, sweep: Sequence[Any], calibration: dict[str, Any] | None,
           figures: Mapping[str, str], h: str) -> None:
    from gapscope.render.run_sections import HEADERS, floors_line, row_cells

    file.write(f"{h} Launch paths against kernel time (`gapscope run` sweep)\n\n")
    _figure(file, figures, "crossover")
    file.write(_table(HEADERS, [[_cell(c) for c in row_cells(r)] for r in sweep], [h != "path" for h in HEADERS]))
    line = floors_line(calibration)
    if line:
        file.write(f"{_cell(line)}\n\n")
