"""The C heap under the analysis: glibc's malloc, tuned for a few large numpy arrays.

The analysis allocates and frees arrays of one value per activity, from the main thread and
from the threads that run beside it. glibc gives each thread its own arena and keeps what a
thread frees there for that arena's reuse, so the freed pages of several arenas stay resident
at once: at 1M kernels about 100 MB over what is live. :func:`use_one_arena` makes every thread
share one arena, as ``MALLOC_ARENA_MAX=1`` would; the command line and the many-trace workers
call it, a program that imports gapscope as a library keeps its own settings.
:func:`give_back_freed_pages` hands the heap's free pages back to the system after a large read.

Elsewhere (macOS, musl) both do nothing.
"""

from __future__ import annotations

import ctypes
import os

#: glibc's mallopt parameter for the most arenas (malloc.h).
_M_ARENA_MAX = -8


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)
    except OSError:  # pragma: no cover - no C library to load
        return None


def use_one_arena() -> bool:
    """Let every thread of this process allocate from one malloc arena (unless the user set
    ``MALLOC_ARENA_MAX``, which glibc reads itself); whether the setting was made."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    if mallopt is None:
        return False
    return bool(mallopt(ctypes.c_int(_M_ARENA_MAX), ctypes.c_int(1)))


def give_back_freed_pages() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``). The driver's
    Arrow batches are freed in pieces, scattered over the heap: about 110 bytes per row read
    that would otherwise stay resident."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is not None:
        trim(0)
