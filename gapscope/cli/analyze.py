"""`gapscope analyze`: parse options, analyze (or load a saved result), render."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import click
from click.core import ParameterSource

from gapscope.cli import cli
from gapscope.cli.output import output_file, output_format
from gapscope.errors import GapscopeError
from gapscope.inputs import KIND_WORDS, Input, expand, resolve


#: The formats `gapscope analyze` writes (a many-trace result: table, json, csv).
FORMATS = ("table", "json", "csv", "markdown", "html")
#: Options that change the analysis itself, which a saved result cannot redo.
ANALYSIS_OPTIONS = ("top", "count_memops", "attribution")
#: The options of :func:`gapscope.analysis.pipeline.run_analysis` that only a trace honours
#: (a saved result refuses them), with the flag that sets each.
TRACE_ONLY = {"ranges": "--range", "domains": "--domain", "threads": "--threads",
              "stall_threshold_ns": "--stall-threshold", "normalize": "--no-normalize"}
DEFAULTS = {"threads": "same", "normalize": True}


def load_input(found: Input, given: frozenset[str] = frozenset(), **options: Any) -> tuple[Any, Any]:
    """(result, the Analysis behind it or None): a trace is analyzed with
    :func:`gapscope.analysis.pipeline.run_analysis`'s ``options``; a saved analysis or
    many-trace result is loaded; a `gapscope run` output gives its trace's analysis (or its
    saved analysis.json when the trace is not there). ``given``: the ANALYSIS_OPTIONS set on
    the command line, which a saved result must honour or refuse."""
    found = found.require("trace", "analysis", "fleet", "run", command="analyze")
    if found.kind == "run":
        trace = found.run_file("gapscope_run.sqlite")
        found = resolve(trace) if trace.is_file() else resolve(found.run_file("analysis.json"))
    if found.kind == "trace":
        from gapscope.analysis.pipeline import analysis_of

        analysis = analysis_of(found.path, **options)
        return analysis.result, analysis
    for key, flag in TRACE_ONLY.items():
        if options.get(key) not in (None, (), DEFAULTS.get(key)):
            raise GapscopeError(f"{flag} applies to traces, not to a saved result JSON")
    attribution = options.get("attribution", True)
    if found.kind == "fleet":
        from gapscope.fleet.result import FleetResult

        if given:
            raise GapscopeError(f"{_flag(sorted(given)[0], attribution)} changes the analysis; a saved "
                                "many-trace result cannot be analyzed again: give the traces")
        return FleetResult.from_dict(found.json()), None
    from gapscope.analysis.result import AnalysisResult

    saved = AnalysisResult.from_dict(found.json())
    return _honoured(saved, given, count_memops=options.get("count_memops", False), attribution=attribution,
                     top=options.get("top", 10)), None


def _flag(name: str, attribution: bool = True) -> str:
    if name == "attribution":
        return "--attribution" if attribution else "--no-attribution"
    return "--" + name.replace("_", "-")


def _honoured(saved: Any, given: frozenset[str], *, count_memops: bool, attribution: bool, top: int) -> Any:
    """A saved result as the options given ask for it, or one line saying which option it cannot
    honour: it holds the analysis as made, so only a shorter --top list can be cut from it."""
    again = "give the trace to analyze it again"
    if "count_memops" in given and count_memops != bool(saved.options.get("count_memops")):
        raise GapscopeError(f"--count-memops: this saved result was analyzed "
                            f"{'without' if count_memops else 'with'} it; {again}")
    if "attribution" in given and attribution != saved.attributed:
        raise GapscopeError(f"{_flag('attribution', attribution)}: this saved result was analyzed "
                            f"{'without' if attribution else 'with'} gap attribution; {again}")
    if "top" in given and attribution:
        held = saved.top_gaps
        if held is None:
            raise GapscopeError(f"--top: this saved result holds no longest gaps (analyzed without "
                                f"attribution); {again}")
        every = sum(int(d.get("gap_count") or 0) for d in saved.devices)
        if top > len(held) and len(held) < every:
            raise GapscopeError(f"--top {top}: this saved result holds the {len(held)} longest gaps; {again}")
        return dataclasses.replace(saved, top_gaps=held[:top])
    return saved


@cli.command("analyze")
@click.argument("traces", nargs=-1, required=True, metavar="TRACE", type=click.Path(dir_okay=True, path_type=str))
@click.option("--range", "-r", "ranges", multiple=True, metavar="NAME",
              help="Only NVTX ranges with this name (exact or glob, e.g. 'decode*'); repeatable.")
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default=None,
              help="Output format  [default: the one -o's suffix names (.json, .csv, .md, .html), else table]")
@click.option("--output", "-o", "output", metavar="FILE", help="Write the report to FILE instead of stdout.")
@click.option("--wide", is_flag=True, help="Every column of every table, whatever the terminal's width.")
@click.option("--count-memops", is_flag=True, help="Count memcpy/memset time as busy GPU time.")
@click.option("--domain", "-d", "domains", multiple=True, metavar="NAME",
              help="Only NVTX ranges of this domain ('default' for the default domain; a library's "
                   "domain such as TSL or CCCL is then listed like the others); repeatable.")
@click.option("--threads", type=click.Choice(["same", "process"]), default="same", show_default=True,
              help="A range's GPU work: launched from its own thread, or from any thread of its process "
                   "inside its time window (asynchronous dispatchers, worker threads).")
@click.option("--stall-threshold", "stall_threshold", default=None, metavar="TIME",
              help="Host stretches with no CUDA call, and single calls, longer than this are stalls "
                   "(ns, us, ms or s; docs/metrics.md).  [default: 1ms]")
@click.option("--normalize/--no-normalize", default=True, show_default=True,
              help="Group range names without PyTorch emit_nvtx suffixes (', seq = N', ', op_id = N', ...).")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True, metavar="N",
              help="Range names and instances shown in the table, those with the most gap time "
                   "(0: none); several traces: steps and ranks.")
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True, metavar="N",
              help="Longest gaps listed; several traces: stragglers per range name.")
@click.option("--attribution/--no-attribution", default=True, show_default=True,
              help="Classify every gap (launch, sync, dependency, memop, pipeline).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, metavar="N",
              help="Several traces: local worker processes (default: the CPU count).")
@click.option("--scheduler", metavar="ADDRESS",
              help="Several traces: run on the Dask cluster at ADDRESS (tcp://host:8786; docs/fleet.md).")
@click.option("--ranks", "ranks_view", is_flag=True,
              help="The report across ranks for one trace too: each of its devices is a rank (one export "
                   "that recorded several GPUs or processes), with collectives paired across them.")
@click.option("--plot", "plot_dir", metavar="DIR",
              help="Also draw the timeline and gap histogram into DIR (one trace; needs matplotlib).")
def analyze_command(traces: tuple[str, ...], ranges: tuple[str, ...], domains: tuple[str, ...],
                    threads: str, stall_threshold: str | None, normalize: bool, fmt: str | None,
                    output: str | None, wide: bool, count_memops: bool, limit: int, top: int,
                    attribution: bool, jobs: int | None, scheduler: str | None, ranks_view: bool,
                    plot_dir: str | None) -> None:
    """Share of GPU time lost to gaps between kernels, per NVTX range, device and stream.

    TRACE is an nsys SQLite export (`nsys export --type sqlite`, or `nsys profile
    --export sqlite`), an nsys parquetdir or arrowdir export folder, an Nsight Systems report
    (.nsys-rep: exported with nsys into gapscope's cache), a PyTorch profiler trace (.json or
    .json.gz), a result JSON saved by `gapscope analyze --format json`, or a `gapscope run`
    output folder (docs/formats.md).

    Several TRACEs (or a folder of exports, or a quoted glob) give one report across ranks,
    each device of each file being a rank: gap fraction and gap time per rank and range name,
    their spread, and the stragglers, with steps aligned by range name and occurrence, and
    communication kernels (NCCL, ...) paired across ranks: who waited for whom, and whether the
    late rank's own gaps made it late. --ranks gives that report for one trace that recorded
    several GPUs or processes. Exit status 1 when some traces failed (the report covers the
    others).
    """
    from gapscope.render import render

    fmt = output_format(output, fmt, FORMATS, "table")
    ctx = click.get_current_context()
    given = frozenset(n for n in ANALYSIS_OPTIONS if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE)
    threshold = None
    if stall_threshold is not None:
        from gapscope.plots.window import parse_time

        threshold = parse_time(stall_threshold, "--stall-threshold")
        if threshold < 0:
            raise GapscopeError(f"--stall-threshold: {stall_threshold!r} is negative")
    paths = expand(traces)
    if len(paths) > 1 or ranks_view:
        what = "several traces" if len(paths) > 1 else "a report across ranks (--ranks)"
        if plot_dir:
            raise GapscopeError(f"--plot draws one trace's figures, not {what}; run `gapscope plot` on each trace")
        if domains or threads != "same" or not normalize or threshold is not None:
            raise GapscopeError("--domain, --threads, --stall-threshold and --no-normalize analyze one "
                                f"trace; {what} take{'' if len(paths) > 1 else 's'} the defaults")
        fleet = _analyze_many(paths, ranges, count_memops, top, attribution, jobs, scheduler)
        with output_file(output) as fh:
            render(fleet, fmt, fh, limit=limit, wide=wide)
        if fleet.failed:
            raise GapscopeError(f"{len(fleet.failed)} of {len(paths)} traces failed (listed above); "
                                "the report covers the others", 1)
        return
    found = resolve(paths[0])
    if plot_dir:
        from gapscope.plots.style import require_matplotlib

        require_matplotlib()  # fail before the analysis, not after it
    options = {"ranges": ranges, "count_memops": count_memops, "attribution": attribution, "top": top,
               "domains": domains, "threads": threads, "normalize": normalize}
    if threshold is not None:
        options["stall_threshold_ns"] = threshold
    result, analysis = load_input(found, given, **options)
    read = analysis.read_seconds if analysis is not None else None
    with output_file(output) as fh:
        render(result, fmt, fh, limit=limit, wide=wide, read_seconds=read)
    if plot_dir:
        _plot(found, analysis, ranges, plot_dir)


def _plot(found: Input, analysis: Any, ranges: tuple[str, ...], plot_dir: str) -> None:
    """Draw the figures of the analysis just made (or of a saved result) into ``plot_dir``."""
    from gapscope.plots import draw_source, write_plots
    from gapscope.plots.source import source_from_analysis

    if analysis is None:
        written = write_plots(found.given, plot_dir)
    else:
        written = draw_source(source_from_analysis(analysis, found.label, ranges), plot_dir, ("png",))
    for p in written:
        click.echo(f"wrote {p}", err=True)


def _analyze_many(paths: list[str], ranges: tuple[str, ...], count_memops: bool, top: int,
                  attribution: bool, jobs: int | None, scheduler: str | None) -> Any:
    """Analyze several traces on a pool or a Dask cluster and merge them; every input must be
    a trace (checked before any work starts)."""
    from gapscope.cli.progress import FileProgress
    from gapscope.fleet.executors import choose_executor
    from gapscope.fleet.merge import analyze_fleet

    for p in paths:  # a saved result among them is a usage error; a bad trace is one failed file
        try:
            kind = resolve(p).kind
        except GapscopeError:
            kind = "analysis" if p.endswith(".json") else "trace"
        if kind != "trace":
            what = "several inputs must all be traces" if len(paths) > 1 else \
                "--ranks analyzes a trace (a saved result holds no per-kernel data to pair)"
            raise GapscopeError(f"{p}: {KIND_WORDS[kind]}; {what}")
    executor = choose_executor(len(paths), jobs, scheduler, preload=["gapscope.fleet.merge"])
    with FileProgress(len(paths), sys.stderr) as progress:
        fleet = analyze_fleet(paths, executor, ranges=ranges, count_memops=count_memops,
                              attribution=attribution, stragglers=top, on_done=progress.done)
    if not fleet.devices:
        raise GapscopeError(f"all {len(paths)} traces failed", 1)
    return fleet
