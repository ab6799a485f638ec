"""Vectorized interval arithmetic over many groups at once: busy union, gaps, quantiles.

Every function takes flat numpy arrays plus a group label per element and works on all groups
in one pass (sorts, cumulative maxima, reduceat), so the cost does not depend on the number of
groups and there is no Python loop per interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gapscope.analysis.keys import index_dtype


@dataclass(frozen=True)
class GroupTimelines:
    """The busy/gap structure of each group's intervals.

    Per group (indexed 0..n_groups-1): ``first_start``/``last_end`` bound the span,
    ``gap_ns`` is the idle time inside the span (span minus the union of the intervals) and
    ``gap_count`` the number of idle stretches. ``gaps_*`` list every individual gap: its group,
    length, the time it starts (the end of the busy block before it), the index (into the
    caller's arrays) of the interval that ends it and of the interval whose end starts it (the
    last-starting one of those that end there).
    """

    n_groups: int
    count: np.ndarray
    first_start: np.ndarray
    last_end: np.ndarray
    gap_ns: np.ndarray
    gap_count: np.ndarray
    gaps_group: np.ndarray
    gaps_len: np.ndarray
    gaps_start: np.ndarray
    gaps_next: np.ndarray
    gaps_prev: np.ndarray

    @property
    def span_ns(self) -> np.ndarray:
        """First start to last end per group (0 for a group with no interval)."""
        return np.where(self.count > 0, self.last_end - self.first_start, 0)

    @property
    def busy_ns(self) -> np.ndarray:
        """Union length of the group's intervals: span minus gaps."""
        return self.span_ns - self.gap_ns


