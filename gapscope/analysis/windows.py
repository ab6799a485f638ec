"""The three timeline levels (range pairs, devices, streams) measured one window of activities
at a time, so that no level's gap list is ever held whole (docs/performance.md, "Bounded
memory").

Activities are taken in (start, index) order and cut into windows of about
:func:`window_size` activities, only where the start changes. Each level's
:class:`~gapscope.analysis.intervals.RunningTimelines` carries its groups' running ends from one
window to the next, so a window yields exactly the gaps that its activities end, as one pass
over the whole trace would find them; they are attributed (the range and stream levels reusing
the device level's split, as in one pass), summed into their rows and let go. What is kept per
gap is its row and length, for the exact percentiles, and the longest gaps so far.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from gapscope.analysis.attribution import (
    N_CATEGORIES, Attributor, GapSplit, IdleCategory, LongStalls, first_of_each_gap, gap_subset, longest_indices,
)
from gapscope.analysis.host_timeline import N_STATES
from gapscope.analysis.intervals import RunningTimelines, WindowGaps
from gapscope.analysis.keys import code_dtype, index_dtype, narrowed
from gapscope.analysis.metrics import ActivityArrays, GapList
from gapscope.analysis.replays import Replays

#: Activities per window: some 10-20 MB of temporaries each, two windows at a time (one found
#: on a thread while the other is attributed); smaller windows only add Python overhead.
WINDOW_ACTIVITIES = 1 << 16
#: Overrides WINDOW_ACTIVITIES (the tests force windows of a few activities with it).
WINDOW_ENV = "GAPSCOPE_WINDOW_ACTIVITIES"


def window_size() -> int:
    """Activities per window: WINDOW_ACTIVITIES, or the positive integer in GAPSCOPE_WINDOW_ACTIVITIES."""
    value = os.environ.get(WINDOW_ENV, "")
    return int(value) if value.isdigit() and int(value) > 0 else WINDOW_ACTIVITIES


#: Sorted starts :func:`activity_windows` reads at a time when it looks for a window's cut.
CUT_SCAN = 4096


def activity_windows(start: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): the activities in (start, index) order, and the positions in it where
    windows begin and the last ends; a window of ``size`` activities or more is cut only where
    the start changes, so that activities starting together share one. Each cut is found by
    reading the sorted starts from its candidate position on, CUT_SCAN at a time (no array of
    every start in order, nor of every position where it changes)."""
    n = np.asarray(start).size
    order = narrowed(np.argsort(start, kind="stable"), n)  # held for the whole measurement
    if n <= size:
        return order, np.array([0, n], dtype=np.int64)
    cuts = [0]
    for c in range(size, n, size):
        if cuts[-1] >= c:  # the last cut is the first change at or after c too
            continue
        lo = c
        while lo < n:  # the first position at or after c whose start differs from the one before
            s = start[order[lo - 1:lo + CUT_SCAN]]
            changed = np.flatnonzero(s[1:] != s[:-1])
            if changed.size:
                cuts.append(lo + int(changed[0]))
                break
            lo += CUT_SCAN
        else:
            break  # the same start from c to the end: no more cuts
    return order, np.array([*cuts, n], dtype=np.int64)


