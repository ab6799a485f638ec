"""Progress of a many-file analysis on stderr: a bar that advances per file (on a terminal),
and one line per file that failed (always)."""

from __future__ import annotations

from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gapscope.fleet.executors import Outcome
from gapscope.text import name, printable


class FileProgress:
    """Context manager fed one :class:`Outcome` per finished file through :meth:`done`.

    The bar is drawn only when ``file`` is a terminal (or ``bar=True``); failures are written
    as ``gapscope: error: PATH: MESSAGE`` lines either way, above the bar.
    """

    def __init__(self, total: int, file: TextIO, *, what: str = "", bar: bool | None = None) -> None:
        self.console = Console(file=file, highlight=False, markup=False)
        show = self.console.is_terminal if bar is None else bar
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("files"),
            TimeElapsedColumn(), TextColumn("{task.fields[last]}", markup=False),
            console=self.console, disable=not show, transient=False,
        )
        self._task = self._progress.add_task(what or "analyzing", total=total, last="")
        self.failures = 0

    def __enter__(self) -> "FileProgress":
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()

    def done(self, outcome: Outcome) -> None:
        """Advance the bar by one file; print the file's error if it failed."""
        if outcome.error:
            self.failures += 1
            self.console.print(f"gapscope: error: {printable(outcome.error)}", soft_wrap=True)
        self._progress.update(self._task, advance=1, last=name(outcome.path))
