"""compare() on synthetic result dicts (docs/schema.md), checked against hand-computed numbers.

Every result here is synthetic: built in the test from chosen spans and gaps. Fractions are
picked to be exact in binary (1/4, 3/8, 1/64 ...) so deltas can be asserted exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gapscope.regression.comparison import Comparison, compare, load_input
from gapscope.errors import GapscopeError
from gapscope.inputs import READS
from gapscope.regression.thresholds import ThresholdSet

ALL_SCOPES = ("range", "device", "stream")


def synthetic_stats(
    span: int,
    gap: int,
    *,
    kernels: int = 10,
    gap_count: int = 4,
    p99: float | None = None,
    kernel_median: float | None = 1000.0,
    categories: dict[str, int] | None = None,
    verdict: str | None = None,
) -> dict[str, Any]:
    """STATS fields of a synthetic timeline with ``span`` ns of GPU span, ``gap`` ns of it idle;
    with ``categories`` the gap split of a gapscope.analysis/2 row (the rest of ``gap`` is
    ``host``), with ``verdict`` its verdict code."""
    stats = {
        "kernels": kernels,
        "memops": 0,
        "gpu_span_ns": span,
        "busy_ns": span - gap,
        "gap_ns": gap,
        "gap_fraction": gap / span if span else None,
        "gap_count": gap_count,
        "gap_p50_ns": None if p99 is None else p99 / 2,
        "gap_p90_ns": None if p99 is None else p99,
        "gap_p99_ns": p99,
        "gap_max_ns": 0 if p99 is None else int(p99),
        "kernel_median_ns": kernel_median,
    }
    if categories is not None:
        split = dict.fromkeys(("launch", "host", "stall", "setup", "sync", "dependency", "memop", "pipeline",
                               "unknown"), 0)
        split.update(categories)
        split["host"] += gap - sum(split.values())
        stats["gap_by_category_ns"] = split
    if verdict is not None:
        stats["verdict"] = verdict
    return stats


def synthetic_result(
    ranges: dict[str, tuple[int, dict[str, Any]]] | None = None,
    devices: dict[int, dict[str, Any]] | None = None,
    streams: list[tuple[int, int, int, dict[str, Any]]] | None = None,
    *,
    count_memops: bool = False,
    instances: list[tuple[str, dict[str, Any]]] | None = None,
    schema: str = "gapscope.analysis/1",
    launch: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A synthetic result (`gapscope.analysis/1` unless ``schema`` says otherwise): ranges =
    {name: (count, stats)} for by_name, devices = {device: stats}, streams = [(pid, device,
    stream, stats)], instances = [(name, stats)] for the ranges section, launch = its rows."""
    out = {
        "schema": schema,
        "gapscope_version": "0.1.0",
        "trace": {"path": "synthetic", "name": "synthetic", "graph_trace": "none"},
        "nsys_version": None,
        "options": {"count_memops": count_memops, "range_filter": []},
        "warnings": [],
        "ranges": [{"id": i, "name": n, "domain": None, "thread": 1, **s} for i, (n, s) in enumerate(instances or [])],
        "by_name": [{"name": n, "count": c, **s} for n, (c, s) in (ranges or {}).items()],
        "devices": [{"device": d, **s} for d, s in (devices or {}).items()],
        "streams": [{"pid": p, "device": d, "stream": st, **s} for p, d, st, s in (streams or [])],
    }
    if launch is not None:
        out["launch"] = launch
    return out


def one_range(span: int, gap: int, name: str = "decode_step", count: int = 1, **kw: Any) -> dict[str, Any]:
    return synthetic_result({name: (count, synthetic_stats(span, gap, **kw))})


#: Two limits, to check both an absolute and a relative threshold.
FRACTION_AND_SPAN = ThresholdSet.parse(["gap_fraction:+0.02", "gpu_span:+5%"])
FRACTION = ThresholdSet.parse(["gap_fraction:+0.02"])


def by(comparison: Comparison) -> dict[tuple[str, str, str | None], Any]:
    return {(v.scope, v.key, v.metric): v for v in comparison.verdicts}


def test_identical_runs_all_ok() -> None:
    r = synthetic_result(
        {"decode_step": (10, synthetic_stats(10_000_000, 2_500_000)), "prefill": (1, synthetic_stats(400_000, 50_000))},
        {0: synthetic_stats(20_000_000, 8_000_000)},
        [(4242, 0, 7, synthetic_stats(20_000_000, 8_000_000))],
    )
    c = compare([r], [r], FRACTION_AND_SPAN, scope=ALL_SCOPES)
    assert c.passed and c.exit_code == 0
    assert c.counts() == {"regression": 0, "missing": 0, "within-noise": 0, "improved": 0, "new": 0, "info": 0, "ok": 8}
    assert [(v.scope, v.key, v.metric) for v in c.verdicts] == [
        ("range", "decode_step", "gap_fraction"),
        ("range", "decode_step", "gpu_span_ns"),
        ("range", "prefill", "gap_fraction"),
        ("range", "prefill", "gpu_span_ns"),
        ("device", "GPU 0", "gap_fraction"),
        ("device", "GPU 0", "gpu_span_ns"),
        ("stream", "GPU 0 stream 7", "gap_fraction"),
        ("stream", "GPU 0 stream 7", "gpu_span_ns"),
    ]
    v = by(c)[("range", "decode_step", "gpu_span_ns")]
    # 10 instances and no instance rows: the mean per instance, 10_000_000 / 10
    assert (v.baseline, v.current, v.delta, v.relative_delta, v.status) == (1_000_000.0, 1_000_000.0, 0.0, 0.0, "ok")
    assert v.limit == pytest.approx(50_000.0)
    assert (v.baseline_count, v.current_count, v.per_instance) == (10.0, 10.0, "mean")
    assert c.headline() == "PASS: no regression in 8 checks (8 ok)"
    assert c.warnings == [] and c.failures() == []


