"""Where a command writes a report: stdout, or a file opened with one clear error."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from gapscope.errors import GapscopeError


@contextmanager
def output_file(path: str | Path | None, *, append: bool = False) -> Iterator[TextIO]:
    """stdout for None or '-', else the named file (its folder must exist), written or appended."""
    if path is None or str(path) == "-":
        yield sys.stdout
        return
    p = Path(path)
    if not p.parent.exists():
        raise GapscopeError(f"{p.parent}: no such folder for the output file")
    try:
        fh = p.open("a" if append else "w", encoding="utf-8", newline="")
    except OSError as exc:
        raise GapscopeError(f"{p}: cannot write ({exc.strerror or exc})") from None
    with fh:
        yield fh
