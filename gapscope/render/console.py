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


class _WithoutTrailingSpaces:
    """A file that writes every line it is given without the spaces rich pads it with (a table's
    last column is padded to its width): reports saved to a file or piped into another tool
    carry no trailing whitespace. Only for output that is not a terminal (no colour codes)."""

    def __init__(self, file: TextIO) -> None:
        self._file = file
        self._pending = ""

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self._file.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._pending:  # a line rich left open: written as it is
            self._file.write(self._pending)
            self._pending = ""
        self._file.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> object:  # encoding, fileno, ...: the file's own
        return getattr(self._file, name)


def console_for(file: TextIO, width: int | None = None, wide: bool = False) -> tuple[Console, int | None]:
    """A console on ``file`` and the width its tables fit: the terminal's (or ``width``), or None
    (every column) for ``wide`` and for output that is not a terminal. Output that is not a
    terminal has no trailing spaces."""
    tty = hasattr(file, "isatty") and file.isatty()
    target = file if tty else _WithoutTrailingSpaces(file)
    if wide or (width is None and not tty):
        return Console(file=target, width=UNBOUNDED, highlight=False, soft_wrap=False, markup=False), None
    console = Console(file=target, width=width, highlight=False, soft_wrap=False, markup=False)
    return console, console.width
