"""`gapscope analyze`: parse options, analyze (or load a saved result), render."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from gapscope.cache import ResultCache, kept_result, result_text
from gapscope.cli import cli
from gapscope.cli.options import cache_option, cache_setting, indent_option, json_options
from gapscope.cli.output import output_file, output_format, refuse_overwriting
from gapscope.errors import GapscopeError
from gapscope.text import printable
from gapscope.inputs import KIND_WORDS, Input, expand, resolve


#: The formats `gapscope analyze` writes (a many-trace result: table, json, csv; ``parquet``: the
#: per-gap and per-kernel tables of one trace, into the folder -o names).
FORMATS = ("table", "json", "csv", "markdown", "html", "parquet")
#: Options that change the analysis itself, which a saved result cannot redo.
ANALYSIS_OPTIONS = ("top", "count_memops", "attribution")
#: The options of :func:`gapscope.analysis.pipeline.run_analysis` that only a trace honours
#: (a saved result refuses them), with the flag that sets each.
TRACE_ONLY = {"ranges": "--range", "domains": "--domain", "threads": "--threads",
              "stall_threshold_ns": "--stall-threshold", "normalize": "--no-normalize"}
DEFAULTS = {"threads": "same", "normalize": True}


def load_input(found: Input, given: frozenset[str] = frozenset(), *, gaps: bool = True,
               **options: Any) -> tuple[Any, Any]:
    """(result, the AnalysisArrays behind it or None): a trace is analyzed with
    :func:`gapscope.analysis.pipeline.run_analysis`'s ``options``; a saved analysis or
    many-trace result is loaded; a `gapscope run` output gives its trace's analysis (or its
    saved analysis.json when the trace is not there). ``given``: the ANALYSIS_OPTIONS set on
    the command line, which a saved result must honour or refuse; ``gaps``: keep the gap
    lists in the arrays (run_analysis)."""
    found = _run_input(found.require("trace", "analysis", "fleet", "run", command="analyze"))
    if found.kind == "trace":
        from gapscope.analysis.pipeline import analysis_of
        from gapscope.cli.progress import TraceStatus

        with TraceStatus(found.path, sys.stderr) as status:
            analysis = analysis_of(found.path, gaps=gaps, progress=status, **options)
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
        return FleetResult.from_dict(found.json(), found.given), None
    from gapscope.analysis.result import AnalysisResult

    saved = AnalysisResult.from_dict(found.json(), found.given)
    return _honoured(saved, given, count_memops=options.get("count_memops", False), attribution=attribution,
                     top=options.get("top", 10)), None


def _run_input(found: Input) -> Input:
    """A `gapscope run` output as its trace, or its saved analysis.json when the trace is not
    there; any other input as it is."""
    if found.kind != "run":
        return found
    trace = found.run_file("gapscope_run.sqlite")
    return resolve(trace) if trace.is_file() else resolve(found.run_file("analysis.json"))


def load_tables(found: Input, **options: Any) -> tuple[Any, Any, Any]:
    """(result, the AnalysisArrays behind it, its ActivityTables): the per-gap and per-activity
    tables (gapscope.analysis.tables) need the trace, open while they are made; a saved result
    holds no gap list and is refused."""
    found = _run_input(found.require("trace", "analysis", "fleet", "run", command="analyze"))
    if found.kind != "trace":
        raise GapscopeError(f"{found.given}: {KIND_WORDS[found.kind]}, which holds no gap list; --format "
                            "parquet and --gaps-csv need the trace")
    from gapscope.analysis.pipeline import opened_analysis
    from gapscope.analysis.tables import tables_of
    from gapscope.cli.progress import TraceStatus

    with TraceStatus(found.path, sys.stderr) as status, \
            opened_analysis(found.path, all_calls=True, progress=status, **options) as analysis:
        status("making the tables of", None)
        return analysis.result, analysis, tables_of(analysis)


def _table_outputs(fmt: str, output: str | None, gaps_csv: str | None) -> list[Path]:
    """Refuse, before any work, a tables output that cannot be written (parquet without a folder,
    or onto a file); the files the tables will be written to, for refuse_overwriting."""
    from gapscope.render.parquet import FILES

    targets = []
    if fmt == "parquet":
        if output is None or output == "-":
            raise GapscopeError("--format parquet writes a folder (gaps.parquet, kernels.parquet): name it with -o DIR")
        if Path(output).exists() and not Path(output).is_dir():
            raise GapscopeError(f"{output}: exists and is not a folder; --format parquet writes a folder")
        targets += [Path(output), *(Path(output) / name for name in FILES.values())]
    if gaps_csv is not None:
        if gaps_csv == "-" and fmt != "parquet" and output in (None, "-"):
            raise GapscopeError("--gaps-csv -: the report already goes to stdout; name a file for one of them")
        if gaps_csv != "-":
            targets.append(Path(gaps_csv))
    return targets


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
                   "(0: none); several traces: range names, stragglers, steps and ranks.")
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
@click.option("--gaps-csv", "gaps_csv", metavar="FILE",
              help="Also write every gap (device, stream, start, length, categories, the kernels either "
                   "side, the launching call, its range) as CSV to FILE (one trace).")
@indent_option
@cache_option
def analyze_command(traces: tuple[str, ...], ranges: tuple[str, ...], domains: tuple[str, ...],
                    threads: str, stall_threshold: str | None, normalize: bool, fmt: str | None,
                    output: str | None, wide: bool, count_memops: bool, limit: int, top: int,
                    attribution: bool, jobs: int | None, scheduler: str | None, ranks_view: bool,
                    plot_dir: str | None, gaps_csv: str | None, indent: int | None, no_cache: bool) -> None:
    """Share of GPU time lost to gaps between kernels, per NVTX range, device and stream.

    TRACE is an nsys SQLite export (`nsys export --type sqlite`, or `nsys profile
    --export sqlite`), an nsys parquetdir or arrowdir export folder, an Nsight Systems report
    (.nsys-rep: exported with nsys into gapscope's cache), a PyTorch profiler trace (.json or
    .json.gz), a result JSON saved by `gapscope analyze --format json`, or a `gapscope run`
    output folder (docs/formats.md).

    `--format parquet -o DIR` writes the per-gap and per-kernel tables of the trace instead
    (DIR/gaps.parquet, DIR/kernels.parquet; docs/schema.md), for pandas, Polars or DuckDB.

    Several TRACEs (or a folder of exports, or a quoted glob) give one report across ranks,
    each device of each file being a rank: gap fraction and gap time per rank and range name,
    their spread, and the stragglers, with steps aligned by range name and occurrence, and
    communication kernels (NCCL, ...) paired across ranks: who waited for whom, and whether the
    late rank's own gaps made it late. --ranks gives that report for one trace that recorded
    several GPUs or processes. Exit status 1 when some traces failed (the report covers the
    others).
    """
    fmt = output_format(output, fmt, FORMATS, "table")
    with cache_setting(no_cache):
        _analyze(traces, ranges, domains, threads, stall_threshold, normalize, fmt, output, wide, count_memops,
                 limit, top, attribution, jobs, scheduler, ranks_view, plot_dir, gaps_csv, json_options(fmt, indent))


def _analyze(traces: tuple[str, ...], ranges: tuple[str, ...], domains: tuple[str, ...], threads: str,
             stall_threshold: str | None, normalize: bool, fmt: str, output: str | None, wide: bool,
             count_memops: bool, limit: int, top: int, attribution: bool, jobs: int | None,
             scheduler: str | None, ranks_view: bool, plot_dir: str | None, gaps_csv: str | None,
             json: dict[str, Any]) -> None:
    """The command's work, its options checked (``json``: the JSON renderer's options)."""
    from gapscope.render import render

    ctx = click.get_current_context()
    given = frozenset(n for n in ANALYSIS_OPTIONS if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE)
    threshold = None
    if stall_threshold is not None:
        from gapscope.plots.window import parse_time

        threshold = parse_time(stall_threshold, "--stall-threshold")
        if threshold < 0:
            raise GapscopeError(f"--stall-threshold: {stall_threshold!r} is negative")
    paths = expand(traces)
    tables = fmt == "parquet" or gaps_csv is not None
    targets: list[Any] = [output] if fmt != "parquet" else []
    if tables:
        if len(paths) > 1 or ranks_view:
            raise GapscopeError("--format parquet and --gaps-csv write the tables of one trace, not a report "
                                "across ranks; run them on each trace")
        targets += _table_outputs(fmt, output, gaps_csv)
    refuse_overwriting(paths, [*targets, *(_figures(plot_dir) if plot_dir else [])])
    if len(paths) > 1 or ranks_view:
        what = "several traces" if len(paths) > 1 else "a report across ranks (--ranks)"
        if plot_dir:
            raise GapscopeError(f"--plot draws one trace's figures, not {what}; run `gapscope plot` on each trace")
        if domains or threads != "same" or not normalize or threshold is not None:
            raise GapscopeError("--domain, --threads, --stall-threshold and --no-normalize analyze one "
                                f"trace; {what} take{'' if len(paths) > 1 else 's'} the defaults")
        fleet = _analyze_many(paths, ranges, count_memops, top, attribution, jobs, scheduler)
        with output_file(output) as fh:
            render(fleet, fmt, fh, limit=limit, wide=wide, **json)
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
    cache = None  # the result cache (gapscope.cache): for a report of one trace's result alone
    if not tables and not plot_dir and found.kind == "trace":
        cache = ResultCache.for_trace(found.path, found.format, options)
    if cache is not None and _write_cached(cache, found, output, fmt, limit=limit, wide=wide, **json):
        return
    if tables:
        result, analysis, made = load_tables(found, **options)
    else:
        # Only the plots read the gap lists; without them each level's gaps go once summed.
        (result, analysis), made = load_input(found, given, gaps=bool(plot_dir), **options), None
    read = analysis.read_seconds if analysis is not None else None
    steps = []
    if fmt == "parquet":
        steps.append((output, lambda: _write_parquet(made, output)))
    elif cache is not None:
        text = result_text(result)
        if fmt == "json" and not json:
            steps.append((output, lambda: _write_text(output, text)))
        else:
            steps.append((output, lambda: _write(output, result, fmt, limit=limit, wide=wide, read_seconds=read, **json)))
        steps.append(("", lambda: cache.keep(text)))  # after the files, before stdout
    else:
        steps.append((output, lambda: _write(output, result, fmt, limit=limit, wide=wide, read_seconds=read, **json)))
    if gaps_csv is not None:
        steps.append((gaps_csv, lambda: _write(gaps_csv, made, "gaps-csv")))
    for _, write in sorted(steps, key=lambda step: step[0] in (None, "-")):  # stdout last: its reader may go
        write()
    if plot_dir:
        _plot(found, analysis, ranges, plot_dir)


def _write_text(path: str | None, text: str) -> None:
    """``text`` to the file ``path`` (stdout for None or '-')."""
    with output_file(path) as fh:
        fh.write(text)


def _write_cached(cache: ResultCache, found: Input, output: str | None, fmt: str, **options: Any) -> bool:
    """Write the report of the result the cache keeps, if it keeps one intact: compact JSON as
    kept, any other format rendered from it (no deep schema check: gapscope wrote it and its
    CRC matched), the header saying "cached result". Whether it did."""
    text = cache.text()
    if text is None:
        return False
    if fmt == "json" and "indent" not in options:
        _write_text(output, text)
        return True
    _write(output, kept_result(text, str(found.path)), fmt, cached=True, **options)
    return True


def _figures(plot_dir: str) -> list[Any]:
    from gapscope.plots import figure_paths

    return figure_paths(plot_dir, ("png",))


def _write(path: str | None, result: Any, fmt: str, **options: Any) -> None:
    """Render ``result`` in ``fmt`` to the file ``path`` (stdout for None or '-')."""
    from gapscope.render import render

    with output_file(path) as fh:
        render(result, fmt, fh, **options)


def _write_parquet(tables: Any, folder: str) -> None:
    """The tables into ``folder``, each file written named on stderr."""
    from gapscope.render import render
    from gapscope.render.parquet import FILES

    render(tables, "parquet", folder)
    for name in FILES.values():
        click.echo(f"wrote {Path(folder) / name}", err=True)


def _plot(found: Input, analysis: Any, ranges: tuple[str, ...], plot_dir: str) -> None:
    """Draw the figures of the analysis just made (or of a saved result) into ``plot_dir``."""
    from gapscope.plots import draw_source, write_plots
    from gapscope.plots.source import source_from_analysis

    if analysis is None:
        written = write_plots(found.given, plot_dir)
    else:
        written = draw_source(source_from_analysis(analysis, found.label, ranges), plot_dir, ("png",))
    for p in written:
        click.echo(f"wrote {printable(p)}", err=True)


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
                              attribution=attribution, stragglers=top, on_done=progress.done,
                              on_note=progress.note)
    if not fleet.devices:
        raise GapscopeError(f"all {len(paths)} traces failed", 1)
    return fleet