class ShortLengths:
    """Gap lengths kept window by window in 2 bytes each: those under :attr:`SHORT` ns as they
    are (most of a trace's gaps: 97 % of a decode loop's), the others apart with their
    positions; read back whole, once (:meth:`taken`)."""

    SHORT = int(np.iinfo(np.uint16).max)

    def __init__(self) -> None:
        self.short: list[np.ndarray] = []
        self.long_at: list[np.ndarray] = []
        self.long: list[np.ndarray] = []
        self.size = 0

    def append(self, length: np.ndarray) -> None:
        """Keep one window's lengths after those kept so far."""
        long_at = np.flatnonzero((length >= self.SHORT) | (length < 0))
        self.short.append(np.minimum(length, self.SHORT).astype(np.uint16))  # the long ones are mended on taking
        if long_at.size:
            self.long.append(length[long_at])
            long_at += self.size
            self.long_at.append(long_at)
        self.size += length.size

    def taken(self) -> np.ndarray:
        """Every length kept, in order: 32-bit where all are below 2**31 - 1 (as
        :func:`gapscope.analysis.keys.narrowed_to_fit` gives them),
        else 64-bit; the lengths are let go."""
        long = np.concatenate(self.long) if self.long else np.zeros(0, dtype=np.int64)
        long_at = np.concatenate(self.long_at) if self.long_at else np.zeros(0, dtype=np.int64)
        out = np.empty(self.size, dtype=index_dtype(max(int(long.max(initial=0)), self.SHORT) + 1))
        if self.short:
            np.concatenate(self.short, out=out, casting="safe")
        out[long_at] = long
        self.short.clear()
        self.long.clear()
        self.long_at.clear()
        self.size = 0
        return out


@dataclass
class LevelSums:
    """One level's figures summed over windows: its timelines, gap time per (row, category) and
    inside graph replays, and every gap's row and length (for the percentiles): the rows as runs
    (a row and how many gaps in a row have it; a window's gaps come grouped by row), the lengths
    one by one."""

    timelines: RunningTimelines
    categories: np.ndarray | None
    inside: np.ndarray
    #: setup gap time per (row, category) and every long stall gap (range pairs and devices,
    #: when attributed; docs/metrics.md, "Steady state")
    setup: np.ndarray | None
    long_stalls: list[LongStalls] | None
    gap_row: list[tuple[np.ndarray, np.ndarray]]
    gap_length: ShortLengths
    gap_lists: list[GapList] | None = None  # each window's (attributed) gaps, when they are kept

    @classmethod
    def empty(cls, n_groups: int, n_inside: int, attributed: bool, keep: bool = False,
              one_off: bool = False) -> "LevelSums":
        cats = np.zeros((n_groups, N_CATEGORIES), dtype=np.int64) if attributed else None
        setup = np.zeros((n_groups, N_CATEGORIES), dtype=np.int64) if attributed and one_off else None
        return cls(RunningTimelines(n_groups), cats, np.zeros(n_inside, dtype=np.int64), setup,
                   [] if setup is not None else None, [], ShortLengths(), [] if keep else None)

    def kept(self) -> GapList | None:
        """The level's gaps in one pass's order (by row, then time), when they were kept."""
        if self.gap_lists is None:
            return None
        gaps = _concat(self.gap_lists)  # every measurement has one window at least
        self.gap_lists = None
        return gap_subset(gaps, np.argsort(gaps.row, kind="stable"))  # windows come in time order

    def keep(self, row: np.ndarray, length: np.ndarray) -> None:
        """Keep a window's gaps' rows (as runs) and lengths (:class:`ShortLengths`)."""
        if row.size:
            first = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
            runs = np.diff(np.r_[first, row.size])
            self.gap_row.append((narrowed(row[first], self.timelines.n_groups), narrowed(runs, row.size + 1)))
        self.gap_length.append(length)

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """(row, length) of every gap of the level, taken out of it (read once)."""
        if not self.gap_row:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        row = np.repeat(np.concatenate([r for r, _ in self.gap_row]), np.concatenate([n for _, n in self.gap_row]))
        self.gap_row.clear()
        return row, self.gap_length.taken()


def _add_one_off(sums: "LevelSums", gaps: GapList, stall_threshold_ns: int) -> None:
    """Add attributed gaps' setup time and keep their long stalls (docs/metrics.md, "Steady state")."""
    _add_categories(sums.setup, gap_subset(gaps, np.flatnonzero(gaps.split.category == IdleCategory.SETUP)))
    stalls = LongStalls.of(gaps, stall_threshold_ns)
    if stalls.row.size:
        sums.long_stalls.append(stalls)