def test_gap_fraction_regression_exact_numbers() -> None:
    base = one_range(1_000_000, 250_000)  # 1/4 idle
    cur = one_range(1_000_000, 375_000)  # 3/8 idle, same span
    c = compare([base], [cur], FRACTION_AND_SPAN)
    v = by(c)[("range", "decode_step", "gap_fraction")]
    assert (v.baseline, v.current, v.delta, v.relative_delta) == (0.25, 0.375, 0.125, 0.5)
    assert (v.limit, v.noise, v.threshold, v.status, v.failed) == (0.02, 0.0, "gap_fraction:+0.02", "regression", True)
    assert by(c)[("range", "decode_step", "gpu_span_ns")].status == "ok"
    assert not c.passed and c.exit_code == 1
    assert [(r.scope, r.key, r.metric) for r in c.regressions] == [("range", "decode_step", "gap_fraction")]
    assert c.headline() == "FAIL: 1 regression: range decode_step gap_fraction"
    assert v.words == "gap fraction 25.0% -> 37.5%: the GPU sits idle for more of its span"
    assert c.failures() == ["range decode_step: gap fraction 25.0% -> 37.5%: the GPU sits idle for more of its span"]
    assert v.summary() == (
        "range decode_step: gap fraction 25.0% -> 37.5%: the GPU sits idle for more of its span "
        "(+12.5 pp, limit +2.0 pp): regression"
    )


def _v2(span: int, gap: int, *, sync: int = 0, kernels: int = 10, verdict: str = "host_bound") -> dict[str, Any]:
    """STATS of a synthetic gapscope.analysis/2 row: ``sync`` ns of the gap in sync, the rest host."""
    return synthetic_stats(span, gap, kernels=kernels, categories={"sync": sync}, verdict=verdict)


