"""Progress on stderr: for a many-file analysis, a bar that advances per file (on a terminal)
and one line per file that failed (always); for one large trace, a status line naming the step
under way (on a terminal)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console

from gapscope.text import name, printable

if TYPE_CHECKING:
    from rich.progress import Progress

    from gapscope.fleet.executors import Outcome


class FileProgress:
    """Context manager fed one :class:`Outcome` per finished file through :meth:`done`.

    The bar is drawn only when ``file`` is a terminal (or ``bar=True``); failures are written
    as ``gapscope: error: PATH: MESSAGE`` lines either way, above the bar.
    """

    def __init__(self, total: int, file: TextIO, *, what: str = "", bar: bool | None = None) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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

    def note(self, line: str) -> None:
        """One ``gapscope: LINE`` on the stream, above the bar (how many files run at once)."""
        self.console.print(f"gapscope: {printable(line)}", soft_wrap=True)

    def done(self, outcome: Outcome) -> None:
        """Advance the bar by one file; print the file's error if it failed."""
        if outcome.error:
            self.failures += 1
            self.console.print(f"gapscope: error: {printable(outcome.error)}", soft_wrap=True)
        self._progress.update(self._task, advance=1, last=name(outcome.path))


#: A trace with at least this many GPU activity rows gets a status line while it is read and
#: analyzed (about a second on a laptop; smaller ones finish before a line would help).
STATUS_ROWS = 250_000
#: ... and so does one whose format does not count its rows cheaply (a PyTorch profiler JSON)
#: when its file is at least this large.
STATUS_BYTES = 64 << 20


class TraceStatus:
    """Context manager and :data:`gapscope.analysis.pipeline.Progress` callback: a one-line
    status on stderr (``0:00:12 reading NAME: 10,812,480 GPU activities``) while a large trace
    is read and analyzed, gone when the report starts. Only on a terminal; nothing in a pipe,
    a log or a test."""

    def __init__(self, path: str | Path, file: TextIO, *, show: bool | None = None) -> None:
        self.path = Path(path)
        self.console = Console(file=file, highlight=False, markup=False)
        self._show = self.console.is_terminal if show is None else show
        self._progress: Progress | None = None
        self._task: Any = None
        self.shown: list[str] = []  # every status text shown, in order

    def __enter__(self) -> "TraceStatus":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _large(self, rows: int | None) -> bool:
        if rows is not None:
            return rows >= STATUS_ROWS
        try:
            return self.path.is_file() and self.path.stat().st_size >= STATUS_BYTES
        except OSError:
            return False

    def __call__(self, step: str, rows: int | None) -> None:
        if not self._show or (self._progress is None and not self._large(rows)):
            return
        what = f"{step} {printable(self.path.name)}" + (f": {rows:,} GPU activities" if rows is not None else "")
        self.shown.append(what)
        if self._progress is None:
            # rich's bars imported only now: most traces finish before a line would help.
            from rich.progress import Progress, TextColumn, TimeElapsedColumn
            from rich.table import Column

            # The time ticking says the work goes on; the text is cut at the terminal's edge.
            self._progress = Progress(
                TimeElapsedColumn(table_column=Column(min_width=7, no_wrap=True)),
                TextColumn("{task.description}", markup=False, table_column=Column(no_wrap=True, overflow="ellipsis")),
                console=self.console, transient=True, redirect_stdout=False, redirect_stderr=False)
            self._task = self._progress.add_task(what, total=None)
            self._progress.start()
        else:
            self._progress.update(self._task, description=what)
