"""The one rich Console every terminal renderer writes through.

It differs from rich's own in three ways: its width is the terminal's (or the one asked for), or
unbounded for a file, a pipe or ``wide`` output, where tables show every column; a closed
pipe is raised as BrokenPipeError, as from any other write, instead of rich's own exit with
status 1 (the CLI ends such a run with 141, see gapscope.cli); and it parses no markup, so a
name from a file (``decode[/]``, ``[bold red]x``) prints as typed: styles come as rich Text.
"""

from __future__ import annotations

from typing import TextIO

import rich.console

#: The console width of output that is not fitted to a terminal (a file, a pipe, --wide).
UNBOUNDED = 100_000


class Console(rich.console.Console):
    """rich's Console, raising BrokenPipeError when the reader of its file has gone."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError("the reader of the output closed it")


def console_for(file: TextIO, width: int | None = None, wide: bool = False) -> tuple[Console, int | None]:
    """A console on ``file`` and the width its tables fit: the terminal's (or ``width``), or None
    (every column) for ``wide`` and for output that is not a terminal."""
    tty = hasattr(file, "isatty") and file.isatty()
    if wide or (width is None and not tty):
        return Console(file=file, width=UNBOUNDED, highlight=False, soft_wrap=False, markup=False), None
    console = Console(file=file, width=width, highlight=False, soft_wrap=False, markup=False)
    return console, console.width
