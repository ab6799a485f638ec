"""`gapscope plot`: parse options, draw the figures (gapscope.plots), list the files written."""

from __future__ import annotations

import sys

import click

from gapscope.cli import cli
from gapscope.text import printable


@cli.command("plot")
@click.argument("sources", nargs=-1, required=True, metavar="TRACE_OR_RESULT...",
                type=click.Path(dir_okay=True, path_type=str))
@click.option("--output-dir", "-o", "out_dir", required=True, metavar="DIR",
              help="Folder for the figures (created if missing).")
@click.option("--range", "-r", "ranges", multiple=True, metavar="NAME",
              help="Draw only NVTX ranges with this name (or glob): the timeline's window and the "
                   "histogram; repeatable.")
@click.option("--window", "-w", metavar="START:END",
              help="Timeline window from the first GPU work of the ranges drawn, in ns or with "
                   "units: 0:200us, 1.5ms:2ms, :500us.")
@click.option("--format", "-f", "fmt", default="png", show_default=True, metavar="png,svg",
              help="Image formats, comma-separated.")
def plot_command(sources: tuple[str, ...], out_dir: str, ranges: tuple[str, ...], window: str | None,
                 fmt: str) -> None:
    """Draw the timeline, the gap-duration histogram and, for a `gapscope run` sweep, the
    crossover chart.

    TRACE_OR_RESULT is a trace (any format `gapscope analyze` reads), a `gapscope run` output
    folder (or its run.json),
    or a result JSON of `gapscope analyze` (a sweep's crossover only: it holds no gap list).
    Several (or a folder of exports, or a quoted glob): each one's figures in a folder of its own
    inside DIR, named by its file.
    """
    from pathlib import Path

    from gapscope.cli.output import refuse_overwriting
    from gapscope.cli.progress import TraceStatus
    from gapscope.cli.report import part_names
    from gapscope.inputs import expand
    from gapscope.plots import figure_paths, write_plots

    paths = expand(sources)
    folders = [Path(out_dir)] if len(paths) == 1 else [Path(out_dir) / n for n in part_names(paths)]
    refuse_overwriting(paths, [f for folder in folders for f in figure_paths(folder, fmt.split(","))])
    for source, folder in zip(paths, folders):
        with TraceStatus(source, sys.stderr) as status:
            written = write_plots(source, folder, fmt.split(","), range_name=ranges, window=window, progress=status)
        for path in written:
            click.echo(printable(path))
