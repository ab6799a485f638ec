"""gapscope's cache folder, its switch and size bound, and the result cache.

One root for everything gapscope caches: ``$XDG_CACHE_HOME/gapscope`` (else ``~/.cache/gapscope``),
never a folder beside a trace. It holds

* ``reports/<sha256>/``: the exports of ``.nsys-rep`` reports (gapscope.trace.nsys_report);
* ``columns/<sha1>-<size>/``: the column cache of SQLite exports (gapscope.trace.column_cache);
* ``digests/<sha256>``: what :func:`content_digest` found a file's content hashes to, by the
  file's identity (device, inode, size, mtime, ctime), so that a repeat need not read every byte;
* ``results/<sha256>.result``: the result cache (:class:`ResultCache`): the compact result JSON
  of one `gapscope analyze TRACE`, keyed by the trace's content (the SHA-1 of every byte, :func:`content_digest`), its path
  as given, every option the pipeline received, the result schema, the Python version, the
  versions of the packages the analysis computes with and a digest of gapscope's own code
  (every ``.py`` file of the package), so a repeat renders it
  without reading or analyzing the trace, and a changed trace, option or gapscope never reads
  an old one. :func:`analysis_result` is that path for every other reader of a trace's result
  (`gapscope compare`, `gapscope mcp`): the entry if kept, else the analysis, then kept.

The folder is gapscope's alone and nothing in it is trusted. Every folder under the root is
opened without following a symbolic link (``O_NOFOLLOW``, then worked in through its descriptor),
and a link found where a folder or file of the cache belongs is removed (the link itself, never
what it points to) and replaced; a root that is itself a link is refused (the caches are off).
Only names gapscope gives what it writes (:data:`NAMES`: hex digests, ``used``, ``.part-*``),
in their places, are ever removed or evicted; anything else in the folder is left alone.

Every entry starts with a line that says what it is for (its place in the folder, which names
its kind and key, and the content digest of the trace it describes) and ends in the CRC-32 of
its bytes; a read checks both, so an entry damaged, cut, or copied from another key is removed
and made again, never trusted. Entries are written to a private name in ``.part/``, then renamed
into place. Column, result and digest entries together keep at most ``GAPSCOPE_CACHE_SIZE``
bytes (default 2 GiB; suffixes K, M, G), evicting those used least recently; a file larger than
that bound is not hashed at all (nothing is cached for it); ``GAPSCOPE_NO_CACHE=1`` (the
commands' ``--no-cache``) turns them all off. Their running total is kept in ``index``
(:class:`Ledger`), so a write costs the same however many entries there are: the entries are
listed only when the total crosses the bound or the index cannot be trusted. Report exports are
not counted or evicted: only nsys can make them again. This module imports neither numpy,
pandas nor pyarrow: a result cache hit needs none of them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import re
import secrets
import stat
import sys
import time
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gapscope import catalog

try:
    import fcntl
except ImportError:  # no flock (Windows): one process at a time is counted right
    fcntl = None  # type: ignore[assignment]

#: Set to anything but "" or "0" to turn the column and result caches off (the commands' --no-cache).
NO_CACHE_ENV = "GAPSCOPE_NO_CACHE"
#: The cache's size bound in bytes (suffixes K, M, G: powers of 1024).
SIZE_ENV = "GAPSCOPE_CACHE_SIZE"
DEFAULT_LIMIT = 2 << 30
#: The folders under the root whose entries the size bound counts (report exports are not).
BOUNDED = ("columns", "results", "digests")
#: The trace formats whose result is cached: those read from one file, keyed by its bytes.
RESULT_FORMATS = tuple(f.name for f in catalog.FORMATS if f.result_cache)
#: The packages the analysis computes with, as their ``.dist-info`` folders name them: the
#: versions installed are part of a result entry's key.
ANALYSIS_PACKAGES = ("numpy", "pandas", "pyarrow", "adbc_driver_manager", "adbc_driver_sqlite", "msgspec",
                     "isal")
#: Bumped whenever what a result entry holds changes, so an older layout is never read.
RESULT_LAYOUT = "2"
#: The pipeline's options as `gapscope analyze TRACE` gives them when none is set on its command
#: line (gapscope.analysis.pipeline.run_analysis's defaults): a result entry's key holds the
#: options given merged over these, so a caller that gives none (`gapscope compare TRACE`) finds
#: the entry of one that gives them all.
ANALYSIS_DEFAULTS: Mapping[str, Any] = {"ranges": (), "domains": (), "count_memops": False, "attribution": True,
                                        "top": 10, "threads": "same", "normalize": True, "window": None}
STAMP = "used"  # in a column entry: its mtime is when the entry was last read or written
CRC_BYTES = 4
_RESULT_SUFFIX = ".result"
#: Under the root: the running total of the bounded folders, the lock every change to them is
#: made under, and the folder entries are written in before they are renamed into place.
INDEX, INDEX_LOCK, SCRATCH = "index", "index.lock", ".part"
#: Bumped whenever what the index holds changes: an index of another layout is rebuilt.
INDEX_LAYOUT = 1
#: A private file left in SCRATCH for longer than this (its writer died) is removed by the next listing.
STALE_SECONDS = 24 * 3600
#: The first line of every sealed file: this layout, then what the file is for.
SEAL_MAGIC = "gapscope-cache/2"

#: The names gapscope gives what it writes in each bounded folder (a column entry is a folder,
#: the others files); nothing else there is counted, evicted or removed.
NAMES = {
    "columns": re.compile(r"[0-9a-f]{40}-[0-9]{1,20}"),
    "results": re.compile(r"[0-9a-f]{64}\.result"),
    "digests": re.compile(r"[0-9a-f]{64}"),
}
#: The files of a column entry: one Arrow file per query (named by the query's SHA-1) and STAMP.
COLUMN_FILE = re.compile(r"[0-9a-f]{40}\.arrow|" + STAMP)
#: A private file, written before it is renamed into place (older gapscopes: tempfile's names).
PRIVATE = re.compile(r"\.part-[0-9a-z_]{8,32}")

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
#: Whether the system can open a folder without following a link and work inside it through its
#: descriptor (POSIX); without that the caches stay off.
SAFE = (hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY") and os.scandir in os.supports_fd
        and {os.open, os.mkdir, os.unlink, os.rename, os.rmdir, os.stat} <= os.supports_dir_fd)


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


class NotHashed(OSError):
    """A file whose content is not hashed for a cache key: larger than the cache's bound, or
    not a regular file. The caches are off for it."""


#: content_digest's digests this process made, by the file's path and identity.
_DIGESTS: dict[tuple[str, tuple[int, ...]], str] = {}
#: A file's digest is kept for later processes only when its last change (ctime) is at least
#: this old when the hashing starts: a write in the same clock tick as an earlier one may leave
#: the identity as it was (the "racy" case git's index guards against the same way).
SETTLED_NS = 2_000_000_000
_HEX40 = re.compile(rb"[0-9a-f]{40}")


def content_digest(path: Path, root: Path | None = None, limit: int | None = None) -> str:
    """The SHA-1 of a file's content, the key of its column and result entries. Hashed once per
    process while the file's identity (device, inode, size, mtime, ctime) stays the same, so one
    analysis reads the bytes once for both caches; and, with the caches on, kept in ``root``'s
    (the cache folder's) ``digests/`` by that identity, so a later process reads 40 bytes instead
    of the whole file. A write to the file changes its ctime, so its identity: the bytes are
    hashed again. A file changed less than SETTLED_NS before its hashing is not kept.
    :class:`NotHashed` (an OSError) for a file that is not regular or is larger than ``limit``
    (the cache's bound, :func:`size_limit`): it is not read at all."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotHashed(errno.EINVAL, "not a regular file", str(path))
    budget = size_limit() if limit is None else limit
    if st.st_size > budget:
        raise NotHashed(errno.EFBIG, f"{st.st_size:,} bytes, more than the cache holds ({budget:,})", str(path))
    identity = _identity(path)
    key = (os.path.abspath(path), identity)
    digest = _DIGESTS.get(key)
    if digest is not None:
        return digest
    base = root or cache_root()
    memo = _digest_file(identity, base) if cache_enabled() else None
    body = read_entry(base, memo) if memo is not None else None
    if body is not None and _HEX40.fullmatch(body):
        digest = bytes(body).decode()
    else:
        settled = time.time_ns() - identity[4] >= SETTLED_NS  # identity[4]: the ctime
        digest = file_digest(path, "sha1")
        if memo is not None and settled and _identity(path) == identity:
            with contextlib.suppress(OSError):
                Ledger(base).keep(memo, digest.encode())
    _DIGESTS[key] = digest
    return digest


def _digest_file(identity: tuple[int, ...], root: Path) -> Path:
    """Where content_digest keeps the digest of the file of this identity."""
    name = hashlib.sha256(("sha1\0" + "\0".join(map(str, identity))).encode()).hexdigest()
    return root / "digests" / name


def cache_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the column and result caches are on (``GAPSCOPE_NO_CACHE`` unset, empty or 0, on
    a system that can open the cache's folders without following links)."""
    env = os.environ if environ is None else environ
    return SAFE and env.get(NO_CACHE_ENV, "") in ("", "0")


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


# -- the folder, opened without following links -------------------------------------------------


def _open_folder(parent: int, name: str, create: bool, replace: bool = True) -> int:
    """A descriptor of the folder ``name`` inside the folder ``parent``, opened without following
    a link. A link there is removed (the link itself) when ``replace``, then, like a missing
    folder, made anew when ``create`` (FileNotFoundError otherwise); anything else under the name
    (a file) is not the cache's: OSError."""
    for _ in range(3):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise
            with contextlib.suppress(FileNotFoundError):  # gone meanwhile: made below
                if not stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise OSError(errno.ENOTDIR, "not a folder of gapscope's cache", name) from None
                if not replace:
                    raise OSError(errno.ELOOP, "a symbolic link where gapscope's cache folder belongs",
                                  name) from None
                os.unlink(name, dir_fd=parent)  # the link itself, never what it points to
            if not create:
                raise FileNotFoundError(errno.ENOENT, "no such folder", name) from None
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent)
    raise OSError(errno.ELOOP, "the folder keeps changing", name)


class _Walk:
    """Descriptors of the cache's folders opened for one operation, closed together: the root
    (itself no link; its parent, the user's XDG_CACHE_HOME, as set) and folders under it."""

    def __init__(self, root: Path, create: bool) -> None:
        self.path = root
        self._fds: list[int] = []
        if create:
            os.makedirs(root.parent, exist_ok=True)
        parent = os.open(root.parent, os.O_RDONLY | _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))
        try:
            self.root = self._held(_open_folder(parent, root.name, create, replace=False))
        finally:
            os.close(parent)

    def _held(self, fd: int) -> int:
        self._fds.append(fd)
        return fd

    def folder(self, *names: str, create: bool = False, parent: int | None = None) -> int:
        """The folder root/names... (or parent/names...), each part opened as _open_folder does."""
        fd = self.root if parent is None else parent
        for name in names:
            fd = self._held(_open_folder(fd, name, create))
        return fd

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.pop())

    def __enter__(self) -> "_Walk":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parts(root: Path, path: Path) -> tuple[str, ...]:
    """The place of ``path`` under ``root``: (folder, name) or, for a file of a column entry,
    ("columns", entry, name), each a name gapscope gives; ValueError for any other path."""
    parts = path.relative_to(root).parts
    if len(parts) == 2 and parts[0] in NAMES and NAMES[parts[0]].fullmatch(parts[1]) and parts[0] != "columns":
        return parts
    if len(parts) == 3 and parts[0] == "columns" and NAMES["columns"].fullmatch(parts[1]) \
            and COLUMN_FILE.fullmatch(parts[2]):
        return parts
    if parts == (INDEX,):
        return parts
    raise ValueError(f"{path}: not a place of gapscope's cache under {root}")


