"""One self-contained HTML page of a report (gapscope.render.document): the readings, the report
sections of gapscope.render.sections as tables, the figures inline as SVG, the longest gaps,
and the whole-trace tables folded. No script, no stylesheet or font to fetch: it reads the same
from a CI artifact, a mail attachment or a machine without a network.

Text from the trace (range, kernel and API names, paths) is escaped, never markup. Tables fit the
page's column: long names and readings wrap (numbers never do) rather than being clipped.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from gapscope.analysis import answer
from gapscope.analysis.result import AnalysisResult
from gapscope.analysis.verdicts import AMORTIZED, LAUNCH_BOUND
from gapscope.render import sections
from gapscope.render.document import Document, Part, document_of, write_part
from gapscope.render.markdown import FIGURE_CAPTIONS
from gapscope.render.sections import Cell, Name, Section, Share

STYLE = """
:root { color-scheme: light; --ink: #1b1b1b; --dim: #5a5a5a; --rule: #d8d8d8; --band: #f5f6f8; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); }
main { max-width: 1200px; margin: 0 auto; padding: 24px 32px 48px; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 20px; margin: 32px 0 8px; }
h3 { font-size: 17px; margin: 24px 0 8px; }
.facts, .note, figcaption { color: var(--dim); font-size: 13px; }
.warning { background: #fff4e0; border-left: 4px solid #e69f00; padding: 6px 12px; margin: 8px 0; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 13.5px; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid var(--rule); text-align: left; vertical-align: top; }
th { background: var(--band); font-weight: 600; } .num { text-align: right; white-space: nowrap; }
th.num { white-space: normal; }
code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
td code { overflow-wrap: anywhere; }
.bound { color: #b3261e; font-weight: 600; } .some { color: #8a5a00; } .fine { color: #1e7b34; }
figure { margin: 16px 0; } figure svg { max-width: 100%; height: auto; display: block; }
details { margin-top: 24px; } summary { cursor: pointer; font-weight: 600; }
ul.readings { padding-left: 20px; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def share_class(f: float | None) -> str:
    """The CSS class of a gap fraction by whether the gaps matter (docs/metrics.md, "Verdicts"):
    ``bound`` from LAUNCH_BOUND on, ``some`` from AMORTIZED on, ``fine`` below."""
    if f is None:
        return ""
    return "bound" if f >= LAUNCH_BOUND else "some" if f >= AMORTIZED else "fine"


def _text(cell: Cell) -> str:
    """A cell's text, escaped; names from the trace as code."""
    return f"<code>{_e(cell.text)}</code>" if isinstance(cell, Name) else _e(cell)


def _cell(cell: Cell, number: bool) -> str:
    cls = ["num"] if number else []
    if isinstance(cell, Share):
        cls.append(share_class(cell.value))
    text = _text(cell)
    return f'<td class="{" ".join(c for c in cls if c)}">{text}</td>' if cls else f"<td>{text}</td>"


def write_section(file: TextIO, section: Section | None, h: int) -> None:
    """One report section as a heading and a table."""
    if section is None:
        return
    head = "".join(f'<th class="num">{_e(c.header)}</th>' if c.number else f"<th>{_e(c.header)}</th>"
                   for c in section.columns)
    body = "\n".join("<tr>" + "".join(_cell(v, c.number) for v, c in zip(row, section.columns)) + "</tr>"
                     for row in section.rows)
    file.write(f'<section><h{h}>{_e(section.title)}</h{h}>\n<div class="scroll"><table><thead><tr>{head}</tr>'
               f"</thead>\n<tbody>\n{body}\n</tbody></table></div>\n")
    if section.note:
        file.write(f'<p class="note">{_e(section.note)}</p>\n')
    file.write("</section>\n")


_PROLOG = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?", re.S)


def inline_svg(svg: str) -> str:
    """An SVG file's markup as an element inside HTML: its XML declaration and DOCTYPE dropped."""
    return _PROLOG.sub("", svg, count=1).strip()


def _figure(file: TextIO, figures: Mapping[str, str], key: str) -> None:
    if key in figures:
        file.write(f'<figure>{inline_svg(figures[key])}<figcaption>{_e(FIGURE_CAPTIONS[key])}</figcaption></figure>\n')


def write_header(file: TextIO, result: AnalysisResult, h: int, read_seconds: float | None = None,
                 limit: int = 20, cached: bool = False) -> None:
    """The report's facts, its warnings and its answer (gapscope.analysis.answer: the ranges that
    matter, what kept the GPU idle and what CUDA Graphs would win), the heading at level ``h``."""
    facts = " · ".join(f"{_e(what)}: {_e(value)}" for what, value in sections.facts(result, read_seconds, cached))
    warnings = "".join(f'<p class="warning">{_e(w)}</p>\n' for w in result.warnings)
    file.write(f'<p class="facts">{facts}</p>\n{warnings}')
    entries = result.answers()
    if entries:
        items = ""
        for entry in entries:
            first, *rest = answer.lines(entry)
            items += f"<li><strong>{_e(first)}</strong>" + "".join(f"<br>{_e(x.strip())}" for x in rest) + "</li>\n"
        file.write(f'<h{h}>{_e(answer.TITLE)}</h{h}>\n<ul class="readings">\n{items}</ul>\n')


def _sweep(file: TextIO, part: Part, h: int) -> None:
    from gapscope.render.run_sections import HEADERS, floors_line, row_cells

    file.write(f"<section><h{h}>Launch paths against kernel time (<code>gapscope run</code> sweep)</h{h}>\n")
    _figure(file, part.figures, "crossover")
    head = "".join(f"<th>{_e(x)}</th>" if x == "path" else f'<th class="num">{_e(x)}</th>' for x in HEADERS)
    rows = "\n".join("<tr>" + "".join(_cell(c, x != "path") for c, x in zip(row_cells(r), HEADERS)) + "</tr>"
                     for r in part.sweep)
    file.write(f'<div class="scroll"><table><thead><tr>{head}</tr></thead>\n<tbody>\n{rows}\n</tbody></table></div>\n')
    line = floors_line(part.calibration)
    if line:
        file.write(f'<p class="note">{_e(line)}</p>\n')
    file.write("</section>\n")


def _part(file: TextIO, part: Part, h: int, limit: int) -> None:
    """One trace's report, its headings at level ``h``."""
    write_part(part, limit, header=lambda r: write_header(file, r, h, part.read_seconds, limit, part.cached),
               figure=lambda k: _figure(file, part.figures, k), sweep=lambda rows: _sweep(file, part, h), section=lambda s: write_section(file, s, h),
               folded=lambda found: _folded(file, found, h + 1))


def _folded(file: TextIO, found: list[Section], h: int) -> None:
    """The whole-trace tables, folded in a <details> block."""
    file.write(f"<details><summary>{_e(sections.FOLDED_TITLE)}</summary>\n")
    for section in found:
        write_section(file, section, h)
    file.write("</details>\n")


def render(
    result: AnalysisResult | Document | None, file: TextIO, *, title: str | None = None, sweep: Sequence[Any] = (),
    calibration: dict[str, Any] | None = None, figures: Mapping[str, str] | None = None,
    limit: int = 20, read_seconds: float | None = None, cached: bool = False, **_: Any,
) -> None:
    """Write the page of a Document, or of one result with these options (``figures``: SVG
    markup by figure key; the rest as for gapscope.render.markdown). Several traces: one
    section per trace."""
    doc = document_of(result, title=title, sweep=sweep, calibration=calibration, figures=figures,
                      read_seconds=read_seconds, cached=cached)
    file.write(f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
               f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
               f"<title>gapscope report: {_e(doc.title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n"
               f"<h1>gapscope report: {_e(doc.title)}</h1>\n")
    many = len(doc.parts) > 1
    for part in doc.parts:
        if many:
            file.write(f'<section class="trace"><h2>{_e(part.label)}</h2>\n')
        _part(file, part, 3 if many else 2, limit)
        if many:
            file.write("</section>\n")
    file.write("</main>\n</body>\n</html>\n")
