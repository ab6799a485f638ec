"""What each thread that made CUDA calls was doing, moment by moment: one partition of the
thread's time into segments, each with the gap category it gives the GPU's idle time
(docs/metrics.md, "Gap attribution", holds the rules).

A thread's calls (the ``api`` frame, QUIET_CALLS left out) and the stretches between them make
the segments, in time order:

* a call holds the time from its start to the next call's start or the end of its block of
  overlapping calls, whichever comes first (calls of one thread do not overlap in the traces we
  have; where they do, a later-starting call takes over);
* a call's category follows its role (gapscope.trace.cuda_api): ``sync`` for a synchronizing
  call, ``setup`` for a setup call, else ``stall`` when the call is longer than the stall
  threshold, else ``launch`` for a launch call and ``host`` for any other call;
* time between a thread's calls is ``host``, except where its whole process made no CUDA call
  (on any thread) for longer than the stall threshold: that stretch is ``stall`` (its whole
  length decides). A thread waiting on another thread that is launching (PyTorch's autograd
  thread, a dispatcher) is not stalled. The stretch before a process's first call starts at the
  trace's earliest timestamp; the one after its last call never ends.

:meth:`HostTimeline.split` measures the time per category a thread spent inside any windows,
vectorized (a cumulative sum per category and one search per window end), with no loop per
window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from gapscope import heap
from gapscope.analysis.intervals import expand_slices, grouped_running_max
from gapscope.analysis.keys import TimeKeys, index_dtype, small_codes
from gapscope.catalog import process_of
from gapscope.trace.cuda_api import ROLE_GRAPH_LAUNCH, ROLE_LAUNCH, ROLE_SETUP, ROLE_SYNC

#: The categories a thread's state gives (indexes of HostTimeline.split's columns).
STATE_LAUNCH, STATE_HOST, STATE_STALL, STATE_SETUP, STATE_SYNC = range(5)
N_STATES = 5

#: Default stall threshold (docs/metrics.md says why 1 ms): no-CUDA-call stretches and single
#: non-synchronizing calls longer than this are ``stall``.
DEFAULT_STALL_THRESHOLD_NS = 1_000_000


class HostTimeline:
    """The segments of every calling thread, keyed by (thread code, start) in ``tk``'s key space.

    ``call_thread[i]`` is the thread code of API call ``i``; threads are numbered among those
    that made any call. Per category, the time of the segments before each one is kept densely
    (a prefix sum per segment) for frequent categories and as the positions and prefix sums of
    its own segments for rare ones; the most frequent is derived, all the time less the others'."""

    #: A category with fewer segments than this share of all is kept sparsely.
    DENSE_SHARE = 1 / 16
    #: From this many segments a dense category's sums are kept as :class:`BlockSums` (an int64
    #: per block of 2**BLOCK_SHIFT segments, an uint32 within it: 4.03 bytes a segment, not 8),
    #: computed CHUNK segments at a time.
    COMPACT_FROM = 1 << 22
    BLOCK_SHIFT = 12
    CHUNK = 1 << 20

    def __init__(self, start: np.ndarray, end: np.ndarray, tid: np.ndarray, role: np.ndarray,
                 threshold_ns: int, tk: TimeKeys, counted: np.ndarray | None = None) -> None:
        """Calls by ``start``, ``end``, ``tid`` (nsys globalTid: the process is ``tid >> 24``)
        and ``role`` (gapscope.trace.cuda_api.ROLE_*); keys in ``tk``'s space. ``counted``:
        the calls that make segments (default all); the others (QUIET_CALLS, when a trace was
        read with every call) count as host time, as when they are not read at all, so the
        figures do not depend on how many calls were read."""
        start = np.asarray(start, dtype=np.int64)
        end = np.asarray(end, dtype=np.int64)
        if (end < start).any():  # a call that ends before it starts lasts no time (else: no copy)
            end = np.maximum(end, start)
        codes, threads = pd.factorize(np.asarray(tid))
        self.call_thread = small_codes(codes, len(threads))
        del codes  # int64 over every call: the narrow codes are kept
        seg_thread = self.call_thread
        if counted is not None:
            counted = np.asarray(counted, dtype=bool)
            start, end, role, seg_thread = start[counted], end[counted], np.asarray(role)[counted], seg_thread[counted]
        self.n_threads = len(threads)
        self.threshold_ns = int(threshold_ns)
        tk.check(self.n_threads + 1)
        self.tk = tk
        if start.size == 0:
            self.seg_key = np.zeros(0, dtype=np.int64)
            self.seg_cat = np.zeros(0, dtype=np.int8)
            self._sums = [np.zeros(0, dtype=np.int64)] * N_STATES
            self._derived = -1  # no segment: split() has no time to give
            return
        thread_proc = pd.factorize(process_of(np.asarray(threads, dtype=np.int64)))[0].astype(np.int64)
        # With one calling thread per process, a process's no-call stretches are its thread's.
        alone = np.unique(thread_proc).size == thread_proc.size
        seg_key, seg_cat = self._thread_segments(seg_thread, start, end, np.asarray(role), alone)
        # The segments' masks and codes (a byte a call each, under the large blocks' size) were
        # freed into the heap: handed back for a large trace (at 10M calls some 600 MB,
        # docs/performance.md).
        heap.give_back_holes_for(start.size)
        if not alone:
            seg_key, seg_cat = self._with_process_stalls(seg_key, seg_cat, seg_thread, start, end, thread_proc)
        self.seg_key, self.seg_cat = seg_key, seg_cat
        # The time per category before each segment. A segment's length runs to the next
        # segment's key (the last's is 0); across a thread boundary that adds a constant to
        # every later sum, which cancels in split(), a difference of two points of one thread.
        # No array of every length is held: each category's sums take them from the keys.
        self._sums: list[np.ndarray | tuple[np.ndarray, np.ndarray] | None] = []
        # The most frequent category is not kept: before any segment, its time is all the time
        # (the key's distance to the first segment's) less the other categories'.
        self._derived = int(np.argmax(np.bincount(seg_cat, minlength=N_STATES)))
        for c in range(N_STATES):  # one pass per category, not per segment
            mine = seg_cat == c
            if c == self._derived:
                self._sums.append(None)
            elif np.count_nonzero(mine) >= self.DENSE_SHARE * seg_key.size:
                compact = self._block_sums(mine) if seg_key.size >= self.COMPACT_FROM else None
                if compact is not None:
                    self._sums.append(compact)
                    continue
                # The time of this category before each segment, summed in place (no array
                # of the segments' own times beside it).
                dense = np.empty_like(seg_key)
                dense[0] = 0
                np.subtract(seg_key[1:], seg_key[:-1], out=dense[1:])
                dense[1:] *= mine[:-1]
                np.cumsum(dense[1:], out=dense[1:])
                self._sums.append(dense)
            else:
                where = np.flatnonzero(mine)
                nxt = np.minimum(where + 1, seg_key.size - 1)  # the last segment's length is 0
                self._sums.append((where, np.r_[0, np.cumsum(seg_key[nxt] - seg_key[where])]))

    def _block_sums(self, mine: np.ndarray) -> BlockSums | None:
        """The time of the segments ``mine`` before each segment as :class:`BlockSums`, or None
        where a block's sums do not fit its uint32s. A thread's last segment counts no time
        here (its length runs to the next thread's first key): split() only takes differences
        of sums within one thread, which never include it."""
        seg_key, width = self.seg_key, self.tk.width
        n, shift = seg_key.size, self.BLOCK_SHIFT
        block = 1 << shift
        chunk = max(self.CHUNK >> shift, 1) << shift  # whole blocks
        # Each thread's last segment but the timeline's: the one before the next thread's keys.
        thread_last = np.searchsorted(seg_key, np.arange(1, self.n_threads, dtype=np.int64) * width) - 1
        base = np.empty(-(-n // block), dtype=np.int64)
        within = np.empty(n, dtype=np.uint32)
        carry = 0
        for lo in range(0, n, chunk):
            hi = min(lo + chunk, n)
            # The lengths counted in the sums of segments lo+1 .. hi (the last chunk's last
            # segment ends the timeline: nothing after it).
            length = np.diff(seg_key[lo:min(hi + 1, n)])
            length *= mine[lo:lo + length.size]
            length[thread_last[(thread_last >= lo) & (thread_last < lo + length.size)] - lo] = 0
            sums = np.empty(hi - lo, dtype=np.int64)
            sums[0] = carry
            np.cumsum(length[:hi - lo - 1], out=sums[1:])
            sums[1:] += carry
            carry = int(sums[-1]) + (int(length[-1]) if length.size == hi - lo else 0)
            first = sums[::block]
            base[lo >> shift:(lo >> shift) + first.size] = first
            sums -= np.repeat(first, block)[:hi - lo]
            if sums.size and int(sums.max()) > np.iinfo(np.uint32).max:
                return None
            within[lo:hi] = sums
        return BlockSums(base, within, shift)

    def _thread_segments(self, call_thread: np.ndarray, start: np.ndarray, end: np.ndarray, role: np.ndarray,
                         alone: bool) -> tuple[np.ndarray, np.ndarray]:
        """(key, category) of every thread's segments in (thread, time) order: a stretch from
        the trace's start to its first call, its calls, and the stretches after them; the
        stretches are ``host``, or (``alone``: each thread is its process's only caller)
        ``stall`` when longer than the threshold."""
        tk = self.tk
        key = tk.key(call_thread, start)
        if key.size < 2 or bool((key[1:] >= key[:-1]).all()):  # a trace read in thread-and-time order
            t, s, e, r = call_thread, start, end, role
        else:
            order = np.argsort(key, kind="stable")
            t, s, e, r, key = call_thread[order], start[order], end[order], role[order], key[order]
        same = t[1:] == t[:-1]
        # End of the block of overlapping calls so far (calls of one thread rarely overlap).
        run = grouped_running_max(e, t) if bool((same & (s[1:] < e[:-1])).any()) else e
        first = np.r_[True, ~same]
        last = np.r_[~same, True]
        # A call's segment ends where the next call starts, if that is inside its block.
        has_stretch = last.copy()
        has_stretch[:-1] |= s[1:] > run[:-1]
        has_lead = first & (s > tk.lo)
        del same, first

        call_cat = np.full(s.size, STATE_HOST, dtype=np.int8)
        call_cat[r == ROLE_LAUNCH] = STATE_LAUNCH
        call_cat[(e - s) > self.threshold_ns] = STATE_STALL
        # A graph launch is launch time however long it takes (a large graph's upload and
        # launch), never a stall.
        call_cat[r == ROLE_GRAPH_LAUNCH] = STATE_LAUNCH
        call_cat[r == ROLE_SETUP] = STATE_SETUP
        call_cat[r == ROLE_SYNC] = STATE_SYNC

        # Segments per call, in time order: [lead stretch], the call, [stretch after it].
        pos = has_lead.astype(index_dtype(3 * s.size + 1))  # at most three segments a call
        pos += 1
        pos += has_stretch
        total = int(pos.sum(dtype=np.int64))
        np.cumsum(pos, out=pos)
        pos -= 1
        pos -= has_stretch  # now the call's own position
        seg_key = np.empty(total, dtype=np.int64)
        seg_cat = np.full(total, STATE_HOST, dtype=np.int8)
        seg_key[pos] = key
        del key
        seg_cat[pos] = call_cat
        del call_cat
        lead = pos[has_lead] - 1
        seg_key[lead] = tk.key(t[has_lead], tk.lo)
        if alone:
            seg_cat[lead[s[has_lead] - tk.lo > self.threshold_ns]] = STATE_STALL
        # The stretch after each call that has one: from its block's end, a chunk of calls at a
        # time (no array of every call's stretch beside the segments).
        for lo in range(0, s.size, self.CHUNK):
            hi = min(lo + self.CHUNK, s.size)
            mine = has_stretch[lo:hi]
            after = pos[lo:hi][mine] + 1
            seg_key[after] = tk.key(t[lo:hi][mine], run[lo:hi][mine])
            if alone:  # a stretch to the thread's next call (or none) longer than the threshold
                long_after = last[lo:hi].copy()
                nxt = s[lo + 1:hi + 1]
                long_after[:nxt.size] |= (nxt - run[lo:lo + nxt.size]) > self.threshold_ns
                seg_cat[after[long_after[mine]]] = STATE_STALL
        return seg_key, seg_cat

    def _with_process_stalls(self, seg_key: np.ndarray, seg_cat: np.ndarray, call_thread: np.ndarray,
                             start: np.ndarray, end: np.ndarray, thread_proc: np.ndarray
                             ) -> tuple[np.ndarray, np.ndarray]:
        """The segments with every long no-call stretch of a process marked ``stall`` on each of
        its threads: a ``stall`` segment where the stretch starts and a ``host`` one where it
        ends (a thread's own next call, if it starts there, comes after that)."""
        tk, thr = self.tk, self.threshold_ns
        call_proc = small_codes(thread_proc, int(thread_proc.max(initial=0)) + 1)[call_thread]
        order = np.argsort(tk.key(call_proc, start), kind="stable")
        p, s = call_proc[order], start[order]
        del call_proc  # (each input let go once taken in order: some 8 bytes a call less at the peak)
        run = grouped_running_max(end[order], p)
        del order
        # Long stretches: before a process's first call, between its blocks of overlapping
        # calls, after its last. Read call by call, with no array of every block: a block ends
        # at call i where the process's next call starts after run[i] (the block's end).
        same = np.r_[p[1:] == p[:-1], False]  # call i's process makes call i + 1 too
        first = np.r_[True, ~same[:-1]]
        lead = np.flatnonzero(first & (s > tk.lo + thr))
        del first
        between = np.flatnonzero(same[:-1] & (s[1:] - run[:-1] > thr))
        last = np.flatnonzero(~same)
        del same
        l_proc = np.concatenate([p[lead], p[between], p[last]])
        l_start = np.concatenate([np.full(lead.size, tk.lo, dtype=np.int64), run[between], run[last]])
        l_end = np.concatenate([s[lead], s[between + 1], np.full(last.size, -1, dtype=np.int64)])  # -1: never ends
        del p, s, run
        # Every thread of the stretch's process gets the stretch.
        t_order = np.argsort(thread_proc, kind="stable")
        t_lo = np.searchsorted(thread_proc[t_order], l_proc, "left")
        t_hi = np.searchsorted(thread_proc[t_order], l_proc, "right")
        owner, at = expand_slices(t_lo, t_hi)
        th = t_order[at]
        ends = l_end[owner]
        resumes = ends >= 0
        key = np.concatenate([tk.key(th, l_start[owner]), tk.key(th[resumes], ends[resumes])])
        cat = np.r_[np.full(th.size, STATE_STALL, dtype=np.int8), np.full(int(resumes.sum()), STATE_HOST, dtype=np.int8)]
        # A stall goes after a thread's segment that starts at the same time (its stretch), a
        # resume before it (its next call).
        where = np.where(cat == STATE_STALL, np.searchsorted(seg_key, key, "right"),
                         np.searchsorted(seg_key, key, "left"))
        o = np.lexsort((cat == STATE_HOST, key))
        return np.insert(seg_key, where[o], key[o]), np.insert(seg_cat, where[o], cat[o])

    def _before(self, c: int, i: np.ndarray) -> np.ndarray:
        """Time in category ``c`` of the segments before segment ``i`` (up to a constant per
        thread: only differences within a thread are read)."""
        sums = self._sums[c]
        if isinstance(sums, tuple):
            where, prefix = sums
            return prefix[np.searchsorted(where, i, "left")]
        if isinstance(sums, BlockSums):
            return sums.at(i)
        return sums[i]

    def split(self, thread: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(time per category each thread spent inside its window ``[a, b)`` (``a <= b``),
        shape (n, N_STATES), each row summing to ``b - a``; the category at ``a``)."""
        n = np.asarray(thread).size
        out = np.empty((n, N_STATES), dtype=np.int64)
        if n == 0:
            return out, np.zeros(0, dtype=np.int8)
        qa, qb = self.tk.key(thread, a), self.tk.key(thread, b)
        ia = np.searchsorted(self.seg_key, qa, side="right") - 1  # the segments holding a and b
        ib = np.searchsorted(self.seg_key, qb, side="right") - 1
        d = self._derived
        np.subtract(self.seg_key[ib], self.seg_key[ia], out=out[:, d])  # all the time between the segments
        for c in range(N_STATES):  # the sums before b's segment minus those before a's
            if c != d:
                np.subtract(self._before(c, ib), self._before(c, ia), out=out[:, c])
                out[:, d] -= out[:, c]
        rows = np.arange(n)
        out[rows, self.seg_cat[ib]] += qb - self.seg_key[ib]  # the parts inside those segments
        out[rows, self.seg_cat[ia]] -= qa - self.seg_key[ia]
        return out, self.seg_cat[ia]


class BlockSums:
    """Prefix sums kept in 4 bytes an entry: an int64 ``base`` per block of ``2**shift`` entries
    and the uint32 rest ``within`` it (the sum at entry ``i`` is ``base[i >> shift] +
    within[i]``)."""

    def __init__(self, base: np.ndarray, within: np.ndarray, shift: int) -> None:
        self.base, self.within, self.shift = base, within, shift

    def at(self, i: np.ndarray) -> np.ndarray:
        """The sums at entries ``i`` (int64)."""
        out = self.base[np.right_shift(i, self.shift)]
        out += self.within[i]
        return out
