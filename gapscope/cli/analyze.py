"""`gapscope analyze`: parse options, analyze, render."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import click

from gapscope.cli import cli
from gapscope.cli.output import output_file
from gapscope.errors import GapscopeError

if TYPE_CHECKING:
    from gapscope.fleet import FleetResult


def load_or_analyze(path: str, ranges: tuple[str, ...] = (), count_memops: bool = False,
                    attribution: bool = True, top: int = 10):
    """An AnalysisResult from a trace (.sqlite) or a saved result (.json); a FleetResult from a
    saved fleet JSON."""
    return _load(path, ranges, count_memops, attribution, top)[0]


def _load(path: str, ranges: tuple[str, ...], count_memops: bool, attribution: bool, top: int):
    """(result, the Analysis behind it or None for a saved JSON)."""
    from gapscope.analysis import analysis_of
    from gapscope.result import load_result

    if path.endswith(".json"):
        if ranges:
            raise GapscopeError("--range applies to traces, not to a saved result JSON")
        from gapscope.fleet import is_fleet_json, load_fleet

        return (load_fleet(path) if is_fleet_json(path) else load_result(path)), None
    analysis = analysis_of(path, ranges=ranges, count_memops=count_memops,
                           attribution=attribution, top=top)
    return analysis.result, analysis


@cli.command("analyze")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE", type=click.Path(dir_okay=True, path_type=str))
@click.option("--range", "-r", "ranges", multiple=True, metavar="NAME",
              help="Only NVTX ranges with this name (exact or glob, e.g. 'decode*'); repeatable.")
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json", "csv"]), default="table",
              show_default=True, help="Output format.")
@click.option("--output", "-o", "output", metavar="FILE", help="Write the report to FILE instead of stdout.")
@click.option("--count-memops", is_flag=True, help="Count memcpy/memset time as busy GPU time.")
@click.option("--limit", default=20, show_default=True, metavar="N",
              help="Range instances shown in the table (0: none); several traces: steps and ranks.")
@click.option("--top", default=10, show_default=True, metavar="N",
              help="Longest gaps listed; several traces: stragglers per range name.")
@click.option("--attribution/--no-attribution", default=True, show_default=True,
              help="Classify every gap (launch, sync, dependency, memop, pipeline).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, metavar="N",
              help="Several traces: local worker processes (default: the CPU count).")
@click.option("--scheduler", metavar="ADDRESS",
              help="Several traces: run on the Dask cluster at ADDRESS (tcp://host:8786; docs/fleet.md).")
@click.option("--plot", "plot_dir", metavar="DIR",
              help="Also draw the timeline and gap histogram into DIR (one trace; needs gapscope[plot]).")
def analyze_command(traces: tuple[str, ...], ranges: tuple[str, ...], fmt: str, output: str | None,
                    count_memops: bool, limit: int, top: int, attribution: bool, jobs: int | None,
                    scheduler: str | None, plot_dir: str | None) -> None:
    """Share of GPU time lost to gaps between kernels, per NVTX range, device and stream.

    TRACE is an nsys SQLite export (`nsys export --type sqlite`, or `nsys profile
    --export sqlite`) or a result JSON saved by `gapscope analyze --format json`.

    Several TRACEs (or a folder of exports, or a quoted glob) give one report across ranks,
    each device of each file being a rank: gap fraction and gap time per rank and range name,
    their spread, and the stragglers, with steps aligned by range name and occurrence.
    Exit status 1 when some traces failed (the report covers the others).
    """
    from gapscope.fleet import FleetResult, trace_paths

    paths = trace_paths(traces)
    if len(paths) > 1:
        if plot_dir:
            raise GapscopeError("--plot draws one trace; run `gapscope plot` on each")
        _analyze_many(paths, ranges, fmt, output, count_memops, limit, top, attribution, jobs, scheduler)
        return
    if plot_dir:
        from gapscope.plots.style import require_matplotlib

        require_matplotlib()  # fail before the analysis, not after it
    result, analysis = _load(paths[0], ranges, count_memops, attribution, top)
    with output_file(output) as fh:
        if isinstance(result, FleetResult):
            _render_fleet(result, fh, fmt, limit)
        elif fmt == "json":
            from gapscope.render.json import render_json

            render_json(result, fh)
        elif fmt == "csv":
            from gapscope.render.csv import render_csv

            render_csv(result, fh)
        else:
            from gapscope.render.table import render_table

            render_table(result, fh, limit=limit)
    if plot_dir:
        _plot(paths[0], analysis, ranges, plot_dir)


def _plot(path: str, analysis, ranges: tuple[str, ...], plot_dir: str) -> None:
    """Draw the figures of the analysis just made (or of a saved result) into ``plot_dir``."""
    from gapscope.plots import draw_source, write_plots
    from gapscope.plots.source import source_from_analysis

    if analysis is None:
        written = write_plots(path, plot_dir)
    else:
        written = draw_source(source_from_analysis(analysis, Path(path).name, ranges), plot_dir, ("png",))
    for p in written:
        click.echo(f"wrote {p}", err=True)


def _analyze_many(paths: list[str], ranges: tuple[str, ...], fmt: str, output: str | None,
                  count_memops: bool, limit: int, top: int, attribution: bool, jobs: int | None,
                  scheduler: str | None) -> None:
    """Analyze several traces on a pool or a Dask cluster, merge, render; exit 1 if any failed."""
    from gapscope.executors import choose_executor
    from gapscope.fleet import analyze_fleet
    from gapscope.render.progress import FileProgress

    saved = [p for p in paths if p.endswith(".json")]
    if saved:
        raise GapscopeError(f"{saved[0]}: a saved result; several inputs must all be nsys SQLite exports")
    executor = choose_executor(len(paths), jobs, scheduler, preload=["gapscope.fleet"])
    with output_file(output) as fh:
        with FileProgress(len(paths), sys.stderr) as progress:
            fleet = analyze_fleet(paths, executor, ranges=ranges, count_memops=count_memops,
                                  attribution=attribution, stragglers=top, on_done=progress.done)
        if not fleet.devices:
            raise GapscopeError(f"all {len(paths)} traces failed", 1)
        _render_fleet(fleet, fh, fmt, limit)
    if fleet.failed:
        raise GapscopeError(f"{len(fleet.failed)} of {len(paths)} traces failed (listed above); "
                            "the report covers the others", 1)


def _render_fleet(fleet: FleetResult, fh: TextIO, fmt: str, limit: int) -> None:
    if fmt == "json":
        json.dump(fleet.to_dict(), fh, indent=2, allow_nan=False)
        fh.write("\n")
    elif fmt == "csv":
        from gapscope.render.fleet_csv import render_fleet_csv

        render_fleet_csv(fleet, fh)
    else:
        from gapscope.render.fleet_table import render_fleet_table

        render_fleet_table(fleet, fh, limit=limit)
