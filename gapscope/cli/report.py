"""`gapscope report`: load the source, draw its figures beside the report, write the Markdown."""

from __future__ import annotations

import os
from pathlib import Path

import click

from gapscope.cli import cli
from gapscope.cli.output import output_file
from gapscope.errors import GapscopeError


@cli.command("report")
@click.argument("source", metavar="TRACE_OR_RESULT", type=click.Path(dir_okay=True, path_type=str))
@click.option("--output", "-o", "output", required=True, metavar="FILE",
              help="The Markdown file; figures go to FILE's folder, in <name>_files/.")
@click.option("--range", "-r", "ranges", multiple=True, metavar="NAME",
              help="Only NVTX ranges with this name (or glob); repeatable.")
@click.option("--window", "-w", metavar="START:END", help="The timeline's window (see gapscope plot).")
@click.option("--figures/--no-figures", default=True, show_default=True,
              help="Draw and link the figures (needs gapscope[plot]).")
@click.option("--limit", default=20, show_default=True, metavar="N", help="Range instances listed.")
def report_command(source: str, output: str, ranges: tuple[str, ...], window: str | None, figures: bool,
                   limit: int) -> None:
    """A Markdown report (readings, tables, figures) that reads well on GitHub and as a CI artifact.

    TRACE_OR_RESULT is a trace (any format `gapscope analyze` reads), a `gapscope run` output
    folder (or its run.json),
    or a result JSON of `gapscope analyze` (tables only: it holds no gap list to draw).
    """
    from gapscope.plots import draw_source
    from gapscope.plots.source import load_source
    from gapscope.plots.style import require_matplotlib
    from gapscope.plots.window import parse_window
    from gapscope.render.markdown import render

    out = Path(output)
    if output == "-" or not out.parent.is_dir():
        raise GapscopeError(f"{output}: the report needs a file in an existing folder (-o report.md)")
    spec = parse_window(window)
    if figures:
        require_matplotlib()
    src = load_source(source, ranges)
    links: dict[str, str] = {}
    if figures and (src.has_trace or src.sweep):
        fig_dir = out.parent / f"{out.stem}_files"
        for path in draw_source(src, fig_dir, ("png",), spec):
            links[path.stem] = Path(os.path.relpath(path, out.parent)).as_posix()
    with output_file(out) as fh:
        render(src.result, fh, title=src.label, sweep=src.sweep, calibration=src.calibration,
               figures=links, limit=limit,
               read_seconds=src.analysis.read_seconds if src.analysis is not None else None)
    click.echo(str(out))
