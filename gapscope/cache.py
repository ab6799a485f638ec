"""gapscope's cache folder, its switch and size bound, and the result cache.

One root for everything gapscope caches: ``$XDG_CACHE_HOME/gapscope`` (else ``~/.cache/gapscope``),
never a folder beside a trace. It holds

* ``reports/<sha256>/``: the exports of ``.nsys-rep`` reports (gapscope.trace.nsys_report);
* ``columns/<sha1>-<size>/``: the column cache of SQLite exports (gapscope.trace.cache);
* ``results/<sha256>.result``: the result cache (:class:`ResultCache`): the compact result JSON
  of one `gapscope analyze TRACE`, keyed by the trace's content (every byte hashed), its path
  as given, every option the pipeline received, the result schema, the Python version, the
  versions of the packages the analysis computes with and a digest of gapscope's own code
  (every ``.py`` file of the package), so a repeat renders it
  without reading or analyzing the trace, and a changed trace, option or gapscope never reads
  an old one.

Every entry ends in the CRC-32 of its bytes and is written to a private name, then renamed into
place: one that fails its check is removed and made again, never trusted. Column and result
entries together keep at most ``GAPSCOPE_CACHE_SIZE`` bytes (default 2 GiB; suffixes K, M, G),
evicting those used least recently; ``GAPSCOPE_NO_CACHE=1`` (the commands' ``--no-cache``) turns
both off. Report exports are not counted or evicted: only nsys can make them again. This module
imports neither numpy, pandas nor pyarrow: a result cache hit needs none of them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

#: Set to anything but "" or "0" to turn the column and result caches off (the commands' --no-cache).
NO_CACHE_ENV = "GAPSCOPE_NO_CACHE"
#: The cache's size bound in bytes (suffixes K, M, G: powers of 1024).
SIZE_ENV = "GAPSCOPE_CACHE_SIZE"
DEFAULT_LIMIT = 2 << 30
#: The folders under the root whose entries the size bound counts (report exports are not).
BOUNDED = ("columns", "results")
#: The trace formats whose result is cached: those read from one file, keyed by its bytes.
RESULT_FORMATS = ("nsys-sqlite", "kineto")
#: The packages the analysis computes with, as their ``.dist-info`` folders name them: the
#: versions installed are part of a result entry's key.
ANALYSIS_PACKAGES = ("numpy", "pandas", "pyarrow", "adbc_driver_manager", "adbc_driver_sqlite", "ijson")
#: Bumped whenever what a result entry holds changes, so an older layout is never read.
RESULT_LAYOUT = "1"
STAMP = "used"  # in a column entry: its mtime is when the entry was last read or written
CRC_BYTES = 4
_RESULT_SUFFIX = ".result"


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
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


#: content_digest's digests this process made, by the file's path and identity.
_DIGESTS: dict[tuple[str, tuple[int, ...]], str] = {}


def content_digest(path: Path) -> str:
    """The SHA-1 of a file's content, the key of its column and result entries: hashed once per
    process while the file's identity (device, inode, size, mtime, ctime) stays the same, so
    one analysis reads the bytes once for both caches; every new process hashes them again."""
    key = (os.path.abspath(path), _identity(path))
    digest = _DIGESTS.get(key)
    if digest is None:
        digest = _DIGESTS[key] = file_digest(path, "sha1")
    return digest


def cache_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the column and result caches are on (``GAPSCOPE_NO_CACHE`` unset, empty or 0)."""
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


def size_limit(environ: Mapping[str, str] | None = None) -> int:
    """The cache's bound in bytes: ``GAPSCOPE_CACHE_SIZE`` (``500M``, ``4G``, bytes), else
    DEFAULT_LIMIT; a value that is no size is the default too (a cache setting never stops an
    analysis)."""
    env = os.environ if environ is None else environ
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", env.get(SIZE_ENV, ""), re.IGNORECASE)
    if not m:
        return DEFAULT_LIMIT
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def bounded_folders(root: Path) -> list[Path]:
    """The folders under ``root`` whose entries the size bound counts: columns and results."""
    return [root / name for name in BOUNDED]


