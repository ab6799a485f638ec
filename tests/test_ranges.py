"""NVTX ranges: domains, op-name grouping, whose launches a range owns, and what a selection of
ranges narrows (synthetic exports, hand-computed)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gapscope.analysis import analyze
from gapscope.analysis.ranges import group_names, is_library_domain
from gapscope.errors import GapscopeError
from synthetic import PID, Synthetic


def by(rows, **match):
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def two_domains(tmp_path):
    """Two op ranges of one name in the default domain, a range of that name in CCCL (domain
    1, named by its creation event) and one in domain 2, which has no creation event."""
    t = Synthetic()
    t.nvtx.append((0, None, 75, "CCCL", 1, 1, PID))
    t.range(0, 10_000, "aten::mul, seq = 7, op_id = 11")
    t.launch(100, 1_000, 2_000, 1).launch(200, 3_000, 4_000, 2)  # gap 1000
    t.range(20_000, 30_000, "aten::mul, seq = 8, op_id = 12, sizes = [[2, 3], []], input_op_ids = [(1,0)]")
    t.launch(20_100, 21_000, 22_000, 3)
    t.range(40_000, 50_000, "aten::mul", domain=1)
    t.launch(40_100, 41_000, 42_000, 4).launch(40_200, 45_000, 46_000, 5)  # gap 3000
    t.range(60_000, 70_000, "mine", domain=2)
    t.launch(60_100, 61_000, 62_000, 6)
    return t.write(tmp_path / "synthetic.sqlite")


def test_by_name_rows_are_per_domain_and_op_name(tmp_path):
    r = analyze(two_domains(tmp_path))
    assert [(x["domain"], x["name"], x["count"], x["kernels"], x["gap_ns"]) for x in r.by_name] == [
        (None, "aten::mul", 2, 3, 1_000), ("CCCL", "aten::mul", 1, 2, 3_000), ("domain 2", "mine", 1, 1, 0)]
    # Instances keep their full names.
    assert r.ranges[1]["name"].startswith("aten::mul, seq = 8, op_id = 12, sizes")
    raw = analyze(two_domains(tmp_path), normalize=False)
    assert [x["name"] for x in raw.by_name][:2] == ["aten::mul, seq = 7, op_id = 11",
                                                    "aten::mul, seq = 8, op_id = 12, sizes = [[2, 3], []], "
                                                    "input_op_ids = [(1,0)]"]


def test_domain_filter(tmp_path):
    path = two_domains(tmp_path)
    assert {x["domain"] for x in analyze(path, domains=["default"]).by_name} == {None}
    cccl = analyze(path, domains=["cccl"])
    assert [(x["domain"], x["name"]) for x in cccl.by_name] == [("CCCL", "aten::mul")]
    assert cccl.options["domain_filter"] == ["cccl"]
    with pytest.raises(GapscopeError, match="no NVTX range in domain 'NCCL'; domains in this trace: "
                                            "CCCL, default, domain 2"):
        analyze(path, domains=["NCCL"])


def test_range_glob_matches_full_and_grouped_names(tmp_path):
    path = two_domains(tmp_path)
    assert len(analyze(path, ranges=["aten::mul"]).ranges) == 3
    assert len(analyze(path, ranges=["*seq = 8*"]).ranges) == 1


def test_op_suffixes_and_library_domains():
    names = ["aten::mm, seq = 1, op_id = 2", "AddBackward0, seq = 3, op_id = 4, sizes = [[8, 16]], "
             "input_op_ids = [(2,0)]", "aten::empty, op_id = 5", "x, sizes = []", "plain, seq = a", "decode_step"]
    assert group_names(names).tolist() == ["aten::mm", "AddBackward0", "aten::empty", "x", "plain, seq = a",
                                           "decode_step"]
    assert [is_library_domain(d) for d in ("TSL", "cccl", "NCCL", "myapp", None, float("nan"))] == [
        True, True, True, False, False, False]


def worker(tmp_path):
    """The main thread (1) holds a range; a worker thread (2) launches two kernels inside it."""
    t = Synthetic().range(0, 10_000, "request", tid=1)
    t.launch(1_000, 2_000, 3_000, 1, tid=2).launch(4_000, 5_000, 6_000, 2, tid=2)
    return t.write(tmp_path / "synthetic.sqlite")


def test_threads_same_warns_and_process_counts_other_threads(tmp_path):
    same = analyze(worker(tmp_path))
    assert same.ranges[0]["kernels"] == 0
    assert same.warnings == ["1 NVTX ranges (request x1) launched no GPU work on their own thread while other "
                             "threads of their process launched work inside them; `--threads process` gives them "
                             "that work"]
    proc = analyze(worker(tmp_path), threads="process")
    (req,) = proc.ranges
    # Gap [3000, 5000): the worker was between calls until 4000, then in its launch call.
    assert (req["kernels"], req["gap_ns"]) == (2, 2_000)
    assert {k: v for k, v in req["gap_by_category_ns"].items() if v} == {"host": 1_000, "launch": 1_000}
    assert proc.warnings == []
    with pytest.raises(GapscopeError, match="--threads must be one of same, process"):
        analyze(worker(tmp_path), threads="any")


def test_a_selection_narrows_the_longest_gaps_and_launch_calls(tmp_path):
    t = Synthetic()
    t.range(0, 10_000, "a").launch(100, 1_000, 2_000, 1).launch(200, 3_000, 4_000, 2)  # a: gap 1000
    t.range(20_000, 30_000, "b").launch(20_100, 21_000, 22_000, 3)
    t.call(20_200, 20_300, 4, name="cudaMemcpyAsync_v3020").memcpy.append((22_000, 22_500, 0, 7, 4, PID))
    t.launch(20_400, 40_000, 41_000, 5)  # b: gap 18000
    path = t.write(tmp_path / "synthetic.sqlite")
    whole = analyze(path)
    assert [g["gap_ns"] for g in whole.top_gaps] == [18_000, 17_000, 1_000]
    assert {x["api"]: x["calls"] for x in whole.launch} == {"cudaLaunchKernel": 4, "cudaMemcpyAsync": 1}
    a = analyze(path, ranges=["a"])
    assert [g["gap_ns"] for g in a.top_gaps] == [1_000]
    assert {x["api"]: x["calls"] for x in a.launch} == {"cudaLaunchKernel": 2}
    # Nested ranges list a gap once.
    t.range(0, 12_000, "outer")
    both = analyze(t.write(tmp_path / "nested.sqlite"), ranges=["a", "outer"])
    assert [g["gap_ns"] for g in both.top_gaps] == [1_000]


def test_range_calls_count_and_sum_each_ranges_own_threads_calls(monkeypatch):
    """Synthetic calls and ranges on three threads (ranges nested, overlapping, empty, on a thread
    with no call; calls at a range's very start and end; a call ending before it starts), the
    calls counted into the ranges a few at a time: each range's calls and summed durations are
    those of its own thread's counted calls with range.start <= call.start <= range.end, as a
    plain walk over every (range, call) pair finds them."""
    from types import SimpleNamespace

    import gapscope.analysis.ranges as ranges_mod

    rng = np.random.default_rng(7)
    n_calls, n_ranges = 3_000, 200
    tid = rng.choice([11, 12, 13], n_calls)
    start = rng.integers(0, 10_000, n_calls)
    end = start + rng.integers(-5, 300, n_calls)
    counted = rng.random(n_calls) < 0.8
    r_tid = rng.choice([11, 12, 14], n_ranges)
    r_start = rng.integers(0, 10_000, n_ranges)
    r_start[:20] = start[:20]  # ranges that begin exactly at a call
    r_end = r_start + rng.integers(0, 3_000, n_ranges)
    r_start[20:40] = start[20:40] - rng.integers(0, 2_000, 20)
    r_end[20:40] = start[20:40]  # and end exactly at one
    r_tid[:40] = tid[:40]
    frames = SimpleNamespace(api=pd.DataFrame({"tid": tid, "start": start, "end": end}))
    table = SimpleNamespace(frame=pd.DataFrame({"tid": r_tid, "start_ns": r_start, "end_ns": r_end}))
    monkeypatch.setattr(ranges_mod, "CALL_BLOCK", 256)
    for mask in (None, counted):
        calls, ns = ranges_mod.range_calls(frames, table, mask)
        want_calls, want_ns = [], []
        for t, a, b in zip(r_tid, r_start, r_end):
            inside = [(s, e) for i, (c, s, e) in enumerate(zip(tid, start, end))
                      if c == t and a <= s <= b and (mask is None or mask[i])]
            want_calls.append(len(inside))
            want_ns.append(sum(max(e - s, 0) for s, e in inside))
        assert calls.tolist() == want_calls and ns.tolist() == want_ns
        assert sum(want_calls) > 1_000 and want_calls.count(0) > 5  # both kinds of range occur
