"""gapscope's cache folder, its switch and size bound, and the result cache.

One root for everything gapscope caches: ``$XDG_CACHE_HOME/gapscope`` (else ``~/.cache/gapscope``),
never a folder beside a trace. It holds

* ``reports/<sha256>/``: the exports of ``.nsys-rep`` reports (gapscope.trace.nsys_report);
* ``columns/<sha1>-<size>/``: the column cache of SQLite exports (gapscope.trace.cache);
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

Every entry ends in the CRC-32 of its bytes and is written to a private name, then renamed into
place: one that fails its check is removed and made again, never trusted. Column, result and
digest entries together keep at most ``GAPSCOPE_CACHE_SIZE`` bytes (default 2 GiB; suffixes K, M, G),
evicting those used least recently; ``GAPSCOPE_NO_CACHE=1`` (the commands' ``--no-cache``) turns
them all off. Their running total is kept in ``index`` (:class:`Ledger`), so a write costs the same
however many entries there are: the entries are listed only when the total crosses the bound or
the index cannot be trusted. Report exports are not counted or evicted: only nsys can make them again. This module
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
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

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
RESULT_FORMATS = ("nsys-sqlite", "kineto")
#: The packages the analysis computes with, as their ``.dist-info`` folders name them: the
#: versions installed are part of a result entry's key.
ANALYSIS_PACKAGES = ("numpy", "pandas", "pyarrow", "adbc_driver_manager", "adbc_driver_sqlite", "msgspec",
                     "isal")
#: Bumped whenever what a result entry holds changes, so an older layout is never read.
RESULT_LAYOUT = "1"
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
#: A file left in SCRATCH for longer than this (its writer died) is removed by the next listing.
STALE_SECONDS = 24 * 3600


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
#: A file's digest is kept for later processes only when its last change (ctime) is at least
#: this old when the hashing starts: a write in the same clock tick as an earlier one may leave
#: the identity as it was (the "racy" case git's index guards against the same way).
SETTLED_NS = 2_000_000_000
_HEX40 = re.compile(rb"[0-9a-f]{40}")


def content_digest(path: Path, root: Path | None = None) -> str:
    """The SHA-1 of a file's content, the key of its column and result entries. Hashed once per
    process while the file's identity (device, inode, size, mtime, ctime) stays the same, so one
    analysis reads the bytes once for both caches; and, with the caches on, kept in ``root``'s
    (the cache folder's) ``digests/`` by that identity, so a later process reads 40 bytes instead
    of the whole file. A write to the file changes its ctime, so its identity: the bytes are
    hashed again. A file changed less than SETTLED_NS before its hashing is not kept."""
    identity = _identity(path)
    key = (os.path.abspath(path), identity)
    digest = _DIGESTS.get(key)
    if digest is not None:
        return digest
    memo = _digest_file(identity, root) if cache_enabled() else None
    body = read_sealed(memo) if memo is not None else None
    if body is not None and _HEX40.fullmatch(body):
        digest = body.decode()
    else:
        settled = time.time_ns() - identity[4] >= SETTLED_NS  # identity[4]: the ctime
        digest = file_digest(path, "sha1")
        if memo is not None and settled and _identity(path) == identity:
            with contextlib.suppress(OSError):
                Ledger(memo.parent.parent).keep(memo, digest.encode())
    _DIGESTS[key] = digest
    return digest


def _digest_file(identity: tuple[int, ...], root: Path | None) -> Path:
    """Where content_digest keeps the digest of the file of this identity."""
    name = hashlib.sha256(("sha1\0" + "\0".join(map(str, identity))).encode()).hexdigest()
    return (root or cache_root()) / "digests" / name


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
    tmp = _sealed_copy(path.parent, body)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _sealed_copy(folder: Path, body: Any) -> str:
    """A new private file in ``folder`` holding ``body`` and its CRC-32: its path."""
    fd, tmp = tempfile.mkstemp(prefix=".part-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
            fh.write(zlib.crc32(body).to_bytes(CRC_BYTES, "big"))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def _entry(entry: Path) -> tuple[float, int, Path]:
    """(last use, bytes, path) of one entry: a column entry is a folder (last use: its STAMP's
    mtime), a result or digest entry a file (its own mtime). OSError when it is gone."""
    if entry.is_dir():
        files = list(entry.iterdir())
        size = sum(f.stat().st_size for f in files)
        used = max((f.stat().st_mtime for f in files if f.name == STAMP), default=0.0)
        return used, size, entry
    st = entry.stat()
    return st.st_mtime, st.st_size, entry


def entry_bytes(entry: Path) -> int:
    """The bytes of one entry of a bounded folder (:func:`_entry`'s), 0 when there is none."""
    try:
        return _entry(entry)[1]
    except OSError:
        return 0


def _entries(bases: Iterable[Path]) -> list[tuple[float, int, Path]]:
    """:func:`_entry` of every entry under ``bases``."""
    out = []
    for base in bases:
        with contextlib.suppress(OSError):
            for entry in base.iterdir():
                with contextlib.suppress(OSError):
                    out.append(_entry(entry))
    return out


def evict(bases: Path | Iterable[Path], limit: int) -> list[Path]:
    """Remove the least recently used entries under ``bases`` (a folder or several) until they
    hold at most ``limit`` bytes together; the entries removed, oldest first."""
    return _evict_listed(_entries([bases] if isinstance(bases, Path) else bases), limit)[0]


def _evict_listed(entries: list[tuple[float, int, Path]], limit: int) -> tuple[list[Path], int, int]:
    """evict over ``entries`` as _entries listed them: the entries removed (oldest first), and
    the bytes and the number of entries left."""
    entries = sorted(entries, key=lambda e: e[0])
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
    return gone, total, len(entries) - len(gone)


def _fingerprint(folder: Path) -> list[int] | None:
    """What changes when an entry is added to or removed from ``folder`` (its inode, link count
    and mtime), or None when there is no such folder."""
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return [st.st_ino, st.st_nlink, st.st_mtime_ns]


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
    between its rename and its count) is missing from the total until the next listing."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.index = root / INDEX

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """The index, trusted or rebuilt, with the lock held; written back (with the folders'
        fingerprints as they are then) when the block ends without an error."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / INDEX_LOCK, "a+b") as lock:
            if fcntl is not None:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file is closed
            state = self._trusted()
            before = dict(state) if state is not None else None
            if state is None:
                state = self._listed()
            yield state
            state["layout"] = INDEX_LAYOUT
            state["folders"] = [_fingerprint(f) for f in bounded_folders(self.root)]
            if state != before:  # else as kept (a bound with nothing to evict)
                write_sealed(self.index, json.dumps(state, sort_keys=True).encode())

    def _trusted(self) -> dict[str, Any] | None:
        """The index as kept, or None when it cannot be trusted."""
        body = read_sealed(self.index)
        try:
            state = json.loads(body) if body is not None else None
        except ValueError:
            return None
        if not isinstance(state, dict) or state.get("layout") != INDEX_LAYOUT:
            return None
        if state.get("folders") != [_fingerprint(f) for f in bounded_folders(self.root)]:
            return None
        if not all(type(state.get(k)) is int and state[k] >= 0 for k in ("bytes", "entries")):
            return None
        return state

    def _listed(self) -> dict[str, Any]:
        """The total as a listing of the folders finds it (and stale scratch files removed)."""
        self._sweep()
        entries = _entries(bounded_folders(self.root))
        return {"bytes": sum(size for _, size, _ in entries), "entries": len(entries)}

    def _sweep(self) -> None:
        with contextlib.suppress(OSError):
            for tmp in (self.root / SCRATCH).iterdir():
                with contextlib.suppress(OSError):
                    if tmp.stat().st_mtime < time.time() - STALE_SECONDS:
                        tmp.unlink()

    def totals(self) -> tuple[int, int]:
        """(bytes, entries) of the bounded folders, as the index counts them (rebuilt if need be)."""
        with self._locked() as state:
            return state["bytes"], state["entries"]

    def keep(self, path: Path, body: Any) -> None:
        """Keep ``body`` and its CRC-32 at ``path`` (an entry's file in a bounded folder, or a
        file of a column entry's folder, made if need be) and count it: written under a private
        name in ``root/.part``, renamed into place under the lock (OSError when the cache cannot
        be written)."""
        scratch = self.root / SCRATCH
        scratch.mkdir(parents=True, exist_ok=True)
        tmp = _sealed_copy(scratch, body)
        try:
            with self._locked() as state:
                column = path.parent.parent in bounded_folders(self.root)  # else a result file
                path.parent.parent.mkdir(parents=True, exist_ok=True)
                try:
                    path.parent.mkdir()
                    made = True
                except FileExistsError:
                    made = False
                new_entry = made if column else not os.path.lexists(path)
                try:
                    old = os.lstat(path).st_size
                except FileNotFoundError:
                    old = 0
                size = os.stat(tmp).st_size
                os.replace(tmp, path)
                state["bytes"] = max(0, state["bytes"] + size - old)
                state["entries"] += new_entry
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def remove(self, entry: Path) -> None:
        """Remove one entry of a bounded folder (a column entry's folder, or a file) and take it
        out of the total; nothing when it is not there."""
        with self._locked() as state:
            try:
                size = _entry(entry)[1]
            except OSError:
                return
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink()
            state["bytes"] = max(0, state["bytes"] - size)
            state["entries"] = max(0, state["entries"] - 1)

    def bound(self, limit: int) -> list[Path]:
        """When the index counts more than ``limit`` bytes: :func:`evict` on a listing of the
        folders (the entries used least recently go first), and the index set to what is left.
        The entries removed, oldest first (none when the total is within the bound)."""
        with self._locked() as state:
            if state["bytes"] <= limit:
                return []
            self._sweep()
            gone, state["bytes"], state["entries"] = _evict_listed(_entries(bounded_folders(self.root)), limit)
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
    """(device, inode, size, mtime, ctime) of a file, times in ns."""
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
        ``options`` (the keywords :func:`gapscope.analysis.pipeline.analysis_of` receives, over
        ANALYSIS_DEFAULTS), or
        None: the cache is off, the format is not one of RESULT_FORMATS, an export has a write in
        flight, or the file cannot be read."""
        if not cache_enabled() or trace_format not in RESULT_FORMATS:
            return None
        if trace_format == "nsys-sqlite" and write_in_flight(path):
            return None
        try:
            identity = _identity(path)
            content = content_digest(path, root)
        except OSError:
            return None
        key = json.dumps({"layout": RESULT_LAYOUT, "content": content, "size": identity[2], "path": str(path),
                          "format": trace_format, "options": {**ANALYSIS_DEFAULTS, **options},
                          "python": sys.version, "code": code_digest(), "packages": package_versions()},
                         sort_keys=True, default=list)
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
        """Keep ``text`` (the result JSON) unless it alone is larger than the cache's bound, the
        trace changed since :meth:`for_trace` looked at it or the cache cannot be written (then
        quietly not); then keep the cache within its bound. Whether it was kept."""
        ledger = Ledger(self.file.parent.parent)
        body = text.encode("utf-8")
        if len(body) + CRC_BYTES > self.limit:  # evicted at once, after every other entry: not kept
            return False
        try:
            if _identity(self.trace) != self.identity:
                return False
            ledger.keep(self.file, body)
        except OSError:
            return False
        with contextlib.suppress(OSError):
            ledger.bound(self.limit)
        return True


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
