"""gapscope.analysis.host_timeline.HostTimeline.split: the time each thread spent in each state
inside a window, against a walk over the thread's segments written here (each segment runs to
the next one's key), on random calls of several threads and processes."""

from __future__ import annotations

import numpy as np
import pytest

from gapscope.analysis.host_timeline import (
    N_STATES,
    STATE_HOST,
    STATE_LAUNCH,
    STATE_SETUP,
    STATE_STALL,
    STATE_SYNC,
    BlockSums,
    HostTimeline,
)
from gapscope.analysis.keys import TimeKeys


def walked(timeline: HostTimeline, qa: int, qb: int) -> list[int]:
    """Time per state of the key window [qa, qb), segment by segment."""
    keys, cats = timeline.seg_key.tolist(), timeline.seg_cat.tolist()
    out = [0] * N_STATES
    for j, (k, c) in enumerate(zip(keys, cats)):
        end = keys[j + 1] if j + 1 < len(keys) else qb
        out[c] += max(0, min(qb, end) - max(qa, k))
    return out


@pytest.mark.parametrize("seed", range(25))
def test_split_equals_a_walk_over_the_segments(seed):
    check_split(seed)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("scale", [1, 10_000_000])
def test_block_sums_split_as_the_walk_does(seed, scale, monkeypatch):
    """The sums a large timeline keeps per block of segments (here blocks of 4 segments,
    computed 8 at a time, from the first segment on): the same split, across the blocks, the
    chunks and the threads; with times ten million times longer a block's sums can pass 32 bits,
    and that category keeps its plain int64 sums."""
    monkeypatch.setattr(HostTimeline, "COMPACT_FROM", 0)
    monkeypatch.setattr(HostTimeline, "BLOCK_SHIFT", 2)
    monkeypatch.setattr(HostTimeline, "CHUNK", 8)
    tl = check_split(seed, scale)
    kept = [s for s in tl._sums if s is not None and not isinstance(s, tuple)]
    if scale == 1:
        assert all(isinstance(s, BlockSums) for s in kept)
    for s in kept:
        if isinstance(s, BlockSums):
            assert s.within.dtype == np.uint32 and s.base.size == -(-tl.seg_key.size // 4)


def check_split(seed: int, scale: int = 1) -> HostTimeline:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    # Threads of two processes (globalTid: the process in bits 24 and up); calls may overlap.
    tid = rng.choice([(1 << 24) | 7, (1 << 24) | 8, (2 << 24) | 9], n)
    start = rng.integers(0, 5_000, n) * scale
    end = start + rng.integers(0, 900, n) * scale
    role = rng.integers(0, 4, n).astype(np.int8)  # ROLE_* codes: other, launch, sync, setup
    a = rng.integers(0, 6_000, 40) * scale
    b = a + rng.integers(0, 2_000, 40) * scale
    tk = TimeKeys([start, end, a, b], 8)  # as the attribution's: every time it will ask about
    threshold = int(rng.choice([50, 300, 10_000])) * scale
    tl = HostTimeline(start, end, tid, role, threshold, tk)
    assert tl._sums[tl._derived] is None  # the most frequent state is derived, not kept
    threads = rng.integers(0, tl.n_threads, 40)
    got, at_a = tl.split(threads, a, b)
    for i in range(40):
        qa, qb = int(tk.key(threads[i:i + 1], a[i:i + 1])[0]), int(tk.key(threads[i:i + 1], b[i:i + 1])[0])
        assert got[i].tolist() == walked(tl, qa, qb), (seed, i)
        assert int(got[i].sum()) == b[i] - a[i]
        holding = int(np.searchsorted(tl.seg_key, qa, side="right")) - 1
        assert at_a[i] == tl.seg_cat[holding]
    return tl


def test_block_sums_keep_int64_where_a_block_passes_32_bits(monkeypatch):
    """One thread's launches 10 s apart: the host time of a block of them passes 2**32 ns, so its
    sums stay plain int64, while the launch time's blocks fit; a window across them splits as
    the walk does: 4 us of launches (a launch lasts 1 us), the rest host time."""
    monkeypatch.setattr(HostTimeline, "COMPACT_FROM", 0)
    monkeypatch.setattr(HostTimeline, "BLOCK_SHIFT", 2)
    step = 10_000_000_000
    start = np.arange(8, dtype=np.int64) * step
    end = start + 1_000
    role = np.full(8, 1, dtype=np.int8)  # ROLE_LAUNCH
    tk = TimeKeys([start, end], 2)
    tl = HostTimeline(start, end, np.full(8, 7), role, 10 * step, tk)
    assert tl._derived == STATE_LAUNCH  # as many launch segments as host ones: the first is derived
    assert isinstance(tl._sums[STATE_HOST], np.ndarray) and tl._sums[STATE_HOST].dtype == np.int64
    a, b = np.array([step // 2]), np.array([4 * step + 500])
    got, _ = tl.split(np.zeros(1, dtype=np.int64), a, b)
    qa, qb = int(tk.key(np.zeros(1), a)[0]), int(tk.key(np.zeros(1), b)[0])
    assert got[0].tolist() == walked(tl, qa, qb)
    assert got[0][STATE_LAUNCH] == 3 * 1_000 + 500 and got[0].sum() == b[0] - a[0]


def segments_by_hand(tid: np.ndarray, start: np.ndarray, end: np.ndarray, role: np.ndarray, threshold: int,
                     tk: TimeKeys) -> tuple[list[int], list[int]]:
    """(key, category) of every segment, call by call in (thread, start) order, for threads that
    are each their process's only caller: a lead stretch from the trace's start to a thread's
    first call, each call, and the stretch after a call where the thread's next call starts past
    the end of the calls so far (or it has none); a stretch longer than ``threshold`` is a stall
    (the one after a thread's last call always)."""
    code = {t: i for i, t in enumerate(dict.fromkeys(tid.tolist()))}  # first seen, first code
    calls = sorted(range(tid.size), key=lambda i: (code[int(tid[i])], int(start[i]), i))
    keys, cats = [], []

    def key(c: int, t: int) -> int:
        return c * tk.width + t - tk.lo

    for j, i in enumerate(calls):
        c = code[int(tid[i])]
        first = j == 0 or code[int(tid[calls[j - 1]])] != c
        last = j + 1 == len(calls) or code[int(tid[calls[j + 1]])] != c
        if first:
            run = int(end[i])
            if start[i] > tk.lo:
                keys.append(key(c, tk.lo))
                cats.append(STATE_STALL if start[i] - tk.lo > threshold else STATE_HOST)
        run = max(run, int(end[i]))
        cat = STATE_HOST
        if role[i] == 1:
            cat = STATE_LAUNCH
        if end[i] - start[i] > threshold:
            cat = STATE_STALL
        cat = {4: STATE_LAUNCH, 3: STATE_SETUP, 2: STATE_SYNC}.get(int(role[i]), cat)
        keys.append(key(c, int(start[i])))
        cats.append(cat)
        nxt = None if last else int(start[calls[j + 1]])
        if last or nxt > run:
            keys.append(key(c, run))
            cats.append(STATE_STALL if last or nxt - run > threshold else STATE_HOST)
    return keys, cats


def random_calls(seed: int, threads: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, TimeKeys]:
    """SYNTHETIC: (tid, start, end, role, threshold, keys) of 1-59 random calls (some
    overlapping) of the given nsys globalTids, every role, and one of three thresholds."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    tid = rng.choice(threads, n)
    start = rng.integers(0, 5_000, n)
    end = start + rng.integers(0, 900, n)
    role = rng.integers(0, 5, n).astype(np.int8)
    return tid, start, end, role, int(rng.choice([50, 300, 10_000])), TimeKeys([start, end], 8)


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])
def test_segments_of_sole_callers_equal_a_walk_over_the_calls(seed, chunk, monkeypatch):
    """Threads that are each their process's only caller: the timeline's segments, made a
    CHUNK of calls at a time, equal the segments written call by call here (leads, calls,
    stretches, and which stretches are stalls)."""
    monkeypatch.setattr(HostTimeline, "CHUNK", chunk)
    # three processes, one thread each
    tid, start, end, role, threshold, tk = random_calls(seed, [(1 << 24) | 7, (2 << 24) | 8, (3 << 24) | 9])
    tl = HostTimeline(start, end, tid, role, threshold, tk)
    keys, cats = segments_by_hand(tid, start, end, role, threshold, tk)
    assert tl.seg_key.tolist() == keys and tl.seg_cat.tolist() == cats


@pytest.mark.parametrize("seed", range(25))
def test_segments_do_not_depend_on_the_chunk(seed, monkeypatch):
    """Threads sharing processes (the processes' stalls added): the segments made one call at a
    time equal those made all at once."""
    tid, start, end, role, threshold, tk = random_calls(seed, [(1 << 24) | 7, (1 << 24) | 8, (2 << 24) | 9])
    whole = HostTimeline(start, end, tid, role, threshold, tk)
    monkeypatch.setattr(HostTimeline, "CHUNK", 1)
    one = HostTimeline(start, end, tid, role, threshold, tk)
    assert one.seg_key.tolist() == whole.seg_key.tolist() and one.seg_cat.tolist() == whole.seg_cat.tolist()
