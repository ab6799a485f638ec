"""gapscope.analysis.overlap on hand-made intervals, exactly, and against a brute-force count per
nanosecond on random ones."""

from __future__ import annotations

import numpy as np

from gapscope.analysis.overlap import stream_overlap


def _one(intervals: list[tuple[int, int, int]], n_groups: int = 1, group: list[int] | None = None):
    s = np.array([i[0] for i in intervals])
    return stream_overlap(np.array(group or [0] * len(intervals)), s,
                          np.array([i[1] for i in intervals]), np.array([i[2] for i in intervals]),
                          n_groups)


def test_two_streams_partly_overlapping() -> None:
    # stream 1: [0,10) [10,20) (touching: one busy block); stream 2: [5,15)
    o = _one([(1, 0, 10), (1, 10, 20), (2, 5, 15)])
    assert (o.busy_ns[0], o.overlap_ns[0], o.stream_busy_ns[0], o.max_stream_ns[0]) == (20, 10, 30, 20)
    assert (o.possible_ns[0], o.streams[0], o.span_ns[0]) == (10, 2, 20)


def test_three_streams_can_overlap_longer_than_any_pair() -> None:
    o = _one([(1, 0, 10), (2, 0, 10), (3, 0, 10)])
    assert (o.overlap_ns[0], o.possible_ns[0]) == (10, 15)  # possible: pairs in turn, 30 / 2


def test_touching_blocks_of_two_streams_do_not_overlap() -> None:
    o = _one([(1, 0, 5), (2, 5, 9)])
    assert (o.overlap_ns[0], o.busy_ns[0], o.possible_ns[0]) == (0, 9, 4)


def test_a_stream_overlapping_itself_counts_once() -> None:
    # a graph's parallel branches reported on one stream: still one stream busy
    o = _one([(1, 0, 10), (1, 5, 12)])
    assert (o.overlap_ns[0], o.busy_ns[0], o.stream_busy_ns[0], o.possible_ns[0]) == (0, 12, 12, 0)


def test_groups_are_independent_and_empty_ones_are_zero() -> None:
    o = _one([(1, 0, 10), (2, 0, 10), (1, 100, 110), (1, 0, 4)], n_groups=3, group=[2, 2, 0, 0])
    assert o.overlap_ns.tolist() == [0, 0, 10]
    assert o.busy_ns.tolist() == [14, 0, 10]
    assert o.span_ns.tolist() == [110, 0, 10]
    assert o.streams.tolist() == [1, 0, 2]
    empty = stream_overlap(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), 2)
    assert empty.overlap_ns.tolist() == [0, 0] and empty.span_ns.tolist() == [0, 0]


def test_against_a_per_nanosecond_count() -> None:
    rng = np.random.default_rng(7)
    n = 300
    group = rng.integers(0, 4, n)
    stream = rng.integers(0, 3, n)
    start = rng.integers(0, 2000, n)
    end = start + rng.integers(0, 120, n)
    o = stream_overlap(group, stream, start, end, 4)
    for g in range(4):
        busy = np.zeros((3, 2200), dtype=bool)
        for s, a, b in zip(stream[group == g], start[group == g], end[group == g]):
            busy[s, a:b] = True
        per_ns = busy.sum(axis=0)
        per_stream = busy.sum(axis=1)
        total = int(per_stream.sum())
        assert o.overlap_ns[g] == int((per_ns >= 2).sum())
        assert o.busy_ns[g] == int((per_ns >= 1).sum())
        assert o.stream_busy_ns[g] == total and o.max_stream_ns[g] == int(per_stream.max())
        assert o.possible_ns[g] == min(total - int(per_stream.max()), total // 2)
