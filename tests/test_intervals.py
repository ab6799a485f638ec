"""gapscope.analysis.intervals.group_timelines: the same timelines whether its intervals come
sorted by (group, start), as range members do (no sort then), or in any order; checked against
a plain per-group walk written here."""

from __future__ import annotations

import numpy as np
import pytest

from gapscope.analysis.intervals import group_timelines


def walk(groups, start, end, n_groups):
    """Per group: (count, first start, last end, gap time, gap count, gap lengths in time order),
    by sorting each group's intervals and merging them one at a time."""
    out = []
    for g in range(n_groups):
        iv = sorted((int(s), max(int(e), int(s))) for gg, s, e in zip(groups, start, end) if gg == g)
        if not iv:
            out.append((0, 0, 0, 0, 0, []))
            continue
        run, gaps = iv[0][1], []
        for s, e in iv[1:]:
            if s > run:
                gaps.append(s - run)
            run = max(run, e)
        out.append((len(iv), iv[0][0], run, sum(gaps), len(gaps), gaps))
    return out


def figures(tl, n_groups):
    per = []
    for g in range(n_groups):
        mine = tl.gaps_group == g
        order = np.argsort(tl.gaps_start[mine], kind="stable")
        per.append((int(tl.count[g]), int(tl.first_start[g]) if tl.count[g] else 0,
                    int(tl.last_end[g]) if tl.count[g] else 0, int(tl.gap_ns[g]), int(tl.gap_count[g]),
                    tl.gaps_len[mine][order].tolist()))
    return per


@pytest.mark.parametrize("seed", range(6))
def test_sorted_and_shuffled_intervals_give_the_same_timelines(seed):
    rng = np.random.default_rng(seed)
    n, n_groups = 400, 7
    groups = rng.integers(0, n_groups - 1, n)  # the last group stays empty
    start = rng.integers(0, 2_000, n)  # many equal starts: ties keep their input order
    end = start + rng.integers(-5, 60, n)  # some end before they start: length 0
    expected = walk(groups, start, end, n_groups)
    shuffled = group_timelines(groups, start, end, n_groups)
    order = np.lexsort((start, groups))  # stable: what group_timelines sorts by
    in_order = group_timelines(groups[order], start[order], end[order], n_groups)
    assert figures(shuffled, n_groups) == expected
    assert figures(in_order, n_groups) == expected
    # The same gaps, ended by and started from the same intervals (indices mapped back).
    assert np.array_equal(order[in_order.gaps_next], shuffled.gaps_next)
    assert np.array_equal(order[in_order.gaps_prev], shuffled.gaps_prev)
    assert np.array_equal(in_order.gaps_start, shuffled.gaps_start)


def test_the_inputs_are_not_changed():
    groups, start, end = np.array([0, 0, 1]), np.array([0, 10, 5]), np.array([5, 4, 9])
    kept = groups.copy(), start.copy(), end.copy()
    tl = group_timelines(groups, start, end, 2)
    assert (tl.gap_ns.tolist(), tl.gaps_next.tolist(), tl.gaps_prev.tolist()) == ([5, 0], [1], [0])
    assert all(np.array_equal(a, b) for a, b in zip((groups, start, end), kept))


# ------------------------------------------------------------------ grouped_quantiles

def quantiles_by_hand(groups, values, n_groups, qs):
    """Per group, each quantile of its sorted values with numpy's default linear interpolation,
    one group and one quantile at a time (NaN for a group with none)."""
    out = np.full((n_groups, len(qs)), np.nan)
    for g in range(n_groups):
        v = sorted(int(x) for gg, x in zip(groups, values) if gg == g)
        for j, q in enumerate(qs):
            if not v:
                continue
            pos = q * (len(v) - 1)
            lo = int(np.floor(pos))
            hi = min(lo + 1, len(v) - 1)
            out[g, j] = float(v[lo]) + (float(v[hi]) - float(v[lo])) * (pos - lo)
    return out