def _header(parts: tuple[str, ...], content: str) -> bytes:
    """A sealed file's first line: the layout, the file's place (its kind and key) and the content
    digest of what it describes ("-" for none)."""
    line = f"{SEAL_MAGIC} {'/'.join(parts)} {content or '-'}\n"
    return line.encode("utf-8", "surrogateescape")


def sealed_size(root: Path, path: Path, content: str, size: int) -> int:
    """The bytes a body of ``size`` bytes takes once sealed at ``path`` for ``content``."""
    return len(_header(_parts(root, path), content)) + size + CRC_BYTES


def _drop(folder: int, name: str) -> None:
    """Remove what holds ``name`` in ``folder`` (a file, or a link itself), never a folder."""
    with contextlib.suppress(OSError):
        if not stat.S_ISDIR(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode):
            os.unlink(name, dir_fd=folder)


def _read_sealed(folder: int, name: str, header: bytes, touch: bool = False) -> memoryview | None:
    """The body of the sealed file ``name`` in ``folder`` when it is a regular file (no link
    followed, no pipe waited on) that starts with ``header`` and whose CRC-32 holds, else None
    (and whatever held the name removed). ``touch``: its mtime set to now (used now)."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError:  # a link (ELOOP), a pipe without a writer, ...
        _drop(folder, name)
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            _drop(folder, name)
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read()
        view = memoryview(data)
        if (len(data) >= len(header) + CRC_BYTES and data.startswith(header)
                and zlib.crc32(view[:-CRC_BYTES]).to_bytes(CRC_BYTES, "big") == data[-CRC_BYTES:]):
            if touch:
                with contextlib.suppress(OSError):
                    os.utime(fd)
            return view[len(header):-CRC_BYTES]
    except OSError:
        return None
    finally:
        os.close(fd)
    _drop(folder, name)
    return None


def read_entry(root: Path, path: Path, content: str = "", touch: bool = False) -> memoryview | None:
    """The body of the cache file at ``path`` (under ``root``) when it is what its place says it
    is, for ``content`` (the digest of the trace it describes, if any), intact; None when there
    is none, or when it is anything else (damaged, cut, another entry's copy, a link: then
    removed). ``touch``: marked used now."""
    parts = _parts(root, path)
    try:
        with _Walk(root, create=False) as walk:
            folder = walk.folder(*parts[:-1])
            return _read_sealed(folder, parts[-1], _header(parts, content), touch)
    except OSError:
        return None


def discard(root: Path, path: Path) -> None:
    """Remove the cache file at ``path`` (under ``root``) that cannot be used, quietly when it is
    gone already; never through a link."""
    parts = _parts(root, path)
    with contextlib.suppress(OSError), _Walk(root, create=False) as walk:
        _drop(walk.folder(*parts[:-1]), parts[-1])


def touch_stamp(entry: Path) -> None:
    """Mark a column entry (``root/columns/<key>``) used now: its STAMP's mtime, the file made
    if missing, never through a link (a link there is replaced by a file)."""
    root = entry.parent.parent
    _parts(root, entry / STAMP)
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    with _Walk(root, create=False) as walk:
        folder = walk.folder("columns", entry.name)
        for _ in range(2):
            try:
                fd = os.open(STAMP, flags, 0o600, dir_fd=folder)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                    raise
                _drop(folder, STAMP)
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.utime(fd)
            finally:
                os.close(fd)
            return


def _write_private(scratch: int, header: bytes, body: Any) -> str:
    """A new private file in the folder ``scratch`` holding ``header``, ``body`` (bytes or a
    buffer) and their CRC-32: its name."""
    name = f".part-{secrets.token_hex(8)}"
    fd = os.open(name, _NEW_FLAGS, 0o600, dir_fd=scratch)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(header)
            fh.write(body)
            fh.write(zlib.crc32(body, zlib.crc32(header)).to_bytes(CRC_BYTES, "big"))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=scratch)
        raise
    return name


def _column_entry(folder: int, name: str) -> tuple[float, int]:
    """(last use: its STAMP's mtime, bytes of its files) of the column entry ``name``."""
    fd = _open_folder(folder, name, create=False)
    try:
        size, used = 0, 0.0
        for e in os.scandir(fd):
            if COLUMN_FILE.fullmatch(e.name) and e.is_file(follow_symlinks=False):
                st = e.stat(follow_symlinks=False)
                size += st.st_size
                if e.name == STAMP:
                    used = st.st_mtime
        return used, size
    finally:
        os.close(fd)


def _entry(folder: int, kind: str, name: str) -> tuple[float, int] | None:
    """(last use, bytes) of the entry ``name`` of the bounded folder ``kind``, or None when no
    entry of gapscope's holds that name (a link, a file where a folder belongs, ...)."""
    try:
        if kind == "columns":
            return _column_entry(folder, name)
        st = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_mtime, st.st_size) if stat.S_ISREG(st.st_mode) else None


