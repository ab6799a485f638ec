"""Gap attribution rules, one synthetic export per category (hand-computed), plus the
third-party CloverLeaf export, which synchronizes the device after every kernel. A synthetic
launch call lasts 1 us unless it is written out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gapscope.analysis import analyze
from gapscope.analysis.attribution import GapSplit, IdleCategory, base_name
from synthetic import Synthetic



def device_categories(t: Synthetic, tmp_path: Path, **kw) -> dict[str, int]:
    r = analyze(t.write(tmp_path / "synthetic.sqlite"), **kw)
    row = r.devices[0]
    assert sum(row["gap_by_category_ns"].values()) == row["gap_ns"]
    return {k: v for k, v in row["gap_by_category_ns"].items() if v}


def test_launch_gap_gpu_waits_for_the_cpu(tmp_path):
    # Kernel 1 ends at 1000; kernel 2's launch call runs 1500-2500, kernel starts at 3000: the
    # thread was between calls 1000-1500 (host), in the launch call 1500-2500, and the work was
    # in flight 2500-3000 (launch).
    t = Synthetic().launch(0, 500, 1_000, 1)
    t.call(1_500, 2_500, 2).kernel(3_000, 4_000, 2)
    assert device_categories(t, tmp_path) == {"launch": 1_500, "host": 500}


def test_launch_call_still_running_when_gpu_goes_idle_is_launch(tmp_path):
    # The call started (900) before the GPU went idle (1000) but returned after (1800).
    t = Synthetic().launch(0, 500, 1_000, 1)
    t.call(900, 1_800, 2).kernel(2_000, 3_000, 2)
    assert device_categories(t, tmp_path) == {"launch": 1_000}


def test_sync_gap_thread_blocked_in_synchronize(tmp_path):
    # Thread 1 sits in cudaStreamSynchronize 600-1200 (GPU idle from 1000), then launches.
    t = Synthetic().launch(0, 500, 1_000, 1)
    t.call(600, 1_200, 3, name="cudaStreamSynchronize_v3020")
    t.call(1_300, 1_400, 2).kernel(2_000, 2_500, 2)
    assert device_categories(t, tmp_path) == {"sync": 1_000}


def test_sync_on_another_thread_is_not_ours(tmp_path):
    # Thread 1: host 1000-1300, launch call 1300-1400, in flight 1400-2000.
    t = Synthetic().launch(0, 500, 1_000, 1)
    t.call(600, 1_200, 3, tid=9, name="cudaDeviceSynchronize_v3020")
    t.call(1_300, 1_400, 2).kernel(2_000, 2_500, 2)
    assert device_categories(t, tmp_path) == {"launch": 700, "host": 300}


def test_pipeline_gap_work_was_queued(tmp_path):
    # Both launches returned long before the GPU went idle at 10_000.
    t = Synthetic().launch(0, 5_000, 10_000, 1).launch(100, 10_300, 12_000, 2)
    assert device_categories(t, tmp_path) == {"pipeline": 300}


def test_dependency_stream_wait_between_launches(tmp_path):
    # Stream 8's kernel was queued at 200, after a cudaStreamWaitEvent issued at 150 on stream 8
    # (CUPTI SYNCHRONIZATION type 2): it waited on stream 7.
    t = Synthetic().launch(0, 1_000, 5_000, 1, stream=7)
    t.call(150, 160, 5, name="cudaStreamWaitEvent_v3020")
    t.syncs.append((150, 160, 0, 8, 5, 2, 4242))
    t.launch(200, 6_000, 7_000, 2, stream=8)
    assert device_categories(t, tmp_path) == {"dependency": 1_000}


def test_waiting_on_a_copy_of_its_own_stream_is_memop(tmp_path):
    # Stream 7: kernel [0,1000), a copy [1000,1300), kernel [3000,4000), all queued early. The
    # copy covers 300 of the 2000 ns gap (not half), but it is the previous operation on the
    # kernel's own stream and ended inside the gap: the stream's own work, not a wait on another.
    t = Synthetic().launch(0, 0, 1_000, 1)
    t.call(10, 20, 2, name="cudaMemcpyAsync_v3020")
    t.memcpy.append((1_000, 1_300, 0, 7, 2, 4242))
    t.call(30, 40, 3).kernel(3_000, 4_000, 3)
    assert device_categories(t, tmp_path) == {"memop": 2_000}


def test_memop_covers_the_gap(tmp_path):
    t = Synthetic().launch(0, 0, 1_000, 1)
    t.call(10, 20, 2, name="cudaMemcpyAsync_v3020")
    t.memcpy.append((1_000, 2_800, 0, 9, 2, 4242))  # another stream, 1800 of the 2000 gap
    t.call(30, 40, 3).kernel(3_000, 4_000, 3)
    assert device_categories(t, tmp_path) == {"memop": 2_000}
    # Counted as busy, the copy closes the gap except for 200 ns of pipeline.
    assert device_categories(t, tmp_path, count_memops=True) == {"pipeline": 200}


def test_unknown_without_a_launching_call(tmp_path):
    t = Synthetic().launch(0, 0, 1_000, 1).kernel(2_000, 3_000, 99)
    assert device_categories(t, tmp_path) == {"unknown": 1_000}


def test_category_sums_and_names():
    # Gap 0 (5 ns) split 3 launch + 2 host; gap 1 (7 ns) all sync; gap 2 (11 ns) all pipeline.
    split = GapSplit(whole=np.array([-1, IdleCategory.SYNC, IdleCategory.PIPELINE], dtype=np.int8),
                     state_row=np.array([0, -1, -1]), states=np.array([[3, 2, 0, 0, 0]]),
                     category=np.array([IdleCategory.LAUNCH, IdleCategory.SYNC, IdleCategory.PIPELINE]))
    sums = split.sums(np.array([0, 0, 1]), np.array([5, 7, 11]), 2)
    assert sums.tolist() == [[3, 2, 0, 0, 7, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 11, 0]]
    assert split.matrix(np.array([2, 0]), np.array([5, 7, 11])).tolist() == [[0, 0, 0, 0, 0, 0, 0, 11, 0],
                                                                             [3, 2, 0, 0, 0, 0, 0, 0, 0]]
    assert [c.label for c in IdleCategory] == ["launch", "host", "stall", "setup", "sync", "dependency",
                                               "memop", "pipeline", "unknown"]
    assert base_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert base_name("cuLaunchKernelEx") == "cuLaunchKernelEx"


def test_cloverleaf_device_synchronize_after_every_kernel(cloverleaf):
    # Sync after every kernel: the gaps are sync, but for the host work done after a synchronize
    # returned (stall: stretches over 1 ms; setup: allocations) (tests/test_verdicts.py checks
    # these against tests/reference.py).
    r = analyze(cloverleaf, top=3)
    d = r.devices[0]
    assert d["gap_by_category_ns"] == {"launch": 16_662, "host": 3_156, "stall": 4_106_473, "setup": 890_616,
                                       "sync": 42_919_260, "dependency": 0, "memop": 0, "pipeline": 0, "unknown": 0}
    assert (d["verdict"], d["reading"]) == ("sync", "host syncs idle the GPU: graphs won't (<=1.05x)")
    top = r.top_gaps
    assert [g["gap_ns"] for g in top] == [2_863_896, 1_174_205, 1_148_317]
    assert top[0] == {"start_ns": 539_216_752, "gap_ns": 2_863_896, "category": "stall",
                      "gap_by_category_ns": {"launch": 0, "host": 0, "stall": 1_912_185, "setup": 593_934,
                                             "sync": 357_777, "dependency": 0, "memop": 0, "pipeline": 0,
                                             "unknown": 0},
                      "device": 0, "stream": 7, "before": "par_ranged2d_kernel", "after": "par_ranged1d_kernel",
                      "launched_by": "cudaLaunchKernel"}
    launch = {x["api"]: x for x in r.launch}
    assert launch["cudaLaunchKernel"]["calls"] == 1312
    assert launch["cudaLaunchKernel"]["host_median_ns"] == 3687.0


def test_kernels_without_any_api_calls(tmp_path):
    # An export recorded without CUDA API tracing: no runtime table at all.
    t = Synthetic().kernel(0, 1_000, 1).kernel(3_000, 4_000, 2)
    t.range(0, 10_000, "r")
    r = analyze(t.write(tmp_path / "synthetic.sqlite"))
    assert r.devices[0]["gap_by_category_ns"]["unknown"] == 2_000
    assert r.ranges[0]["kernels"] == 0
    assert any("no CUDA API calls" in w for w in r.warnings)
    assert r.launch == [] and r.top_gaps[0]["launched_by"] is None


def test_longest_picks_like_a_stable_descending_sort():
    from gapscope.analysis.attribution import longest_indices

    rng = np.random.default_rng(7)
    for size, top in ((1, 3), (10, 3), (1000, 10), (1000, 1000)):
        lengths = rng.integers(0, 20, size)  # many ties
        assert longest_indices(lengths, top).tolist() == np.argsort(-lengths, kind="stable")[:top].tolist()


# ---------------------------------------------------------- what the launching thread was doing
# One thread (tid 1) unless said: kernel 1's 1 us launch call at 0, kernel 1 on [500, 1000).


def first_kernel() -> Synthetic:
    return Synthetic().launch(0, 500, 1_000, 1)


def test_host_stretch_over_the_threshold_is_a_stall(tmp_path):
    # No CUDA call 1000 -> 3,000,000 (2.999 ms > 1 ms); then the launch call and 1 us in flight.
    t = first_kernel()
    t.call(3_000_000, 3_001_000, 2).kernel(3_002_000, 3_003_000, 2)
    assert device_categories(t, tmp_path) == {"stall": 2_999_000, "launch": 2_000}
    assert device_categories(t, tmp_path, stall_threshold_ns=5_000_000) == {"host": 2_999_000, "launch": 2_000}


def test_a_thread_waiting_while_another_thread_calls_is_not_stalled(tmp_path):
    # The same 3 ms without a call on thread 1, but thread 2 of the process calls every 0.8 ms
    # (PyTorch's autograd thread launching while the main thread waits): host, not stall.
    t = first_kernel()
    for i, at in enumerate((800_000, 1_600_000, 2_400_000)):
        t.call(at, at + 1_000, 10 + i, tid=2, name="cudaMemGetInfo_v3020")
    t.call(3_000_000, 3_001_000, 2).kernel(3_002_000, 3_003_000, 2)
    assert device_categories(t, tmp_path) == {"host": 2_999_000, "launch": 2_000}


@pytest.mark.parametrize("name,end,expected", [
    # A 5.75 ms cudaMemsetAsync (blocked in an allocator or a lock, not paying launch overhead).
    ("cudaMemsetAsync_v3020", 5_751_500, {"host": 1_000, "stall": 5_750_000, "launch": 2_000}),
    # 30 ms of lazy module loading: setup, however long.
    ("cuLibraryLoadData", 30_001_500, {"host": 1_000, "setup": 30_000_000, "launch": 2_000}),
    # A synchronize after the gap began.
    ("cudaStreamSynchronize_v3020", 1_700, {"host": 1_000, "sync": 200, "launch": 2_000}),
])
def test_a_call_inside_the_gap_counts_by_its_role(tmp_path, name, end, expected):
    # The call from 1500 to `end`, host 500 ns before and after it, then the launch call.
    t = first_kernel()
    t.call(1_500, end, 5, name=name)
    t.call(end + 500, end + 1_500, 2).kernel(end + 2_500, end + 3_500, 2)
    assert device_categories(t, tmp_path) == expected


def test_sync_then_data_loading_keeps_the_loading_a_stall(tmp_path):
    # In cudaStreamSynchronize at g0 = 1000 (until 1200), then 5 ms of batch building without a
    # CUDA call, then the next launch: sync except the stall.
    t = first_kernel()
    t.call(600, 1_200, 3, name="cudaStreamSynchronize_v3020")
    t.call(5_001_200, 5_002_200, 2).kernel(5_003_000, 5_004_000, 2)
    assert device_categories(t, tmp_path) == {"sync": 2_000, "stall": 5_000_000}


def test_before_a_threads_first_call_the_process_decides(tmp_path):
    # Thread 2 makes its first call at 2 ms; the process made none from 1000 on: stall.
    t = first_kernel()
    t.call(2_000_000, 2_001_000, 2, tid=2).kernel(2_002_000, 2_003_000, 2)
    assert device_categories(t, tmp_path) == {"stall": 1_999_000, "launch": 2_000}


def test_graph_replays_between_and_inside(tmp_path):
    from gapscope.analysis.verdicts import verdict

    # Two replays of a two-kernel graph: the kernels of one replay share its launch call.
    t = Synthetic().range(0, 10_000, "decode")
    t.call(100, 200, 1, name="cudaGraphLaunch_v10000").kernel(1_000, 2_000, 1).kernel(2_300, 3_000, 1)
    t.call(5_000, 5_100, 2, name="cudaGraphLaunch_v10000").kernel(6_000, 7_000, 2).kernel(7_300, 8_000, 2)
    r = analyze(t.write(tmp_path / "synthetic.sqlite"))
    (d,) = r.ranges
    # Inside: [2000, 2300) and [7000, 7300), queued work (pipeline). Between: [3000, 6000), the
    # host until the second launch call (3000-5000), the call and its work in flight.
    assert {k: v for k, v in d["gap_by_category_ns"].items() if v} == {"launch": 1_000, "host": 2_000, "pipeline": 600}
    assert (d["graph_kernels"], d["graph_replays"], d["gap_between_replays_ns"], d["gap_inside_replays_ns"]) == (
        4, 2, 3_000, 600)
    assert (d["verdict"], d["reading"]) == verdict(d) == ("graph_replay", "graphs: host between")
    assert r.trace["graph_trace"] == "node"


@pytest.mark.parametrize("name, gaps, absent", [
    ("torch_decode_sync", 5231, {"dependency", "unknown"}),  # copies on the kernels' own stream: memop
    ("case_default_stream", 200, {"host", "unknown"}),  # the legacy default stream's dependency
])
def test_gaps_classified_in_blocks_get_the_categories_of_one_block(monkeypatch, name, gaps, absent):
    """Attributor.classify works CLASSIFY_BLOCK gaps at a time; forced to blocks of 7 gaps on
    shipped traces whose device gaps between them fall in every category but unknown (the
    largest category of a gap: each trace lacks the ones named), the whole result (every level's
    categories, splits, longest gaps) is the one-block result."""
    from gapscope.analysis import attribution, pipeline
    from paths import TRACES

    path = TRACES / f"{name}.sqlite"
    one = pipeline.analysis_of(path)
    monkeypatch.setattr(attribution, "CLASSIFY_BLOCK", 7)
    blocks = pipeline.analysis_of(path)
    assert blocks.result.to_dict() == one.result.to_dict()
    for level in ("device_gaps", "stream_gaps", "range_gaps"):
        a, b = getattr(one, level), getattr(blocks, level)
        assert np.array_equal(a.category, b.category)
        assert np.array_equal(a.split.matrix(np.arange(a.length.size), a.length),
                              b.split.matrix(np.arange(b.length.size), b.length))
    assert one.device_gaps.length.size == gaps
    present = np.bincount(one.device_gaps.category, minlength=len(IdleCategory)) > 0
    assert {c.label for c in IdleCategory if not present[c]} == absent


@pytest.mark.parametrize("seed", range(12))
def test_previous_on_stream_a_block_at_a_time_is_the_stream_sort(seed):
    """SYNTHETIC activities (repeated starts, one to 40 streams, one stream with no activity):
    each one's predecessor on its stream found block by block from the (start, index) order
    equals the one a sort of every activity by (stream, start, index) gives, by hand."""
    from gapscope.analysis.attribution import previous_on_stream

    rng = np.random.default_rng(seed)
    n, n_streams = int(rng.integers(1, 400)), int(rng.integers(1, 41))
    start = rng.integers(0, 50, n)  # many ties
    code = rng.integers(0, n_streams, n).astype(np.int8)
    by_start = np.argsort(start, kind="stable").astype(np.int32)
    want = [-1] * n
    for s in range(n_streams):
        mine = sorted((int(start[i]), i) for i in range(n) if code[i] == s)
        for (_, a), (_, b) in zip(mine, mine[1:]):
            want[b] = a
    for block in (1, 7, n):
        got = previous_on_stream(code, n_streams + 1, by_start, block)
        assert got.dtype == np.int32 and got.tolist() == want, block


@pytest.mark.parametrize("block", [1, 3, 1 << 20])
def test_call_lengths_a_block_at_a_time_are_exact_and_as_narrow_as_they_fit(monkeypatch, block):
    """SYNTHETIC calls: each call's length (end - start) exact, made a block of calls at a time;
    32 bits while every length lies in [-2**31, 2**31 - 1), 64 once one does not."""
    from gapscope.analysis import attribution

    monkeypatch.setattr(attribution, "STREAM_BLOCK", block)
    start = np.array([10, 5_000, 7, 2**40, 0, 3], dtype=np.int64)
    for end, wide in (([15, 5_000, 9, 2**40 + 2**31 - 2, 1, 2], False),
                      ([15, 5_000, 9, 2**40 + 2**31 - 1, 1, 2], True),
                      ([15, 5_000, 9, 2**40 + 1, 1, 3 - 2**31 - 1], True)):
        end = np.array(end, dtype=np.int64)
        got = attribution._call_lengths(start, end)
        assert got.tolist() == [int(e) - int(s) for s, e in zip(start.tolist(), end.tolist())]
        assert got.dtype == (np.int64 if wide else np.int32)