def _add_categories(out: np.ndarray, gaps: GapList) -> None:
    """Add attributed gaps' time per category into ``out`` (rows x categories), summing over
    the rows present only (a level can have millions of rows)."""
    if gaps.length.size == 0:
        return
    row = gaps.row
    if bool((row[1:] >= row[:-1]).all()):  # a level's gaps come in row order: no sort needed
        new_row = np.r_[True, row[1:] != row[:-1]]
        rows, local = row[new_row], np.cumsum(new_row) - 1
    else:
        rows, local = np.unique(row, return_inverse=True)
    out[rows] += gaps.split.sums(local, gaps.length, rows.size)


@dataclass
class Candidates:
    """The longest gaps met so far, with the key that orders them as one pass lists them."""

    gaps: list[GapList]
    keys: list[np.ndarray]  # (row, next start, position): one pass's order of the level's gaps


def _gap_list(w: WindowGaps, acts: ActivityArrays, act: np.ndarray) -> GapList:
    """The GapList of a window's gaps, their rows the groups (``act``: the activity of each of
    the window's intervals)."""
    next_act = act[w.next_pos]
    return GapList(row=w.group, device=acts.device_of(next_act), length=w.length, start=w.start,
                   next_act=next_act, prev_act=w.prev_id)


#: Memberships put in window order at a time by :func:`members_by_window`.
MEMBER_BLOCK = 1 << 20


def members_by_window(busy: np.ndarray, member_act: np.ndarray, window_of: np.ndarray,
                      n_windows: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): every membership, those whose activity is busy grouped by that
    activity's window and in membership order within each window (what a stable sort by window
    gives), then the others in membership order; and where each window's begin in that order
    (the last bound is where the others begin). Sorted MEMBER_BLOCK memberships at a time, each
    block's placed after the earlier blocks' members of the same window, so the temporaries are
    one block's, not 20 bytes for every membership."""
    n = member_act.size

    def block(lo: int) -> tuple[np.ndarray, np.ndarray]:
        acts = member_act[lo:lo + MEMBER_BLOCK]
        idx = np.flatnonzero(busy[acts])
        return idx, window_of[acts[idx]]

    counts = np.zeros(n_windows, dtype=np.int64)
    for lo in range(0, n, MEMBER_BLOCK):
        counts += np.bincount(block(lo)[1], minlength=n_windows)
    bounds = np.r_[0, np.cumsum(counts)].astype(np.int64)
    order = np.empty(n, dtype=index_dtype(n))
    fill = bounds[:-1].copy()  # where each window's next member goes
    idle = int(bounds[-1])  # where the next member of no window goes
    for lo in range(0, n, MEMBER_BLOCK):
        idx, w = block(lo)
        by_window = np.argsort(w, kind="stable")
        w = w[by_window]
        count = np.bincount(w, minlength=n_windows)
        rank = np.arange(w.size) - (np.cumsum(count) - count)[w]  # place among the block's of its window
        order[fill[w] + rank] = idx[by_window] + lo
        fill += count
        rest = np.flatnonzero(~busy[member_act[lo:lo + MEMBER_BLOCK]]) + lo
        order[idle:idle + rest.size] = rest
        idle += rest.size
    return order, bounds


