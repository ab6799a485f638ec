"""Memberships: every activity given as ``None`` (the device and stream levels) reads the same
kernels, counts and replays as the explicit membership of every activity; range memberships
and codes are 32-bit, with the values of a plain 64-bit computation written here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gapscope.analysis.metrics import level_table, member_kernels
from gapscope.analysis.pipeline import run_analysis
from gapscope.analysis.replays import Replays
from gapscope.trace.frames import ActivityKind
from gapscope.trace.handle import open_trace
from paths import TRACES

#: Graph replays (kernels launched by cudaGraphLaunch), several devices, copies.
NAMES = ["cupy_paths_node.sqlite", "case_multi_gpu.sqlite", "torch_decode_sync.sqlite"]


@pytest.fixture(scope="module", params=NAMES)
def analysis(request):
    with open_trace(TRACES / request.param) as trace:
        yield run_analysis(trace.frames(syncs=True), gaps=True)


def test_every_activity_as_none_reads_what_the_explicit_membership_reads(analysis):
    acts = analysis.acts
    every = np.arange(acts.start.size)
    for codes in (acts.device_code, acts.stream_code):
        n = int(codes.max()) + 1
        rows, dur = member_kernels(acts, None, codes)
        rows_e, dur_e = member_kernels(acts, every, codes)
        assert rows.tolist() == rows_e.tolist() and dur.tolist() == dur_e.tolist()
        # By hand: each kernel's (or graph execution's) code and end - start, in activity order.
        kind = analysis.frames.activities["kind"].to_numpy()
        k = [i for i in range(kind.size) if kind[i] in (ActivityKind.KERNEL, ActivityKind.GRAPH)]
        assert rows.tolist() == [int(codes[i]) for i in k]
        assert dur.tolist() == [int(acts.end[i] - acts.start[i]) for i in k]
        span, gap, count = (np.arange(n, dtype=np.int64) * c for c in (7, 3, 1))
        pd.testing.assert_frame_equal(level_table(acts, None, codes, n, span, gap, count, None),
                                      level_table(acts, every, codes, n, span, gap, count, None))
        # Percentiles from gap lengths given, and the kernel medians from the shared durations.
        lengths = (codes[:50].astype(np.int32), np.arange(50, dtype=np.int64))
        pd.testing.assert_frame_equal(level_table(acts, None, codes, n, span, gap, count, lengths, (rows, dur)),
                                      level_table(acts, every, codes, n, span, gap, count, lengths))
        # Every call taken for a graph launch, so that every linked kernel counts as replay work.
        rp = Replays(analysis.frames.activities["kind"].to_numpy(), analysis.launch,
                     np.ones(len(analysis.frames.api), dtype=bool))
        got, want = rp.counts(None, codes, n), rp.counts(every, codes, n)
        assert [g.tolist() for g in got] == [w.tolist() for w in want]


def test_range_memberships_are_32_bit_with_the_64_bit_values(analysis):
    assert analysis.member_range.dtype == np.int32 and analysis.member_act.dtype == np.int32
    acts = analysis.acts
    assert acts.device_ids.size <= 127 and acts.stream_keys.size <= 127  # these traces: a byte a code
    assert acts.device_code.dtype == np.int8 and acts.stream_code.dtype == np.int8
    dev = analysis.frames.activities["device"].to_numpy()  # the codes give back every device id
    assert acts.device_ids[acts.device_code].tolist() == dev.tolist()
    assert acts.device_of(np.arange(dev.size)).tolist() == dev.tolist()
    # Each member is a (range, activity) pair whose activity was launched inside the range, on its thread.
    rf, api = analysis.ranges.frame, analysis.frames.api
    call = analysis.launch[analysis.member_act.astype(np.int64)]
    t = api["start"].to_numpy()[call]
    r = analysis.member_range.astype(np.int64)
    assert (call >= 0).all()
    assert ((rf["start_ns"].to_numpy()[r] <= t) & (t <= rf["end_ns"].to_numpy()[r])).all()
    assert (api["tid"].to_numpy()[call] == rf["tid"].to_numpy()[r]).all()
    # As many members as (range, linked activity) pairs that satisfy that, counted in 64 bits.
    linked = np.flatnonzero(analysis.launch >= 0)
    lt = api["start"].to_numpy()[analysis.launch[linked]]
    ltid = api["tid"].to_numpy()[analysis.launch[linked]]
    expected = sum(int(((lt >= s) & (lt <= e) & (ltid == tid)).sum())
                   for s, e, tid in zip(rf["start_ns"], rf["end_ns"], rf["tid"]))
    assert analysis.member_act.size == expected > 0


def test_narrowed_holds_the_values_in_32_bits_below_2_31():
    from gapscope.analysis.keys import index_dtype, narrowed, narrowed_to_fit

    assert index_dtype(2**31 - 1) is np.int32 and index_dtype(2**31) is np.int64
    values = np.array([-1, 0, 7, 2**31 - 1], dtype=np.int64)
    small = narrowed(values, 2**31)
    assert small.dtype == np.int64 and small is values  # a bound of 2**31 keeps 64 bits, no copy
    kept = narrowed(values[:3], 8)
    assert kept.dtype == np.int32 and kept.tolist() == [-1, 0, 7]
    assert narrowed(kept, 8) is kept  # 32 bits already: no copy
    fit = narrowed_to_fit(values[:3])  # the bound from its own largest value, 7 + 1
    assert fit.dtype == np.int32 and fit.tolist() == [-1, 0, 7]
    assert narrowed_to_fit(values) is values  # 2**31 - 1 needs 64 bits
    assert narrowed_to_fit(np.zeros(0, dtype=np.int64)).dtype == np.int32


def test_small_codes_take_the_narrowest_dtype_that_holds_minus_one_to_n():
    from gapscope.analysis.keys import code_dtype, small_codes

    assert [code_dtype(n) for n in (0, 127, 128, 32_767, 32_768, 2**31 - 1, 2**31)] == \
        [np.int8, np.int8, np.int16, np.int16, np.int32, np.int32, np.int64]
    for n in (127, 128, 32_768):
        codes = np.array([-1, 0, n - 1], dtype=np.int64)
        small = small_codes(codes, n)
        assert small.dtype == code_dtype(n) and small.tolist() == [-1, 0, n - 1]


@pytest.mark.parametrize("block", [3, 1 << 18])
def test_narrow_durations_a_block_at_a_time(monkeypatch, block):
    """SYNTHETIC activities: durations computed DURATION_BLOCK at a time equal end - start for
    the indices asked, in 32 bits while every one is below 2**31 - 1 and in 64 bits once one
    (here in the last block) is not."""
    from gapscope.analysis import metrics
    from gapscope.analysis.metrics import ActivityArrays

    monkeypatch.setattr(metrics, "DURATION_BLOCK", block)
    start = np.array([0, 10, 20, 30, 40, 50, 60, 70], dtype=np.int64)
    end = start + np.array([1, 2, 3, 4, 5, 6, 7, 2**31 + 5], dtype=np.int64)
    z = np.zeros(start.size, dtype=np.int32)
    acts = ActivityArrays(start=start, end=end, is_kernel=z > 0, is_memop=z > 0, busy=z > 0,
                          device_code=z, device_ids=np.zeros(1, np.int64), stream_code=z,
                          stream_keys=np.zeros(1, np.int64))
    short = acts.narrow_durations(np.array([6, 0, 2, 2, 5], dtype=np.int32))
    assert short.dtype == np.int32 and short.tolist() == [7, 1, 3, 3, 6]
    edge = ActivityArrays(**{**acts.__dict__, "end": start + np.array([1, 2, 3, 4, 5, 6, 7, 2**31 - 2])})
    assert edge.narrow_durations(np.arange(8)).dtype == np.int32  # 2**31 - 2 still fits
    long = acts.narrow_durations(np.arange(8, dtype=np.int32))
    assert long.dtype == np.int64 and long.tolist() == [1, 2, 3, 4, 5, 6, 7, 2**31 + 5]
    assert acts.narrow_durations(np.zeros(0, dtype=np.int32)).tolist() == []


@pytest.mark.parametrize("block", [1, 7, 1 << 20])
def test_range_pair_kernel_counts_a_block_at_a_time_equal_a_count_by_hand(analysis, monkeypatch, block):
    """level_table counts each range pair's kernels (graph executions included) COUNT_BLOCK
    memberships at a time (or the pairs' number at a time, when more): the same as a loop over
    the memberships, whatever the block."""
    from gapscope.analysis import metrics

    monkeypatch.setattr(metrics, "COUNT_BLOCK", block)
    acts = analysis.acts
    n_dev = acts.device_ids.size
    pair = analysis.member_range.astype(np.int64) * n_dev + acts.device_code[analysis.member_act]
    n = len(analysis.ranges.frame) * n_dev
    zeros = np.zeros(n, dtype=np.int64)
    got = level_table(acts, analysis.member_act, pair, n, zeros, zeros, zeros, None)["kernels"].tolist()
    kind = analysis.frames.activities["kind"].to_numpy()
    want = [0] * n
    for act, row in zip(analysis.member_act.tolist(), pair.tolist()):
        if kind[act] in (ActivityKind.KERNEL, ActivityKind.GRAPH):
            want[row] += 1
    assert got == want and sum(want) > 0


@pytest.mark.parametrize("block", [5, 1 << 20])
def test_replay_counts_a_block_at_a_time_equal_a_plain_count(analysis, monkeypatch, block):
    """Replays.counts read COUNT_BLOCK members at a time: per range, the graph kernels and the
    distinct graph launch calls that issued them equal a plain count over the memberships
    (cupy_paths_node replays graphs; the other two traces give zeros that must stay zeros)."""
    from gapscope.analysis import replays
    from gapscope.trace.cuda_api import GRAPH_LAUNCH_CALLS

    monkeypatch.setattr(replays, "COUNT_BLOCK", block)
    names = analysis.frames.names
    api_ids = analysis.frames.api["name_id"].to_numpy()
    text = names.lookup(int(i) for i in set(api_ids.tolist()))
    graph_call = np.array([text[int(i)].split("_v")[0] in GRAPH_LAUNCH_CALLS for i in api_ids], dtype=bool)
    kind = analysis.frames.activities["kind"].to_numpy()
    rp = Replays(kind, analysis.launch, graph_call)
    n = len(analysis.ranges.frame)
    kernels, calls = rp.counts(analysis.member_act, analysis.member_range, n)
    want_k, want_c = [0] * n, [set() for _ in range(n)]
    for act, row in zip(analysis.member_act.tolist(), analysis.member_range.tolist()):
        call = int(analysis.launch[act])
        if kind[act] == ActivityKind.GRAPH or (kind[act] == ActivityKind.KERNEL and call >= 0 and graph_call[call]):
            want_k[row] += 1
            if call >= 0:
                want_c[row].add(call)
    assert kernels.tolist() == want_k and calls.tolist() == [len(c) for c in want_c]
    if "cupy_paths_node" in str(analysis.frames.meta.path):
        assert sum(want_k) > 0 and sum(len(c) for c in want_c) > 0


@pytest.mark.parametrize("block", [1, 4, 1 << 20])
def test_gathered_slices_equal_a_loop_over_the_slices(monkeypatch, block):
    """SYNTHETIC slices (empty, reversed, overlapping, nested): every covered value with its
    slice, one slice after the other, as a loop over the slices gives it; 32-bit owners, the
    values' own dtype, whatever GATHER_BLOCK."""
    from gapscope.analysis import intervals

    monkeypatch.setattr(intervals, "GATHER_BLOCK", block)
    rng = np.random.default_rng(7)
    for _ in range(50):
        values = rng.integers(0, 10**6, int(rng.integers(0, 60))).astype(np.int32)
        n = int(rng.integers(0, 20))
        lo = rng.integers(0, values.size + 1, n)
        hi = np.minimum(lo + rng.integers(-3, 15, n), values.size)
        owner, got = intervals.gathered_slices(values, lo, hi)
        want = [(i, int(v)) for i in range(n) for v in values[lo[i]:max(hi[i], lo[i])]]
        assert list(zip(owner.tolist(), got.tolist())) == want
        assert owner.dtype == np.int32 and got.dtype == np.int32
