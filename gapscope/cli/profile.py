"""`gapscope profile`: parse options, call gapscope.capture.profile.profile, render its analysis,
exit with the program's exit status when it failed."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import click

from gapscope.capture.nsys import EXPORT_TYPES
from gapscope.capture.profile import DEFAULT_OUT, TRACERS
from gapscope.cli import cli
from gapscope.cli.analyze import FORMATS
from gapscope.text import printable

if TYPE_CHECKING:
    from gapscope.capture.profile import ProfileResult


@cli.command("profile", context_settings={"allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- CMD [ARGS...]")
@click.option("--output-dir", "-o", default=DEFAULT_OUT, show_default=True, metavar="DIR",
              help="Folder for the report, its export, the result JSON, the commands and the "
                   "environment; %q{VAR}, %h, %p expanded as nsys does (-o rank%q{RANK}).")
@click.option("--force", is_flag=True,
              help="Write into an existing folder, replacing an earlier profile's files (only those).")
@click.option("--tracer", type=click.Choice(TRACERS), default="nsys", show_default=True,
              help="nsys, or torch: torch.profiler around a Python program (no nsys needed).")
@click.option("--capture-range", metavar="nvtx:NAME|cudaProfilerApi",
              help="Record only from the first opening of the NVTX (or record_function) range NAME "
                   "to its close, or between cudaProfilerStart and Stop.")
@click.option("--delay", type=int, metavar="SECONDS", help="nsys: start recording after SECONDS.")
@click.option("--duration", type=int, metavar="SECONDS",
              help="nsys: record for SECONDS (nsys then ends the program).")
@click.option("--nsys-arg", "nsys_args", multiple=True, metavar="ARG",
              help="More nsys profile options, split as a shell would (repeatable); they replace "
                   "gapscope's --trace, --sample, --cpuctxsw, --cuda-graph-trace when given.")
@click.option("--nsys", metavar="PATH", help="The nsys to use (else $GAPSCOPE_NSYS, PATH, "
                                              "the usual install places).")
@click.option("--export-type", type=click.Choice(EXPORT_TYPES),
              help="nsys export type  [default: the fastest to read that this nsys offers]")
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="How to print the analysis (the folder gets report.txt and result.json).")
@click.option("--wide", is_flag=True, help="Every column of every table, whatever the terminal's width.")
@click.option("--dry-run", is_flag=True, help="Print the commands and stop (no nsys, GPU or program needed).")
@click.option("--quiet", "-q", is_flag=True,
              help="No progress display, and the program's output only in DIR/output.log.")
def profile_command(command: tuple[str, ...], output_dir: str, force: bool, tracer: str,
                    capture_range: str | None, delay: int | None, duration: int | None,
                    nsys_args: tuple[str, ...], nsys: str | None, export_type: str | None, fmt: str,
                    wide: bool, dry_run: bool, quiet: bool) -> int:
    """Record your own program the way the analysis needs it, and report its launch gaps.

    \b
    gapscope profile -- python serve.py --batch 8
    gapscope profile --capture-range nvtx:decode -- python generate.py
    gapscope profile --tracer torch -- python train.py      (no nsys: torch.profiler)

    Runs CMD under nsys (-t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none),
    exports the report, analyzes it as `gapscope analyze` does and prints the report. Ctrl-C
    stops the program and analyzes what was recorded. Exit status: the program's when it failed,
    130 after Ctrl-C, 2 for bad usage or when nothing could be recorded. See docs/profile.md.
    """
    from gapscope.capture.profile import ProfileOptions, profile
    from gapscope.render import render

    opts = ProfileOptions(command=list(command), out_dir=output_dir, tracer=tracer,
                          capture_range=capture_range, delay=delay, duration=duration,
                          nsys_args=list(nsys_args), nsys=nsys, export_type=export_type,
                          force=force, dry_run=dry_run)
    result = profile(opts, progress=not quiet and not dry_run)
    for warning in result.warnings:
        click.echo(f"gapscope: warning: {warning}", err=True)
    if dry_run:
        for line in result.plan.command_lines():
            click.echo(line)
        return 0
    for warning in result.analysis.warnings:  # on stderr, as `gapscope analyze` writes them
        click.echo(f"gapscope: warning: {warning}", err=True)
    render(result.analysis, fmt, sys.stdout, wide=wide, read_seconds=result.read_seconds, warnings=False)
    if fmt == "table":  # the answer last too, where a long report leaves the terminal
        from gapscope.analysis import answer

        entries = result.analysis.answers()
        if entries:
            click.echo(f"\n{answer.TITLE}")
            for entry in entries:
                for line in answer.lines(entry):
                    click.echo(printable(line))
    click.echo(f"gapscope: {_ending(result)}; everything is in {result.plan.out_dir}", err=True)
    return result.exit_code


def _ending(result: "ProfileResult") -> str:
    """How the program ended, in words."""
    code, sig = result.program_exit_code, result.program_signal
    how = (f"the program was ended by {signal.Signals(sig).name} (exit status {code})" if sig
           else f"the program exited with {code}" if code is not None
           else "the program's exit status is unknown")
    if result.interrupted:
        return (f"interrupted ({signal.Signals(result.forwarded[0]).name}): {how}; what was recorded "
                "until then is analyzed above")
    return how
