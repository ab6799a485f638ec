"""The C heap under the analysis: glibc's malloc, tuned for a few large numpy arrays.

The analysis allocates and frees arrays of one value per activity, from the main thread and
from the threads that run beside it. glibc gives each thread its own arena and keeps what a
thread frees there for that arena's reuse, so the freed pages of several arenas stay resident
at once (docs/performance.md). :func:`use_one_arena` makes every thread
share one arena, as ``MALLOC_ARENA_MAX=1`` would; the command line and the many-trace workers
call it, a program that imports gapscope as a library keeps its own settings.

glibc also serves a block from its heap, not from a mapping of its own, once a block of that
size has been freed (its mmap threshold rises, up to 32 MiB): from then on the arrays of a 1M-
kernel trace (4-8 MB each) are carved out of the heap, and what they leave when freed stays
resident between the blocks still live. :func:`map_large_blocks` fixes the threshold at
:data:`MMAP_THRESHOLD`, so every such array is mapped and its pages go back the moment it is
freed (larger traces' arrays are over 32 MiB and mapped anyway). :func:`tune_for_analysis` makes
both settings. :func:`give_back_freed_pages` hands the heap's free pages back to the system during
and after a large read and between the analysis's steps (:func:`give_back_for`).

Elsewhere (macOS, musl) both do nothing.
"""

from __future__ import annotations

import ctypes
import os

#: glibc's mallopt parameters (malloc.h): the most arenas, the mmap threshold.
_M_ARENA_MAX = -8
_M_MMAP_THRESHOLD = -3
#: Blocks of this many bytes or more get a mapping of their own (glibc's default is 128 KiB,
#: raised as blocks are freed): a lower peak than the default, at the cost of the page faults of
#: mapping each block anew (docs/performance.md).
MMAP_THRESHOLD = 4 << 20


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)
    except OSError:  # pragma: no cover - no C library to load
        return None


def use_one_arena() -> bool:
    """Let every thread of this process allocate from one malloc arena (unless the user set
    ``MALLOC_ARENA_MAX``, which glibc reads itself); whether the setting was made."""
    return _mallopt(_M_ARENA_MAX, 1, "MALLOC_ARENA_MAX")


def map_large_blocks() -> bool:
    """Give every malloc block of MMAP_THRESHOLD bytes or more its own mapping, returned to the
    system when freed (unless the user set ``MALLOC_MMAP_THRESHOLD_``); whether it was set."""
    return _mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_")


def tune_for_analysis() -> None:
    """The heap settings of the command line and its workers: :func:`use_one_arena`,
    :func:`map_large_blocks`. Call it before any other thread starts."""
    use_one_arena()
    map_large_blocks()


def _mallopt(param: int, value: int, variable: str) -> bool:
    """glibc's ``mallopt(param, value)``, unless the user set the environment ``variable`` that
    glibc reads for it; whether the setting was made."""
    if variable in os.environ:
        return False
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:
        return False
    return bool(mallopt(ctypes.c_int(param), ctypes.c_int(value)))


#: Traces of at least this many activity or call rows have the heap's free pages handed back after
#: the read and between the analysis's steps (:func:`give_back_freed_pages`): from a million rows
#: on that lowers the peak at no cost in time; below this many it changes nothing
#: (docs/performance.md). Between the steps, see gapscope.analysis.pipeline.
TRIM_ROWS = 1 << 18


def give_back_for(rows: int) -> None:
    """:func:`give_back_freed_pages` when a trace has ``rows`` (activities or calls) of
    TRIM_ROWS or more; below, its heap is too small for the hand-back to matter."""
    if rows >= TRIM_ROWS:
        give_back_freed_pages()


def give_back_freed_pages() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``). The driver's
    Arrow batches are freed in pieces, scattered over the heap: about 110 bytes per row read
    that would otherwise stay resident."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is not None:
        trim(0)
