"""`gapscope report`: load each source, draw its figures, write the Markdown report and/or the
HTML page (gapscope.render.markdown, gapscope.render.html)."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from gapscope.cli import cli
from gapscope.cli.output import output_file, output_format, refuse_overwriting
from gapscope.errors import GapscopeError
from gapscope.files import together
from gapscope.text import printable


def part_names(labels: list[str]) -> list[str]:
    """A folder name per source for its figures: the file's stem, numbered when two collide."""
    stems = [Path(label).stem or "trace" for label in labels]
    seen: dict[str, int] = {}
    out = []
    for s in stems:
        seen[s] = seen.get(s, 0) + 1
        out.append(s if stems.count(s) == 1 else f"{s}-{seen[s]}")
    return out


def _report_file(path: str, flag: str) -> Path:
    out = Path(path)
    if path == "-" or not out.parent.is_dir():
        raise GapscopeError(f"{path}: {flag} needs a file in an existing folder (-o report.md, --html report.html)")
    return out


@cli.command("report")
@click.argument("sources", nargs=-1, required=True, metavar="TRACE_OR_RESULT...",
                type=click.Path(dir_okay=True, path_type=str))
@click.option("--output", "-o", "output", metavar="FILE",
              help="The report: Markdown (figures in FILE's folder, in <name>_files/), or the HTML page "
                   "when FILE ends in .html.")
@click.option("--html", "html_out", metavar="FILE.html",
              help="Write the HTML page (figures inline, one self-contained file) to FILE.")
@click.option("--format", "-f", "fmt", type=click.Choice(["markdown", "html"]), default=None,
              help="The format of -o  [default: html for a .html file, else markdown]")
@click.option("--range", "-r", "ranges", multiple=True, metavar="NAME",
              help="Only NVTX ranges with this name (or glob); repeatable.")
@click.option("--window", "-w", metavar="START:END", help="The timeline's window (see gapscope plot).")
@click.option("--figures/--no-figures", default=True, show_default=True,
              help="Draw the figures (needs matplotlib: pip install -e '.[plot]').")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True, metavar="N",
              help="Range instances listed.")
def report_command(sources: tuple[str, ...], output: str | None, html_out: str | None, fmt: str | None,
                   ranges: tuple[str, ...], window: str | None, figures: bool, limit: int) -> None:
    """A report (readings, tables, figures) that reads well on GitHub, as a CI artifact or in a
    browser: Markdown with -o FILE.md, one self-contained HTML page with --html FILE.html.

    TRACE_OR_RESULT is a trace (any format `gapscope analyze` reads), a `gapscope run` output
    folder (or its run.json),
    or a result JSON of `gapscope analyze` (tables only: it holds no gap list to draw). Several
    (or a folder of exports, or a quoted glob) give one report with a section per trace.
    """
    from gapscope.inputs import expand
    from gapscope.plots import figure_paths
    from gapscope.plots.source import load_source
    from gapscope.plots.style import require_matplotlib
    from gapscope.plots.window import parse_window
    from gapscope.render import render
    from gapscope.render.document import Document, Part

    if output is None and html_out is None:
        raise GapscopeError("say where the report goes: -o report.md and/or --html report.html")
    targets: dict[str, Path] = {}
    if output is not None:
        targets[output_format(output, fmt, ("markdown", "html"), "markdown")] = _report_file(output, "-o")
    if html_out is not None:
        if "html" in targets:
            raise GapscopeError("-o and --html both ask for the HTML page; give one of them")
        targets["html"] = _report_file(html_out, "--html")
    spec = parse_window(window)
    if figures:
        require_matplotlib()
    paths = expand(sources)
    names = part_names(paths) if len(paths) > 1 else [""]
    drawn = [f for fmt_, out in targets.items() if figures and fmt_ != "html"
             for name in names for f in figure_paths(_figure_dir(out, name), ("png",))]
    refuse_overwriting(paths, [*targets.values(), *drawn])
    from gapscope.cli.progress import TraceStatus

    srcs = []
    for p in paths:
        with TraceStatus(p, sys.stderr) as status:
            srcs.append(load_source(p, ranges, progress=status))
    names = part_names([s.label for s in srcs]) if len(srcs) > 1 else [""]
    for fmt_, out in targets.items():
        # A Markdown report and its figure files are one output: all written, or none of them.
        with together() if fmt_ != "html" else contextlib.nullcontext():
            links = [_figures(src, out, name, fmt_, spec) if figures else {} for src, name in zip(srcs, names)]
            doc = Document(tuple(Part(s.label, s.result, s.sweep, s.calibration, f,
                                      s.analysis.read_seconds if s.analysis is not None else None)
                                 for s, f in zip(srcs, links)))
            with output_file(out) as fh:
                render(doc, fmt_, fh, limit=limit)
        click.echo(printable(out))


def _figures(src: Any, out: Path, name: str, fmt: str, spec: tuple[int | None, int | None]) -> dict[str, str]:
    """Draw a source's figures for a report at ``out``: PNG files beside a Markdown report
    (key -> path relative to it), SVG markup for the HTML page (key -> markup)."""
    from gapscope.plots import draw_source

    if not (src.has_trace or src.sweep):
        return {}
    if fmt == "html":
        with tempfile.TemporaryDirectory(prefix="gapscope-report-") as tmp:
            return {p.stem: p.read_text(encoding="utf-8") for p in draw_source(src, tmp, ("svg",), spec)}
    fig_dir = _figure_dir(out, name)
    return {p.stem: Path(os.path.relpath(p, out.parent)).as_posix() for p in draw_source(src, fig_dir, ("png",), spec)}


def _figure_dir(out: Path, name: str) -> Path:
    """Where a Markdown report at ``out`` keeps the figures of its part ``name``."""
    return out.parent / f"{out.stem}_files" / name if name else out.parent / f"{out.stem}_files"
