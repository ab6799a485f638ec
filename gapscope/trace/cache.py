"""gapscope's cache folder and the columnar copies it keeps of what was read from SQLite exports.

One root for everything gapscope caches: ``$XDG_CACHE_HOME/gapscope`` (else ``~/.cache/gapscope``),
never a folder beside a trace. It holds

* ``reports/<sha256>/``: the exports of ``.nsys-rep`` reports (gapscope.trace.nsys_report);
* ``columns/<sha1>-<size>/``: for a SQLite export, keyed by the file's content (the SHA-1 of every
  byte, and its size), the Arrow tables its bulk SELECTs returned, one Arrow IPC file per query,
  named by the query's hash. A later read of the same content (any name, any mtime) takes those
  tables instead of running the queries; a file whose content changed in any byte has another
  key, so it never reads a stale copy.

Every column file ends in the CRC-32 of its bytes and is written to a private name, then renamed
into place: an entry that fails its check (a damaged or truncated file) is removed and read from
the export again, never trusted. The column cache keeps at most ``GAPSCOPE_CACHE_SIZE`` bytes
(default 2 GiB; suffixes K, M, G), evicting the entries used least recently; ``GAPSCOPE_NO_CACHE=1``
(the commands' ``--no-cache``) turns it off. Report exports are not counted or evicted: only nsys
can make them again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Set to anything but "" or "0" to turn the column cache off (the commands' --no-cache).
NO_CACHE_ENV = "GAPSCOPE_NO_CACHE"
#: The column cache's size bound in bytes (suffixes K, M, G: powers of 1024).
SIZE_ENV = "GAPSCOPE_CACHE_SIZE"
DEFAULT_LIMIT = 2 << 30
#: Bumped whenever what an entry holds changes, so an older layout is never read.
LAYOUT = "1"
_SUFFIX = ".arrow"
_STAMP = "used"  # its mtime: when the entry was last read or written (least recently used first)
_CRC_BYTES = 4


def cache_root(environ: dict[str, str] | None = None) -> Path:
    """gapscope's cache folder: $XDG_CACHE_HOME/gapscope, else ~/.cache/gapscope."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gapscope"


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """The hex digest of a file's content, read in 1 MiB blocks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def cache_enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether the column cache is on (``GAPSCOPE_NO_CACHE`` unset, empty or 0)."""
    env = os.environ if environ is None else environ
    return env.get(NO_CACHE_ENV, "") in ("", "0")


@contextlib.contextmanager
def turned_off(off: bool = True) -> Iterator[None]:
    """``GAPSCOPE_NO_CACHE=1`` while the block runs (a command's --no-cache: worker processes
    started inside it inherit it), then as it was."""
    if not off:
        yield
        return
    before = os.environ.get(NO_CACHE_ENV)
    os.environ[NO_CACHE_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(NO_CACHE_ENV, None)
        else:
            os.environ[NO_CACHE_ENV] = before


def size_limit(environ: dict[str, str] | None = None) -> int:
    """The column cache's bound in bytes: ``GAPSCOPE_CACHE_SIZE`` (``500M``, ``4G``, bytes), else
    DEFAULT_LIMIT; a value that is no size is the default too (a cache setting never stops an
    analysis)."""
    env = os.environ if environ is None else environ
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", env.get(SIZE_ENV, ""), re.IGNORECASE)
    if not m:
        return DEFAULT_LIMIT
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


class ColumnCache:
    """The Arrow tables of one SQLite export's queries, kept under ``root/columns/<key>``; ``key``
    names the file's content (:meth:`for_file`). Safe to use from several threads and processes:
    every file is written under a private name and renamed into place."""

    def __init__(self, folder: Path, limit: int = DEFAULT_LIMIT) -> None:
        self.folder = folder
        self.limit = limit
        self._lock = threading.Lock()
        self._wrote = False

    @classmethod
    def for_file(cls, path: Path, root: Path | None = None, limit: int | None = None) -> "ColumnCache | None":
        """The cache entry of ``path``'s current content, or None when the cache is off
        (GAPSCOPE_NO_CACHE) or the file cannot be hashed."""
        if not cache_enabled():
            return None
        try:
            key = f"{file_digest(path, 'sha1')}-{os.stat(path).st_size}"
        except OSError:
            return None
        base = (root or cache_root()) / "columns"
        return cls(base / key, size_limit() if limit is None else limit)

    def _file(self, query: str) -> Path:
        name = hashlib.sha1(f"{LAYOUT}\0{query}".encode()).hexdigest()
        return self.folder / f"{name}{_SUFFIX}"

    def table(self, query: str) -> Any | None:
        """The Arrow table kept for ``query``, or None (not kept, or kept damaged: then removed)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        path = self._file(query)
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            return None
        body, crc = data[:-_CRC_BYTES], data[-_CRC_BYTES:]
        try:
            if len(data) <= _CRC_BYTES or zlib.crc32(body).to_bytes(_CRC_BYTES, "big") != crc:
                raise ValueError("checksum")
            table = ipc.open_file(pa.py_buffer(body)).read_all()
        except (ValueError, pa.ArrowException):
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        self._touch()
        return table

    def keep(self, query: str, table: Any) -> None:
        """Keep ``table`` as ``query``'s answer (quietly not, when the cache cannot be written)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        body = sink.getvalue()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".part-", dir=self.folder)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(body)
                    fh.write(zlib.crc32(body).to_bytes(_CRC_BYTES, "big"))
                os.replace(tmp, self._file(query))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError:
            return
        with self._lock:
            self._wrote = True
        self._touch()

    def _touch(self) -> None:
        with contextlib.suppress(OSError):
            (self.folder / _STAMP).touch()

    def finish(self) -> None:
        """After a read that wrote to this entry: evict the least recently used entries until the
        column cache holds at most ``limit`` bytes (this entry too, when it alone is larger)."""
        if self._wrote:
            evict(self.folder.parent, self.limit)


def _entries(base: Path) -> list[tuple[float, int, Path]]:
    """(last use, bytes, folder) of every entry of the column cache under ``base``."""
    out = []
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            try:
                files = list(entry.iterdir())
                size = sum(f.stat().st_size for f in files)
                used = max((f.stat().st_mtime for f in files if f.name == _STAMP), default=0.0)
            except OSError:
                continue
            out.append((used, size, entry))
    return out


def evict(base: Path, limit: int) -> list[Path]:
    """Remove the least recently used entries under ``base`` until they hold at most ``limit``
    bytes; the folders removed, oldest first."""
    entries = sorted(_entries(base), key=lambda e: e[0])
    total = sum(size for _, size, _ in entries)
    gone = []
    for _, size, entry in entries:
        if total <= limit:
            break
        shutil.rmtree(entry, ignore_errors=True)
        total -= size
        gone.append(entry)
    return gone
