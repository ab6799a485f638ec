"""Where a command writes a report: which format a report takes when ``-f`` is not given (the
one the ``-o`` file's suffix names). Writing it (stdout or a file) and the check that no output
is written over an input are the library's (gapscope.outputs), imported here for the commands."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gapscope.errors import GapscopeError
from gapscope.outputs import Identity, output_file, refuse_overwriting  # noqa: F401  (the commands' imports)


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
