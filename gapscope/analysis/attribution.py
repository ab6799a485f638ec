"""Why the GPU sat idle: every gap's time split into categories, decided from the kernel that
ends the gap, the API call that launched it and what the launching thread was doing meanwhile
(docs/metrics.md, "Gap attribution", holds the exact rules).

Rules, first match wins, for a gap [g0, g1) ended by activity K, launched by call L on thread T:

1. ``memop``: memcpy/memset (not counted as busy) on the gap's device cover at least half of it,
   unless a copy or memset K waited for through the legacy default stream (rule 5) ended in it:
   that copy is what K waited for, on another stream (rule 5 then decides).
2. ``unknown``: K has no launching call in the trace.
3. ``sync``: L had not returned at g0 (L.end > g0) and T was inside a synchronizing call at g0
   (stream/device/event synchronize, a synchronous copy): the gap is ``sync``, except the parts
   of it that T spent in a ``stall`` or ``setup`` segment (gapscope.analysis.host_timeline).
4. L had not returned at g0: the GPU waited on the host. [g0, min(g1, L.end)) is split by T's
   segments: ``launch`` (inside a launch call), ``host`` (other calls, short no-call stretches),
   ``stall`` (long stretches and long calls), ``setup`` (setup calls), ``sync`` (a synchronize
   after g0); the rest of the gap, after L returned, is ``launch`` (the work was in flight).
   Unless K then waited longer after L returned than the host held it (g1 - L.end > L.end - g0),
   behind a stream wait or the legacy default stream (rule 5, its work ending from L.end on) or
   for longer than the stall threshold: then the whole gap is ``dependency``.
5. ``dependency``: K was queued, but its stream was told to wait on an event (stream-wait
   SYNCHRONIZATION record on K's stream issued after the stream's previous launch), or the legacy
   default stream's implicit synchronization held it: K is on the null stream and an activity
   (kernel, copy, memset) of a blocking stream (created with default flags) of its process and
   device ended in [g0, g1], or K is on a blocking stream and an activity of that null stream
   did (an end at g0 included: the gap began where the work K waited for ended). The stream
   kinds are the trace's (TraceFrames.streams: nsys records them; a PyTorch profiler trace does
   not, and the rule then never applies).
6. ``memop``: K was queued and the previous operation on K's stream is a copy or memset that
   ended inside the gap: the stream's own work (a library's memset between two of its kernels),
   not a wait on another stream.
7. ``pipeline``: queued with nothing to wait for: the device's own turnaround.

Rules 1, 2, 5, 6 and 7 give the whole gap one category; rules 3 and 4 split it, so a gap's
categories always sum to its length.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from gapscope import catalog
from gapscope.analysis import host_timeline as ht
from gapscope.analysis.host_timeline import DEFAULT_STALL_THRESHOLD_NS, HostTimeline
from gapscope.analysis.intervals import union_blocks
from gapscope.analysis.keys import (
    TimeKeys, index_dtype, narrowed, narrowed_blocks, pid_stream_key, small_codes, stream_key,
    stream_key_without_device, unpack_stream_key,
)
from gapscope.analysis.metrics import ActivityArrays, GapList
from gapscope.trace.cuda_api import QUIET_CALLS, base_name, call_role
from gapscope.trace.frames import ActivityKind, TraceFrames


class IdleCategory(enum.IntEnum):
    """Why the GPU was idle; values index ``gap_by_category_ns``. The first five are what the
    launching thread was doing (gapscope.analysis.host_timeline numbers them alike)."""

    LAUNCH = ht.STATE_LAUNCH
    HOST = ht.STATE_HOST
    STALL = ht.STATE_STALL
    SETUP = ht.STATE_SETUP
    SYNC = ht.STATE_SYNC
    DEPENDENCY = 5
    MEMOP = 6
    PIPELINE = 7
    UNKNOWN = 8

    @property
    def label(self) -> str:
        return self.name.lower()


CATEGORY_LABELS = catalog.CATEGORY_NAMES
N_CATEGORIES = len(IdleCategory)
if tuple(c.label for c in IdleCategory) != CATEGORY_LABELS:  # the catalog orders every table
    raise ImportError("IdleCategory is out of step with gapscope.catalog.CATEGORIES")


@dataclass(frozen=True)
class GapSplit:
    """The categories of a list of gaps, compactly: ``whole[i]`` is the one category of gap i,
    or -1 when its time is split over the launching thread's states, which are then row
    ``state_row[i]`` of ``states`` (shape (m, N_STATES); the levels of one trace share rows).
    ``category`` is each gap's largest category (the first on a tie)."""

    whole: np.ndarray
    state_row: np.ndarray
    states: np.ndarray
    category: np.ndarray

    def take(self, idx: np.ndarray) -> "GapSplit":
        """The split of the gaps ``idx``."""
        return GapSplit(self.whole[idx], self.state_row[idx], self.states, self.category[idx])

    def compacted(self) -> "GapSplit":
        """The same split with only the state rows its gaps use (a subset of a level's gaps,
        :meth:`take`, still shares the level's whole ``states``)."""
        used = np.flatnonzero(self.state_row >= 0)
        state_row = np.full(self.state_row.size, -1, dtype=np.int64)
        state_row[used] = np.arange(used.size)
        return GapSplit(self.whole, state_row, self.states[self.state_row[used]], self.category)

    @staticmethod
    def concat(parts: list["GapSplit"]) -> "GapSplit":
        """The splits of several gap lists, one after another, as one."""
        offset = np.cumsum([0] + [p.states.shape[0] for p in parts[:-1]])
        return GapSplit(
            whole=np.concatenate([p.whole for p in parts]),
            state_row=np.concatenate([np.where(p.state_row >= 0, p.state_row + o, -1) for p, o in zip(parts, offset)]),
            states=np.concatenate([p.states for p in parts]),
            category=np.concatenate([p.category for p in parts]),
        )

    def matrix(self, idx: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Time per IdleCategory of the gaps ``idx`` (``length``: every gap's length), shape
        (len(idx), N_CATEGORIES)."""
        out = np.zeros((idx.size, N_CATEGORIES), dtype=np.int64)
        w = self.whole[idx]
        one = np.flatnonzero(w >= 0)
        out[one, w[one]] = length[idx[one]]
        split = np.flatnonzero(w < 0)
        out[split, :ht.N_STATES] = self.states[self.state_row[idx[split]]]
        return out

    def sums(self, rows: np.ndarray, length: np.ndarray, n_rows: int) -> np.ndarray:
        """Gap time per (row, category), shape (n_rows, N_CATEGORIES); each row sums to its
        gaps' total (whole gaps as weighted counts: exact below 2**53 ns)."""
        rows = np.asarray(rows, dtype=np.int64)
        one = self.whole >= 0
        out = np.bincount(rows[one] * N_CATEGORIES + self.whole[one], weights=length[one],
                          minlength=n_rows * N_CATEGORIES)
        out = np.rint(out).astype(np.int64).reshape(n_rows, N_CATEGORIES)
        split = np.flatnonzero(~one)
        if split.size:
            r = rows[split]
            states = self.states.take(self.state_row[split], axis=0)  # (split gaps, N_STATES)
            if (r[1:] < r[:-1]).any():  # a level's gaps come in row order; sort any others
                order = np.argsort(r, kind="stable")
                r, states = r[order], states[order]
            first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])  # where each row's gaps begin
            out[r[first], :ht.N_STATES] += np.add.reduceat(states, first, axis=0)
        return out