def _remove(folder: int, kind: str, name: str) -> None:
    """Remove one entry of a bounded folder: a file, or a column entry's own files and then its
    folder (which stays when something that is not gapscope's is in it)."""
    if kind != "columns":
        _drop(folder, name)
        return
    try:
        fd = _open_folder(folder, name, create=False)
    except OSError:
        return
    try:
        for e in os.scandir(fd):
            if (COLUMN_FILE.fullmatch(e.name) or PRIVATE.fullmatch(e.name)) and not e.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(e.name, dir_fd=fd)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(name, dir_fd=folder)


def _fingerprint(root: int, name: str) -> list[int] | None:
    """What changes when an entry is added to or removed from the bounded folder ``name`` (its
    inode, link count and mtime), or None when there is no such folder."""
    try:
        st = os.stat(name, dir_fd=root, follow_symlinks=False)
    except OSError:
        return None
    return [st.st_ino, st.st_nlink, st.st_mtime_ns] if stat.S_ISDIR(st.st_mode) else None


class Ledger:
    """The running total of the bounded folders under ``root`` (bytes and entries), kept in
    ``root/index`` beside the fingerprints of the folders it was counted from; every change
    gapscope makes to them (an entry renamed into place, an eviction) is made under an exclusive
    lock of ``root/index.lock`` and counted in it at once, so bookkeeping a write costs the same
    at 10 or 10,000 entries. An index that is missing, damaged, of another layout, or whose
    folders changed behind it (a user deleting an entry, another gapscope version writing, a
    process that died between its change and its count) is rebuilt silently from a listing, as
    is the total whenever it crosses the bound (so a total too high, from a file removed by hand
    inside an entry, is corrected before it evicts anything). What no fingerprint shows (a file
    added inside an existing column entry by another gapscope version, or by a process killed
    between its rename and its count) is missing from the total until the next listing. A
    listing counts only gapscope's own names (:data:`NAMES`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.index = root / INDEX

    @contextlib.contextmanager
    def _locked(self, walk: _Walk) -> Iterator[dict[str, Any]]:
        """The index, trusted or rebuilt, with the lock held; written back (with the folders'
        fingerprints as they are then) when the block ends without an error."""
        lock = self._lock_file(walk.root)
        try:
            if fcntl is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            state = self._trusted(walk)
            before = dict(state) if state is not None else None
            if state is None:
                state = self._listed(walk)
            yield state
            state["layout"] = INDEX_LAYOUT
            state["folders"] = [_fingerprint(walk.root, name) for name in BOUNDED]
            if state != before:  # else as kept (a bound with nothing to evict)
                scratch = walk.folder(SCRATCH, create=True)
                tmp = _write_private(scratch, _header((INDEX,), ""), json.dumps(state, sort_keys=True).encode())
                try:
                    os.rename(tmp, INDEX, src_dir_fd=scratch, dst_dir_fd=walk.root)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=scratch)
                    raise
        finally:
            os.close(lock)

    @staticmethod
    def _lock_file(root: int) -> int:
        """The lock file's descriptor: a regular file of the root's own (a link there is replaced)."""
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
            | getattr(os, "O_CLOEXEC", 0)
        for _ in range(2):
            try:
                fd = os.open(INDEX_LOCK, flags, 0o600, dir_fd=root)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                    raise
                _drop(root, INDEX_LOCK)
                continue
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)
            _drop(root, INDEX_LOCK)
        raise OSError(errno.EEXIST, "not a lock file of gapscope's", INDEX_LOCK)

    def _trusted(self, walk: _Walk) -> dict[str, Any] | None:
        """The index as kept, or None when it cannot be trusted."""
        body = _read_sealed(walk.root, INDEX, _header((INDEX,), ""))
        try:
            state = json.loads(bytes(body)) if body is not None else None
        except ValueError:
            return None
        if not isinstance(state, dict) or state.get("layout") != INDEX_LAYOUT:
            return None
        if state.get("folders") != [_fingerprint(walk.root, name) for name in BOUNDED]:
            return None
        if not all(type(state.get(k)) is int and state[k] >= 0 for k in ("bytes", "entries")):
            return None
        return state

    def _listed(self, walk: _Walk) -> dict[str, Any]:
        """The total as a listing of the folders finds it (and stale private files removed)."""
        self._sweep(walk)
        entries = self._entries(walk)
        return {"bytes": sum(size for _, size, _, _ in entries), "entries": len(entries)}

    @staticmethod
    def _entries(walk: _Walk) -> list[tuple[float, int, str, str]]:
        """(last use, bytes, folder, name) of every entry of gapscope's in the bounded folders."""
        out = []
        for kind in BOUNDED:
            try:
                folder = walk.folder(kind)
            except OSError:
                continue
            for e in os.scandir(folder):
                if NAMES[kind].fullmatch(e.name):
                    found = _entry(folder, kind, e.name)
                    if found is not None:
                        out.append((*found, kind, e.name))
        return out

    @staticmethod
    def _sweep(walk: _Walk) -> None:
        """Remove the private files in SCRATCH older than STALE_SECONDS (their writers died)."""
        try:
            scratch = walk.folder(SCRATCH)
        except OSError:
            return
        stale = time.time() - STALE_SECONDS
        for e in os.scandir(scratch):
            with contextlib.suppress(OSError):
                if PRIVATE.fullmatch(e.name) and not e.is_dir(follow_symlinks=False) \
                        and e.stat(follow_symlinks=False).st_mtime < stale:
                    os.unlink(e.name, dir_fd=scratch)

    def keep(self, path: Path, body: Any, content: str = "") -> None:
        """Keep ``body`` at ``path`` (an entry's file in a bounded folder, or a file of a column
        entry's folder, made if need be), sealed for ``content`` (the digest of the trace it
        describes), and count it: written under a private name in ``root/.part``, renamed into
        place under the lock (OSError when the cache cannot be written)."""
        parts = _parts(self.root, path)
        with _Walk(self.root, create=True) as walk:
            scratch = walk.folder(SCRATCH, create=True)
            tmp: str | None = _write_private(scratch, _header(parts, content), body)
            try:
                size = os.stat(tmp, dir_fd=scratch, follow_symlinks=False).st_size
                with self._locked(walk) as state:
                    folder = walk.folder(parts[0], create=True)
                    made = False
                    if len(parts) == 3:  # a column entry's file: its folder made if need be
                        with contextlib.suppress(FileExistsError):
                            os.mkdir(parts[1], 0o700, dir_fd=folder)
                            made = True
                        folder = walk.folder(parts[1], create=True, parent=folder)
                    try:
                        st = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
                        old = st.st_size if stat.S_ISREG(st.st_mode) else 0
                        new_entry = False
                    except FileNotFoundError:
                        old, new_entry = 0, True
                    os.rename(tmp, parts[-1], src_dir_fd=scratch, dst_dir_fd=folder)
                    tmp = None
                    state["bytes"] = max(0, state["bytes"] + size - old)
                    state["entries"] += made if len(parts) == 3 else new_entry
            finally:
                if tmp is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=scratch)

    def entry_bytes(self, entry: Path) -> int:
        """The bytes of one entry of a bounded folder, as a listing counts them (0 when none)."""
        kind, name = entry.relative_to(self.root).parts
        try:
            with _Walk(self.root, create=False) as walk:
                found = _entry(walk.folder(kind), kind, name)
        except OSError:
            return 0
        return found[1] if found is not None else 0

    def remove(self, entry: Path) -> None:
        """Remove one entry of a bounded folder (a column entry's folder, or a file) and take it
        out of the total; nothing when it is not there (or the cache folder is not)."""
        kind, name = entry.relative_to(self.root).parts
        if kind not in NAMES or not NAMES[kind].fullmatch(name):
            raise ValueError(f"{entry}: not an entry of gapscope's cache")
        try:
            walk = _Walk(self.root, create=False)
        except FileNotFoundError:
            return
        with walk, self._locked(walk) as state:
            try:
                folder = walk.folder(kind)
            except FileNotFoundError:
                return
            found = _entry(folder, kind, name)
            if found is None:
                return
            _remove(folder, kind, name)
            state["bytes"] = max(0, state["bytes"] - found[1])
            state["entries"] = max(0, state["entries"] - 1)

    def bound(self, limit: int) -> list[Path]:
        """When the index counts more than ``limit`` bytes: remove the entries used least
        recently, on a listing of the folders, until at most ``limit`` bytes are left, and set
        the index to what is left. The entries removed, oldest first (none when the total is
        within the bound); the index is rebuilt first when it cannot be trusted."""
        try:
            walk = _Walk(self.root, create=False)
        except FileNotFoundError:
            return []
        with walk, self._locked(walk) as state:
            if state["bytes"] <= limit:
                return []
            self._sweep(walk)
            entries = sorted(self._entries(walk), key=lambda e: e[0])
            total = sum(size for _, size, _, _ in entries)
            gone = []
            for _, size, kind, name in entries:
                if total <= limit:
                    break
                _remove(walk.folder(kind), kind, name)
                total -= size
                gone.append(self.root / kind / name)
            state["bytes"], state["entries"] = total, len(entries) - len(gone)
            return gone


