"""The rows a report shows (gapscope.render.sections.top_indices / top_rows): the ``limit`` with
the most gap time, most first, the first on a tie, checked against a sort of every candidate by
(-gap time, position) on generated lists full of ties."""

from __future__ import annotations

import random

import pytest

from gapscope.render.sections import top_indices, top_rows


def by_sorting(gap_ns: list[int], candidates: list[int], limit: int) -> list[int]:
    """The definition: sort every candidate by (-gap time, position), keep the first ``limit``."""
    keep = sorted(range(len(candidates)), key=lambda j: (-gap_ns[candidates[j]], j))[:max(limit, 0)]
    return [candidates[j] for j in keep]


@pytest.mark.parametrize("seed", range(40))
def test_the_top_candidates_are_those_a_full_sort_keeps(seed):
    rng = random.Random(seed)
    n = rng.randint(0, 300)
    gap_ns = [rng.choice([0, 5, 5, 7, rng.randint(0, 50), 10**12]) for _ in range(n)]  # many ties
    candidates = sorted(rng.sample(range(n), rng.randint(0, n)))
    for limit in (0, 1, 3, 10, n, n + 1):
        assert top_indices(gap_ns, candidates, limit) == by_sorting(gap_ns, candidates, limit)


def test_ties_at_the_cut_keep_the_first_ones():
    # gap times 5 5 9 5 9 5: the top three are both 9s (the first first), then the first 5.
    gaps = [5, 5, 9, 5, 9, 5]
    assert top_indices(gaps, list(range(6)), 3) == [2, 4, 0]
    assert top_indices(gaps, [1, 2, 3, 4, 5], 3) == [2, 4, 1]
    assert top_indices(gaps, list(range(6)), 0) == [] and top_indices(gaps, [3], 5) == [3]
    rows = [{"gap_ns": g, "i": i} for i, g in enumerate(gaps)]
    assert [r["i"] for r in top_rows(rows, 4)] == [2, 4, 0, 1]


def test_rows_without_gap_time_come_last():
    # The FSDP trace's order of issue 43: a 47 us row before a 2.63 ms one, zero-gap rows first.
    rows = [{"gap_ns": g} for g in (0, 47_000, 0, 2_630_000, 359_000)]
    assert [r["gap_ns"] for r in top_rows(rows, 5)] == [2_630_000, 359_000, 47_000, 0, 0]
    assert [r["gap_ns"] for r in top_rows(rows, 2)] == [2_630_000, 359_000]
