"""`gapscope analyze`: parse options, load the result (gapscope.loading), render it."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from gapscope.cli import cli
from gapscope.cli.options import cache_option, cache_setting, indent_option, json_options
from gapscope.cli.output import output_file, output_format, refuse_overwriting
from gapscope.errors import GapscopeError
from gapscope.inputs import Input, expand, resolve
from gapscope.loading import ANALYSIS_OPTIONS, Loaded, executor_for, load, merged
from gapscope.text import printable


#: The formats `gapscope analyze` writes (a many-trace result: table, json, csv; ``parquet``: the
#: per-gap and per-kernel tables of one trace, into the folder -o names).
FORMATS = ("table", "json", "csv", "markdown", "html", "parquet")


@dataclass(frozen=True)
class _Report:
    """What the command writes: the report in ``fmt`` to ``output`` (stdout for None or '-';
    for ``parquet`` the tables' folder), the gaps' CSV and the figures' folder when asked, and
    the renderer's options (``limit``, ``wide``, the JSON's ``indent``)."""

    fmt: str
    output: str | None
    gaps_csv: str | None
    plot_dir: str | None
    render: dict[str, Any]

    @property
    def tables(self) -> bool:
        """Whether the report needs the trace's per-gap and per-activity tables."""
        return self.fmt == "parquet" or self.gaps_csv is not None


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
                   "inside its time window (asynchronous dispatchers, worker threads) but one inside a range "
                   "of the same name of its own.")
@click.option("--stall-threshold", "stall_threshold", default=None, metavar="TIME",
              help="Host stretches with no CUDA call, and single calls, longer than this are stalls "
                   "(ns, us, ms or s; docs/metrics.md).  [default: 1ms]")
@click.option("--window", "-w", "window", metavar="START:END",
              help="Analyze only this time window, counted from the trace's first GPU activity, in ns or "
                   "with units (the syntax of `gapscope plot`): 2s:2.3s, :300ms, 2s: (skips the first "
                   "2 s). Activities, calls and NVTX ranges are cut to it (docs/metrics.md).")
@click.option("--normalize/--no-normalize", default=True, show_default=True,
              help="Group range names without PyTorch emit_nvtx suffixes (', seq = N', ', op_id = N', ...) "
                   "and step markers' numbers (ProfilerStep#N as ProfilerStep#*).")
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True, metavar="N",
              help="Range names and instances shown in the table, those with the most gap time first "
                   "(0: no instances, the 20 names of the summary); several traces: range names, stragglers, "
                   "steps and ranks.")
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
                    threads: str, stall_threshold: str | None, window: str | None, normalize: bool,
                    fmt: str | None,
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
    report = _Report(fmt, output, gaps_csv, plot_dir,
                     {"limit": limit, "wide": wide, "warnings": False, **json_options(fmt, indent)})
    with cache_setting(no_cache):
        options = _analysis_options(ranges, domains, threads, stall_threshold, normalize, count_memops, top,
                                    attribution, window)
        paths = expand(traces)
        several = len(paths) > 1 or ranks_view
        _refuse_outputs(paths, report, several)
        if several:
            _analyze_several(paths, options, report, jobs, scheduler, ranks_view)
        else:
            _analyze_one(paths[0], options, report)


def _analysis_options(ranges: tuple[str, ...], domains: tuple[str, ...], threads: str, stall_threshold: str | None,
                      normalize: bool, count_memops: bool, top: int, attribution: bool,
                      window: str | None = None) -> dict[str, Any]:
    """The options of gapscope.analysis.pipeline.run_analysis the command line sets."""
    options = {"ranges": ranges, "count_memops": count_memops, "attribution": attribution, "top": top,
               "domains": domains, "threads": threads, "normalize": normalize}
    if window is not None:
        from gapscope.analysis.time_window import parse

        options["window"] = parse(window)
    if stall_threshold is not None:
        from gapscope.plots.window import parse_time

        threshold = parse_time(stall_threshold, "--stall-threshold")
        if threshold < 0:
            raise GapscopeError(f"--stall-threshold: {stall_threshold!r} is negative")
        options["stall_threshold_ns"] = threshold
    return options


