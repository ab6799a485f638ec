"""Why the GPU sat idle: one category per gap, decided from the kernel that ends the gap and
the API call that launched it (docs/metrics.md, "Gap attribution", holds the exact rules).

Rules, first match wins, for a gap [g0, g1) ended by activity K, launched by call L:

1. ``memop``: memcpy/memset (not counted as busy) on the gap's device cover at least half of it.
2. ``unknown``: K has no launching call in the trace.
3. ``sync``: L had not returned at g0 (L.end > g0) and L's thread was inside a synchronizing
   call at g0 (stream/device/event synchronize, a synchronous copy).
4. ``launch``: L had not returned at g0: the GPU waited for the CPU to issue the work.
5. ``dependency``: K was queued, but its stream was told to wait on an event (stream-wait
   SYNCHRONIZATION record on K's stream issued after the stream's previous launch), or the
   previous operation on K's stream is a copy that ended inside the gap.
6. ``pipeline``: queued with nothing to wait for: the device's own turnaround.
"""

from __future__ import annotations

import enum

import numpy as np
import pandas as pd

from gapscope.analysis.intervals import union_blocks
from gapscope.analysis.keys import TimeKeys, pid_stream_key, stream_key, stream_key_without_device
from gapscope.analysis.metrics import ActivityArrays, GapList
from gapscope.trace.cuda_api import SYNC_CALLS, base_name
from gapscope.trace.frames import TraceFrames


class IdleCategory(enum.IntEnum):
    """Why a gap happened; values index ``gap_by_category_ns``."""

    LAUNCH = 0
    SYNC = 1
    DEPENDENCY = 2
    MEMOP = 3
    PIPELINE = 4
    UNKNOWN = 5

    @property
    def label(self) -> str:
        return self.name.lower()


CATEGORY_LABELS = tuple(c.label for c in IdleCategory)


def api_names(frames: TraceFrames) -> tuple[np.ndarray, np.ndarray]:
    """(code per API call, table of suffix-stripped names): ``table[code]`` is a call's name."""
    codes, uniques = pd.factorize(frames.api["name_id"].to_numpy())
    names = frames.names.lookup(int(u) for u in uniques)
    table = np.array([base_name(names[int(u)]) for u in uniques] + [""], dtype=object)
    return codes.astype(np.int64), table


def _previous(sorted_keys: np.ndarray, query: np.ndarray, side: str = "right") -> np.ndarray:
    """Index of the last sorted key <= query (side='right') or < query (side='left'); -1 if none."""
    return np.searchsorted(sorted_keys, query, side=side) - 1