def api_names(frames: TraceFrames) -> tuple[np.ndarray, np.ndarray]:
    """(code per API call, table of suffix-stripped names): ``table[code]`` is a call's name."""
    codes, uniques = pd.factorize(frames.api["name_id"].to_numpy())
    names = frames.names.lookup(int(u) for u in uniques)
    table = np.array([base_name(names[int(u)]) for u in uniques] + [""], dtype=object)
    return small_codes(codes, table.size), table


def _previous(sorted_keys: np.ndarray, query: np.ndarray, side: str = "right") -> np.ndarray:
    """Index of the last sorted key <= query (side='right') or < query (side='left'); -1 if none."""
    return np.searchsorted(sorted_keys, query, side=side) - 1


#: Gaps classified at a time (Attributor.classify).
CLASSIFY_BLOCK = 1 << 18


class Attributor:
    """Classifies gaps of any level against one trace; build once, call ``classify`` per level."""

    def __init__(self, frames: TraceFrames, acts: ActivityArrays, launch: np.ndarray,
                 names: tuple[np.ndarray, np.ndarray] | None = None, *,
                 stall_threshold_ns: int = DEFAULT_STALL_THRESHOLD_NS, start_order: np.ndarray | None = None,
                 read: Callable[[], None] | None = None) -> None:
        """``names``: :func:`api_names` of ``frames``, when the caller has them already;
        ``stall_threshold_ns``: no-call stretches and calls longer than this are ``stall``;
        ``start_order``: the activities in (start, index) order, when the caller has it (the
        windows' order; else it is made here), from which each one's predecessor on its stream is found;
        ``read``: called once the calls' ends and threads are read for good (the host timeline
        built; the caller may let those frame columns go)."""
        self.stall_threshold_ns = stall_threshold_ns
        self.frames = frames
        self.acts = acts
        self.launch = launch
        api = frames.api
        self.name_codes, self.name_table = names if names is not None else api_names(frames)
        self.api_start = api["start"].to_numpy()
        api_end = api["end"].to_numpy()
        self.is_memop = acts.is_memop
        # Times keyed per device, stream or calling thread (the timeline checks its threads).
        self.tk = TimeKeys([acts.start, acts.end, self.api_start, api_end],
                           max(acts.device_ids.size, acts.stream_keys.size))
        self.lo = self.tk.lo
        roles = np.array([call_role(str(n)) for n in self.name_table], dtype=np.int8)
        quiet = np.isin(self.name_table, sorted(QUIET_CALLS))
        # (the calls' threads are read here only: the timeline keeps their codes)
        self.timeline = HostTimeline(self.api_start, api_end, api["tid"].to_numpy(), roles[self.name_codes],
                                     stall_threshold_ns, self.tk,
                                     counted=~quiet[self.name_codes] if quiet.any() else None)
        # From here a call's end is its start plus its length, kept in 32 bits where every
        # call fits (4 bytes a call, not the end's 8).
        self.api_length = _call_lengths(self.api_start, api_end)
        del api_end
        if read is not None:
            read()
        self._index_memops()
        self._index_streams(start_order)
        #: whether any activity has its launching call in the trace (else every gap is `unknown`)
        self.has_calls = bool((launch >= 0).any())

    @property
    def names(self) -> np.ndarray:
        """Suffix-stripped name of every API call."""
        return self.name_table[self.name_codes]

    # -- indexes built once -------------------------------------------------------------
    def _index_memops(self) -> None:
        """Per device, the union of non-busy memop intervals as sorted blocks with the
        cumulative covered time before each block (to measure coverage of any window)."""
        acts = self.acts
        m = acts.is_memop & ~acts.busy
        if not m.any():
            self.mem_keys = None
            return
        dev, start, end = union_blocks(acts.device_code[m], acts.start[m], acts.end[m])
        bs = self.tk.key(dev, start)
        be = self.tk.key(dev, end)
        self.mem_keys = (bs, be, np.r_[0, np.cumsum(be - bs)[:-1]])

    def _covered_before(self, t: np.ndarray) -> np.ndarray:
        bs, be, before = self.mem_keys
        i = _previous(bs, t)
        inside = np.where(i >= 0, np.minimum(t, be[np.maximum(i, 0)]) - bs[np.maximum(i, 0)], 0)
        return np.where(i >= 0, before[np.maximum(i, 0)] + inside, 0)

    def _index_streams(self, start_order: np.ndarray | None) -> None:
        """Per stream: each activity's predecessor by GPU start (ties by index), and the
        stream-wait-event calls issued on it (to see whether a wait came between two launches)."""
        acts = self.acts
        if start_order is None:
            start_order = narrowed(np.argsort(acts.start, kind="stable"), acts.start.size)
        self.prev_on_stream = previous_on_stream(acts.stream_code, acts.stream_keys.size, start_order)

        self.wait_keys = None
        waits = self.frames.syncs  # stream-wait records only; each starts inside its API call
        if len(waits):
            code = self._wait_stream_codes(waits)
            ok = code >= 0
            self.wait_keys = np.sort(self.tk.key(code[ok], waits["start"].to_numpy()[ok]))
        self._index_implicit_sync()

    def _index_implicit_sync(self) -> None:
        """The legacy default stream's implicit synchronization: each stream's ``sync_target``,
        the group of streams whose earlier work it waits for (a blocking stream: the null stream
        of its process and device; the null stream: that process's and device's blocking
        streams; -1 for any other stream or where the trace records no kinds), a group named by
        the lowest code of its streams; and the end of every activity of a group's streams,
        keyed by the group (``sync_keys``, sorted), with the running count of copies and memsets
        among them (``sync_memops``)."""
        acts = self.acts
        self.sync_keys = None
        kinds = self.frames.streams
        if len(kinds) == 0:
            return
        pid, dev_code, _ = unpack_stream_key(acts.stream_keys)
        kind_dev = pd.Index(acts.device_ids).get_indexer(kinds["device"].to_numpy())
        known = kind_dev >= 0
        keys = pd.Index(stream_key(kinds["proc"].to_numpy()[known], kind_dev[known], kinds["stream"].to_numpy()[known]))
        first = ~keys.duplicated()
        at = keys[first].get_indexer(acts.stream_keys)
        kind = np.where(at >= 0, kinds["kind"].to_numpy()[known][first][np.maximum(at, 0)], catalog.STREAM_UNKNOWN)
        side = np.where(kind == catalog.STREAM_NULL, 0, np.where(kind == catalog.STREAM_BLOCKING, 1, -1))
        mine = pd.DataFrame({"pid": pid, "dev": dev_code, "side": side, "code": np.arange(side.size)})[side >= 0]
        if mine["side"].nunique() < 2:  # no null stream and blocking stream both ran work
            return
        lowest = mine.groupby(["pid", "dev", "side"])["code"].min()
        group = np.full(side.size, -1, dtype=np.int64)
        own = pd.MultiIndex.from_frame(mine[["pid", "dev", "side"]])
        group[mine["code"].to_numpy()] = lowest.reindex(own).to_numpy()
        other = mine.assign(side=1 - mine["side"])[["pid", "dev", "side"]]
        target = np.full(side.size, -1, dtype=np.int64)
        target[mine["code"].to_numpy()] = np.nan_to_num(
            lowest.reindex(pd.MultiIndex.from_frame(other)).to_numpy(dtype=np.float64), nan=-1).astype(np.int64)
        if not (target >= 0).any():
            return
        g = group[acts.stream_code]
        sel = np.flatnonzero((g >= 0) & (target[np.maximum(g, 0)] >= 0))  # only groups some stream waits for
        order = np.argsort(self.tk.key(g[sel], acts.end[sel]), kind="stable")
        sel = sel[order]
        self.sync_target = target
        self.sync_keys = self.tk.key(g[sel], acts.end[sel])
        self.sync_memops = np.r_[0, np.cumsum(self.is_memop[sel])]

    def _implicit_sync(self, k: np.ndarray, after: np.ndarray, g1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(waited, behind a memop) of the activities ``k`` ending gaps at ``g1``: whether an
        activity of a stream that ``k``'s stream implicitly synchronizes with (the legacy default
        stream and the blocking streams of its process and device, either way) ended in
        ``[after, g1]``, and whether a copy or memset of such a stream did."""
        none = np.zeros(k.size, dtype=bool)
        if self.sync_keys is None:
            return none, none
        target = self.sync_target[self.acts.stream_code[k]]
        has = np.flatnonzero(target >= 0)
        if has.size == 0:
            return none, none
        t, upto = target[has], g1[has]
        since = np.maximum(after[has], self.lo)  # (a call's end after g1 leaves nothing to wait for)
        hi = np.searchsorted(self.sync_keys, self.tk.key(t, upto), "right")
        lo = np.searchsorted(self.sync_keys, self.tk.key(t, np.minimum(since, upto)), "left")
        lo = np.where(since > upto, hi, lo)
        waited, behind = none.copy(), none.copy()
        waited[has] = hi > lo
        behind[has] = self.sync_memops[hi] > self.sync_memops[lo]
        return waited, behind

    def _wait_stream_codes(self, waits: pd.DataFrame) -> np.ndarray:
        """The stream code of each stream-wait record, -1 where the stream has no activity.

        nsys 2025.3 files a cross-device wait under device 0 whatever the waiting stream's
        device, so a record is matched on (process, stream id) when that pair names one stream
        of the trace, and on (process, device, stream id) otherwise."""
        acts = self.acts
        keys = acts.stream_keys
        pid_stream = pd.Series(np.arange(keys.size), index=stream_key_without_device(keys))
        unique = pid_stream[~pid_stream.index.duplicated(keep=False)]
        proc = waits["proc"].to_numpy()
        stream = waits["stream"].to_numpy()
        by_pair = unique.reindex(pid_stream_key(proc, stream)).to_numpy()
        dev = pd.Index(acts.device_ids).get_indexer(waits["device"].to_numpy())
        by_key = pd.Index(keys).get_indexer(stream_key(proc, np.maximum(dev, 0), stream))
        by_key = np.where(dev >= 0, by_key, -1)
        return np.where(np.isnan(by_pair), by_key, np.nan_to_num(by_pair, nan=-1)).astype(np.int64)

    # -- per activity -----------------------------------------------------------------------
    def _facts(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(linked, call end, calling thread, waited, previous copy's end) of the activities
        ``k``: whether a launching call is in the trace, its end and thread code (the lowest
        int64 and -1 without one), whether a stream wait was issued on the activity's stream
        since the previous launch there, and the end of the previous operation on its stream when
        that is a copy or memset (else the lowest int64)."""
        lowest = np.iinfo(np.int64).min
        call = self.launch[k]
        linked = call >= 0
        if not self.has_calls:  # no API calls in the trace: every gap is `unknown`
            none = np.full(k.size, lowest, dtype=np.int64)
            return linked, none, np.full(k.size, -1, dtype=np.int64), np.zeros(k.size, dtype=bool), none
        c = np.maximum(call, 0)
        call_end = np.where(linked, self.api_start[c] + self.api_length[c], lowest)
        call_thread = np.where(linked, self.timeline.call_thread[c], -1)
        prev = self.prev_on_stream[k]
        p = np.maximum(prev, 0)
        prev_copy_end = np.where((prev >= 0) & self.is_memop[p], self.acts.end[p], lowest)
        waited = np.zeros(k.size, dtype=bool)
        if self.wait_keys is not None:
            sc = self.acts.stream_code[k]
            prev_call = np.where(prev >= 0, self.launch[p], -1)
            t_prev = np.where(prev_call >= 0, self.api_start[np.maximum(prev_call, 0)], self.lo)
            hi = np.searchsorted(self.wait_keys, self.tk.key(sc, self.api_start[c]), "right")
            lo = np.searchsorted(self.wait_keys, self.tk.key(sc, t_prev), "right")
            waited = linked & (hi > lo)
        return linked, call_end, call_thread, waited, prev_copy_end

    # -- classification -------------------------------------------------------------------
    def classify(self, gaps: GapList) -> GapSplit:
        """The categories of every gap: one category for the whole gap (rules 1, 2, 5, 6, 7), or
        its time split over the launching thread's states (rules 3, 4); every gap's time sums
        to its length."""
        return self._classified(gaps.start, gaps.length, gaps.next_act)

    def _classified(self, g0: np.ndarray, length: np.ndarray, k: np.ndarray) -> GapSplit:
        """:meth:`classify` of the gaps starting at ``g0``, of ``length``, ended by activity
        ``k``: CLASSIFY_BLOCK gaps at a time (each gap's categories are its own), so that the
        rules' temporaries (some 130 bytes a gap) do not grow with the level's length."""
        n = length.size
        if n <= CLASSIFY_BLOCK:
            return self._classified_block(g0, length, k)
        return GapSplit.concat([self._classified_block(g0[a:a + CLASSIFY_BLOCK], length[a:a + CLASSIFY_BLOCK],
                                                       k[a:a + CLASSIFY_BLOCK]) for a in range(0, n, CLASSIFY_BLOCK)])

    def _classified_block(self, g0: np.ndarray, length: np.ndarray, k: np.ndarray) -> GapSplit:
        n = length.size
        if n == 0:
            empty = np.zeros(0, dtype=np.int8)
            return GapSplit(empty, np.zeros(0, dtype=np.int64), np.zeros((0, ht.N_STATES), dtype=np.int64), empty)
        whole = np.full(n, IdleCategory.PIPELINE, dtype=np.int8)
        linked, call_end, call_thread, waited, prev_copy_end = self._facts(k)
        # memop: the previous operation on K's stream is a copy or memset that ended inside the
        # gap (the stream's own work, not a wait on another stream) ...
        whole[prev_copy_end > g0] = IdleCategory.MEMOP
        # ... unless K waited on another stream: a stream wait issued between the previous launch
        # on K's stream and L, or the legacy default stream's implicit synchronization (an
        # activity of a stream K's stream synchronizes with ended in the gap or at its start,
        # and not before L returned).
        g1 = g0 + length
        implicit, implicit_memop = self._implicit_sync(k, np.maximum(g0, call_end), g1)
        whole[waited | implicit] = IdleCategory.DEPENDENCY
        host_side = call_end > g0  # L had not returned: the GPU waited on the host
        # ... unless K waited longer after L returned than the host held it, queued behind a
        # stream wait or an implicit synchronization, or for longer than the stall threshold (a
        # launch reaches an idle GPU within microseconds; a wait the trace does not hold, such as
        # a PyTorch profiler trace's without cuda_sync events): then that is what the GPU waited
        # on (dependency).
        after = g1 - call_end
        host_side &= ~((waited | implicit | (after > self.stall_threshold_ns)) & (after > call_end - g0))
        whole[~host_side & (call_end > g0) & linked] = IdleCategory.DEPENDENCY
        del waited, prev_copy_end
        unlinked = ~linked
        whole[unlinked] = IdleCategory.UNKNOWN
        host_side &= ~unlinked
        # A gap K waited through for a copy or memset of a stream it implicitly synchronizes with
        # stays dependency however much of it copies covered: that copy is what K waited for.
        keep_dependency = implicit_memop & ~host_side & linked
        del implicit, implicit_memop
        if self.mem_keys is not None:
            bs, be, _ = self.mem_keys
            k0 = self.tk.key(self.acts.device_code[k], g0)
            k1 = k0 + length
            # Only gaps that some copy block overlaps: the first block ending after g0 starts before g1.
            j = np.minimum(np.searchsorted(be, k0, "right"), be.size - 1)
            hit = np.flatnonzero((be[j] > k0) & (bs[j] < k1))
            covered = self._covered_before(k1[hit]) - self._covered_before(k0[hit])
            mem = hit[2 * covered >= length[hit]]
            mem = mem[~keep_dependency[mem]]
            whole[mem] = IdleCategory.MEMOP
            host_side[mem] = False
        hs = np.flatnonzero(host_side)
        states = self._host_side(g0[hs], length[hs], call_end[hs], call_thread[hs])
        category = whole.copy()
        category[hs] = np.argmax(states, axis=1) if hs.size else category[hs]
        whole[hs] = -1
        state_row = np.full(n, -1, dtype=np.int64)
        state_row[hs] = np.arange(hs.size)
        return GapSplit(whole, state_row, states, category)

    def attribute(self, levels: list[GapList]) -> list[GapList]:
        """Every level's gaps with their split and category. A gap's categories depend only on
        its start, length and the activity that ends it, so the first level is classified (unless
        it was attributed already: its split is kept) and the other levels' gaps that are the
        same gap (most of them) take its split."""
        first = levels[0]
        base = first.split if first.split is not None else self.classify(first)
        out = [replace(first, split=base, category=base.category)]
        gap_ended_by = self._gap_ended_by(first.next_act)
        for g in levels[1:]:
            if first.length.size == 0:  # no gap at the first level (one kernel spans it): on their own
                split = self.classify(g)
                out.append(replace(g, split=split, category=split.category))
                continue
            j = gap_ended_by(g.next_act)
            j0 = np.maximum(j, 0)
            same = (j >= 0) & (first.start[j0] == g.start) & (first.length[j0] == g.length)
            split = base.take(j0)
            other = np.flatnonzero(~same)
            if other.size:  # gaps of this level only: classified, their states after the base's
                fresh = self._classified(g.start[other], g.length[other], g.next_act[other])
                states = np.concatenate([base.states, fresh.states])
                whole, state_row, category = split.whole.copy(), split.state_row.copy(), split.category.copy()
                whole[other], category[other] = fresh.whole, fresh.category
                state_row[other] = np.where(fresh.state_row >= 0, fresh.state_row + base.states.shape[0], -1)
                split = GapSplit(whole, state_row, states, category)
            out.append(replace(g, split=split, category=split.category))
        return out

    def _gap_ended_by(self, next_act: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        """A function from activities to the index of the gap (of a level whose gaps each end
        at a distinct activity, ``next_act``) that each ends, -1 for none: a table over every
        activity for a whole level, a search in a sorted copy for a window's few."""
        if next_act.size * 8 >= self.acts.start.size:
            row_of = np.full(self.acts.start.size, -1, dtype=np.int64)
            row_of[next_act] = np.arange(next_act.size)
            return lambda k: row_of[k]
        order = np.argsort(next_act, kind="stable")
        ends = next_act[order]

        def lookup(k: np.ndarray) -> np.ndarray:
            at = np.minimum(np.searchsorted(ends, k), max(ends.size - 1, 0))
            return np.where(ends[at] == k, order[at], -1) if ends.size else np.full(k.size, -1, dtype=np.int64)
        return lookup

    def _host_side(self, g0: np.ndarray, length: np.ndarray, call_end: np.ndarray, thread: np.ndarray) -> np.ndarray:
        """Rules 3 and 4 for gaps whose launching call (ending at ``call_end``, on the thread
        ``thread``) had not returned at their start: their time per thread state, shape
        (len(g0), N_STATES)."""
        g1 = g0 + length
        upto = np.minimum(g1, call_end)  # after L returned, the work was in flight
        states, at_g0 = self.timeline.split(thread, g0, upto)
        states[:, ht.STATE_LAUNCH] += g1 - upto
        at_sync = np.flatnonzero(at_g0 == ht.STATE_SYNC)
        if at_sync.size:
            # The CPU had serialized itself with the GPU: sync, except the stalls and setup.
            kept = states[at_sync][:, [ht.STATE_STALL, ht.STATE_SETUP]]
            states[at_sync] = 0
            states[at_sync, ht.STATE_STALL] = kept[:, 0]
            states[at_sync, ht.STATE_SETUP] = kept[:, 1]
            states[at_sync, ht.STATE_SYNC] = length[at_sync] - kept.sum(axis=1)
        return states


#: Activities :func:`previous_on_stream` takes at a time.
STREAM_BLOCK = 1 << 20


def _call_lengths(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``end - start`` per call, in 32 bits where every one fits, else 64 (keys.narrowed_blocks,
    STREAM_BLOCK calls at a time): no 64-bit array of every length held beside the narrow one."""
    return narrowed_blocks(start.size, STREAM_BLOCK, lambda lo, hi: end[lo:hi] - start[lo:hi])


def previous_on_stream(stream_code: np.ndarray, n_streams: int, start_order: np.ndarray,
                       block: int | None = None) -> np.ndarray:
    """Each activity's predecessor on its stream in (start, index) order, -1 for a stream's
    first: the activities of ``start_order`` (that order) taken ``block`` at a time, each
    block's streams carried from the last activity each stream had before it. The same as
    sorting every activity by (stream, start, index), without a 64-bit index of them all."""
    block = block or STREAM_BLOCK
    n = start_order.size
    prev = np.full(n, -1, dtype=index_dtype(n))
    last = np.full(max(int(n_streams), 1), -1, dtype=np.int64)  # each stream's latest activity so far
    for lo in range(0, n, block):
        a = start_order[lo:lo + block]
        code = stream_code[a]
        by_stream = np.argsort(code, kind="stable")  # in the block: by stream, then (start, index)
        a, code = a[by_stream], code[by_stream]
        first = np.r_[True, code[1:] != code[:-1]]
        before = np.empty(a.size, dtype=np.int64)
        before[1:] = a[:-1]
        before[first] = last[code[first]]
        prev[a] = before
        final = np.r_[first[1:], True]
        last[code[final]] = a[final]
    return prev


def gap_subset(gaps: GapList, idx: np.ndarray) -> GapList:
    """The gaps ``idx`` of a gap list."""
    def part(value: Any) -> Any:
        return None if value is None else value.take(idx) if isinstance(value, GapSplit) else value[idx]

    return GapList(**{f: part(getattr(gaps, f)) for f in GapList.__dataclass_fields__})


def category_sums(gaps: GapList, n_rows: int) -> np.ndarray:
    """Gap time per (row, category) of attributed gaps, shape (n_rows, N_CATEGORIES); each row
    sums to its gaps' total."""
    return gaps.split.sums(gaps.row, gaps.length, n_rows)


def setup_sums(gaps: GapList, n_rows: int) -> np.ndarray:
    """Gap time per (row, category) of the setup gaps: those whose largest category is setup
    (module loading, allocations, graph capture: one-off in a steady state; docs/metrics.md,
    "Steady state")."""
    return category_sums(gap_subset(gaps, np.flatnonzero(gaps.split.category == IdleCategory.SETUP)), n_rows)


@dataclass(frozen=True)
class LongStalls:
    """The long stall gaps of a level: those whose largest category is stall and that last the
    stall threshold or longer, each with its row, length, time per category and the activity
    that ended it. Few in any trace (a loop's host stretches are microseconds), so held as a
    list."""

    row: np.ndarray
    length: np.ndarray
    split: np.ndarray  # (gaps, N_CATEGORIES)
    next_act: np.ndarray  # the activity ending each gap (an index of the activity frame)

    @classmethod
    def of(cls, gaps: GapList, stall_threshold_ns: int) -> "LongStalls":
        idx = np.flatnonzero((gaps.split.category == IdleCategory.STALL) & (gaps.length >= max(stall_threshold_ns, 1)))
        return cls(gaps.row[idx].astype(np.int64), gaps.length[idx].astype(np.int64),
                   gaps.split.matrix(idx, gaps.length), gaps.next_act[idx].astype(np.int64))

    @classmethod
    def concat(cls, parts: list["LongStalls"]) -> "LongStalls":
        if not parts:
            empty = np.zeros(0, np.int64)
            return cls(empty, empty, np.zeros((0, N_CATEGORIES), np.int64), empty)
        return cls(*(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("row", "length", "split", "next_act")))

    def regrouped(self, group: np.ndarray) -> "LongStalls":
        """The same gaps, each row mapped through ``group`` (range pairs to ranges, ...)."""
        return LongStalls(np.asarray(group)[self.row], self.length, self.split, self.next_act)

    def once(self) -> np.ndarray:
        """Which of the gaps are one-off: a row's long stalls repeat when at least REPEATS of them
        last within a factor of 2 of their median length (a sleep, a batch loaded each step);
        those are its steady state's, every other long stall of it is one-off (first use of a
        library, a compile)."""
        if self.row.size == 0:
            return np.zeros(0, dtype=bool)
        frame = pd.DataFrame({"row": self.row, "length": self.length})
        median = frame.groupby("row")["length"].transform("median").to_numpy(np.float64)
        near = (self.length >= median / 2) & (self.length <= median * 2)
        repeating = pd.Series(near).groupby(self.row).transform("sum").to_numpy() >= REPEATS
        return ~(near & repeating)

    def one_off(self, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """(one-off time per (row, category), one-off long stalls per row) (:meth:`once`)."""
        out = np.zeros((n_rows, N_CATEGORIES), dtype=np.int64)
        count = np.zeros(n_rows, dtype=np.int64)
        once = self.once()
        np.add.at(out, self.row[once], self.split[once])
        np.add.at(count, self.row[once], 1)
        return out, count

    def libraries(self, n_rows: int, frames: TraceFrames) -> np.ndarray:
        """Per row, the libraries (catalog.KERNEL_LIBRARIES, in its order, joined by ", ") of the
        kernels its one-off long stalls ended in: what the stalls most likely were (a library's
        plans chosen and modules loaded on first use, a compile before its first kernel); None
        where no such stall ended in a known library's kernel."""
        out = np.full(n_rows, None, dtype=object)
        once = self.once()
        ended_by, rows = self.next_act[once], self.row[once]
        kernel = frames.activities["kind"].to_numpy()[ended_by] == ActivityKind.KERNEL
        found: dict[int, set[str]] = {}
        for row, name in zip(rows[kernel].tolist(), frames.activity_names(ended_by[kernel])):
            library = catalog.kernel_library(name)
            if library != catalog.OTHER_KERNELS:
                found.setdefault(row, set()).add(library)
        order = [name for name, _ in catalog.KERNEL_LIBRARIES]
        for row, libraries in found.items():
            out[row] = ", ".join(sorted(libraries, key=order.index))
        return out


#: How many long stalls of about one length make them a row's steady state.
REPEATS = 3


def as_dicts(sums: np.ndarray) -> list[dict[str, int]]:
    """Rows of ``category_sums`` as {category label: ns} dicts."""
    return [dict(zip(CATEGORY_LABELS, row)) for row in np.asarray(sums, dtype=np.int64).tolist()]


def longest_indices(lengths: np.ndarray, top: int) -> np.ndarray:
    """Indices of the ``top`` largest values, largest first, ties in index order (as a stable
    descending sort would give), in linear time."""
    if top >= lengths.size:
        return np.argsort(-lengths, kind="stable")
    threshold = np.partition(lengths, lengths.size - top)[lengths.size - top]
    above = np.flatnonzero(lengths > threshold)
    equal = np.flatnonzero(lengths == threshold)[: top - above.size]
    pick = np.concatenate([above, equal])
    return pick[np.lexsort((pick, -lengths[pick]))]


def first_of_each_gap(gaps: GapList) -> np.ndarray:
    """The position of each distinct gap's first entry (a gap is its device, start and the
    activity ending it: nested ranges list the same gap once each)."""
    key = pd.DataFrame({"d": gaps.device, "s": gaps.start, "k": gaps.next_act})
    return np.flatnonzero(~key.duplicated().to_numpy())


def distinct_gaps(gaps: GapList) -> GapList:
    """One entry per distinct gap (:func:`first_of_each_gap`)."""
    if gaps.length.size == 0:
        return gaps
    return gap_subset(gaps, first_of_each_gap(gaps))


def activities_before(frames: TraceFrames, acts: ActivityArrays, gaps: GapList, idx: np.ndarray) -> np.ndarray:
    """For each gap ``idx``, the busy activity that ended exactly at its start on its device (the
    first such in the activity frame), -1 where none did."""
    ends = frames.activities["end"].to_numpy()
    starts = gaps.start[idx]
    cand = np.flatnonzero(acts.busy & pd.Series(ends, copy=False).isin(starts).to_numpy())  # a hash set, not a sort
    before = pd.DataFrame({"device": acts.device_of(cand), "end": ends[cand], "idx": cand}).drop_duplicates(["device", "end"])
    want = pd.DataFrame({"device": gaps.device[idx], "end": starts})
    prev = want.merge(before, on=["device", "end"], how="left")["idx"].to_numpy(dtype=np.float64)
    return np.where(np.isnan(prev), -1, prev).astype(np.int64)


def longest_gaps(
    frames: TraceFrames, gaps: GapList, launch: np.ndarray,
    name_codes: np.ndarray, name_table: np.ndarray, acts: ActivityArrays, top: int,
) -> list[dict]:
    """The ``top`` longest of the (attributed) gaps with their categories and their
    surroundings: the activity that ended just before (its end is the gap's start), the one
    after, and the call that launched the one after."""
    if top <= 0 or gaps.length.size == 0:
        return []
    cats = gaps.category
    pick = longest_indices(gaps.length, top)
    split = gaps.split.matrix(pick, gaps.length)
    prev = activities_before(frames, acts, gaps, pick)
    nxt = gaps.next_act[pick]
    stream = acts.stream_of(nxt)  # as the streams table gives it
    after_names = frames.activity_names(nxt)
    has_prev = prev >= 0
    prev_names = dict(zip(np.flatnonzero(has_prev).tolist(), frames.activity_names(prev[has_prev])))
    call = launch[nxt]
    rows = []
    for j, i in enumerate(pick.tolist()):
        rows.append({
            "start_ns": int(gaps.start[i]),
            "gap_ns": int(gaps.length[i]),
            "category": IdleCategory(int(cats[i])).label,
            "gap_by_category_ns": dict(zip(CATEGORY_LABELS, map(int, split[j]))),
            "device": int(gaps.device[i]),
            "stream": int(stream[j]),
            "before": prev_names.get(j),
            "after": after_names[j],
            "launched_by": str(name_table[name_codes[call[j]]]) if call[j] >= 0 else None,
        })
    return rows
