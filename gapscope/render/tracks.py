"""Which track each slice of a timeline export goes on, so that no two slices of one track
overlap (Perfetto and chrome://tracing draw a track's slices as a stack: a slice may sit
inside another, never across its end).

Kernels and API calls of one stream or thread normally follow one another; when some overlap
(graph branches traced on one stream, clock skew), :func:`disjoint_lanes` moves them to extra
lanes of the same stream. NVTX ranges nest: :func:`crossing` finds the few that cross another
range's end, which then go to lanes of their own. Both are numpy over all slices at once.
"""

from __future__ import annotations

import numpy as np

from gapscope.analysis.intervals import grouped_running_max
from gapscope.analysis.keys import TimeKeys


def disjoint_lanes(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane number per slice: lane 0 holds, per track, the slices that start after every
    earlier slice of the track ended; lane 1 the same among the others; and so on. Slices of one
    (track, lane) never overlap, not even by nesting."""
    n = start.size
    lane = np.zeros(n, dtype=np.int64)
    todo = np.arange(n, dtype=np.int64)
    k = 0
    while todo.size:
        order = todo[np.lexsort((end[todo], start[todo], track[todo]))]
        t, s = track[order], start[order]
        _, groups = np.unique(t, return_inverse=True)
        ran = grouped_running_max(end[order], groups)
        first = np.r_[True, groups[1:] != groups[:-1]]
        before = np.r_[0, ran[:-1]]
        keep = first | (s >= before)
        lane[order[keep]] = k
        todo = order[~keep]
        k += 1
    return lane


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(values[lo:hi]) per query (-inf-like minimum for empty ranges), by a sparse table."""
    n = values.size
    floor = np.iinfo(np.int64).min
    out = np.full(lo.size, floor, dtype=np.int64)
    if n == 0:
        return out
    table = [values.astype(np.int64)]
    while (1 << len(table)) <= n:
        prev, step = table[-1], 1 << (len(table) - 1)
        table.append(np.maximum(prev[:-step], prev[step:]))
    length = hi - lo
    ok = length > 0
    level = np.zeros(lo.size, dtype=np.int64)
    level[ok] = np.floor(np.log2(length[ok])).astype(np.int64)
    for k in np.unique(level[ok]):
        sel = np.flatnonzero(ok & (level == k))
        t = table[k]
        out[sel] = np.maximum(t[lo[sel]], t[hi[sel] - (1 << k)])
    return out


def crossing(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """True for each slice that some later-starting slice of its track crosses: one that starts
    inside it (after its start, before its end) and ends after it. Without them, a track's
    slices nest properly."""
    n = start.size
    bad = np.zeros(n, dtype=np.bool_)
    if n == 0:
        return bad
    codes = np.unique(track, return_inverse=True)[1].astype(np.int64)
    tk = TimeKeys([start, end], int(codes.max()) + 1)
    order = np.lexsort((-end, start, codes))
    keys = tk.key(codes[order], start[order])
    s_end = end[order]
    lo = np.searchsorted(keys, tk.key(codes[order], start[order]), "right")
    hi = np.searchsorted(keys, tk.key(codes[order], s_end), "left")
    bad[order] = _range_max(s_end, lo, np.maximum(hi, lo)) > s_end
    return bad
