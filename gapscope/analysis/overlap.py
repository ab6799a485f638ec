"""Stream overlap: how long two or more streams of a device were busy at the same time.

For each group (a range on a device, say) of GPU intervals labelled with their stream:

* ``busy_ns``: time with at least one stream busy (the union of all intervals);
* ``overlap_ns``: time with at least two streams busy at once: the concurrency that happened;
* ``stream_busy_ns``: the sum over streams of each stream's own busy time (its union);
* ``max_stream_ns``: the busiest stream's busy time;
* ``possible_ns``: the most overlap those per-stream busy times allow, ignoring dependencies:
  ``min(stream_busy - max_stream, stream_busy // 2)``. With two streams that is the shorter
  stream's busy time; three streams busy 10 each can overlap for 15 (pairs in turn).

Everything is computed for all groups at once with sorts, cumulative sums and ``reduceat``: one
sweep over start/end events, no Python loop per interval or per group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gapscope.analysis.intervals import union_blocks


@dataclass(frozen=True)
class StreamOverlap:
    """Per-group overlap figures (arrays indexed by group; see the module docstring)."""

    first_start: np.ndarray
    last_end: np.ndarray
    busy_ns: np.ndarray
    overlap_ns: np.ndarray
    stream_busy_ns: np.ndarray
    max_stream_ns: np.ndarray
    streams: np.ndarray

    @property
    def span_ns(self) -> np.ndarray:
        """First start to last end of the group's intervals (0 for a group with none)."""
        return np.where(self.streams > 0, self.last_end - self.first_start, 0)

    @property
    def possible_ns(self) -> np.ndarray:
        """The most time the group's streams could have been busy together."""
        return np.minimum(self.stream_busy_ns - self.max_stream_ns, self.stream_busy_ns // 2)


def stream_overlap(groups: np.ndarray, streams: np.ndarray, start: np.ndarray, end: np.ndarray,
                   n_groups: int) -> StreamOverlap:
    """Overlap figures for each group ``0..n_groups-1`` of intervals ``[start, end)`` on
    ``streams`` (any integer labels). Touching intervals (one ends where the next starts) do
    not overlap."""
    groups = np.asarray(groups, dtype=np.int64)
    streams = np.asarray(streams, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.maximum(np.asarray(end, dtype=np.int64), start)
    zero = np.zeros(n_groups, dtype=np.int64)
    if groups.size == 0:
        return StreamOverlap(zero, zero.copy(), zero.copy(), zero.copy(), zero.copy(),
                             zero.copy(), zero.copy())

    # 1. Each stream's own busy blocks per group: a stream never overlaps itself.
    pair_codes, pair_inv = np.unique(np.stack([groups, streams]), axis=1, return_inverse=True)
    pair_inv = pair_inv.reshape(-1)
    pair_group = pair_codes[0]
    p, bs, be = union_blocks(pair_inv, start, end)
    block_group = pair_group[p]
    pair_busy = np.zeros(pair_group.size, dtype=np.int64)
    np.add.at(pair_busy, p, be - bs)
    stream_busy = zero.copy()
    np.add.at(stream_busy, pair_group, pair_busy)
    max_stream = zero.copy()
    np.maximum.at(max_stream, pair_group, pair_busy)
    n_streams = np.bincount(pair_group, minlength=n_groups).astype(np.int64)

    # 2. One sweep over the blocks' start (+1) and end (-1) events, per group; at equal times
    #    ends come first, so blocks that only touch do not count as two streams busy.
    t = np.concatenate([bs, be])
    delta = np.concatenate([np.ones(bs.size, np.int64), -np.ones(be.size, np.int64)])
    g = np.concatenate([block_group, block_group])
    order = np.lexsort((delta, t, g))
    t, delta, g = t[order], delta[order], g[order]
    level = np.cumsum(delta)  # every group's events net to zero, so one global sum will do
    step = np.zeros(t.size, dtype=np.int64)
    same = g[1:] == g[:-1]
    step[:-1] = np.where(same, t[1:] - t[:-1], 0)
    busy = zero.copy()
    overlap = zero.copy()
    np.add.at(busy, g, np.where(level >= 1, step, 0))
    np.add.at(overlap, g, np.where(level >= 2, step, 0))

    first = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    last = zero.copy()
    np.minimum.at(first, block_group, bs)
    np.maximum.at(last, block_group, be)
    first = np.where(n_streams > 0, first, 0)
    return StreamOverlap(first, last, busy, overlap, stream_busy, max_stream, n_streams)
