"""The gapscope command line: a click group whose commands live one per module.

Each command parses its options, calls one library function and hands the result to a
renderer. Every GapscopeError becomes one line on stderr and its exit code; nothing a user
can cause ends in a traceback. A reader that closes the pipe early (``gapscope analyze T | head``)
ends the command quietly with exit status 141 (128 + SIGPIPE), as a Unix tool killed by SIGPIPE
reports it: distinct from 1 (a regression) and 2 (bad input). A full disk or an I/O error (on a
file, or on stdout) is one line naming the file, exit 2 (gapscope.files writes every output whole
or not at all). Anything else that escapes is a
bug: one line saying so, and exit code 3 (gapscope.errors).
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator

import click

from gapscope import __version__, heap
from gapscope.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, GapscopeError, internal_error_line, missing_dependency_line
from gapscope.text import printable


class ClosedPipe(Exception):
    """The reader of stdout went away (raised instead of click's own exit with status 1)."""


#: Each command and the module of gapscope.cli that defines it (and registers it with ``cli``
#: when imported): a command's module is imported only when that command runs or is listed, so
#: `gapscope analyze` does not import what compare, profile or run need (0.1 s of every start).
COMMANDS = {"analyze": "analyze", "compare": "compare", "plot": "plot", "report": "report",
            "export": "export", "profile": "profile", "run": "run", "mcp": "mcp"}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"gapscope.cli.{COMMANDS[cmd_name]}")
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                            list[str]]:
        """click's, with the command nearest a mistyped one named (``analyz``: did you mean analyze?)."""
        name = click.utils.make_str(args[0]) if args else ""
        if args and self.get_command(ctx, name) is None and not name.startswith("-"):
            import difflib

            near = difflib.get_close_matches(name, self.list_commands(ctx), n=1, cutoff=0.5)
            hint = f"; did you mean {near[0]}?" if near else f"; the commands are {', '.join(self.list_commands(ctx))}"
            raise click.UsageError(f"no such command {name!r}{hint}", ctx)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise ClosedPipe() from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="gapscope")
def cli() -> None:
    """Measure CUDA launch gaps in Nsight Systems and PyTorch profiler traces.

    \b
    gapscope analyze TRACE                    gap fraction per range, device and stream
    gapscope compare BASE CURRENT             fail CI when launch gaps regress
    gapscope plot TRACE -o DIR                timeline, gap histogram, sweep crossover
    gapscope report TRACE -o report.html      one page (or Markdown): tables, readings, figures
    gapscope export TRACE --perfetto T.json   gaps on a timeline for ui.perfetto.dev
    gapscope profile -- CMD [ARGS...]         record your own program (nsys or torch.profiler)
    gapscope run -o DIR                       record CuPy micro-kernels under nsys (GPU)
    gapscope mcp                              serve the analysis to AI agents (MCP, stdio)

    TRACE: an nsys SQLite, parquetdir or arrowdir export, a .nsys-rep, a PyTorch profiler trace.

    Shell completion (bash): eval "$(_GAPSCOPE_COMPLETE=bash_source gapscope)"
    """


#: Exit status when the reader of stdout went away: 128 + SIGPIPE, as the shell reports a Unix
#: tool that SIGPIPE ended (`yes | head -1`).
EXIT_BROKEN_PIPE = 141


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of a closed pipe is silent."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (tests capture stdout)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


#: The system's errors of a disk or device rather than of gapscope (a full disk, a quota, a file
#: too large, a read-only file system, an I/O error): one line, exit 2, never a bug report.
IO_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})


def _settle_stdout() -> None:
    """Before an error line: what stdout still buffers written, or, when it cannot be (a full
    device, a closed pipe), stdout pointed at /dev/null so the interpreter's exit adds no line."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        _quiet_stdout()


#: The warning lines this command printed (each is printed once).
_WARNED: set[str] = set()


def _warning_line(text: object) -> None:
    """One warning on stderr, once: ``gapscope: warning: TEXT``, TEXT's lines joined and made
    printable (gapscope.text: a CR or an ESC in it written as an escape)."""
    line = printable(" ".join(str(text).split("\n")).strip()).removeprefix("gapscope: ")
    if line not in _WARNED:
        _WARNED.add(line)
        click.echo(f"gapscope: warning: {line}", err=True)


class _WarningLines(logging.Handler):
    """Log records of the libraries gapscope uses (those no handler takes), as warning lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            _warning_line(record.getMessage())
        except Exception:  # a record that cannot be formatted says nothing rather than crash
            pass


@contextlib.contextmanager
def _one_line_warnings() -> Iterator[None]:
    """While a command runs, every warning (gapscope's own, or a library's: matplotlib names the
    character of a missing glyph, which may be a name's ESC or CR) and every library log record
    reaches stderr as one escaped line, never raw and never with a source line under it."""
    saved = warnings.showwarning, logging.lastResort
    _WARNED.clear()
    warnings.showwarning = lambda message, *_args, **_kw: _warning_line(message)
    logging.lastResort = _WarningLines(logging.WARNING)
    try:
        yield
    finally:
        warnings.showwarning, logging.lastResort = saved


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    heap.tune_for_analysis()  # before any thread allocates (gapscope.heap says why)
    try:
        with _one_line_warnings():
            rv = cli.main(args=argv, prog_name="gapscope", standalone_mode=False)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except GapscopeError as exc:
        _settle_stdout()
        click.echo(f"gapscope: error: {exc.message}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("gapscope: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        where = f"gapscope {exc.ctx.info_name}" if exc.ctx and exc.ctx.parent else "gapscope"
        click.echo(f"gapscope: error: {printable(exc.format_message())} (see: {where} --help)", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"gapscope: error: {printable(exc.format_message())}", err=True)
        sys.exit(2 if exc.exit_code == 1 else exc.exit_code)
    except (BrokenPipeError, ClosedPipe):
        _quiet_stdout()
        sys.exit(EXIT_BROKEN_PIPE)
    except OSError as exc:
        if exc.errno not in IO_ERRNOS:
            click.echo(internal_error_line(exc, __version__), err=True)
            sys.exit(EXIT_INTERNAL)
        _settle_stdout()  # stdout on a full device: its last flush
        where = printable(exc.filename) if exc.filename is not None else "stdout"
        click.echo(f"gapscope: error: {where}: {exc.strerror or exc} (an I/O error of the system, "
                   "not of gapscope)", err=True)
        sys.exit(2)
    except Exception as exc:  # a missing package, else a bug: one line that says so, never a traceback
        missing = missing_dependency_line(exc)
        click.echo(missing or internal_error_line(exc, __version__), err=True)
        sys.exit(EXIT_BAD_INPUT if missing else EXIT_INTERNAL)
    sys.exit(rv if isinstance(rv, int) else 0)
