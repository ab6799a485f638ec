"""`gapscope compare`: fail CI when launch gaps regress between a baseline and a current run."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TextIO

import click

from gapscope.cli import cli
from gapscope.cli.options import cache_option, cache_setting, indent_option, json_options
from gapscope.cli.output import output_file, output_format, refuse_overwriting
from gapscope.regression.comparison import Comparison, compare_paths
from gapscope.errors import GapscopeError
from gapscope.text import printable
from gapscope.render import render
from gapscope.regression.thresholds import DEFAULT_THRESHOLDS, MISSING_POLICIES, resolve_settings

_SIDE_OPTIONS = {"-b", "--baseline", "-c", "--current"}


class _CompareCommand(click.Command):
    """Lets ``--baseline a.json b.json c.json`` take several paths: each path after the option,
    up to the next option, counts as one more ``--baseline``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        side: str | None = None
        for i, arg in enumerate(args):
            if arg == "--":
                out.extend(args[i:])
                break
            if arg in _SIDE_OPTIONS:
                side = arg
                out.append(arg)
                continue
            if arg.startswith("-") and arg != "-":
                side = None
            elif side is not None and out and out[-1] != side:
                out.append(side)  # a further path for the same side
            out.append(arg)
        try:
            return super().parse_args(ctx, out)
        except click.UsageError as exc:  # one line, like every other bad input
            raise GapscopeError(f"{exc.format_message()} (see: gapscope compare --help)", 2) from None


def _write(path: str | None, render: Callable[[TextIO], None], *, append: bool = False) -> None:
    with output_file(path, append=append) as fh:
        render(fh)