def _v2_result(ranges: dict[str, tuple[int, dict[str, Any]]] | None = None,
               devices: dict[int, dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    return synthetic_result(ranges, devices, [(1, 0, 7, _v2(4000, 1000))], schema="gapscope.analysis/2", **kw)


def test_default_thresholds_check_the_ranges_only() -> None:
    base = _v2_result({"decode_step": (2, _v2(2000, 500))}, {0: _v2(4000, 1000)})
    cur = _v2_result(  # twice the span everywhere, same share of gaps: not a regression
        {"decode_step": (2, _v2(4000, 1000))}, {0: _v2(8000, 8000 - 1)},
    )
    c = compare([base], [cur])
    assert c.thresholds == ["gap_fraction:+0.1", "kernels:+0", "sync:+10%+20us", "eager_fallback:+0", "verdict:same"]
    assert c.scope == ("range",)
    assert [(v.scope, v.key, v.metric, v.baseline, v.current, v.status) for v in c.verdicts] == [
        ("range", "decode_step", "gap_fraction", 0.25, 0.25, "ok"),
        ("range", "decode_step", "kernels", 5.0, 5.0, "ok"),  # 10 kernels over 2 instances
        ("range", "decode_step", "sync_ns", 0.0, 0.0, "ok"),
        ("range", "decode_step", "verdict", "host_bound", "host_bound", "ok"),
    ]
    assert c.passed and c.warnings == []  # the device's 100% idle is not compared by default


def test_devices_by_default_when_neither_side_has_ranges() -> None:
    base, cur = _v2_result(devices={0: _v2(4000, 1000)}), _v2_result(devices={0: _v2(4000, 2000)})
    c = compare([base], [cur])
    assert c.scope == ("device",)
    assert [(v.key, v.metric, v.status) for v in c.verdicts] == [
        ("GPU 0", "gap_fraction", "regression"),  # 25% -> 50%
        ("GPU 0", "kernels", "ok"),
        ("GPU 0", "sync_ns", "ok"),
        ("GPU 0", "verdict", "ok"),
    ]
    assert c.headline() == "FAIL: 1 regression: device GPU 0 gap_fraction"


def test_ranges_without_gpu_work_do_not_count_as_ranges() -> None:
    idle = {"MPI_Init": (1, _v2(0, 0, kernels=0, verdict="no_work"))}
    base = _v2_result(idle, {0: _v2(4000, 1000)})
    cur = _v2_result(idle, {0: _v2(4000, 1000)})
    assert compare([base], [cur]).scope == ("device",)


def test_scope_is_what_is_asked() -> None:
    base = _v2_result({"d": (1, _v2(1024, 256))}, {0: _v2(4000, 1000)})
    cur = _v2_result({"d": (1, _v2(1024, 256))}, {0: _v2(4000, 1000)})
    for scope, scopes in ((["device"], {"device"}), (["stream", "range"], {"range", "stream"}),
                          (ALL_SCOPES, {"range", "device", "stream"})):
        c = compare([base], [cur], scope=scope)
        assert c.scope == tuple(s for s in ALL_SCOPES if s in scopes)
        assert {v.scope for v in c.verdicts} == scopes


def test_change_equal_to_the_limit_is_not_a_regression() -> None:
    # 0.27 - 0.25 is 0.020000000000000018 in floating point: still "at" the limit, not over it
    c = compare([one_range(1_000_000, 250_000)], [one_range(1_000_000, 270_000)], FRACTION)
    assert by(c)[("range", "decode_step", "gap_fraction")].status == "ok"
    c = compare([one_range(1_000_000, 250_000)], [one_range(1_000_000, 270_001)], FRACTION)
    assert by(c)[("range", "decode_step", "gap_fraction")].status == "regression"


def test_relative_span_threshold() -> None:
    t = ThresholdSet.parse(["gpu_span:+5%"])
    ok = compare([one_range(2_000_000, 0)], [one_range(2_100_000, 0)], t)
    v = by(ok)[("range", "decode_step", "gpu_span_ns")]
    assert (v.delta, v.relative_delta, v.status) == (100_000.0, 0.05, "ok")
    bad = compare([one_range(2_000_000, 0)], [one_range(2_100_001, 0)], t)
    v = by(bad)[("range", "decode_step", "gpu_span_ns")]
    assert (v.delta, v.status) == (100_001.0, "regression")
    assert list(by(bad)) == [("range", "decode_step", "gpu_span_ns")]  # only that metric checked


def test_relative_plus_absolute_limit() -> None:
    t = ThresholdSet.parse(["sync:+10%+20us"])
    base = _v2_result({"d": (1, _v2(1_000_000, 500_000, sync=100_000))})
    for sync, status in ((130_000, "ok"), (130_001, "regression")):  # allowed: 10% of 100 us + 20 us
        (v,) = compare([base], [_v2_result({"d": (1, _v2(1_000_000, 500_000, sync=sync))})], t).verdicts
        assert (v.limit, v.status, v.limit_text) == (pytest.approx(30_000.0), status, "+10%+20 us")
    zero = _v2_result({"d": (1, _v2(1_000_000, 500_000, sync=0))})
    for sync, status in ((20_000, "ok"), (41_000, "regression")):  # from 0: the 20 us alone
        (v,) = compare([zero], [_v2_result({"d": (1, _v2(1_000_000, 500_000, sync=sync))})], t).verdicts
        assert (v.limit, v.status) == (20_000.0, status)
    assert v.words == "sync time 0 -> 41 us: a new host synchronize"
    (v,) = compare([base], [_v2_result({"d": (1, _v2(1_000_000, 500_000, sync=200_000))})], t).verdicts
    assert v.words == "sync time 100 us -> 200 us: the host synchronizes longer"


def test_summed_range_metrics_compare_per_instance() -> None:
    base = one_range(10_000_000, 1_000_000, count=10, kernels=100)
    cur = one_range(20_000_000, 2_000_000, count=20, kernels=200)  # twice the steps, same steps
    c = compare([base], [cur], ThresholdSet.parse(["gpu_span:+0%", "kernels:+0", "gap_fraction:+0"]))
    assert c.passed
    assert [(v.metric, v.baseline, v.current, v.status) for v in c.verdicts] == [
        ("gap_fraction", 0.1, 0.1, "ok"),
        ("gpu_span_ns", 1_000_000.0, 1_000_000.0, "ok"),
        ("kernels", 10.0, 10.0, "ok"),
    ]
    assert c.warnings == [
        "instance counts differ for decode_step (10 -> 20); range values are compared per instance"
    ]


def _steps(spans_gaps: list[tuple[int, int]], kernels: int = 78) -> dict[str, Any]:
    """A result whose `step` range has one instance per (span, gap), and its by_name row."""
    instances = [("step", synthetic_stats(s, g, kernels=kernels)) for s, g in spans_gaps]
    span, gap = sum(s for s, _ in spans_gaps), sum(g for _, g in spans_gaps)
    return synthetic_result({"step": (len(spans_gaps), synthetic_stats(span, gap, kernels=kernels * len(spans_gaps)))},
                            instances=instances)


def test_repeated_ranges_compare_the_median_instance() -> None:
    # five steps of 1024 ns, 1/4 idle; in current one step stalls (7/8 idle, 8x as long)
    base = _steps([(1024, 256)] * 5)
    cur = _steps([(1024, 256)] * 4 + [(8192, 7168)])
    t = ThresholdSet.parse(["gap_fraction:+0.02", "gpu_span:+5%", "kernels:+0"])
    c = compare([base], [cur], t)
    assert c.passed
    v = by(c)
    assert (v[("range", "step", "gap_fraction")].baseline, v[("range", "step", "gap_fraction")].current) == (0.25, 0.25)
    assert (v[("range", "step", "gpu_span_ns")].current, v[("range", "step", "kernels")].current) == (1024.0, 78.0)
    assert {x.per_instance for x in c.verdicts} == {"median"}
    # the sum over instances, which the by_name row holds, would have failed: 13/20 idle
    assert cur["by_name"][0]["gap_fraction"] == (256 * 4 + 7168) / (1024 * 4 + 8192)
    # a change in most steps moves the median
    worse = _steps([(1024, 512)] * 3 + [(1024, 256)] * 2)
    (frac,) = [x for x in compare([base], [worse], t).verdicts if x.metric == "gap_fraction"]
    assert (frac.current, frac.status, frac.words) == (
        0.5, "regression", "gap fraction per step 25.0% -> 50.0%: the GPU sits idle for more of its span")


def test_instances_without_gpu_work_are_not_counted() -> None:
    base = _steps([(1024, 256)] * 3)
    base["ranges"].append({"id": 3, "name": "step", "domain": None, "thread": 1, **synthetic_stats(0, 0, kernels=0)})
    (v,) = compare([base], [_steps([(1024, 256)] * 3)], ThresholdSet.parse(["kernels:+0"])).verdicts
    assert (v.baseline, v.current) == (78.0, 78.0)


def test_spread_of_the_runs_masks_a_change_within_noise() -> None:
    base = [one_range(1024, g) for g in (128, 256, 384)]  # 1/8, 1/4, 3/8: median 1/4, spread 1/4
    cur = [one_range(1024, g) for g in (384, 384, 400)]  # median 3/8
    c = compare(base, cur, FRACTION)
    (v,) = c.verdicts
    assert (v.baseline, v.current, v.delta) == (0.25, 0.375, 0.125)
    assert (v.baseline_spread, v.current_spread, v.noise) == (0.25, 0.015625, 0.25)
    assert (v.baseline_runs, v.current_runs) == (3, 3)
    assert (v.status, v.failed) == ("within-noise", False)
    assert c.passed and c.exit_code == 0


def test_change_beyond_threshold_and_spread_is_a_regression() -> None:
    base = [one_range(1024, g) for g in (256, 256, 272)]  # 1/4, 1/4, 1/4+1/64
    cur = [one_range(1024, g) for g in (384, 400, 384)]  # 3/8, 3/8+1/64, 3/8
    c = compare(base, cur, FRACTION)
    (v,) = c.verdicts
    assert (v.baseline, v.current, v.delta, v.noise) == (0.25, 0.375, 0.125, 0.015625)
    assert v.status == "regression"


def test_noise_from_the_current_side_alone_counts() -> None:
    base = [one_range(1024, 256)]
    cur = [one_range(1024, g) for g in (128, 384, 512)]  # median 3/8, spread 3/8
    (v,) = compare(base, cur, FRACTION).verdicts
    assert (v.delta, v.noise, v.status) == (0.125, 0.375, "within-noise")


def test_two_runs_per_side_median_is_the_mean() -> None:
    base = [one_range(1_000_000, 0), one_range(1_100_000, 0)]
    cur = [one_range(1_400_000, 0), one_range(1_500_000, 0)]
    (v,) = compare(base, cur, ThresholdSet.parse(["gpu_span:+5%"])).verdicts
    assert (v.baseline, v.current, v.delta, v.noise, v.status) == (
        1_050_000.0, 1_450_000.0, 400_000.0, 100_000.0, "regression"
    )


@pytest.mark.parametrize("runs", [1, 3])
def test_improvements_never_fail(runs: int) -> None:
    base = [one_range(2_000_000, 1_000_000) for _ in range(runs)]  # 1/2 idle, 2 ms
    cur = [one_range(1_000_000, 0) for _ in range(runs)]  # no gaps, 1 ms
    c = compare(base, cur, FRACTION_AND_SPAN)
    assert [(v.metric, v.delta, v.relative_delta, v.status) for v in c.verdicts] == [
        ("gap_fraction", -0.5, -1.0, "improved"),
        ("gpu_span_ns", -1_000_000.0, -0.5, "improved"),
    ]
    assert c.passed and c.exit_code == 0 and c.regressions == []
    assert c.headline() == "PASS: no regression in 2 checks (2 improved)"


def _unmatched_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    base = synthetic_result(
        {"decode_step": (4, synthetic_stats(4000, 1000)), "warmup": (1, synthetic_stats(500, 100)),
         "log": (1, synthetic_stats(500, 100, kernels=2))},
        {0: synthetic_stats(9000, 3000)},
    )
    cur = synthetic_result(
        {"decode_step": (4, synthetic_stats(4000, 1000)), "sample": (4, synthetic_stats(800, 400, kernels=8)),
         "log": (1, synthetic_stats(0, 0, kernels=0))},
        {0: synthetic_stats(9000, 3000), 1: synthetic_stats(9000, 8000)},
    )
    return base, cur


def test_a_missing_range_fails_in_words_and_a_new_one_is_listed() -> None:
    base, cur = _unmatched_pair()
    c = compare([base], [cur], FRACTION_AND_SPAN, scope=("range", "device"))
    assert not c.passed and c.missing == "fail"
    assert c.unmatched() == [
        ("range", "warmup", "missing"),
        ("range", "log", "missing"),
        ("range", "sample", "new"),
        ("device", "GPU 1", "new"),
    ]
    warm, log, sample, gpu1 = (by(c)[(s, k, None)] for s, k, _ in c.unmatched())
    assert (warm.words, warm.failed, warm.baseline_runs, warm.current_runs) == (
        "missing from current (baseline: 10 kernels)", True, 1, 0)
    assert (log.words, log.failed, log.current_runs) == ("no GPU work in current (baseline: 2 kernels)", True, 0)
    assert (sample.words, sample.failed) == ("new in current (2 kernels per step)", False)  # 8 over 4 instances
    assert (gpu1.words, gpu1.failed) == ("new in current (10 kernels)", False)
    assert c.headline() == "FAIL: 2 missing: range warmup missing, range log missing"
    assert c.failures() == ["range warmup: missing from current (baseline: 10 kernels)",
                            "range log: no GPU work in current (baseline: 2 kernels)"]
    assert c.counts() == {"regression": 0, "missing": 2, "within-noise": 0, "improved": 0, "new": 2, "info": 0, "ok": 4}
    assert [(v.key, v.metric) for v in c.verdicts if v.metric] == [
        ("decode_step", "gap_fraction"), ("decode_step", "gpu_span_ns"), ("GPU 0", "gap_fraction"),
        ("GPU 0", "gpu_span_ns")]


@pytest.mark.parametrize(("policy", "listed"), [("warn", 2), ("ignore", 0)])
def test_missing_warn_lists_and_ignore_drops(policy: str, listed: int) -> None:
    base, cur = _unmatched_pair()
    c = compare([base], [cur], FRACTION, missing=policy)
    assert c.passed and c.missing == policy
    assert [(v.key, v.failed) for v in c.verdicts if v.status == "missing"] == [("warmup", False), ("log", False)][:listed]
    assert [v.key for v in c.verdicts if v.status == "new"] == ["sample"]


def test_sides_that_share_nothing_are_refused() -> None:
    base = synthetic_result({"eager": (1, synthetic_stats(1000, 500)), "graph": (1, synthetic_stats(1000, 100))},
                            {0: synthetic_stats(9000, 3000)})
    cur = synthetic_result({f"MPI_{i}": (1, synthetic_stats(100, 50)) for i in range(6)}, {0: synthetic_stats(9000, 3000)})
    with pytest.raises(GapscopeError) as info:
        compare([base], [cur], baseline_sources=["a.json"], current_sources=["b.json"])
    assert (info.value.message, info.value.exit_code) == (
        "baseline and current share no range with GPU work (baseline: eager, graph; current: MPI_0, MPI_1, "
        "MPI_2, MPI_3 and 2 more): not two runs of one program? Compare runs of one program, or choose what "
        "to compare with --scope", 2)
    assert compare([base], [cur], FRACTION, scope=["device"]).passed  # the devices are shared
    no_ranges = synthetic_result(devices={0: synthetic_stats(9000, 3000)})
    with pytest.raises(GapscopeError) as info:
        compare([base], [no_ranges])
    assert info.value.message == (
        "current has no range with GPU work (recorded without NVTX: nsys -t cuda,nvtx?), baseline has eager, "
        "graph: nothing to match; record both the same way, or choose what to compare with --scope")
    with pytest.raises(GapscopeError) as info:
        compare([synthetic_result()], [synthetic_result()])
    assert info.value.message == "nothing to compare: neither side has a device"


def test_streams_match_on_device_and_stream_not_pid() -> None:
    s = synthetic_stats(1000, 250)
    base = synthetic_result(streams=[(100, 0, 7, s), (100, 0, 13, s)])
    cur = synthetic_result(streams=[(555, 0, 13, s), (555, 0, 7, synthetic_stats(1000, 500))])
    c = compare([base], [cur], FRACTION, scope=["stream"])
    assert [(v.key, v.match, v.baseline, v.current, v.status) for v in c.verdicts] == [
        ("GPU 0 stream 7", {"device": 0, "stream": 7}, 0.25, 0.5, "regression"),
        ("GPU 0 stream 13", {"device": 0, "stream": 13}, 0.25, 0.25, "ok"),
    ]


def test_two_processes_on_one_device_stream_match_in_order() -> None:
    a, b = synthetic_stats(1000, 100), synthetic_stats(1000, 500)
    base = synthetic_result(streams=[(1, 0, 7, a), (2, 0, 7, b)])
    cur = synthetic_result(streams=[(8, 0, 7, a), (9, 0, 7, b)])
    c = compare([base], [cur], ThresholdSet.parse(["gap_fraction:+0"]), scope=["stream"])
    assert [(v.key, v.match, v.baseline, v.status) for v in c.verdicts] == [
        ("GPU 0 stream 7", {"device": 0, "stream": 7}, 0.1, "ok"),
        ("GPU 0 stream 7 (#2)", {"device": 0, "stream": 7, "occurrence": 2}, 0.5, "ok"),
    ]


def test_ranges_match_on_domain_and_name() -> None:
    row = synthetic_stats(1024, 256)
    base = synthetic_result({"step": (1, row)})
    base["by_name"].append({"name": "step", "domain": "CCCL", "count": 1, **synthetic_stats(1024, 512)})
    cur = json.loads(json.dumps(base))
    cur["by_name"][1]["domain"] = "TSL"
    c = compare([base], [cur], FRACTION, missing="warn")
    assert [(v.key, v.match, v.status) for v in c.verdicts] == [
        ("step", {"domain": None, "name": "step"}, "ok"),
        ("[CCCL] step", {"domain": "CCCL", "name": "step"}, "missing"),
        ("[TSL] step", {"domain": "TSL", "name": "step"}, "new"),
    ]


def test_range_present_in_some_runs_uses_those_runs() -> None:
    with_warmup = synthetic_result({"d": (1, synthetic_stats(1024, 256)), "warmup": (1, synthetic_stats(100, 50))})
    without = synthetic_result({"d": (1, synthetic_stats(1024, 256))})
    c = compare([with_warmup, without, with_warmup], [with_warmup], FRACTION)
    v = by(c)[("range", "warmup", "gap_fraction")]
    assert (v.baseline_runs, v.current_runs, v.baseline, v.current, v.status) == (2, 1, 0.5, 0.5, "ok")


def test_scoped_threshold_only_on_matching_ranges() -> None:
    base = synthetic_result({"decode_step": (1, synthetic_stats(1000, 250)), "prefill": (1, synthetic_stats(1000, 250))})
    cur = synthetic_result({"decode_step": (1, synthetic_stats(1000, 265)), "prefill": (1, synthetic_stats(1000, 265))})
    c = compare([base], [cur], ThresholdSet.parse(["gap_fraction:+0.02", "decode*:gap_fraction:+0.01"]))
    assert [(v.key, v.threshold, v.status) for v in c.verdicts] == [
        ("decode_step", "decode*:gap_fraction:+0.01", "regression"),
        ("prefill", "gap_fraction:+0.02", "ok"),
    ]


def test_null_fields_compare_as_zero() -> None:
    base = one_range(1000, 0, gap_count=0, p99=None)  # no gaps: percentiles are null
    cur = one_range(6000, 5000, gap_count=1, p99=5000.0)
    c = compare([base], [cur], ThresholdSet.parse(["gap_p99:+1us"]))
    (v,) = c.verdicts
    assert (v.baseline, v.current, v.delta, v.relative_delta, v.status) == (0.0, 5000.0, 5000.0, None, "regression")


def test_relative_threshold_on_a_zero_baseline_flags_any_rise() -> None:
    c = compare([one_range(1000, 0, gap_count=0)], [one_range(1000, 1, gap_count=1)], ThresholdSet.parse(["gaps:+50%"]))
    (v,) = c.verdicts
    assert (v.baseline, v.current, v.limit, v.relative_delta, v.status) == (0.0, 1.0, 0.0, None, "regression")


def test_off_removes_a_metric() -> None:
    c = compare([one_range(1000, 0)], [one_range(9000, 0)], ThresholdSet.parse(["gap_fraction:+0.02", "gpu_span:off"]))
    assert [v.metric for v in c.verdicts] == ["gap_fraction"]
    assert c.passed


def test_a_metric_that_is_worse_when_lower() -> None:
    replayed = synthetic_stats(1000, 100, kernels=78)
    base = synthetic_result({"step": (1, {**replayed, "graph_kernels": 78})})
    t = ThresholdSet.parse(["graph_kernels:-0"])
    (v,) = compare([base], [synthetic_result({"step": (1, {**replayed, "graph_kernels": 0})})], t).verdicts
    assert (v.delta, v.status, v.limit_text) == (-78.0, "regression", "-0")
    assert v.words == "graph kernels 78 -> 0: fewer kernels come from CUDA graph replays"
    (v,) = compare([synthetic_result({"step": (1, {**replayed, "graph_kernels": 0})})], [base], t).verdicts
    assert (v.delta, v.status) == (78.0, "improved")


def _verdicts(b: str, c: str, *, b_replay: bool = False, c_replay: bool = False) -> Any:
    def row(code: str, replay: bool) -> dict[str, Any]:
        extra = {"graph_kernels": 10, "graph_replays": 1} if replay else {"graph_kernels": 0, "graph_replays": 0}
        return {**_v2(1000, 250, verdict=code), **extra}

    base = _v2_result({"graph": (1, row(b, b_replay))})
    cur = _v2_result({"graph": (1, row(c, c_replay))})
    (v,) = compare([base], [cur], ThresholdSet.parse(["verdict:same"])).verdicts
    return v


@pytest.mark.parametrize(
    ("b", "c", "b_replay", "c_replay", "status", "words"),
    [
        ("graph_replay", "host_bound", True, False, "regression",
         "graph_replay verdict lost: the range is no longer replayed as a CUDA graph (now host_bound)"),
        ("graph_replay", "pipeline", True, False, "regression",
         "graph_replay verdict lost: the range is no longer replayed as a CUDA graph (now pipeline)"),
        ("graph_replay", "sync", True, True, "regression", "verdict graph_replay -> sync: host syncs idle the GPU"),
        ("amortized", "some_launch_gaps", False, False, "regression", "verdict amortized -> some_launch_gaps: some launch gaps"),
        ("graph_replay", "amortized", True, False, "improved", "verdict graph_replay -> amortized"),
        ("sync", "graph_replay", True, True, "improved", "verdict sync -> graph_replay"),
        ("launch_bound", "host_bound", False, False, "ok", "verdict launch_bound -> host_bound"),
        ("graph_replay", "graph_replay", True, True, "ok", "verdict graph_replay"),
    ],
)
def test_verdict_same_fails_when_the_verdict_gets_worse(b: str, c: str, b_replay: bool, c_replay: bool,
                                                        status: str, words: str) -> None:
    v = _verdicts(b, c, b_replay=b_replay, c_replay=c_replay)
    assert (v.baseline, v.current, v.status, v.words, v.delta, v.limit_text) == (b, c, status, words, None, "same")


def test_a_verdict_that_some_runs_of_both_sides_had_is_within_noise() -> None:
    def run(code: str) -> dict[str, Any]:
        return _v2_result({"d": (1, _v2(1000, 250, verdict=code))})

    t = ThresholdSet.parse(["verdict:same"])
    (v,) = compare([run("some_launch_gaps"), run("some_launch_gaps"), run("launch_bound")],
                   [run("launch_bound"), run("launch_bound"), run("some_launch_gaps")], t).verdicts
    assert (v.baseline, v.current, v.status) == ("some_launch_gaps", "launch_bound", "within-noise")
    (v,) = compare([run("some_launch_gaps")] * 3, [run("launch_bound")] * 3, t).verdicts
    assert v.status == "regression"


def _launch(api: str, host: float, calls: int = 100) -> dict[str, Any]:
    return {"api": api, "calls": calls, "host_median_ns": host, "host_p90_ns": host * 2,
            "latency_median_ns": 1000.0, "latency_p90_ns": 2000.0, "per_second": 5000.0}


def _with_launch(*rows: dict[str, Any]) -> dict[str, Any]:
    return _v2_result({"d": (1, _v2(1000, 250))}, launch=list(rows))


def test_launch_statistics_per_api() -> None:
    base = _with_launch(_launch("cudaLaunchKernel", 5000.0), _launch("cudaGraphLaunch", 100_000.0))
    cur = _with_launch(_launch("cudaLaunchKernel", 5500.0), _launch("cudaGraphLaunch", 700_000.0))
    t = ThresholdSet.parse(["launch.cudaGraphLaunch.host_median_ns:+20%"])
    c = compare([base], [cur], t)
    assert c.scope == ("range", "launch")
    assert [(v.scope, v.key, v.metric, v.baseline, v.current, v.status) for v in c.verdicts] == [
        ("launch", "cudaGraphLaunch", "launch.host_median_ns", 100_000.0, 700_000.0, "regression"),
    ]
    assert c.failures() == [
        "launch cudaGraphLaunch: host time per call 100 us -> 700 us: launching got slower on the host"]
    assert c.headline() == "FAIL: 1 regression: launch cudaGraphLaunch host_median"
    every = compare([base], [cur], ThresholdSet.parse(["launch.*.host_median_ns:+20%"]))
    assert [(v.key, v.status) for v in every.verdicts] == [("cudaLaunchKernel", "ok"), ("cudaGraphLaunch", "regression")]


def test_a_launch_api_gone_from_current_fails_only_when_named() -> None:
    base = _with_launch(_launch("cudaLaunchKernel", 5000.0), _launch("cudaGraphLaunch", 100_000.0))
    cur = _with_launch(_launch("cudaLaunchKernel", 5000.0, calls=1700))
    named = compare([base], [cur], ThresholdSet.parse(["launch.cudaGraphLaunch.host_median_ns:+20%"]))
    (gone,) = named.verdicts
    assert (gone.key, gone.status, gone.failed, gone.words) == (
        "cudaGraphLaunch", "missing", True, "missing from current (baseline: 100 calls)")
    globbed = compare([base], [cur], ThresholdSet.parse(["launch.*.host_median_ns:+20%"]))
    assert [(v.key, v.status, v.failed) for v in globbed.verdicts] == [
        ("cudaLaunchKernel", "ok", False), ("cudaGraphLaunch", "missing", False)]


def test_defaults_a_result_cannot_answer_are_skipped_with_a_warning() -> None:
    # version 1 rows without categories (no attribution): the default sync threshold is skipped
    base, cur = one_range(1000, 250), one_range(1000, 250)
    for r in (base, cur):
        r["devices"] = [{"device": 0, **synthetic_stats(4000, 1000)}]
    c = compare([base], [cur])
    assert [v.metric for v in c.verdicts] == ["gap_fraction", "kernels", "verdict"]
    assert c.warnings == ["the default sync:+10%+20us is not checked on ranges: baseline[0] has no gap "
                          "categories in its by_name rows (analyzed with --no-attribution)"]
    with pytest.raises(GapscopeError) as info:
        compare([base], [cur], ThresholdSet.parse(["sync:+10%"]))
    assert info.value.message == ("baseline[0] has no gap categories in its by_name rows (analyzed with "
                                  "--no-attribution); cannot check sync:+10%")
    with pytest.raises(GapscopeError) as info:
        compare([base], [cur], ThresholdSet.parse(["launch.*.calls:+0"]))
    assert info.value.message == ("baseline[0] has no launch statistics (analyzed with --no-attribution); "
                                  "cannot check launch.*.calls:+0")
    pooled = {**base, "schema": "gapscope.fleet/2", "files": [], "rank_names": [], "spread": [], "steps": [],
              "stragglers": []}  # the sections every many-trace result has (gapscope.schema)
    pooled.pop("ranges")
    c = compare([pooled], [pooled])
    assert c.warnings == [
        "the default sync:+10%+20us is not checked on ranges: baseline[0] is a many-trace result, whose pooled "
        "range rows have no gap categories",
        "the default verdict:same is not checked on ranges: baseline[0] is a many-trace result, whose pooled "
        "range rows have no verdict"]


def test_categories_a_version_1_result_lacks_are_refused_in_one_line() -> None:
    old = one_range(1000, 250)
    old["by_name"][0]["gap_by_category_ns"] = {"launch": 250, "sync": 0, "dependency": 0, "memop": 0, "pipeline": 0,
                                               "unknown": 0}
    new = _v2_result({"decode_step": (1, _v2(1000, 250))})
    for spec in ("host:+10%", "stall:+1ms", "setup:+0"):
        with pytest.raises(GapscopeError) as info:
            compare([old], [new], ThresholdSet.parse([spec]))
        metric = spec.split(":")[0]
        assert info.value.message == (
            f"baseline[0] is a gapscope.analysis/1 result, whose gap categories have no {metric} (its launch "
            f"time holds all the host-side time): {spec} needs /2 results on both sides (analyze the traces again)")
    with pytest.raises(GapscopeError) as info:
        compare([old], [new], ThresholdSet.parse(["launch:+10%"]))
    assert info.value.message.startswith("launch:+10% compares results of different schemas (gapscope.analysis/1, "
                                         "gapscope.analysis/2): launch time held all the host-side time")
    (v,) = compare([old], [new], ThresholdSet.parse(["sync:+10%"])).verdicts  # the same meaning in both
    assert (v.baseline, v.current, v.status) == (0.0, 0.0, "ok")
    assert compare([old], [old], ThresholdSet.parse(["launch:+10%"])).passed


def test_report_order_failures_first_and_json_round_trip() -> None:
    base = synthetic_result(
        {"a": (1, synthetic_stats(1000, 100)), "b": (1, synthetic_stats(1000, 500)), "c": (1, synthetic_stats(1000, 250))},
    )
    cur = synthetic_result(
        {"a": (1, synthetic_stats(1000, 100)), "b": (1, synthetic_stats(1000, 250)), "c": (1, synthetic_stats(1000, 500))},
    )
    c = compare([base], [cur], FRACTION, baseline_sources=["b.json"], current_sources=["c.json"])
    assert [(v.key, v.status) for v in c.ordered()] == [("c", "regression"), ("b", "improved"), ("a", "ok")]
    d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert d["schema"] == "gapscope.comparison/2"
    assert (d["passed"], d["exit_code"]) == (False, 1)
    assert d["headline"] == "FAIL: 1 regression: range c gap_fraction"
    assert d["failures"] == ["range c: gap fraction 25.0% -> 50.0%: the GPU sits idle for more of its span"]
    assert d["baseline"] == {"runs": 1, "sources": ["b.json"]}
    assert (d["thresholds"], d["scope"], d["missing"]) == (["gap_fraction:+0.02"], ["range"], "fail")
    assert d["counts"]["regression"] == 1 and d["counts"]["improved"] == 1 and d["counts"]["ok"] == 1
    assert d["verdicts"][0] == {
        "scope": "range", "key": "c", "match": {"domain": None, "name": "c"}, "metric": "gap_fraction",
        "status": "regression", "baseline": 0.25, "current": 0.5, "delta": 0.25, "relative_delta": 1.0,
        "threshold": "gap_fraction:+0.02", "limit": 0.02, "noise": 0.0, "baseline_spread": 0.0,
        "current_spread": 0.0, "baseline_runs": 1, "current_runs": 1, "baseline_count": 1.0,
        "current_count": 1.0, "failed": True, "note": False,
        "words": "gap fraction 25.0% -> 50.0%: the GPU sits idle for more of its span",
        "per_instance": "mean", "limit_text": "+2.0 pp",
    }


def test_option_mismatch_warns() -> None:
    base = synthetic_result({"d": (1, synthetic_stats(1000, 250))})
    cur = synthetic_result({"d": (1, synthetic_stats(1000, 250))}, count_memops=True)
    c = compare([base], [cur], FRACTION)
    assert c.warnings == [
        "baseline and current differ in count_memops option (false vs true); the comparison may not be like for like"
    ]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("schema"), "baseline[0] is not a gapscope result (no 'schema' field; expected gapscope.analysis/3)"),
        (lambda r: r.update(schema="other/1"), "baseline[0] is not a gapscope result (schema 'other/1'; expected gapscope.analysis/3)"),
        (lambda r: r.pop("streams"), "baseline[0]: result has no 'streams' list"),
        (lambda r: r["by_name"][0].pop("gap_fraction"),
         "baseline[0] has no 'gap_fraction' field in its by_name rows; cannot check gap_fraction:+0.02"),
        (lambda r: r["by_name"][0].update(gap_fraction="x"),
         "baseline[0]: by_name[0].gap_fraction is 'x', not a fraction in [0, 1]; not a result gapscope wrote"),
        (lambda r: r["by_name"][0].pop("name"), "baseline[0]: by_name[0] has no 'name' field"),
        (lambda r: r["devices"].append({"gap_fraction": 0.1}), "baseline[0]: devices[1] has no 'device' field"),
        (lambda r: r["by_name"][0].update(count=-1), "baseline[0]: by_name[0].count is -1, not a number >= 0; not a result gapscope wrote"),
    ],
)
def test_malformed_results_raise_one_clear_error(mutate: Any, message: str) -> None:
    bad = synthetic_result({"d": (1, synthetic_stats(1000, 250))}, {0: synthetic_stats(1000, 250)})
    mutate(bad)
    good = synthetic_result({"d": (1, synthetic_stats(1000, 250))}, {0: synthetic_stats(1000, 250)})
    with pytest.raises(GapscopeError) as info:
        compare([bad], [good], FRACTION, scope=ALL_SCOPES)
    assert (info.value.message, info.value.exit_code) == (message, 2)


