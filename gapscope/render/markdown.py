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

from gapscope.analysis.result import AnalysisResult
from gapscope.analysis.verdicts import reading
from gapscope.render import sections
from gapscope.render.sections import Cell, Name, Section
from gapscope.render.units import fmt_ns, fmt_pct

FIGURE_CAPTIONS = {
    "timeline": "GPU timeline: one row per device and stream, kernels dark, device-level gaps "
                "shaded by category, NVTX ranges on top.",
    "histogram": "Gap durations per NVTX range name (log bins, stacked by category; lines at "
                 "p50, p90, p99).",
    "crossover": "Gap fraction per launch path against kernel time, and the graph's speedup "
                 "over eager.",
}


def _cell(value: Any) -> str:
    """Text safe inside a table cell: pipes and HTML brackets escaped, one line."""
    text = str(value)
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\r", " ").replace("\n", " "))


def _code(value: Any) -> str:
    return f"`{_cell(value).replace('`', chr(39))}`"


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
        file.write(f"![{key}]({figures[key]})\n\n*{FIGURE_CAPTIONS[key]}*\n\n")


def render(
    result: AnalysisResult | None, file: TextIO, *, title: str | None = None, sweep: Sequence[Any] = (),
    calibration: dict[str, Any] | None = None, figures: Mapping[str, str] | None = None,
    limit: int = 20, **_: Any,
) -> None:
    """Write the report. ``figures`` maps 'timeline', 'histogram', 'crossover' to image paths
    relative to the report; ``sweep`` holds gapscope.analysis.sweep.SweepRow rows of a
    `gapscope run`; ``title`` defaults to the trace's name."""
    figures = figures or {}
    if title is None:
        title = str(result.trace.get("name")) if result is not None else "gapscope"
    file.write(f"# gapscope report: {_cell(title)}\n\n")
    if result is not None:
        _header(file, result, limit)
    _figure(file, figures, "timeline")
    if result is not None:
        _section(file, sections.by_name(result, limit))
        _section(file, sections.domains(result))
        _section(file, sections.idle(result, limit))
        _section(file, sections.payoff(result))
    _figure(file, figures, "histogram")
    if sweep:
        _sweep(file, sweep, calibration, figures)
    if result is not None:
        _section(file, sections.top_gaps(result))
        _section(file, sections.launch(result))
        _whole_trace(file, result, limit)


def _header(file: TextIO, result: AnalysisResult, limit: int) -> None:
    tr = result.trace
    gpus = ", ".join(sorted(set((tr.get("gpus") or {}).values()))) or "?"
    file.write(f"nsys {_cell(tr.get('nsys_version') or '?')} · export schema "
               f"{_cell(tr.get('export_schema') or '?')} · CUDA graphs traced: "
               f"{_cell(tr.get('graph_trace') or '?')} · GPU: {_cell(gpus)} · gapscope "
               f"{_cell(result.gapscope_version)}\n\n")
    for w in result.warnings:
        file.write(f"> ⚠️ {_cell(w)}\n\n")
    rows = [r for r in sections.shown_names(result, limit)[0] if r["kernels"] > 0]
    if rows:
        file.write("## Readings\n\n")
        for r in rows:
            file.write(f"- {_code(sections.label(r))} (x{r['count']}): **{fmt_pct(r['gap_fraction'])}** of the GPU "
                       f"span in gaps ({fmt_ns(r['gap_ns'])} of {fmt_ns(r['gpu_span_ns'])}): "
                       f"{reading(r)}\n")
        file.write("\n")
    elif result.devices:
        file.write("## Readings\n\n")
        for r in result.devices:
            file.write(f"- device {r['device']}: **{fmt_pct(r['gap_fraction'])}** of the GPU span in gaps: "
                       f"{reading(r)}\n")
        file.write("\n")


def _sweep(file: TextIO, sweep: Sequence[Any], calibration: dict[str, Any] | None,
           figures: Mapping[str, str]) -> None:
    from gapscope.render.run_sections import HEADERS, floors_line, row_cells

    file.write("## Launch paths against kernel time (`gapscope run` sweep)\n\n")
    _figure(file, figures, "crossover")
    file.write(_table(HEADERS, [[_cell(c) for c in row_cells(r)] for r in sweep], [h != "path" for h in HEADERS]))
    line = floors_line(calibration)
    if line:
        file.write(f"{_cell(line)}\n\n")


def _whole_trace(file: TextIO, result: AnalysisResult, limit: int) -> None:
    file.write("<details><summary>Devices, streams and range instances</summary>\n\n")
    _section(file, sections.devices(result), "###")
    _section(file, sections.streams(result), "###")
    _section(file, sections.ranges(result, limit), "###")
    file.write("</details>\n")
