"""Where a command writes a report: stdout, or a file opened with one clear error; which format
a report takes when ``-f`` is not given (the one the ``-o`` file's suffix names); and the check
that no output is written over (or into) an input."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
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


#: The format an output file's suffix names.
SUFFIX_FORMATS = {".json": "json", ".csv": "csv", ".md": "markdown", ".markdown": "markdown",
                  ".html": "html", ".htm": "html", ".xml": "junit"}


def output_format(path: str | Path | None, given: str | None, choices: Sequence[str], default: str) -> str:
    """The format to write: ``given`` (``-f``) when set; else the one the suffix of ``path``
    (``-o``) names, which must be one of ``choices``; else ``default``."""
    if given is not None:
        return given
    if path is None or str(path) == "-":
        return default
    suffix = Path(path).suffix.lower()
    fmt = SUFFIX_FORMATS.get(suffix)
    if fmt is None:
        return default
    if fmt not in choices:
        raise GapscopeError(f"{path}: this command writes no {fmt} ({', '.join(choices)}); "
                            f"give -f {default} to write the {default} to a {suffix} file")
    return fmt


def refuse_overwriting(inputs: Iterable[str | Path], outputs: Iterable[str | Path | None]) -> None:
    """GapscopeError (exit 2), before any work, when an output is one of the inputs or lies
    inside an input folder (an nsys parquetdir export, a `gapscope run` output): gapscope changes
    nothing it was given and adds nothing to it. Paths are compared resolved (symbolic links
    followed); None and '-' (stdout) outputs are skipped."""
    sources = [(str(given), Path(given).resolve()) for given in inputs]
    for out in outputs:
        if out is None or str(out) == "-":
            continue
        target = Path(out).resolve()
        for given, source in sources:
            if target == source or source in target.parents:
                raise GapscopeError(f"refusing to write {out} over (or into) the input {given}; gapscope adds "
                                    "nothing to its inputs: write it elsewhere")
