"""The column cache's side of a SQLite export's bulk reads (gapscope.trace.column_cache): which cache
entry an export's reads go through, and each query's Arrow table taken from that entry when an
earlier read of the same content kept it, else read from the export and kept there.

gapscope.trace.sqlite_reads calls these three functions and nothing else of the column cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gapscope.trace.column_cache import ColumnCache
from gapscope.trace.sqlite_source import Source


def entry_of(source: Source) -> ColumnCache | None:
    """The columnar cache entry of the export's content (gapscope.trace.column_cache), None when the
    cache is off or the export is read from a snapshot (its content is the file and the
    write in flight together)."""
    return None if source.snapshot else ColumnCache.for_file(source.path)


def cached_table(entry: ColumnCache | None, query: str, read: Callable[[str], Any]) -> Any:
    """The Arrow table of ``query``: the one ``entry`` keeps, else ``read(query)``, kept in
    ``entry``; always ``read(query)`` without an entry."""
    if entry is not None:
        table = entry.table(query)
        if table is None:
            table = read(query)
            entry.keep(query, table)
        return table
    return read(query)


def finish(entry: ColumnCache | None) -> None:
    """The reads through ``entry`` are over: the caches are bounded again (ColumnCache.finish)."""
    if entry is not None:
        entry.finish()
