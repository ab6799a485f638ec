"""The progress display of a recording (`gapscope run`, `gapscope profile`): one rich progress
line per step on stderr (calibrate, capture, write the report, export, analyze), and the
recorded program's own output printed above it."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator


class Progress:
    """A rich progress display on stderr, drawn only when stderr is a terminal (``terminal``:
    whether it is, for tests); elsewhere (a file, a pipe, a CI log) the recorded program's lines
    alone are written there. With ``enabled`` False it shows nothing at all."""

    def __init__(self, enabled: bool, terminal: bool | None = None) -> None:
        self.enabled = enabled
        self._terminal = terminal
        self._progress: Any = None

    def __enter__(self) -> "Progress":
        if self.enabled:
            from rich.console import Console

            console = Console(stderr=True)
            if not (console.is_terminal if self._terminal is None else self._terminal):
                return self
            from rich.progress import (BarColumn, Progress as RichProgress, SpinnerColumn,
                                       TaskProgressColumn, TextColumn, TimeElapsedColumn)

            self._progress = RichProgress(SpinnerColumn(), TextColumn("{task.description:<28}"),
                                          BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                                          TextColumn("{task.fields[note]}"),
                                          console=console)
            self._progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def line(self, text: str) -> None:
        """Print one line of the recorded program's output above the display, or alone on stderr
        when it is not a terminal (nothing when the display is off)."""
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False, emoji=False,
                                         soft_wrap=True)
        elif self.enabled:
            import sys

            print(text, file=sys.stderr, flush=True)

    @contextmanager
    def task(self, description: str, total: float | None) -> Iterator[Any]:
        """A task whose handle has step(note) and set(pct, note); completed on exit."""
        prog = self._progress

        class Handle:
            def step(self, note: str = "") -> None:
                if prog is not None:
                    prog.update(tid, advance=1, note=note)

            def set(self, pct: float, note: str = "") -> None:
                if prog is not None:
                    prog.update(tid, completed=pct, note=note)

        tid = prog.add_task(description, total=total, note="") if prog is not None else None
        yield Handle()
        if prog is not None:
            task = prog.tasks[tid]
            prog.update(tid, completed=task.total if task.total is not None else 1, total=task.total or 1)