class Attributor:
    """Classifies gaps of any level against one trace; build once, call ``classify`` per level."""

    def __init__(self, frames: TraceFrames, acts: ActivityArrays, launch: np.ndarray,
                 names: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """``names``: :func:`api_names` of ``frames``, when the caller has them already."""
        self.frames = frames
        self.acts = acts
        self.launch = launch
        api = frames.api
        self.name_codes, self.name_table = names if names is not None else api_names(frames)
        self.api_start = api["start"].to_numpy()
        self.api_end = api["end"].to_numpy()
        self.api_tid = api["tid"].to_numpy()
        self.is_memop = acts.is_memop
        # Times keyed per device, stream or synchronizing thread (checked again for the threads).
        self.tk = TimeKeys([acts.start, acts.end, self.api_start, self.api_end],
                           max(acts.device_ids.size, acts.stream_keys.size))
        self.lo = self.tk.lo
        self._index_memops()
        self._index_syncs()
        self._index_streams()
        self._index_activities()

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

    def _index_syncs(self) -> None:
        """Synchronizing calls keyed by (thread, start), threads numbered among those that
        made any."""
        is_sync_name = np.isin(self.name_table, list(SYNC_CALLS))
        idx = np.flatnonzero(is_sync_name[self.name_codes])
        codes, self.sync_tids = pd.factorize(self.api_tid[idx])
        self.tk.check(len(self.sync_tids))
        keys = self.tk.key(codes, self.api_start[idx])
        order = np.argsort(keys, kind="stable")
        self.sync_keys = keys[order]
        self.sync_end = self.api_end[idx][order]

    def _index_streams(self) -> None:
        """Per stream: each activity's predecessor by GPU start, and the stream-wait-event calls
        issued on it (to see whether a wait came between two launches)."""
        acts = self.acts
        order = np.lexsort((acts.start, acts.stream_code))
        prev = np.full(order.size, -1, dtype=np.int64)
        same = acts.stream_code[order][1:] == acts.stream_code[order][:-1]
        prev[order[1:]] = np.where(same, order[:-1], -1)
        self.prev_on_stream = prev

        self.wait_keys = None
        waits = self.frames.syncs  # stream-wait records only; each starts inside its API call
        if len(waits) == 0:
            return
        code = self._wait_stream_codes(waits)
        ok = code >= 0
        self.wait_keys = np.sort(self.tk.key(code[ok], waits["start"].to_numpy()[ok]))

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

    # -- classification -------------------------------------------------------------------
    def _index_activities(self) -> None:
        """What the rules need per activity, computed once for every level's gaps: its call's
        end, whether a stream wait was issued on its stream since the previous launch there,
        and its launching thread's number among the threads that synchronized."""
        call = self.launch
        linked = call >= 0
        self.linked = linked
        self.call_end = np.full(call.size, np.iinfo(np.int64).min, dtype=np.int64)
        self.waited = np.zeros(call.size, dtype=bool)
        self.sync_tcode = np.full(call.size, -1, dtype=np.int64)
        if not linked.any():  # no API calls in the trace: every gap is `unknown`
            self.prev_copy_end = self.call_end
            return
        c = np.maximum(call, 0)
        self.call_end = np.where(linked, self.api_end[c], self.call_end)
        prev = self.prev_on_stream
        p = np.maximum(prev, 0)
        self.prev_copy_end = np.where((prev >= 0) & self.is_memop[p], self.acts.end[p], np.iinfo(np.int64).min)
        if self.wait_keys is not None:
            sc = self.acts.stream_code
            prev_call = np.where(prev >= 0, self.launch[p], -1)
            t_prev = np.where(prev_call >= 0, self.api_start[np.maximum(prev_call, 0)], self.lo)
            hi = np.searchsorted(self.wait_keys, self.tk.key(sc, self.api_start[c]), "right")
            lo = np.searchsorted(self.wait_keys, self.tk.key(sc, t_prev), "right")
            self.waited = linked & (hi > lo)
        if self.sync_keys.size:
            self.sync_tcode = np.where(
                linked, pd.Index(self.sync_tids).get_indexer(self.api_tid[c]), -1).astype(np.int64)

    # -- classification -------------------------------------------------------------------
    def classify(self, gaps: GapList) -> np.ndarray:
        """One IdleCategory per gap."""
        n = gaps.length.size
        cat = np.full(n, IdleCategory.PIPELINE, dtype=np.int8)
        if n == 0:
            return cat
        g0 = gaps.start
        k = gaps.next_act
        # dependency: a stream wait issued between the previous launch on K's stream and L,
        # or the previous operation on K's stream is a copy that ended inside the gap.
        cat[self.waited[k] | (self.prev_copy_end[k] > g0)] = IdleCategory.DEPENDENCY
        launch_bound = self.call_end[k] > g0
        cat[launch_bound] = IdleCategory.LAUNCH
        if self.sync_keys.size:
            lb = np.flatnonzero(launch_bound & (self.sync_tcode[k] >= 0))
            tcode = self.sync_tcode[k[lb]]
            i = _previous(self.sync_keys, self.tk.key(tcode, g0[lb]))
            i0 = np.maximum(i, 0)
            blocked = (i >= 0) & (self.tk.group_of(self.sync_keys[i0]) == tcode) & (self.sync_end[i0] > g0[lb])
            cat[lb[blocked]] = IdleCategory.SYNC
        cat[~self.linked[k]] = IdleCategory.UNKNOWN
        if self.mem_keys is not None:
            bs, be, _ = self.mem_keys
            k0 = self.tk.key(self.acts.device_code[k], g0)
            k1 = k0 + gaps.length
            # Only gaps that some copy block overlaps: the first block ending after g0 starts before g1.
            j = np.minimum(np.searchsorted(be, k0, "right"), be.size - 1)
            hit = np.flatnonzero((be[j] > k0) & (bs[j] < k1))
            covered = self._covered_before(k1[hit]) - self._covered_before(k0[hit])
            cat[hit[2 * covered >= gaps.length[hit]]] = IdleCategory.MEMOP
        return cat


def category_sums(rows: np.ndarray, lengths: np.ndarray, cats: np.ndarray, n_rows: int) -> np.ndarray:
    """Gap time per (row, category): shape (n_rows, len(IdleCategory)); rows sum to gap_ns."""
    out = np.zeros(n_rows * len(IdleCategory), dtype=np.int64)
    np.add.at(out, rows.astype(np.int64) * len(IdleCategory) + cats.astype(np.int64), lengths)
    return out.reshape(n_rows, len(IdleCategory))


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


def longest_gaps(
    frames: TraceFrames, gaps: GapList, cats: np.ndarray, launch: np.ndarray,
    name_codes: np.ndarray, name_table: np.ndarray, busy: np.ndarray, top: int,
) -> list[dict]:
    """The ``top`` longest gaps of a level with their category and their surroundings: the
    activity that ended just before (its end is the gap's start), the one after, and the call
    that launched the one after."""
    if top <= 0 or gaps.length.size == 0:
        return []
    pick = longest_indices(gaps.length, top)
    a = frames.activities
    ends = a["end"].to_numpy()
    dev = a["device"].to_numpy()
    cand = np.flatnonzero(busy & np.isin(ends, gaps.start[pick]))
    before = pd.DataFrame({"device": dev[cand], "end": ends[cand], "idx": cand}).drop_duplicates(["device", "end"])
    want = pd.DataFrame({"device": gaps.device[pick], "end": gaps.start[pick]})
    prev = want.merge(before, on=["device", "end"], how="left")["idx"].to_numpy()
    nxt = gaps.next_act[pick]
    after_names = frames.activity_names(nxt)
    has_prev = ~np.isnan(prev)
    prev_names = dict(zip(np.flatnonzero(has_prev).tolist(),
                          frames.activity_names(prev[has_prev].astype(np.int64))))
    call = launch[nxt]
    rows = []
    for j, i in enumerate(pick.tolist()):
        rows.append({
            "start_ns": int(gaps.start[i]),
            "gap_ns": int(gaps.length[i]),
            "category": IdleCategory(int(cats[i])).label,
            "device": int(gaps.device[i]),
            "stream": int(a["stream"].to_numpy()[nxt[j]]),
            "before": prev_names.get(j),
            "after": after_names[j],
            "launched_by": str(name_table[name_codes[call[j]]]) if call[j] >= 0 else None,
        })
    return rows
