"""gapscope.analysis.host_timeline.HostTimeline.split: the time each thread spent in each state
inside a window, against a walk over the thread's segments written here (each segment runs to
the next one's key), on random calls of several threads and processes."""

from __future__ import annotations

import numpy as np
import pytest

from gapscope.analysis.host_timeline import N_STATES, HostTimeline
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
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    # Threads of two processes (globalTid: the process in bits 24 and up); calls may overlap.
    tid = rng.choice([(1 << 24) | 7, (1 << 24) | 8, (2 << 24) | 9], n)
    start = rng.integers(0, 5_000, n)
    end = start + rng.integers(0, 900, n)
    role = rng.integers(0, 4, n).astype(np.int8)  # ROLE_* codes: other, launch, sync, setup
    a = rng.integers(0, 6_000, 40)
    b = a + rng.integers(0, 2_000, 40)
    tk = TimeKeys([start, end, a, b], 8)  # as the attribution's: every time it will ask about
    threshold = int(rng.choice([50, 300, 10_000]))
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