@pytest.mark.parametrize("high, key", [(1_000, "int32"), (2**36, "int64"), (-1, "lexsort")])
@pytest.mark.parametrize("seed", range(6))
def test_grouped_quantiles_equal_a_per_group_computation(high, key, seed):
    """Quantiles per group whatever the sort key: a combined 32-bit key (small values), a 64-bit
    one (values too large for 32 bits) or two keys (negative values): the same floats as sorting
    each group's values alone, and within rounding of numpy's own quantile."""
    from gapscope.analysis.intervals import grouped_quantiles, sort_within_groups

    rng = np.random.default_rng(seed)
    n_groups, n = 9, 300
    groups = rng.integers(0, n_groups - 1, n)  # the last group gets no value: NaN
    values = rng.integers(-5, 1_000, n) if high < 0 else rng.integers(0, high, n)
    if high < 0:
        values[0] = -5  # one negative value at least
    else:
        values[0] = high - 1  # the largest value: the key's width is decided by it
    qs = (0.0, 0.5, 0.9, 0.99, 1.0)
    got = grouped_quantiles(groups, values, n_groups, qs)
    assert np.array_equal(got, quantiles_by_hand(groups, values, n_groups, qs), equal_nan=True)
    for g in range(n_groups - 1):
        assert np.allclose(got[g], np.quantile(values[groups == g], qs), rtol=1e-12, atol=0)
    assert np.isnan(got[-1]).all()
    _, keys, scale = sort_within_groups(groups, values, n_groups)
    assert keys.dtype == (np.int32 if key == "int32" else np.int64)
    assert (scale == 0) == (key == "lexsort")


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("seed", range(4))
def test_grouped_quantiles_of_many_groups_in_runs_sort_each_group_in_its_row(monkeypatch, dtype, seed):
    """SYNTHETIC: 150 groups (one with no value, one with one, sizes from 1 to some 200) whose
    values come in runs of a group, the runs of one group scattered (as a level's gaps come window
    by window), values up to the dtype's largest: each group's values are sorted in a row of its
    own (sorted_in_rows, placed a few values at a time), and the quantiles are the same floats as
    sorting each group's values alone; values in no runs fall back to the combined key."""
    from gapscope.analysis import intervals

    monkeypatch.setattr(intervals, "ROW_BLOCK", 37)
    rng = np.random.default_rng(seed)
    n_groups = 150
    runs = [(g, int(rng.integers(1, 12))) for g in range(1, n_groups) for _ in range(int(rng.integers(1, 20)))]
    runs.append((2, 1))
    runs = [r for r in runs if r[0] != 1] + [(1, 1)]  # group 1 has one value, group 0 none
    order = rng.permutation(len(runs))
    groups = np.concatenate([np.full(runs[i][1], runs[i][0]) for i in order])
    top = np.iinfo(dtype).max
    values = rng.integers(0, top, groups.size, dtype=dtype, endpoint=True)
    values[:5] = top  # the padding's value among the real ones
    qs = (0.0, 0.25, 0.5, 0.9, 0.99, 1.0)
    in_rows = []
    real = intervals.sorted_in_rows
    monkeypatch.setattr(intervals, "sorted_in_rows", lambda *a: (in_rows.append(1), real(*a))[1])
    got = intervals.grouped_quantiles(groups, values, n_groups, qs)
    assert in_rows == [1]
    assert np.array_equal(got, quantiles_by_hand(groups, values, n_groups, qs), equal_nan=True)
    assert np.isnan(got[0]).all() and not np.isnan(got[1:]).any()
    scattered = rng.permutation(groups)  # runs of about one value: the combined key
    got = intervals.grouped_quantiles(scattered, values, n_groups, qs)
    assert intervals.group_runs(scattered, values) is None
    assert np.array_equal(got, quantiles_by_hand(scattered, values, n_groups, qs), equal_nan=True)


def test_grouped_quantiles_select_instead_of_sorting_for_few_large_groups(monkeypatch):
    """Three groups of 70,000 values each (SELECT_RATIO times more values than needed positions):
    the keys are partitioned around the positions the quantiles read instead of sorted, and the
    quantiles are those of each group's values sorted alone (and numpy's own)."""
    from gapscope.analysis import intervals

    rng = np.random.default_rng(7)
    groups = rng.integers(0, 3, 210_000)
    values = rng.integers(0, 10**9, 210_000)
    qs = (0.0, 0.5, 0.9, 0.99, 1.0)
    partitioned = []
    real = intervals.sort_within_groups

    def spy(*args, **kwargs):
        partitioned.append(kwargs.get("kth") is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(intervals, "sort_within_groups", spy)
    got = intervals.grouped_quantiles(groups, values, 3, qs)
    assert partitioned == [True]
    for g in range(3):
        v = np.sort(values[groups == g])
        pos = [q * (v.size - 1) for q in qs]
        want = [float(v[int(p)]) + (float(v[min(int(p) + 1, v.size - 1)]) - float(v[int(p)])) * (p - int(p))
                for p in pos]
        assert got[g].tolist() == want
        assert np.allclose(got[g], np.quantile(values[groups == g], qs), rtol=1e-12, atol=0)
