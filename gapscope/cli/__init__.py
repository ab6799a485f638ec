"""The gapscope command line: a click group whose commands live one per module.

Each command parses its options, calls one library function and hands the result to a
renderer. Every GapscopeError becomes one line on stderr and its exit code; nothing a user
can cause ends in a traceback.
"""

from __future__ import annotations

import sys

import click

from gapscope import __version__
from gapscope.errors import GapscopeError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="gapscope")
def cli() -> None:
    """Measure CUDA launch gaps in Nsight Systems and PyTorch profiler traces.

    \b
    gapscope analyze TRACE            gap fraction per range, device and stream
    gapscope run -o DIR               record CuPy micro-kernels under nsys, then analyze
    gapscope compare BASE CURRENT     fail CI when launch gaps regress
    """


def _register() -> None:
    from gapscope.cli import analyze  # noqa: F401  (registers the command)

    for optional in ("run", "compare", "plot", "report"):
        try:
            __import__(f"gapscope.cli.{optional}")
        except ModuleNotFoundError as exc:  # a command module not written yet
            if exc.name != f"gapscope.cli.{optional}":
                raise


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    _register()
    try:
        rv = cli.main(args=argv, prog_name="gapscope", standalone_mode=False)
    except GapscopeError as exc:
        click.echo(f"gapscope: error: {exc.message}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("gapscope: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        where = f"gapscope {exc.ctx.info_name}" if exc.ctx and exc.ctx.parent else "gapscope"
        click.echo(f"gapscope: error: {exc.format_message()} (see: {where} --help)", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"gapscope: error: {exc.format_message()}", err=True)
        sys.exit(2 if exc.exit_code == 1 else exc.exit_code)
    except BrokenPipeError:
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)
