"""The column cache: the columnar copies gapscope keeps of what was read from SQLite exports.

Under gapscope's cache folder (gapscope.cache, which also holds the result cache and the
``.nsys-rep`` exports), ``columns/<sha1>-<size>/`` holds, for a SQLite export keyed by the file's
content (the SHA-1 of every byte, and its size), the Arrow tables its bulk SELECTs returned, one
Arrow IPC file per query, named by the query's hash. A later read of the same content (any name,
any mtime) takes those tables instead of running the queries; a file whose content changed in
any byte has another key, so it never reads a stale copy.

Every column file starts with a line naming its place (the entry's key, the query's hash) and
ends in the CRC-32 of its bytes, is written to a private name, then renamed into place and
counted in the cache's running total (gapscope.cache.Ledger): a file that fails its check (a
damaged or truncated file, another entry's copy, a link) is removed and read from the export
again, never trusted. The entry's folder, its files and its ``used`` stamp are opened without
following links (gapscope.cache says how). Column and result entries together keep at most
``GAPSCOPE_CACHE_SIZE`` bytes (gapscope.cache.size_limit), evicting the entries used least
recently; an entry larger than that alone is not kept (nor is anything evicted for it);
``GAPSCOPE_NO_CACHE=1`` (the commands' ``--no-cache``) turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from pathlib import Path
from typing import Any

from gapscope.cache import (
    DEFAULT_LIMIT, Ledger, cache_enabled, cache_root, content_digest, discard, file_identity, read_entry, sealed_size,
    size_limit, touch_stamp,
)

#: Bumped whenever what an entry holds changes, so an older layout is never read.
LAYOUT = "2"
_SUFFIX = ".arrow"


class ColumnCache:
    """The Arrow tables of one SQLite export's queries, kept under ``root/columns/<key>``; ``key``
    names the file's content (:meth:`for_file`). Safe to use from several threads and processes:
    every file is written under a private name and renamed into place. With ``source`` (the
    export and its identity when it was hashed), nothing is kept once the export changed (what
    was read may be of its new content): the entry is removed by :meth:`finish`."""

    def __init__(self, folder: Path, limit: int = DEFAULT_LIMIT,
                 source: tuple[Path, tuple[int, ...]] | None = None) -> None:
        self.folder = folder
        self.key = folder.name
        self.limit = limit
        self.source = source
        self.ledger = Ledger(folder.parent.parent)
        self._lock = threading.Lock()
        self._wrote = False
        self._bytes: int | None = None  # the entry's bytes, its files' as found, then what this read adds
        self._too_large = False  # the entry alone would pass the bound: nothing more is kept
        self._stale = False  # the export changed during the read: nothing more is kept

    @classmethod
    def for_file(cls, path: Path, root: Path | None = None, limit: int | None = None) -> "ColumnCache | None":
        """The cache entry of ``path``'s current content, or None when the cache is off
        (GAPSCOPE_NO_CACHE) or the file cannot be hashed (gapscope.cache.content_digest: one
        larger than the cache's bound is not)."""
        if not cache_enabled():
            return None
        bound = size_limit() if limit is None else limit
        try:
            identity = file_identity(path)
            key = f"{content_digest(path, root, bound)}-{identity[2]}"
        except OSError:
            return None
        base = (root or cache_root()) / "columns"
        return cls(base / key, bound, (path, identity))

    def _changed(self) -> bool:
        """Whether the export changed since it was hashed (or cannot be looked at)."""
        if self.source is None:
            return False
        try:
            return file_identity(self.source[0]) != self.source[1]
        except OSError:
            return True

    def _file(self, query: str) -> Path:
        name = hashlib.sha1(f"{LAYOUT}\0{query}".encode()).hexdigest()
        return self.folder / f"{name}{_SUFFIX}"

    def table(self, query: str) -> Any | None:
        """The Arrow table kept for ``query``, or None (not kept, or kept damaged: then removed)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        path = self._file(query)
        body = read_entry(self.ledger.root, path, self.key)
        if body is None:
            return None
        try:
            table = ipc.open_file(pa.py_buffer(body)).read_all()
        except (ValueError, pa.ArrowException):
            discard(self.ledger.root, path)
            return None
        self._touch()
        return table

    def keep(self, query: str, table: Any) -> None:
        """Keep ``table`` as ``query``'s answer (quietly not, when the cache cannot be written)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        if self._too_large or self._stale:
            return
        if self._changed():
            self._stale = True
            return
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        body = sink.getvalue()
        path = self._file(query)
        size = sealed_size(self.ledger.root, path, self.key, body.size)
        with self._lock:
            if self._bytes is None:  # files other reads of this content kept (other queries)
                self._bytes = self.ledger.entry_bytes(self.folder)
            # An entry larger than the whole bound would be evicted as soon as it is complete,
            # after every other entry had gone to make room for it: it is not kept at all.
            self._too_large = self._too_large or self._bytes + size > self.limit
            if self._too_large:
                return
            self._bytes += size
        try:
            self.ledger.keep(path, body, self.key)
        except OSError:
            return
        with self._lock:
            self._wrote = True
        self._touch()

    def _touch(self) -> None:
        with contextlib.suppress(OSError):
            touch_stamp(self.folder)

    def finish(self) -> None:
        """After a read that wrote to this entry: evict the least recently used entries until the
        column and result caches hold at most ``limit`` bytes. An entry that alone would hold more
        than ``limit`` is not kept: it is removed (what this read and any earlier one wrote of
        it), and no other entry is evicted for it; so is an entry whose export changed during the
        read."""
        if self._too_large or self._stale or (self._wrote and self._changed()):
            with contextlib.suppress(OSError):
                self.ledger.remove(self.folder)
        elif self._wrote:
            with contextlib.suppress(OSError):
                self.ledger.bound(self.limit)
