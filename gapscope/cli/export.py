"""`gapscope export`: analyze one trace and write its timeline for a trace viewer."""

from __future__ import annotations

import sys

import click

from gapscope.cli import cli
from gapscope.cli.output import output_file, refuse_overwriting
from gapscope.text import printable


@cli.command("export")
@click.argument("trace", metavar="TRACE", type=click.Path(dir_okay=True, path_type=str))
@click.option("--perfetto", "out", required=True, metavar="FILE.json",
              help="Write the timeline as Trace Event JSON: open it in ui.perfetto.dev or chrome://tracing.")
@click.option("--range", "-r", "ranges", multiple=True, metavar="NAME",
              help="Only NVTX ranges with this name (or glob) on the CPU tracks; repeatable.")
@click.option("--count-memops", is_flag=True, help="Count memcpy/memset time as busy (copies close gaps).")
def export_command(trace: str, out: str, ranges: tuple[str, ...], count_memops: bool) -> None:
    """The timeline of a trace for the viewers people already use: one track per GPU stream
    (kernels, copies), one track of device-level gaps coloured by category with their length
    and launching call, and per CPU thread its NVTX ranges and CUDA calls.

    TRACE is a trace (any format `gapscope analyze` reads: docs/formats.md) or a `gapscope run`
    output folder. See docs/perfetto.md.
    """
    from gapscope.analysis.pipeline import opened_analysis
    from gapscope.cli.progress import TraceStatus
    from gapscope.inputs import resolve
    from gapscope.render import render

    found = resolve(trace).require("trace", "run", command="export")
    path = found.run_file("gapscope_run.sqlite") if found.kind == "run" else found.path
    refuse_overwriting([trace, path], [out])
    with TraceStatus(path, sys.stderr) as status, opened_analysis(
            path, ranges=ranges, count_memops=count_memops, all_calls=True, progress=status) as analysis:
        status("writing the timeline of", None)
        with output_file(out) as fh:
            render(analysis, "perfetto", fh)
    if out != "-":
        click.echo(printable(out))
