"""The column cache: the columnar copies gapscope keeps of what was read from SQLite exports.

Under gapscope's cache folder (gapscope.cache, which also holds the result cache and the
``.nsys-rep`` exports), ``columns/<sha1>-<size>/`` holds, for a SQLite export keyed by the file's
content (the SHA-1 of every byte, and its size), the Arrow tables its bulk SELECTs returned, one
Arrow IPC file per query, named by the query's hash. A later read of the same content (any name,
any mtime) takes those tables instead of running the queries; a file whose content changed in
any byte has another key, so it never reads a stale copy.

Every column file ends in the CRC-32 of its bytes and is written to a private name, then renamed
into place and counted in the cache's running total (gapscope.cache.Ledger): an entry that
fails its check (a damaged or truncated file) is removed and read from the export again, never
trusted. Column and result entries together keep at most
``GAPSCOPE_CACHE_SIZE`` bytes (gapscope.cache.size_limit), evicting the entries used least
recently; an entry larger than that alone is not kept (nor is anything evicted for it);
``GAPSCOPE_NO_CACHE=1`` (the commands' ``--no-cache``) turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from gapscope.cache import (
    CRC_BYTES, DEFAULT_LIMIT, STAMP, Ledger, cache_enabled, cache_root, content_digest, discard, entry_bytes,
    read_sealed, size_limit,
)

#: Bumped whenever what an entry holds changes, so an older layout is never read.
LAYOUT = "1"
_SUFFIX = ".arrow"


class ColumnCache:
    """The Arrow tables of one SQLite export's queries, kept under ``root/columns/<key>``; ``key``
    names the file's content (:meth:`for_file`). Safe to use from several threads and processes:
    every file is written under a private name and renamed into place."""

    def __init__(self, folder: Path, limit: int = DEFAULT_LIMIT) -> None:
        self.folder = folder
        self.limit = limit
        self.ledger = Ledger(folder.parent.parent)
        self._lock = threading.Lock()
        self._wrote = False
        self._bytes: int | None = None  # the entry's bytes, its files' as found, then what this read adds
        self._too_large = False  # the entry alone would pass the bound: nothing more is kept

    @classmethod
    def for_file(cls, path: Path, root: Path | None = None, limit: int | None = None) -> "ColumnCache | None":
        """The cache entry of ``path``'s current content, or None when the cache is off
        (GAPSCOPE_NO_CACHE) or the file cannot be hashed."""
        if not cache_enabled():
            return None
        try:
            key = f"{content_digest(path, root)}-{os.stat(path).st_size}"
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
        body = read_sealed(path)
        if body is None:
            return None
        try:
            table = ipc.open_file(pa.py_buffer(body)).read_all()
        except (ValueError, pa.ArrowException):
            discard(path)
            return None
        self._touch()
        return table

    def keep(self, query: str, table: Any) -> None:
        """Keep ``table`` as ``query``'s answer (quietly not, when the cache cannot be written)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        if self._too_large:
            return
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        body = sink.getvalue()
        with self._lock:
            if self._bytes is None:  # files other reads of this content kept (other queries)
                self._bytes = entry_bytes(self.folder)
            # An entry larger than the whole bound would be evicted as soon as it is complete,
            # after every other entry had gone to make room for it: it is not kept at all.
            self._too_large = self._too_large or self._bytes + body.size + CRC_BYTES > self.limit
            if self._too_large:
                return
            self._bytes += body.size + CRC_BYTES
        try:
            self.ledger.keep(self._file(query), body)
        except OSError:
            return
        with self._lock:
            self._wrote = True
        self._touch()

    def _touch(self) -> None:
        with contextlib.suppress(OSError):
            (self.folder / STAMP).touch()

    def finish(self) -> None:
        """After a read that wrote to this entry: evict the least recently used entries until the
        column and result caches hold at most ``limit`` bytes. An entry that alone would hold more
        than ``limit`` is not kept: it is removed (what this read and any earlier one wrote of
        it), and no other entry is evicted for it."""
        if self._too_large:
            with contextlib.suppress(OSError):
                self.ledger.remove(self.folder)
        elif self._wrote:
            with contextlib.suppress(OSError):
                self.ledger.bound(self.limit)
