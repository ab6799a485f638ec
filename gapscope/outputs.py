"""Where gapscope writes what it was asked for: stdout, or a file written whole or not at all
(gapscope.files), with one clear error; and the one check that no output is written over (or
into) an input."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from gapscope.errors import GapscopeError
from gapscope.files import appended, write_error, written

Identity = tuple[int, int]  # (device, inode): the same file whatever path names it


@contextmanager
def output_file(path: str | Path | None, *, append: bool = False) -> Iterator[TextIO]:
    """stdout for None or '-', else the named file (its folder must exist), written whole or not
    at all, or appended in one write (gapscope.files); a write error (a full disk, an I/O error,
    stdout on a full device) is one line naming the file (GapscopeError, exit 2), a closed pipe
    stays a BrokenPipeError (exit 141)."""
    if path is None or str(path) == "-":
        try:
            yield sys.stdout
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise write_error("stdout", exc) from None
        return
    p = Path(path)
    if not p.parent.exists():
        raise GapscopeError(f"{p.parent}: no such folder for the output file")
    with (appended(p) if append else written(p)) as fh:
        yield fh


def _identity(path: str | Path) -> tuple[Identity, os.stat_result] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino), st


def _inside(out: str | Path, folders: dict[Identity, str]) -> str | None:
    """The input folder (of ``folders``, by identity) that ``out`` would be written in, at any
    depth: any existing folder above it, as spelled and as resolved (links, ``..``), is one."""
    spelled = Path(os.path.abspath(out))
    for above in (*spelled.parents, *Path(os.path.realpath(out)).parents):
        found = _identity(above)
        if found is not None and found[0] in folders:
            return folders[found[0]]
    return None


def refuse_overwriting(inputs: Iterable[str | Path], outputs: Iterable[str | Path | None]) -> None:
    """GapscopeError (exit 2) before any work when an output would be written over an input or
    into an input folder. Files are compared by identity (device and inode), so a hard link, a
    symbolic link or another spelling of an input's path is caught; an input folder (a
    `gapscope run` output, an nsys parquetdir or arrowdir export) protects the files in it and
    takes no new ones, at any depth (no figure folder, no tables folder inside it either). ``None`` and '-'
    (stdout) outputs are skipped; two outputs may not be the same file either."""
    files: dict[Identity, str] = {}
    folders: dict[Identity, str] = {}
    for given in inputs:
        found = _identity(given)
        if found is None:
            continue
        ident, st = found
        if not stat.S_ISDIR(st.st_mode):
            files[ident] = str(given)
            continue
        folders[ident] = str(given)
        for child in Path(given).iterdir():
            inner = _identity(child)
            if inner is not None and stat.S_ISREG(inner[1].st_mode):
                files.setdefault(inner[0], str(child))
    seen: dict[object, str] = {}
    for out in outputs:
        if out is None or str(out) == "-":
            continue
        found = _identity(out)
        if found is not None and found[0] in files:
            same = "" if str(out) == files[found[0]] else f" ({out} is the same file)"
            raise GapscopeError(f"refusing to overwrite input {files[found[0]]} with a report{same}; "
                                "give another output file")
        if found is not None and found[0] in folders:
            raise GapscopeError(f"{out}: is the input folder {folders[found[0]]}; write elsewhere")
        inside = _inside(out, folders)
        if inside is not None:
            raise GapscopeError(f"{out}: inside the input folder {inside}; gapscope adds "
                                "nothing to its inputs: write it elsewhere")
        key: object = found[0] if found is not None else os.path.abspath(out)
        if key in seen:
            raise GapscopeError(f"two reports cannot go to the same file ({seen[key]} and {out})")
        seen[key] = str(out)