@dataclass
class WindowPlan:
    """How the activities are cut into windows (:func:`activity_windows`: ``order``,
    ``bounds``) and where each window's range memberships begin (``member_bounds``) in the
    memberships :func:`planned` put in window order. Used up by :func:`measure`, so that the
    order (4 bytes an activity) is let go with the windows, whoever holds the plan."""

    order: np.ndarray | None
    bounds: np.ndarray
    member_bounds: np.ndarray

    def taken(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(order, bounds, member_bounds), the plan left without its order."""
        if self.order is None:
            raise RuntimeError("this window plan was used already")
        order, self.order = self.order, None
        return order, self.bounds, self.member_bounds


def planned(acts: ActivityArrays, member_act: np.ndarray, member_pair: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, WindowPlan]:
    """(member_act, member_pair, plan): the memberships in window order (:func:`members_by_window`:
    each window's busy ones together, in their own order, the others last) and the windows'
    plan for :func:`measure`. The memberships are the same set, only reordered: what the
    windows read one slice at a time, with no index array of every membership held beside
    them (4 bytes a membership). The caller lets the memberships it passed go."""
    order, bounds = activity_windows(acts.start, window_size())
    n_windows = bounds.size - 1
    # Each activity's window (8 or 16 bits where they suffice: a stable sort of those is a radix sort).
    window_of = np.empty(order.size, dtype=code_dtype(n_windows))
    window_of[order] = np.repeat(np.arange(n_windows, dtype=window_of.dtype), np.diff(bounds))
    m_order, m_bounds = members_by_window(acts.busy, member_act, window_of, n_windows)
    del window_of
    member_act = member_act[m_order]
    member_pair = member_pair[m_order]
    return member_act, member_pair, WindowPlan(order, bounds, m_bounds)


@dataclass(frozen=True)
class _WindowLevels:
    """One window's gaps at each level, and what orders its range gaps as one pass would."""

    devices: GapList
    pairs: GapList
    streams: GapList
    pair_member: np.ndarray  # the range membership row of the interval ending each range pair gap


def measure(acts: ActivityArrays, member_act: np.ndarray, member_pair: np.ndarray, plan: WindowPlan, n_pairs: int,
            pair_range: np.ndarray, n_ranges: int, replays: Replays, attributor: "Future[Attributor] | None",
            top: int, selected: bool, keep_device_gaps: bool = False,
            ) -> tuple[LevelSums, LevelSums, LevelSums, tuple[GapList, np.ndarray] | None]:
    """(pairs, devices, streams, longest): every level's sums over the windows of ``plan``
    (the memberships in its window order, :func:`planned`; the plan is used up); ``longest``: (the ``top`` longest
    candidates of the device gaps, or with ``selected`` of the distinct range gaps, in one
    pass's order; their order key) when ``attributor`` (being built) is given. Range pair
    ``inside`` is summed per range (``pair_range``); ``keep_device_gaps``: the device level
    keeps its gap lists (:meth:`LevelSums.kept`). The next window's gaps are found on a thread
    while this one's are attributed and summed."""
    n_dev, n_str = acts.device_ids.size, acts.stream_keys.size
    attributed = attributor is not None
    pairs = LevelSums.empty(n_pairs, n_ranges, attributed, one_off=True)
    devices = LevelSums.empty(n_dev, n_dev, attributed, keep_device_gaps, one_off=True)
    streams = LevelSums.empty(n_str, 0, attributed)
    order, bounds, m_bounds = plan.taken()
    busy = acts.busy
    # Range members of each window, in one pass's order: (pair, start, member).
    n_windows = bounds.size - 1

    def level(timelines: RunningTimelines, codes: np.ndarray, a: np.ndarray) -> GapList:
        a = a[np.argsort(codes[a], kind="stable")]  # (group, start, index)
        w = timelines.feed(codes[a], acts.start[a], acts.end[a], a)
        return _gap_list(w, acts, a)

    def found(w: int) -> _WindowLevels:
        a = order[bounds[w]:bounds[w + 1]]
        a = a[busy[a]]
        m = np.arange(m_bounds[w], m_bounds[w + 1], dtype=np.int64)
        m = m[np.lexsort((m, acts.start[member_act[m]], member_pair[m]))]
        m_act = member_act[m]
        pw = pairs.timelines.feed(member_pair[m], acts.start[m_act], acts.end[m_act], m_act)
        return _WindowLevels(level(devices.timelines, acts.device_code, a), _gap_list(pw, acts, m_act),
                             level(streams.timelines, acts.stream_code, a), m[pw.next_pos])

    cand = Candidates([], [])
    with ThreadPoolExecutor(1) as finder:
        coming = finder.submit(found, 0)
        attributor = attributor.result() if attributor is not None else None
        for w in range(n_windows):
            lv = coming.result()
            if w + 1 < n_windows:
                coming = finder.submit(found, w + 1)
            d_gaps, p_gaps, s_gaps = lv.devices, lv.pairs, lv.streams
            if attributed:
                d_gaps, p_gaps, s_gaps = attributor.attribute([d_gaps, p_gaps, s_gaps])  # both take the device split
                for sums, g in ((devices, d_gaps), (pairs, p_gaps), (streams, s_gaps)):
                    _add_categories(sums.categories, g)
                    if sums.setup is not None:
                        _add_one_off(sums, g, attributor.stall_threshold_ns)
                if selected:
                    r_gaps = replace(p_gaps, row=pair_range[p_gaps.row])
                    first = first_of_each_gap(r_gaps)  # a gap's first range, in one pass's order
                    _keep_longest(cand, r_gaps, first, (p_gaps.row, acts.start[p_gaps.next_act], lv.pair_member), top)
                else:
                    _keep_longest(cand, d_gaps, np.arange(d_gaps.length.size),
                                  (d_gaps.row, acts.start[d_gaps.next_act], d_gaps.next_act), top)
            replays.add_inside(devices.inside, d_gaps, d_gaps.row)
            replays.add_inside(pairs.inside, p_gaps, pair_range[p_gaps.row])
            if devices.gap_lists is not None:
                devices.gap_lists.append(d_gaps)
            for sums, g in ((devices, d_gaps), (pairs, p_gaps), (streams, s_gaps)):
                sums.keep(g.row, g.length)  # kept to the end, for the percentiles
            del lv, d_gaps, p_gaps, s_gaps  # the next window's temporaries reuse their blocks
    longest = _merged(cand) if attributed else None
    return pairs, devices, streams, longest


def _keep_longest(cand: Candidates, gaps: GapList, pick: np.ndarray, key: tuple[np.ndarray, ...], top: int) -> None:
    """Keep the ``top`` longest of the gaps ``pick`` (ties by one pass's order, ``key``)."""
    if top <= 0 or pick.size == 0:
        return
    k = np.stack([x[pick] for x in key], axis=1)  # a window's gaps come in one pass's order
    best = longest_indices(gaps.length[pick], top)
    cand.gaps.append(_kept(gaps, pick[best]))
    cand.keys.append(k[best])
    if len(cand.gaps) > 1:  # fold into one list, so that it never holds more than 2 x top gaps
        merged, keys = _merged(cand)
        best = longest_indices(merged.length, top)
        cand.gaps[:] = [_kept(merged, best)]
        cand.keys[:] = [keys[best]]


def _kept(gaps: GapList, idx: np.ndarray) -> GapList:
    """The attributed gaps ``idx``, holding only their own state rows (not their window's all)."""
    kept = gap_subset(gaps, idx)
    return replace(kept, split=kept.split.compacted())


def _merged(cand: Candidates) -> tuple[GapList, np.ndarray]:
    """The candidates as one list in one pass's order, and their keys."""
    if not cand.gaps:
        empty = np.zeros(0, dtype=np.int64)
        split = GapSplit(np.zeros(0, dtype=np.int8), empty, np.zeros((0, N_STATES), dtype=np.int64), np.zeros(0, dtype=np.int8))
        return GapList(empty, empty, empty, empty, empty, empty, split.category, split), np.zeros((0, 3), dtype=np.int64)
    gaps = _concat(cand.gaps)
    keys = np.concatenate(cand.keys)
    order = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))
    return gap_subset(gaps, order), keys[order]


def _concat(lists: list[GapList]) -> GapList:
    """Gap lists (all attributed, or none) as one."""
    fields = {f: np.concatenate([getattr(g, f) for g in lists])
              for f in ("row", "device", "length", "start", "next_act", "prev_act")}
    if lists[0].split is None:
        return GapList(**fields)
    split = GapSplit.concat([g.split for g in lists])
    return GapList(**fields, category=split.category, split=split)