def _refuse_outputs(paths: list[str], report: _Report, several: bool) -> None:
    """Refuse, before any work, outputs that cannot be written: tables of several traces, a
    tables output that is no folder or no file (:func:`_table_outputs`), any output that is an
    input (refuse_overwriting)."""
    targets: list[Any] = [report.output] if report.fmt != "parquet" else []
    if report.tables:
        if several:
            raise GapscopeError("--format parquet and --gaps-csv write the tables of one trace, not a report "
                                "across ranks; run them on each trace")
        targets += _table_outputs(report.fmt, report.output, report.gaps_csv)
    refuse_overwriting(paths, [*targets, *(_figures(report.plot_dir) if report.plot_dir else [])])


def _analyze_several(paths: list[str], options: dict[str, Any], report: _Report, jobs: int | None,
                     scheduler: str | None, ranks_view: bool) -> None:
    """Several traces (or one with --ranks) analyzed side by side and merged; exit status 1
    when some failed (the report covers the others)."""
    from gapscope.cli.progress import FileProgress
    from gapscope.render import render

    what = "several traces" if len(paths) > 1 else "a report across ranks (--ranks)"
    if report.plot_dir:
        raise GapscopeError(f"--plot draws one trace's figures, not {what}; run `gapscope plot` on each trace")
    if options["domains"] or options["threads"] != "same" or not options["normalize"] or \
            "stall_threshold_ns" in options or "window" in options:
        raise GapscopeError("--domain, --threads, --stall-threshold, --window and --no-normalize analyze one "
                            f"trace; {what} take{'' if len(paths) > 1 else 's'} the defaults")
    executor = executor_for(paths, jobs, scheduler)
    with FileProgress(len(paths), sys.stderr) as progress:
        fleet = merged(paths, executor, options, on_done=progress.done, on_note=progress.note)
    failed = f"{len(fleet.failed)} of {len(fleet.files)} traces failed"  # said by the error line below
    _warn([w for w in fleet.warnings if not (fleet.failed and w.startswith(failed))])
    with output_file(report.output) as fh:
        render(fleet, report.fmt, fh, **report.render)
    if fleet.failed:
        raise GapscopeError(f"{len(fleet.failed)} of {len(paths)} traces failed (listed above); "
                            "the report covers the others", 1)


def _analyze_one(path: str, options: dict[str, Any], report: _Report) -> None:
    """One input: its result loaded (analyzed, cached or saved), then every file asked for
    written, stdout last (its reader may go), the result kept in the cache after the files and
    before stdout; the figures after them."""
    found = resolve(path)
    if report.plot_dir:
        from gapscope.plots.style import require_matplotlib

        require_matplotlib()  # fail before the analysis, not after it
    ctx = click.get_current_context()
    given = frozenset(n for n in ANALYSIS_OPTIONS if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE)
    # Only the plots read the gap lists; without them each level's gaps go once summed.
    loaded = load(found, options, given=given, tables=report.tables, gaps=bool(report.plot_dir),
                  status=_status)
    _warn(loaded.warnings())
    steps = [(report.output, lambda: _write_report(loaded, report))]
    if loaded.keeps:
        steps.append(("", loaded.keep))
    if report.gaps_csv is not None:
        steps.append((report.gaps_csv, lambda: _write(report.gaps_csv, loaded.tables, "gaps-csv")))
    for _, write in sorted(steps, key=lambda step: step[0] in (None, "-")):  # stdout last: its reader may go
        write()
    if report.plot_dir:
        _plot(found, loaded.analysis, options["ranges"], report.plot_dir)


def _warn(warnings: list[str]) -> None:
    """The result's warnings on stderr, one line each, whatever the format (the report on stdout
    or in a file holds none of them but in the Markdown and HTML reports and the JSON)."""
    for w in warnings:
        click.echo(f"gapscope: warning: {printable(w)}", err=True)


def _status(trace: Path) -> Any:
    """The status line of one trace on stderr (imported only when a trace is analyzed: a cached
    result's report needs none)."""
    from gapscope.cli.progress import TraceStatus

    return TraceStatus(trace, sys.stderr)


def _write_report(loaded: Loaded, report: _Report) -> None:
    """The report to its file: the tables' folder for parquet; compact JSON as the result cache
    holds it, when it does; else the result rendered (the header saying "cached result" for
    one the cache held)."""
    if report.fmt == "parquet":
        _write_parquet(loaded.tables, report.output)
        return
    text = loaded.json_text() if report.fmt == "json" and "indent" not in report.render else None
    if text is not None:
        with output_file(report.output) as fh:
            fh.write(text)
        return
    _write(report.output, loaded.result, report.fmt, read_seconds=loaded.read_seconds, cached=loaded.cached,
           **report.render)


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