@cli.command(
    "compare",
    cls=_CompareCommand,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.argument("paths", nargs=-1, metavar="[BASELINE CURRENT]")
@click.option(
    "-b", "--baseline", "baselines", multiple=True, metavar="PATH...",
    help="Baseline run(s): result JSON, gapscope run folder or trace (any format analyze reads). "
    "Takes several paths.",
)
@click.option(
    "-c", "--current", "currents", multiple=True, metavar="PATH...",
    help="Current run(s), likewise. Several runs per side compare medians.",
)
@click.option(
    "--fail", "fail", multiple=True, metavar="SPEC",
    help="Threshold [RANGE_GLOB:]METRIC:LIMIT, repeatable, e.g. gap_fraction:+0.02, "
    "gpu_span:+5%, sync:+10%+20us, kernels:+0, verdict:same, "
    "launch.cudaGraphLaunch.host_median_ns:+20%, 'decode*:gap_fraction:+0.01', gpu_span:off. "
    f"Default: {', '.join(DEFAULT_THRESHOLDS)}. See docs/ci.md.",
)
@click.option(
    "--scope", "scope", metavar="SCOPES",
    help="What to compare: some of range,device,stream (comma-separated) [default: the ranges when "
    "either side has ranges with GPU work, else the devices]. Launch APIs are compared whenever a "
    "launch.API.FIELD threshold is given.",
)
@click.option(
    "--missing", "missing", type=click.Choice(MISSING_POLICIES, case_sensitive=False), default=None,
    help="A baseline range (device, stream) with GPU work that current lacks or that has no work "
    "there: fail, warn (list it) or ignore  [default: fail]. New ones are always listed, never failed.",
)
@click.option(
    "--config", "config", type=click.Path(dir_okay=False), metavar="PYPROJECT",
    help="Read thresholds (fail), scope and missing from [tool.gapscope.compare] of this file "
    "[default: ./pyproject.toml when it has that table].",
)
@click.option(
    "--window", "-w", "window", metavar="START:END",
    help="Analyze every trace given over this time window, counted from its first GPU activity "
    "(gapscope analyze's --window: 2s:2.3s, 2s: skips the first 2 s). Saved results are refused.",
)
@click.option("--markdown", "markdown", metavar="FILE", help="Also write a Markdown report ('-' = stdout).")
@click.option("--junit", "junit", metavar="FILE", help="Also write JUnit XML ('-' = stdout).")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default=None,
    help="Main report format  [default: json when -o names a .json file, else table]",
)
@click.option("-o", "--output", "output", metavar="FILE", help="Write the main report to FILE instead of stdout.")
@click.option("--all", "show_all", is_flag=True, help="List every ok check in the table.")
@click.option("--wide", is_flag=True, help="Every column of the table, whatever the terminal's width.")
@indent_option
@cache_option
def compare_command(
    paths: tuple[str, ...],
    baselines: tuple[str, ...],
    currents: tuple[str, ...],
    fail: tuple[str, ...],
    scope: str | None,
    missing: str | None,
    config: str | None,
    window: str | None,
    markdown: str | None,
    junit: str | None,
    fmt: str | None,
    output: str | None,
    show_all: bool,
    wide: bool,
    indent: int | None,
    no_cache: bool,
) -> int:
    """Compare launch gaps of CURRENT against BASELINE; exit 1 on a regression.

    \b
    gapscope compare base.json current.json
    gapscope compare --baseline b1.json b2.json b3.json --current c1.json c2.json c3.json
    gapscope compare base.json trace.sqlite --fail gap_fraction:+0.01 --junit report.xml

    Each side is a result JSON (gapscope analyze --format json), a gapscope run folder, or a
    trace in any format `gapscope analyze` reads, analyzed on the fly. Ranges match by domain
    and name and are compared per instance (the median over their instances); devices match by
    id, streams by device and stream. A metric regresses when it gets worse by more than its
    threshold and the spread of the runs; a baseline range with GPU work that current lacks
    fails too (--missing). Two sides that share nothing are refused. The Markdown report is
    also appended to $GITHUB_STEP_SUMMARY when that is set.

    Exit status: 0 no regression, 1 regression, 2 bad input or usage.
    """
    if paths and (baselines or currents):
        raise GapscopeError(
            "give either BASELINE CURRENT or --baseline ... --current ..., not both", 2
        )
    if paths:
        if len(paths) > 2:
            raise GapscopeError(
                f"expected BASELINE and CURRENT, got {len(paths)} paths; "
                "for several runs per side use --baseline A B ... --current X Y ...",
                2,
            )
        baselines, currents = (paths[0],), tuple(paths[1:])
    if not baselines or not currents:
        missing = "BASELINE" if not baselines else "CURRENT"
        raise GapscopeError(
            f"missing {missing}: usage: gapscope compare BASELINE CURRENT "
            "(or --baseline A ... --current X ...)",
            2,
        )
    inputs = [*baselines, *currents, *([config] if config else [])]
    refuse_overwriting(inputs, [output, markdown, junit])
    summary = os.environ.get("GITHUB_STEP_SUMMARY") or None
    refuse_overwriting(inputs, [summary])  # it may be --markdown's file too: that is appended
    to_stdout = [name for name, p in (("the main report", output or "-"), ("--markdown", markdown),
                                      ("--junit", junit)) if p == "-"]
    if len(to_stdout) > 1:
        raise GapscopeError(f"only one report can go to stdout, not {' and '.join(to_stdout)}", 2)

    fmt = output_format(output, fmt, ("table", "json"), "table")
    settings = resolve_settings(fail, config, scope=scope, missing=missing)
    json = json_options(fmt, indent)
    cut = None
    if window is not None:
        from gapscope.analysis.time_window import parse

        cut = parse(window)
    with cache_setting(no_cache):
        comparison = compare_paths(list(baselines), list(currents), settings.thresholds, scope=settings.scope,
                                   missing=settings.missing, window=cut)

    _write(output, lambda fh: render(comparison, fmt, fh, show_all=show_all, wide=wide, **json))
    if not to_stdout:  # every report went to a file: still say the outcome
        click.echo(printable(comparison.headline()))
    if markdown is not None:
        _write(markdown, lambda fh: _render_markdown(comparison, fh))
    if summary:
        try:
            _write(summary, lambda fh: _render_markdown(comparison, fh), append=True)
        except GapscopeError as exc:  # the verdict stands; the summary page is a courtesy
            click.echo(f"gapscope: warning: $GITHUB_STEP_SUMMARY: {exc.message}", err=True)
    if junit is not None:
        _write(junit, lambda fh: render(comparison, "junit", fh))
    return comparison.exit_code


def _render_markdown(comparison: Comparison, fh: TextIO) -> None:
    render(comparison, "markdown", fh)