def test_empty_sides_are_errors() -> None:
    r = synthetic_result()
    with pytest.raises(GapscopeError, match="^no baseline given$"):
        compare([], [r])
    with pytest.raises(GapscopeError, match="^no current result given$"):
        compare([r], [])


def test_load_input_json_and_errors(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GAPSCOPE_NSYS", str(tmp_path / "no-nsys"))  # no nsys, on any machine
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    good = tmp_path / "r.json"
    good.write_text(json.dumps(synthetic_result()), encoding="utf-8")
    assert load_input(good)["schema"] == "gapscope.analysis/1"
    cases = {
        "missing.json": (None, f"{tmp_path / 'missing.json'}: no such file"),
        "broken.json": ("{", f"{tmp_path / 'broken.json'}: not valid JSON (line 1, column 2: Expecting property name enclosed in double quotes); expected a gapscope result JSON"),
        "list.json": ("[]", f"{tmp_path / 'list.json'}: a JSON array, neither a gapscope result nor a PyTorch profiler trace (an object with traceEvents; gapscope reads {READS})"),
        "other.json": ('{"schema": "x/1"}', f"{tmp_path / 'other.json'}: a JSON file but neither a gapscope result nor a PyTorch profiler trace (schema 'x/1'; gapscope reads {READS})"),
        "fake.sqlite": ("not sqlite", f"{tmp_path / 'fake.sqlite'}: not a SQLite file, a PyTorch profiler trace or a gapscope result JSON (gapscope reads {READS})"),
        "t.nsys-rep": ("x", f"{tmp_path / 't.nsys-rep'}: export it where nsys is (`nsys export --type parquetdir -o DIR {tmp_path / 't.nsys-rep'}`) and give gapscope DIR, or install Nsight Systems (or set GAPSCOPE_NSYS): a .nsys-rep is read through nsys, and GAPSCOPE_NSYS {tmp_path / 'no-nsys'}: no executable nsys there"),
    }
    for name, (content, message) in cases.items():
        if content is not None:
            (tmp_path / name).write_text(content, encoding="utf-8")
        with pytest.raises(GapscopeError) as info:
            load_input(tmp_path / name)
        assert (info.value.message, info.value.exit_code) == (message, 2), name
    with pytest.raises(GapscopeError) as info:
        load_input(tmp_path)
    assert info.value.message == (f"{tmp_path}: is a directory, not an nsys export folder or a `gapscope run` "
                                  f"output folder: no nsys export tables (.parquet or .arrow) and no run.json "
                                  f"in it (gapscope reads {READS})")
    run_dir = tmp_path / "gapscope-run"
    run_dir.mkdir()
    (run_dir / "analysis.json").write_text(json.dumps(synthetic_result({"x": (1, synthetic_stats(10, 5))})), encoding="utf-8")
    assert load_input(run_dir)["by_name"][0]["name"] == "x"
    (run_dir / "run.json").write_text('{"schema": "gapscope-run/1"}', encoding="utf-8")
    assert load_input(run_dir / "run.json")["by_name"][0]["name"] == "x"  # its analysis.json
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(GapscopeError) as info:
        load_input(tmp_path / "bin.json")
    assert info.value.message == f"{tmp_path / 'bin.json'}: not a gapscope result JSON (not UTF-8 text)"


def test_every_field_of_the_comparison_json_is_documented() -> None:
    base, cur = _unmatched_pair()
    data = compare([base], [cur], FRACTION, missing="warn").to_dict()
    schema = (Path(__file__).parents[1] / "docs" / "schema.md").read_text(encoding="utf-8")
    section = schema.split("# Comparison: `gapscope.comparison/2`", 1)[1].split("\n# ", 1)[0]
    assert f'"schema": "{data["schema"]}"' in section
    for key in data:
        assert f'"{key}"' in section, key
    for key in data["verdicts"][0]:
        assert f"`{key}`" in section, key
    for status in data["counts"]:
        assert f"`{status}`" in section, status