def own_folder(root: Path, *names: str) -> Path:
    """``root/names...`` made where missing, each part a folder of the cache's own (a link there
    replaced by a folder, never followed); OSError when it cannot be (a root that is a link)."""
    with _Walk(root, create=True) as walk:
        walk.folder(*names, create=True)
    return root.joinpath(*names)


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


def file_identity(path: Path) -> tuple[int, ...]:
    """(device, inode, size, mtime, ctime) of a file, times in ns: what changes when it is written."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


_identity = file_identity


class ResultCache:
    """The result JSON of one analysis of one trace, kept at ``file`` (:meth:`for_trace` names
    it) and sealed for the trace's ``content`` digest. :meth:`text` reads it back verified;
    :meth:`keep` stores a new one, unless the trace changed while it was analyzed."""

    def __init__(self, file: Path, trace: Path, identity: tuple[int, ...], limit: int = DEFAULT_LIMIT,
                 content: str = "") -> None:
        self.file = file
        self.trace = trace
        self.identity = identity
        self.limit = limit
        self.content = content

    @classmethod
    def for_trace(cls, path: Path, trace_format: str, options: Mapping[str, Any], root: Path | None = None,
                  limit: int | None = None) -> "ResultCache | None":
        """The entry of the analysis of ``path`` (read as ``trace_format``) with the pipeline's
        ``options`` (the keywords :func:`gapscope.analysis.pipeline.analysis_of` receives, over
        ANALYSIS_DEFAULTS), or
        None: the cache is off, the format is not one of RESULT_FORMATS, an export has a write in
        flight, or the file cannot be read or is too large to hash (:func:`content_digest`)."""
        if not cache_enabled() or trace_format not in RESULT_FORMATS:
            return None
        if trace_format == "nsys-sqlite" and write_in_flight(path):
            return None
        bound = size_limit() if limit is None else limit
        try:
            identity = _identity(path)
            content = content_digest(path, root, bound)
        except OSError:
            return None
        # The file, not the path's spelling: `big.sqlite` and `/abs/big.sqlite` share an entry.
        key = json.dumps({"layout": RESULT_LAYOUT, "content": content, "size": identity[2],
                          "path": os.path.realpath(path),
                          "format": trace_format, "options": {**ANALYSIS_DEFAULTS, **options},
                          "python": sys.version, "code": code_digest(), "packages": package_versions()},
                         sort_keys=True, default=list)
        from gapscope.schema import ANALYSIS_SCHEMA

        name = hashlib.sha256(f"{ANALYSIS_SCHEMA}\0{key}".encode()).hexdigest()
        return cls((root or cache_root()) / "results" / f"{name}{_RESULT_SUFFIX}", path, identity, bound, content)

    @property
    def root(self) -> Path:
        return self.file.parent.parent

    def text(self) -> str | None:
        """The result JSON kept (compact, as the JSON renderer wrote it), or None: not kept, or
        kept damaged or for another key (then removed)."""
        body = read_entry(self.root, self.file, self.content, touch=True)  # used now: the last to go
        if body is None:
            return None
        try:
            text = str(body, "utf-8")
        except UnicodeDecodeError:
            discard(self.root, self.file)
            return None
        return _spelled(text, str(self.trace))



    def keep(self, text: str) -> bool:
        """Keep ``text`` (the result JSON) unless it alone is larger than the cache's bound, the
        trace changed since :meth:`for_trace` looked at it or the cache cannot be written (then
        quietly not); then keep the cache within its bound. Whether it was kept."""
        ledger = Ledger(self.root)
        body = text.encode("utf-8")
        if len(body) + CRC_BYTES > self.limit:  # evicted at once, after every other entry: not kept
            return False
        try:
            if _identity(self.trace) != self.identity:
                return False
            ledger.keep(self.file, body, self.content)
        except OSError:
            return False
        with contextlib.suppress(OSError):
            ledger.bound(self.limit)
        return True


_PATH_AT = '"trace":{"path":'


def _spelled(text: str, path: str) -> str:
    """A kept result's JSON with its ``trace.path`` as this run spells the trace (an entry is
    shared by every spelling of one file, and the JSON says the path it was given)."""
    at = text.find(_PATH_AT)
    if at < 0:
        return text
    start = at + len(_PATH_AT)
    try:
        kept, end = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return text
    return text if kept == path else text[:start] + json.dumps(path) + text[end:]


def result_text(result: Any) -> str:
    """A result's JSON as the JSON renderer writes it (compact, ending in a newline): what a result
    entry keeps."""
    import io

    from gapscope.render import render

    text = io.StringIO()
    render(result, "json", text)
    return text.getvalue()


def kept_result(text: str, source: str) -> Any:
    """The AnalysisResult of a result entry's text (:meth:`ResultCache.text`), read without the deep
    schema check: gapscope wrote it and its CRC matched (gapscope.schema.Verified). ``source``
    names it, as the trace's path."""
    from gapscope.analysis.result import AnalysisResult
    from gapscope.schema import Verified

    return AnalysisResult.from_dict(Verified(json.loads(text)), source)


def analysis_result(path: Path, trace_format: str, options: Mapping[str, Any] | None = None) -> tuple[Any, bool]:
    """(the AnalysisResult of the trace at ``path``, read as ``trace_format``, with the pipeline's
    ``options``; whether the result cache held it): the entry a `gapscope analyze` of the same
    trace and options kept, read without opening the trace, else the trace analyzed
    (:func:`gapscope.analysis.pipeline.analysis_of` without the gap lists) and its result kept.
    With the cache off, a format it does not hold or an export with a write in flight, the trace
    is analyzed and nothing kept."""
    options = dict(options or {})
    cache = ResultCache.for_trace(path, trace_format, options)
    text = cache.text() if cache is not None else None
    if text is not None:
        return kept_result(text, str(path)), True
    from gapscope.analysis.pipeline import analysis_of

    result = analysis_of(path, gaps=False, **options).result
    if cache is not None:
        cache.keep(result_text(result))
    return result, False
