"""The C heap under the analysis: glibc's malloc, tuned for a few large numpy arrays.

The analysis allocates and frees arrays of one value per activity, from the main thread and
from the threads that run beside it. glibc gives each thread its own arena and keeps what a
thread frees there for that arena's reuse, so the freed pages of several arenas stay resident
at once (docs/performance.md). :func:`use_one_arena` makes every thread
share one arena, as ``MALLOC_ARENA_MAX=1`` would; the command line and the many-trace workers
call it, a program that imports gapscope as a library keeps its own settings.

Every page the system maps anew is zeroed first (a system call's time, not the process's own),
and the analysis allocates and frees arrays of one value per activity, or per membership, again
and again: mapped each time and handed back each time, a 10M-kernel trace had some 14 GB of
pages zeroed for a peak of 2 GB, and its system time was over a quarter of its CPU time
(docs/performance.md, "Issue 42, wave 3 second pass"). :func:`map_large_blocks` and
:func:`keep_freed_pages` make glibc serve every block under :data:`MMAP_THRESHOLD` from its heap
and keep what is freed there for the next block, not hand it back: an array freed by one step is
the next step's, its pages already mapped. :func:`tune_for_analysis` makes the three settings.
:func:`give_back_freed_pages` hands the heap's free pages back to the system once an analysis is
done (:func:`give_back_for`), for a program that goes on (the MCP server, the many-trace workers).

Elsewhere (macOS, musl) both do nothing.
"""

from __future__ import annotations

import ctypes
import os

#: glibc's mallopt parameters (malloc.h): the most arenas, the mmap threshold, the trim threshold.
_M_ARENA_MAX = -8
_M_MMAP_THRESHOLD = -3
_M_TRIM_THRESHOLD = -1
#: Blocks of this many bytes or more get a mapping of their own, handed back when freed (glibc's
#: default is 128 KiB, raised up to 32 MiB as blocks are freed); smaller ones come from the heap.
#: Above any one array of a 30M-kernel trace, so that every array freed is reused.
MMAP_THRESHOLD = 1 << 30
#: The free memory at the top of the heap that glibc hands back by itself once it passes this
#: many bytes (its default: 128 KiB, or twice the mmap threshold as it rises).
TRIM_THRESHOLD = 1 << 30
#: A trace of this many activities or more is analyzed with blocks of LARGE_TRACE_MMAP_THRESHOLD
#: bytes or more mapped apart (:func:`map_apart_for`): its arrays are large enough that the
#: holes they leave in the heap, kept, raise the peak more than zeroing their pages costs (30M
#: kernels: 5.2 -> 4.3 GB, some 4 s of system time more; docs/performance.md). The size from
#: which the analysis runs its large steps one after the other too (pipeline.SERIAL_ACTIVITIES).
LARGE_ROWS = 1 << 22
LARGE_TRACE_MMAP_THRESHOLD = 16 << 20
#: Whether :func:`map_large_blocks` set the threshold (the command line, its workers): only then
#: does an analysis change it.
_tuned = False


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
    """Give only malloc blocks of MMAP_THRESHOLD bytes or more a mapping of their own, returned
    to the system when freed, every smaller one coming from the heap (unless the user set
    ``MALLOC_MMAP_THRESHOLD_``); whether it was set."""
    global _tuned
    done = _mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_")
    _tuned = _tuned or done
    return done


def map_apart_for(rows: int) -> bool:
    """For the analysis of a trace of ``rows`` activities, LARGE_ROWS or more, in a process whose
    heap :func:`map_large_blocks` tuned: map blocks of LARGE_TRACE_MMAP_THRESHOLD bytes or more
    apart, handed back when freed, until :func:`give_back_for` restores the threshold; whether
    it was set."""
    if rows < LARGE_ROWS or not _tuned:
        return False
    return _mallopt(_M_MMAP_THRESHOLD, LARGE_TRACE_MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_")


def keep_freed_pages() -> bool:
    """Keep the heap's free memory for the blocks to come, up to TRIM_THRESHOLD bytes free at its
    top, instead of handing it back as it is freed (unless the user set
    ``MALLOC_TRIM_THRESHOLD_``); whether it was set."""
    return _mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD, "MALLOC_TRIM_THRESHOLD_")


def tune_for_analysis() -> None:
    """The heap settings of the command line and its workers: :func:`use_one_arena`,
    :func:`map_large_blocks`, :func:`keep_freed_pages`. Call it before any other thread starts."""
    use_one_arena()
    map_large_blocks()
    keep_freed_pages()


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
#: the read and once analyzed (:func:`give_back_freed_pages`); below this many it changes nothing
#: (docs/performance.md).
TRIM_ROWS = 1 << 18


def give_back_for(rows: int) -> None:
    """:func:`give_back_freed_pages` when a trace has ``rows`` (activities or calls) of
    TRIM_ROWS or more; below, its heap is too small for the hand-back to matter. The mmap
    threshold :func:`map_apart_for` lowered for it is set back for the traces to come."""
    if rows >= TRIM_ROWS:
        give_back_freed_pages()
    if rows >= LARGE_ROWS and _tuned:
        _mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_")


def give_back_holes_for(rows: int) -> None:
    """For a trace of LARGE_ROWS rows (activities, calls) or more, whose large arrays its
    analysis maps apart (:func:`map_apart_for`): the heap's freed blocks handed back as a step
    lets them go (frame columns a reader built in the heap, a step's many small temporaries),
    since no later large block reuses them and, kept, they stay resident beside it."""
    if rows >= LARGE_ROWS:
        give_back_freed_pages()


def give_back_freed_pages() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``). Pages handed
    back are zeroed again when the heap reuses them: not during an analysis's steps, whose arrays
    reuse what the steps before freed."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is not None:
        trim(0)
