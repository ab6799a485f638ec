"""Files gapscope writes for the user (reports, figures, tables): whole, or not at all.

A file is written under a private name beside its target (``.NAME.gapscope-XXXXXXXX``, the
user's umask applied) and renamed over the target only once every byte is written, so a full
disk, an I/O error or an interrupt leaves the target as it was (absent, or the old file) and no
private file behind. A target that is a symbolic link is written where the link points (the link
stays); a target that is not a regular file (``/dev/null``, ``/dev/full``, a pipe) is written
directly. An appended file (``$GITHUB_STEP_SUMMARY``) gets its text in one write and is cut back
to its old length if that write fails. Every write error becomes one line naming the file
(GapscopeError, exit 2): :func:`write_error`. Several files that make one output (a figure
folder, the two Parquet tables, a Markdown report and its figures) are written
:func:`together`: renamed into place only once all of them are written, and the folders made for
them removed again when one of them fails.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from gapscope.errors import GapscopeError
from gapscope.text import printable


class _Batch:
    """Files written but not yet renamed into place, and folders made, for :func:`together`."""

    def __init__(self) -> None:
        self.pending: list[tuple[Path, Path, str]] = []  # (private file, target, the path as given)
        self.made: list[Path] = []

    def commit(self) -> None:
        while self.pending:
            tmp, target, given = self.pending[0]
            try:
                os.replace(tmp, target)
            except OSError as exc:
                self.abandon()
                raise write_error(given, exc) from None
            self.pending.pop(0)

    def abandon(self) -> None:
        for tmp, _, _ in self.pending:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self.pending.clear()
        for folder in reversed(self.made):  # the deepest first; a folder something else is in stays
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        self.made.clear()


_LOCAL = threading.local()


@contextlib.contextmanager
def together() -> Iterator[None]:
    """The files :func:`written` in the block are renamed into place together when it ends
    without an error (the first failing rename undoes none before it, and leaves no private
    file); on an error none is, and the folders :func:`folder` made are removed. Nested blocks
    belong to the outermost."""
    if getattr(_LOCAL, "batch", None) is not None:
        yield
        return
    batch = _LOCAL.batch = _Batch()
    try:
        yield
    except BaseException:
        batch.abandon()
        raise
    finally:
        _LOCAL.batch = None
    batch.commit()


def folder(path: str | os.PathLike[str]) -> Path:
    """``path`` made a folder with its missing parents (recorded for :func:`together` to remove
    again when the output fails); one line naming it when it cannot be."""
    p = Path(path)
    missing = []
    for above in (p, *p.parents):
        if above.exists():
            break
        missing.append(above)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GapscopeError(f"{printable(os.fspath(p))}: cannot create the folder ({exc.strerror or exc})") from None
    batch = getattr(_LOCAL, "batch", None)
    if batch is not None:
        batch.made.extend(reversed(missing))
    return p


def _handle(fd: int, binary: bool, target: Path) -> IO:
    """The file object the private file of ``target`` is written through (text: UTF-8, newlines
    as written)."""
    return os.fdopen(fd, "wb") if binary else open(fd, "w", encoding="utf-8", newline="")


def _write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` to ``fd`` (os.write may take part of it at a time)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_error(path: str | os.PathLike[str], exc: OSError) -> GapscopeError:
    """The one line for a write that failed: the file and the system's reason (exit 2)."""
    return GapscopeError(f"{printable(os.fspath(path))}: cannot write ({exc.strerror or exc})")


def _private(target: Path) -> tuple[int, Path]:
    """A new private file beside ``target``: mode 0666 less the umask, as a plain open gives, or
    the mode of the file it replaces."""
    for _ in range(8):
        tmp = target.with_name(f".{target.name}.gapscope-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            continue
        with contextlib.suppress(OSError):
            os.fchmod(fd, stat.S_IMODE(os.stat(target).st_mode))
        return fd, tmp
    raise FileExistsError(errno.EEXIST, "no free private name", str(target))


def _target(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """(where the bytes go: a link's target, followed; whether that is a regular file or absent,
    which is then replaced whole)."""
    p = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    try:
        return p, stat.S_ISREG(os.stat(p).st_mode)
    except FileNotFoundError:
        return p, True
    except OSError:
        return p, False


@contextlib.contextmanager
def written(path: str | os.PathLike[str], *, binary: bool = False) -> Iterator[IO]:
    """A file to write ``path``'s new content into (text: UTF-8, newlines as written); the
    content replaces ``path`` when the block ends without an error, and nothing is left when it
    does not. A write error is :func:`write_error` (GapscopeError)."""
    target, whole = _target(path)
    if not whole:  # a device or a pipe: written as it is, its errors one line too
        try:
            with open(target, "ab" if binary else "a", **({} if binary else {"encoding": "utf-8", "newline": ""})) as fh:
                yield fh
        except OSError as exc:
            raise write_error(path, exc) from None
        return
    try:
        fd, tmp = _private(target)
    except OSError as exc:
        raise write_error(path, exc) from None
    try:
        with _handle(fd, binary, target) as fh:
            yield fh
        batch = getattr(_LOCAL, "batch", None)
        if batch is not None:
            batch.pending.append((tmp, target, os.fspath(path)))
        else:
            os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise write_error(path, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """``data`` as the whole new content of ``path`` (:func:`written`)."""
    with written(path, binary=True) as fh:
        fh.write(data)


@contextlib.contextmanager
def appended(path: str | os.PathLike[str]) -> Iterator[IO[str]]:
    """A text buffer whose content is appended to ``path`` (made if missing) in one write when
    the block ends without an error; a failed write is cut back off the file (its old length
    kept) and raised as :func:`write_error`."""
    buffer = io.StringIO()
    yield buffer
    data = buffer.getvalue().encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        raise write_error(path, exc) from None
    try:
        start = os.fstat(fd).st_size
        try:
            _write_all(fd, data)
        except OSError as exc:
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.ftruncate(fd, start)
            raise write_error(path, exc) from None
    finally:
        os.close(fd)