def read_sealed(path: Path) -> bytes | None:
    """The body of the cache file at ``path``, its CRC-32 checked; None when there is none, or
    when it fails its check (damaged, cut: then removed)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    body, crc = data[:-CRC_BYTES], data[-CRC_BYTES:]
    if len(data) > CRC_BYTES and zlib.crc32(body).to_bytes(CRC_BYTES, "big") == crc:
        return body
    discard(path)
    return None


def discard(path: Path) -> None:
    """Remove a cache file that cannot be used (quietly, when it is gone already)."""
    with contextlib.suppress(OSError):
        path.unlink()


def write_sealed(path: Path, body: Any) -> None:
    """Keep ``body`` (bytes or a buffer) and then its CRC-32 at ``path``, as every cache file is
    kept: written under a private name in its folder, then renamed into place (OSError when the
    folder cannot be written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".part-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
            fh.write(zlib.crc32(body).to_bytes(CRC_BYTES, "big"))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _entries(bases: Iterable[Path]) -> list[tuple[float, int, Path]]:
    """(last use, bytes, path) of every entry under ``bases``: a column entry is a folder (last
    use: its STAMP's mtime), a result entry a file (its own mtime)."""
    out = []
    for base in bases:
        with contextlib.suppress(OSError):
            for entry in base.iterdir():
                try:
                    if entry.is_dir():
                        files = list(entry.iterdir())
                        size = sum(f.stat().st_size for f in files)
                        used = max((f.stat().st_mtime for f in files if f.name == STAMP), default=0.0)
                    else:
                        st = entry.stat()
                        size, used = st.st_size, st.st_mtime
                except OSError:
                    continue
                out.append((used, size, entry))
    return out


def evict(bases: Path | Iterable[Path], limit: int) -> list[Path]:
    """Remove the least recently used entries under ``bases`` (a folder or several) until they
    hold at most ``limit`` bytes together; the entries removed, oldest first."""
    entries = sorted(_entries([bases] if isinstance(bases, Path) else bases), key=lambda e: e[0])
    total = sum(size for _, size, _ in entries)
    gone = []
    for _, size, entry in entries:
        if total <= limit:
            break
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
        total -= size
        gone.append(entry)
    return gone


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """The SHA-256 of every ``.py`` file of the gapscope package (names and bytes), made once
    per process: a result entry of any other gapscope code is never read."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix().encode()
        body = path.read_bytes()
        digest.update(b"%d:%s%d:" % (len(name), name, len(body)))
        digest.update(body)
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def package_versions() -> tuple[str, ...]:
    """The ``.dist-info`` folder names (project and version) of ANALYSIS_PACKAGES on the module
    path, the first of each as an import would find it: listed, not imported (neither they nor
    importlib.metadata, which a cache hit would pay for)."""
    found: dict[str, str] = {}
    for folder in sys.path:
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                project = name[: -len(".dist-info")].rsplit("-", 1)[0].lower().replace("-", "_").replace(".", "_")
                if project in ANALYSIS_PACKAGES:
                    found.setdefault(project, name)
    return tuple(sorted(found.values()))


def write_in_flight(path: Path) -> bool:
    """Whether a SQLite export may have a write in flight: a ``-wal`` or ``-journal`` file
    beside it (whatever it holds: the SQLite reader then reads a private snapshot, whose
    content is not the file's alone)."""
    return any(os.path.lexists(f"{path}{side}") for side in ("-wal", "-journal"))


def _identity(path: Path) -> tuple[int, ...]:
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class ResultCache:
    """The result JSON of one analysis of one trace, kept at ``file`` (:meth:`for_trace` names
    it). :meth:`text` reads it back verified; :meth:`keep` stores a new one, unless the trace
    changed while it was analyzed."""

    def __init__(self, file: Path, trace: Path, identity: tuple[int, ...], limit: int = DEFAULT_LIMIT) -> None:
        self.file = file
        self.trace = trace
        self.identity = identity
        self.limit = limit

    @classmethod
    def for_trace(cls, path: Path, trace_format: str, options: Mapping[str, Any], root: Path | None = None,
                  limit: int | None = None) -> "ResultCache | None":
        """The entry of the analysis of ``path`` (read as ``trace_format``) with the pipeline's
        ``options`` (every keyword :func:`gapscope.analysis.pipeline.analysis_of` receives), or
        None: the cache is off, the format is not one of RESULT_FORMATS, an export has a write in
        flight, or the file cannot be read."""
        if not cache_enabled() or trace_format not in RESULT_FORMATS:
            return None
        if trace_format == "nsys-sqlite" and write_in_flight(path):
            return None
        try:
            identity = _identity(path)
            content = content_digest(path)
        except OSError:
            return None
        key = json.dumps({"layout": RESULT_LAYOUT, "content": content, "size": identity[2], "path": str(path),
                          "format": trace_format, "options": options, "python": sys.version,
                          "code": code_digest(), "packages": package_versions()}, sort_keys=True, default=list)
        from gapscope.schema import ANALYSIS_SCHEMA

        name = hashlib.sha256(f"{ANALYSIS_SCHEMA}\0{key}".encode()).hexdigest()
        return cls((root or cache_root()) / "results" / f"{name}{_RESULT_SUFFIX}", path, identity,
                   size_limit() if limit is None else limit)

    def text(self) -> str | None:
        """The result JSON kept (compact, as the JSON renderer wrote it), or None: not kept, or
        kept damaged (then removed)."""
        body = read_sealed(self.file)
        if body is None:
            return None
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            discard(self.file)
            return None
        with contextlib.suppress(OSError):
            os.utime(self.file)  # used now: the last to go
        return text

    def keep(self, text: str) -> bool:
        """Keep ``text`` (the result JSON) unless the trace changed since :meth:`for_trace`
        looked at it or the cache cannot be written (then quietly not); then keep the cache
        within its bound. Whether it was kept."""
        try:
            if _identity(self.trace) != self.identity:
                return False
            write_sealed(self.file, text.encode("utf-8"))
        except OSError:
            return False
        evict(bounded_folders(self.file.parent.parent), self.limit)
        return True