def grouped_running_max(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` restarting at each group; ``groups`` must be sorted."""
    if values.size == 0:
        return values.copy()
    lo = values.min()
    width = int(values.max() - lo) + 1
    n_groups = int(groups[-1]) + 1 if groups.size else 0
    if width * max(n_groups, 1) < 2**62:
        # Lift each group above every earlier one so that one global accumulate restarts per group
        # (in place: two arrays of the input's length, whatever its size).
        shift = np.multiply(groups, width, dtype=np.int64)
        lifted = values - lo
        lifted += shift
        np.maximum.accumulate(lifted, out=lifted)
        lifted -= shift
        lifted += lo
        return lifted
    import pandas as pd  # pragma: no cover - only for spans too wide to lift

    return pd.Series(values).groupby(groups).cummax().to_numpy()  # pragma: no cover


def group_timelines(
    groups: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int
) -> GroupTimelines:
    """Busy union and gaps of the intervals ``[start, end)`` in each group.

    ``groups`` holds a label in ``0..n_groups-1`` per interval; the arrays need not be sorted.
    Overlapping intervals (several streams) count once; a gap is a stretch inside a group's span
    covered by none of its intervals. One window of :class:`RunningTimelines`, sorted first.
    """
    groups = np.asarray(groups, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    if _in_order(groups, start):  # range members come so: no sort, no gathers (the same order)
        ids = np.arange(groups.size, dtype=np.int64)
        g, s, e = groups, start, end
    else:
        ids = np.lexsort((start, groups))
        g, s, e = groups[ids], start[ids], np.asarray(end, dtype=np.int64)[ids]
    tl = RunningTimelines(n_groups)
    gaps = tl.feed(g, s, e, ids)
    del g, s, e
    return GroupTimelines(n_groups, tl.count, tl.first_start, tl.last_end, tl.gap_ns, tl.gap_count,
                          gaps.group, gaps.length, gaps.start, ids[gaps.next_pos], gaps.prev_id)


def _in_order(groups: np.ndarray, start: np.ndarray) -> bool:
    """Whether intervals already come sorted by group, then start (the order a stable sort by
    (group, start) would give them)."""
    if groups.size < 2:
        return True
    step = groups[1:] - groups[:-1]
    if bool((step < 0).any()):
        return False
    return bool((start[1:] >= start[:-1])[step == 0].all())


def union_blocks(keys: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union of the intervals ``[start, end)`` of each key: (key, block start, block end) per
    merged block, sorted by key then start. ``keys`` are non-negative integers."""
    keys = np.asarray(keys, dtype=np.int64)
    if keys.size == 0:
        return keys, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort((start, keys))
    k, s, e = keys[order], np.asarray(start)[order], np.asarray(end)[order]
    run = grouped_running_max(e, k)
    new = np.ones(k.size, dtype=bool)
    new[1:] = (k[1:] != k[:-1]) | (s[1:] > run[:-1])
    heads = np.flatnonzero(new)
    tails = np.r_[heads[1:], k.size] - 1
    return k[heads], s[heads], run[tails]


def key_dtype(values: np.ndarray, n_groups: int) -> type[np.signedinteger] | None:
    """The dtype of :func:`sort_within_groups`' combined keys of these (non-empty) values in
    ``n_groups`` groups: 32 bits when group times largest value fits, else 64; None when no
    combined key fits (negative or huge values: a two-key sort then)."""
    values = np.asarray(values)
    vmax = int(values.max()) + 1
    if values.min() >= 0 and vmax * max(n_groups, 1) < 2**62:
        return index_dtype(vmax * max(n_groups, 1))
    return None


def sort_within_groups(groups: np.ndarray, values: np.ndarray, n_groups: int,
                       spare_groups: bool = False, kth: np.ndarray | None = None,
                       count: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """(counts per group, keys sorted by group then value, scale) for integer values: the value
    of key ``k`` of group ``g`` is ``k - g * scale`` (scale 0: the keys are the values).
    ``spare_groups``: ``groups`` is the caller's own temporary, which the keys may be built in
    (no copy of it). ``kth``: only these positions need their sorted key (the keys are
    partitioned around them, a selection in linear time, instead of sorted); ``count``: the
    counts per group, when the caller has them."""
    groups = np.asarray(groups)
    values = np.asarray(values)
    if count is None:
        count = np.bincount(groups, minlength=n_groups)
    if values.size == 0:
        return count, values.astype(np.int64), 0
    dtype = key_dtype(values, n_groups)
    if dtype is not None:
        # One sort of a combined key beats a two-key lexsort; a key that fits 32 bits sorts
        # in about 60 % of the time of a 64-bit one.
        vmax = int(values.max()) + 1
        key = groups.astype(dtype, copy=not spare_groups)
        key *= vmax
        key += values
        if kth is None:
            key.sort()
        else:
            key.partition(kth)
        return count, key, vmax
    order = np.lexsort((values, groups))  # pragma: no cover - negative or huge values only
    return count, np.asarray(values, dtype=np.int64)[order], 0  # pragma: no cover


#: grouped_quantiles selects (np.partition) instead of sorting when it needs at most this many
#: positions of the sorted keys and the values outnumber them SELECT_RATIO times: a few large
#: groups (a range name's every gap, a launch API's every call), where a full sort of tens of
#: millions of keys cost most of the percentiles' time at 10M kernels.
SELECT_MAX_POSITIONS = 1024
SELECT_RATIO = 64
#: grouped_quantiles sorts each group's values in a row of its own (:func:`sorted_in_rows`)
#: instead of one combined key when there are at least ROW_GROUPS groups with values and the
#: groups come in runs of RUN_VALUES values or more on average (a level's gaps, window by window;
#: the memberships, in window order): many groups, one per range instance.
ROW_GROUPS = 64
RUN_VALUES = 4
#: Values :func:`sorted_in_rows` places into their rows at a time.
ROW_BLOCK = 1 << 20


def group_runs(groups: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(start, end, group) of each run of equal groups, what :func:`sorted_in_rows` places the
    values by; None when the groups do not come in runs (RUN_VALUES values a run on average) or
    the values are not integers."""
    n = values.size
    if not np.issubdtype(values.dtype, np.integer):
        return None
    change = np.flatnonzero(groups[1:] != groups[:-1]) + 1
    if (change.size + 1) * RUN_VALUES > n:
        return None
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [n]))
    return starts, ends, groups[starts].astype(np.int64)


def sorted_in_rows(runs: tuple[np.ndarray, np.ndarray, np.ndarray], values: np.ndarray, count: np.ndarray,
                   present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, first): each group's integer values sorted, group ``g``'s at ``rows[first[g]:
    first[g] + count[g]]``, from the values' runs of one group (:func:`group_runs`; the groups
    themselves are not read, so the caller can let them go first). Each group has a row of its
    count rounded up to a quarter of the power of two at or below it, padded with the dtype's
    largest value (sorted after every value, so never read), the rows of one width side by
    side: one 2-D sort per width, along the rows (short rows sort in sorting networks), instead
    of one sort of every value. The values are placed run by run: a stable sort of the runs' groups finds where each
    run goes in its group's row (O(runs log runs)), and the values are copied ROW_BLOCK at a
    time."""
    n = values.size
    starts, ends, run_group = runs
    # Each present group's row: the rows sorted by width, each width's side by side. A row's
    # width is its count rounded up to a quarter of the power of two at or below it (8 and
    # under: the count itself), so that the padding stays under a quarter of the values.
    c = count[present].astype(np.int64)
    step = np.left_shift(1, np.maximum(np.floor(np.log2(c)).astype(np.int64) - 2, 0))
    width = (c + step - 1) // step * step
    del c, step
    by_width = np.argsort(width, kind="stable")
    first = np.zeros(count.size, dtype=np.int64)
    w = width[by_width]
    first[present[by_width]] = np.cumsum(w) - w
    total = int(w.sum())
    # Where each run begins in its group's row: after the group's earlier runs.
    order = np.argsort(run_group, kind="stable")
    length = (ends - starts)[order]
    before = np.cumsum(length) - length  # over the runs in group order
    group_sorted = run_group[order]
    new_group = np.concatenate(([True], group_sorted[1:] != group_sorted[:-1]))
    in_group = before - np.maximum.accumulate(np.where(new_group, before, 0))
    run_at = np.empty(starts.size, dtype=np.int64)
    run_at[order] = first[group_sorted] + in_group
    del order, length, before, group_sorted, new_group, in_group
    shift = run_at - starts  # a value's place in the rows minus its own position
    rows = np.full(total, np.iinfo(values.dtype).max, dtype=values.dtype)
    for a in range(0, n, ROW_BLOCK):
        b = min(n, a + ROW_BLOCK)
        r0 = int(np.searchsorted(starts, a, side="right")) - 1
        r1 = int(np.searchsorted(starts, b, side="left"))
        covered = np.minimum(ends[r0:r1], b) - np.maximum(starts[r0:r1], a)
        rows[np.repeat(shift[r0:r1], covered) + np.arange(a, b)] = values[a:b]
    lo = 0
    for size in np.unique(w).tolist():  # widths in increasing order, as the rows lie
        hi = lo + int(np.count_nonzero(w == size)) * size
        rows[lo:hi].reshape(-1, size).sort(axis=1)
        lo = hi
    return rows, first


def grouped_quantiles(
    groups: np.ndarray, values: np.ndarray, n_groups: int, qs: tuple[float, ...], spare_groups: bool = False,
) -> np.ndarray:
    """Quantiles ``qs`` (0..1, linear interpolation as numpy's default) of integer ``values``
    per group. Returns an array of shape ``(n_groups, len(qs))``; NaN where a group has none.
    ``spare_groups``: ``groups`` may be overwritten (:func:`sort_within_groups`)."""
    out = np.full((n_groups, len(qs)), np.nan)
    values = np.asarray(values)
    if values.size == 0:
        return out
    groups = np.asarray(groups)
    count = np.bincount(groups, minlength=n_groups)
    offset = np.concatenate(([0], np.cumsum(count)[:-1]))
    present = np.flatnonzero(count)
    n = count[present]
    base = offset[present]
    pos = [q * (n - 1) for q in qs]
    lo = [np.floor(p).astype(np.int64) for p in pos]
    hi = [np.minimum(b + 1, n - 1) for b in lo]
    needed = None
    if 2 * len(qs) * present.size <= SELECT_MAX_POSITIONS:  # else many groups: sorted whole
        needed = np.unique(np.concatenate([base + b for b in (*lo, *hi)]))
        if values.size < SELECT_RATIO * needed.size:
            needed = None
    runs = group_runs(groups, values) if needed is None and present.size >= ROW_GROUPS else None
    if runs is not None:
        del groups  # the caller's temporary (spare_groups) goes before the rows are made
        rows, first = sorted_in_rows(runs, values, count, present)
        del runs
        base = first[present]

        def value(at: np.ndarray) -> np.ndarray:
            return rows[at].astype(np.float64)  # as floats, as numpy's quantile takes them
    else:
        count, key, scale = sort_within_groups(groups, values, n_groups, spare_groups, kth=needed, count=count)
        shift = present.astype(np.int64) * scale  # each group's part of its keys

        def value(at: np.ndarray) -> np.ndarray:
            return (key[at].astype(np.int64) - shift).astype(np.float64)  # as floats, as numpy's quantile takes them

    for j in range(len(qs)):
        v_lo = value(base + lo[j])
        out[present, j] = v_lo + (value(base + hi[j]) - v_lo) * (pos[j] - lo[j])
    return out


def expand_slices(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For slices ``[lo[i], hi[i])`` return (owner i, position) for every covered position."""
    lengths = np.maximum(hi - lo, 0)
    total = int(lengths.sum())
    owner = np.repeat(np.arange(lo.size, dtype=np.int64), lengths)
    if total == 0:
        return owner, np.zeros(0, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    pos = np.arange(total, dtype=np.int64) - np.repeat(starts - lo, lengths)
    return owner, pos


#: Covered positions :func:`gathered_slices` gathers at a time.
GATHER_BLOCK = 1 << 20


def gathered_slices(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner i, value) for every position of the slices ``values[lo[i]:hi[i]]``, one slice
    after the other: :func:`expand_slices` with the positions looked up, the owners 32-bit where
    there are fewer than 2**31 slices and the values in ``values``' own dtype, GATHER_BLOCK
    positions at a time (no 64-bit array of every owner or position)."""
    lengths = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(lo.size, dtype=index_dtype(lo.size)), lengths)
    out = np.empty(owner.size, dtype=values.dtype)
    shift = np.cumsum(lengths) - lengths - lo  # a covered position's index in the output minus its own
    for a in range(0, owner.size, GATHER_BLOCK):
        b = min(owner.size, a + GATHER_BLOCK)
        out[a:b] = values[np.arange(a, b) - shift[owner[a:b]]]
    return owner, out


def covered_ns(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray, q_keys: np.ndarray, q_lo: np.ndarray,
               q_hi: np.ndarray) -> np.ndarray:
    """For each query ``[q_lo, q_hi)`` of key ``q_keys``, the time covered by the intervals
    ``[starts, ends)`` of the same key, which must not overlap one another (a device's gaps):
    one prefix sum of lengths and two searches per query, no loop."""
    from gapscope.analysis.keys import TimeKeys

    keys = np.asarray(keys, dtype=np.int64)
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    q_keys = np.asarray(q_keys, dtype=np.int64)
    q_lo, q_hi = np.asarray(q_lo, dtype=np.int64), np.asarray(q_hi, dtype=np.int64)
    if keys.size == 0 or q_keys.size == 0:
        return np.zeros(q_keys.size, dtype=np.int64)
    n_keys = int(max(keys.max(), q_keys.max())) + 1
    tk = TimeKeys([starts, ends, q_lo, q_hi], n_keys)
    packed = tk.key(keys, starts)
    order = np.argsort(packed, kind="stable")
    packed, s, e, k = packed[order], starts[order], ends[order], keys[order]
    length = e - s
    before = np.concatenate(([0], np.cumsum(length)))  # total length of the intervals before each

    def upto(t: np.ndarray) -> np.ndarray:
        """Covered time of the query's key before ``t``."""
        j = np.searchsorted(packed, tk.key(q_keys, t), side="right") - 1  # last interval starting at or before t
        mine = (j >= 0) & (k[np.maximum(j, 0)] == q_keys)
        jj = np.maximum(j, 0)
        inside = np.clip(t - s[jj], 0, length[jj])
        # Intervals of earlier keys sort before this key's: count only this key's.
        first = np.searchsorted(packed, tk.key(q_keys, np.full(t.size, tk.lo)), side="left")
        return np.where(mine, before[jj] - before[first] + inside, 0)

    return upto(q_hi) - upto(q_lo)


@dataclass(frozen=True)
class WindowGaps:
    """The gaps one window of intervals added to :class:`RunningTimelines`: group, length,
    start, the position (in the window's arrays) of the interval that ends each and the index
    (the caller's ``ids``) of the interval whose end starts it."""

    group: np.ndarray
    length: np.ndarray
    start: np.ndarray
    next_pos: np.ndarray
    prev_id: np.ndarray


class RunningTimelines:
    """:func:`group_timelines` fed one window of intervals at a time, in memory that does not
    grow with the intervals: per group it carries the count, the first start, the running end
    and the interval holding it (the last, in order, whose own end is the running end), so a
    gap that straddles two windows is found once, with the same length and endpoints as one
    pass over all the intervals would give it.

    Each window must come sorted by (group, start) with every group's intervals after those it
    had in earlier windows, in the order one pass would sort them."""

    def __init__(self, n_groups: int) -> None:
        self.n_groups = n_groups
        self.count = np.zeros(n_groups, dtype=np.int64)
        self.first_start = np.zeros(n_groups, dtype=np.int64)
        self.last_end = np.zeros(n_groups, dtype=np.int64)  # the running end, once count > 0
        self.holder = np.full(n_groups, -1, dtype=np.int64)
        self.gap_ns = np.zeros(n_groups, dtype=np.int64)
        self.gap_count = np.zeros(n_groups, dtype=np.int64)

    @property
    def span_ns(self) -> np.ndarray:
        """First start to last end per group (0 for a group with no interval)."""
        return np.where(self.count > 0, self.last_end - self.first_start, 0)

    def feed(self, groups: np.ndarray, start: np.ndarray, end: np.ndarray, ids: np.ndarray) -> WindowGaps:
        """Add one window's intervals (``ids``: what :attr:`WindowGaps.prev_id` and the carried
        holders name them by); the gaps they end."""
        g = np.asarray(groups, dtype=np.int64)
        s = np.asarray(start, dtype=np.int64)
        e = np.maximum(np.asarray(end, dtype=np.int64), s)
        empty = np.zeros(0, dtype=np.int64)
        if g.size == 0:
            return WindowGaps(empty, empty, empty, empty, empty)
        new_group = np.empty(g.size, dtype=bool)
        new_group[0] = True
        np.not_equal(g[1:], g[:-1], out=new_group[1:])
        heads = np.flatnonzero(new_group)
        tails = np.append(heads[1:], g.size) - 1
        present = g[heads]
        seen = self.count[present] > 0
        sizes = tails - heads + 1
        running = grouped_running_max(e, g)
        head_before = s[heads]  # a group's very first interval opens its span
        if seen.any():
            # Each interval's group's running end from earlier windows (the lowest int64 for none).
            carried = np.repeat(np.where(seen, self.last_end[present], np.iinfo(np.int64).min), sizes)
            np.maximum(running, carried, out=running)
            head_before = np.where(seen, carried[heads], head_before)
            del carried
        is_mark = e == running
        del e
        before = np.empty(g.size, dtype=np.int64)  # the running end before each interval
        before[1:] = running[:-1]
        before[heads] = head_before
        gap = s - before
        is_gap = gap > 0
        idx = np.flatnonzero(is_gap)
        # The holder of a gap's start: the last mark before it in its group, else the carried
        # one. The position of the last mark at or before each interval (-1 for none), forward-filled.
        last_mark = np.where(is_mark, np.arange(g.size, dtype=np.int64), -1)
        del is_mark
        np.maximum.accumulate(last_mark, out=last_mark)
        ids = np.asarray(ids, dtype=np.int64)
        mark = last_mark[idx - 1] if idx.size else empty  # a gap at a group's head has no interval before it in the group
        head_of_gap = heads[np.searchsorted(heads, idx, side="right") - 1]
        in_group = (idx > 0) & (mark >= head_of_gap)
        prev_id = np.where(in_group, ids[np.maximum(mark, 0)], self.holder[g[idx]])
        # The state carried to the next window.
        self.first_start[present[~seen]] = s[heads[~seen]]
        self.count[present] += sizes  # the groups present only: a level can have millions
        self.last_end[present] = running[tails]
        tail_mark = last_mark[tails]
        has_mark = tail_mark >= heads
        self.holder[present[has_mark]] = ids[tail_mark[has_mark]]
        self.gap_ns[present] += np.add.reduceat(np.maximum(gap, 0), heads)
        self.gap_count[present] += np.add.reduceat(is_gap, heads, dtype=np.int64)
        return WindowGaps(g[idx], gap[idx], before[idx], idx, prev_id)
