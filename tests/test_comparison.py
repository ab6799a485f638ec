"""compare() on synthetic result dicts (docs/schema.md), checked against hand-computed numbers.

Every result here is synthetic: built in the test from chosen spans and gaps. Fractions are
picked to be exact in binary (1/4, 3/8, 1/64 ...) so deltas can be asserted exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gapscope.compare.comparison import Comparison, compare, load_input
from gapscope.errors import GapscopeError
from gapscope.inputs import READS
from gapscope.compare.thresholds import ThresholdSet


def synthetic_stats(
    span: int,
    gap: int,
    *,
    kernels: int = 10,
    gap_count: int = 4,
    p99: float | None = None,
    kernel_median: float | None = 1000.0,
) -> dict[str, Any]:
    """STATS fields of a synthetic timeline with ``span`` ns of GPU span, ``gap`` ns of it idle."""
    return {
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


def synthetic_result(
    ranges: dict[str, tuple[int, dict[str, Any]]] | None = None,
    devices: dict[int, dict[str, Any]] | None = None,
    streams: list[tuple[int, int, int, dict[str, Any]]] | None = None,
    *,
    count_memops: bool = False,
) -> dict[str, Any]:
    """A synthetic `gapscope.analysis/1` result: ranges = {name: (count, stats)}, devices =
    {device: stats}, streams = [(pid, device, stream, stats)]."""
    return {
        "schema": "gapscope.analysis/1",
        "gapscope_version": "0.1.0",
        "trace": {"path": "synthetic", "name": "synthetic", "graph_trace": "none"},
        "nsys_version": None,
        "options": {"count_memops": count_memops, "range_filter": []},
        "warnings": [],
        "ranges": [],
        "by_name": [{"name": n, "count": c, **s} for n, (c, s) in (ranges or {}).items()],
        "devices": [{"device": d, **s} for d, s in (devices or {}).items()],
        "streams": [{"pid": p, "device": d, "stream": st, **s} for p, d, st, s in (streams or [])],
    }


def one_range(span: int, gap: int, name: str = "decode_step", count: int = 1, **kw: Any) -> dict[str, Any]:
    return synthetic_result({name: (count, synthetic_stats(span, gap, **kw))})


#: The defaults plus a span limit, to check both an absolute and a relative threshold.
FRACTION_AND_SPAN = ThresholdSet.parse(["gap_fraction:+0.02", "gpu_span:+5%"])


def by(comparison: Comparison) -> dict[tuple[str, str, str], Any]:
    return {(v.scope, v.key, v.metric): v for v in comparison.verdicts}


def test_identical_runs_all_ok() -> None:
    r = synthetic_result(
        {"decode_step": (10, synthetic_stats(10_000_000, 2_500_000)), "prefill": (1, synthetic_stats(400_000, 50_000))},
        {0: synthetic_stats(20_000_000, 8_000_000)},
        [(4242, 0, 7, synthetic_stats(20_000_000, 8_000_000))],
    )
    c = compare([r], [r], FRACTION_AND_SPAN)
    assert c.passed and c.exit_code == 0
    assert c.counts() == {"regression": 0, "within-noise": 0, "improved": 0, "new": 0, "missing": 0, "ok": 8}
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
    # 10 instances: the per-instance span is 10_000_000 / 10
    assert (v.baseline, v.current, v.delta, v.relative_delta, v.status) == (1_000_000.0, 1_000_000.0, 0.0, 0.0, "ok")
    assert v.limit == pytest.approx(50_000.0)
    assert (v.baseline_count, v.current_count) == (10.0, 10.0)
    assert c.headline() == "PASS: no regression in 8 checks (8 ok)"
    assert c.warnings == []


def test_gap_fraction_regression_exact_numbers() -> None:
    base = one_range(1_000_000, 250_000)  # 1/4 idle
    cur = one_range(1_000_000, 375_000)  # 3/8 idle, same span
    c = compare([base], [cur], FRACTION_AND_SPAN)
    v = by(c)[("range", "decode_step", "gap_fraction")]
    assert (v.baseline, v.current, v.delta, v.relative_delta) == (0.25, 0.375, 0.125, 0.5)
    assert (v.limit, v.noise, v.threshold, v.status) == (0.02, 0.0, "gap_fraction:+0.02", "regression")
    assert by(c)[("range", "decode_step", "gpu_span_ns")].status == "ok"
    assert not c.passed and c.exit_code == 1
    assert [(r.scope, r.key, r.metric) for r in c.regressions] == [("range", "decode_step", "gap_fraction")]
    assert c.headline() == "FAIL: 1 regression: range decode_step gap_fraction"
    assert v.summary() == (
        "range decode_step gap_fraction 25.0% -> 37.5% (+12.5 pp, limit +2.0 pp): regression"
    )


def test_default_thresholds_check_gap_fraction_everywhere() -> None:
    base = synthetic_result(
        {"decode_step": (2, synthetic_stats(2000, 500))},
        {0: synthetic_stats(4000, 1000)},
        [(1, 0, 7, synthetic_stats(4000, 1000))],
    )
    cur = synthetic_result(  # twice the span everywhere, same share of gaps: not a regression
        {"decode_step": (2, synthetic_stats(4000, 1000))},
        {0: synthetic_stats(8000, 2000)},
        [(1, 0, 7, synthetic_stats(8000, 2000))],
    )
    c = compare([base], [cur])
    assert c.thresholds == ["gap_fraction:+0.02"]
    assert [(v.scope, v.key, v.metric, v.baseline, v.current, v.status) for v in c.verdicts] == [
        ("range", "decode_step", "gap_fraction", 0.25, 0.25, "ok"),
        ("device", "GPU 0", "gap_fraction", 0.25, 0.25, "ok"),
        ("stream", "GPU 0 stream 7", "gap_fraction", 0.25, 0.25, "ok"),
    ]


def test_change_equal_to_the_limit_is_not_a_regression() -> None:
    # 0.27 - 0.25 is 0.020000000000000018 in floating point: still "at" the limit, not over it
    c = compare([one_range(1_000_000, 250_000)], [one_range(1_000_000, 270_000)])
    assert by(c)[("range", "decode_step", "gap_fraction")].status == "ok"
    c = compare([one_range(1_000_000, 250_000)], [one_range(1_000_000, 270_001)])
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
        "instance counts differ for decode_step (10 -> 20); summed range metrics are compared per instance"
    ]


def test_spread_of_the_runs_masks_a_change_within_noise() -> None:
    base = [one_range(1024, g) for g in (128, 256, 384)]  # 1/8, 1/4, 3/8: median 1/4, spread 1/4
    cur = [one_range(1024, g) for g in (384, 384, 400)]  # median 3/8
    c = compare(base, cur, ThresholdSet.parse(["gap_fraction:+0.02"]))
    (v,) = c.verdicts
    assert (v.baseline, v.current, v.delta) == (0.25, 0.375, 0.125)
    assert (v.baseline_spread, v.current_spread, v.noise) == (0.25, 0.015625, 0.25)
    assert (v.baseline_runs, v.current_runs) == (3, 3)
    assert v.status == "within-noise"
    assert c.passed and c.exit_code == 0


def test_change_beyond_threshold_and_spread_is_a_regression() -> None:
    base = [one_range(1024, g) for g in (256, 256, 272)]  # 1/4, 1/4, 1/4+1/64
    cur = [one_range(1024, g) for g in (384, 400, 384)]  # 3/8, 3/8+1/64, 3/8
    c = compare(base, cur, ThresholdSet.parse(["gap_fraction:+0.02"]))
    (v,) = c.verdicts
    assert (v.baseline, v.current, v.delta, v.noise) == (0.25, 0.375, 0.125, 0.015625)
    assert v.status == "regression"


def test_noise_from_the_current_side_alone_counts() -> None:
    base = [one_range(1024, 256)]
    cur = [one_range(1024, g) for g in (128, 384, 512)]  # median 3/8, spread 3/8
    (v,) = compare(base, cur, ThresholdSet.parse(["gap_fraction:+0.02"])).verdicts
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


def test_unmatched_entries_are_listed_not_dropped_and_never_fail() -> None:
    base = synthetic_result(
        {"decode_step": (4, synthetic_stats(4000, 1000)), "warmup": (1, synthetic_stats(500, 100))},
        {0: synthetic_stats(9000, 3000)},
    )
    cur = synthetic_result(
        {"decode_step": (4, synthetic_stats(4000, 1000)), "sample": (4, synthetic_stats(800, 400))},
        {0: synthetic_stats(9000, 3000), 1: synthetic_stats(9000, 8000)},
    )
    c = compare([base], [cur], FRACTION_AND_SPAN)
    assert c.passed
    assert c.unmatched() == [
        ("range", "warmup", "missing"),
        ("range", "sample", "new"),
        ("device", "GPU 1", "new"),
    ]
    warm = by(c)[("range", "warmup", "gap_fraction")]
    assert (warm.baseline, warm.current, warm.delta, warm.status) == (0.2, None, None, "missing")
    assert (warm.baseline_runs, warm.current_runs) == (1, 0)
    sample = by(c)[("range", "sample", "gpu_span_ns")]
    assert (sample.baseline, sample.current, sample.status) == (None, 200.0, "new")
    assert c.counts() == {"regression": 0, "within-noise": 0, "improved": 0, "new": 4, "missing": 2, "ok": 4}


def test_streams_match_on_device_and_stream_not_pid() -> None:
    s = synthetic_stats(1000, 250)
    base = synthetic_result(streams=[(100, 0, 7, s), (100, 0, 13, s)])
    cur = synthetic_result(streams=[(555, 0, 13, s), (555, 0, 7, synthetic_stats(1000, 500))])
    c = compare([base], [cur], ThresholdSet.parse(["gap_fraction:+0.02"]))
    assert [(v.key, v.match, v.baseline, v.current, v.status) for v in c.verdicts] == [
        ("GPU 0 stream 7", {"device": 0, "stream": 7}, 0.25, 0.5, "regression"),
        ("GPU 0 stream 13", {"device": 0, "stream": 13}, 0.25, 0.25, "ok"),
    ]


def test_two_processes_on_one_device_stream_match_in_order() -> None:
    a, b = synthetic_stats(1000, 100), synthetic_stats(1000, 500)
    base = synthetic_result(streams=[(1, 0, 7, a), (2, 0, 7, b)])
    cur = synthetic_result(streams=[(8, 0, 7, a), (9, 0, 7, b)])
    c = compare([base], [cur], ThresholdSet.parse(["gap_fraction:+0"]))
    assert [(v.key, v.match, v.baseline, v.status) for v in c.verdicts] == [
        ("GPU 0 stream 7", {"device": 0, "stream": 7}, 0.1, "ok"),
        ("GPU 0 stream 7 (#2)", {"device": 0, "stream": 7, "occurrence": 2}, 0.5, "ok"),
    ]


def test_range_present_in_some_runs_uses_those_runs() -> None:
    with_warmup = synthetic_result({"d": (1, synthetic_stats(1024, 256)), "warmup": (1, synthetic_stats(100, 50))})
    without = synthetic_result({"d": (1, synthetic_stats(1024, 256))})
    c = compare([with_warmup, without, with_warmup], [with_warmup], ThresholdSet.parse(["gap_fraction:+0.02"]))
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


def test_report_order_regressions_first_and_json_round_trip() -> None:
    base = synthetic_result(
        {"a": (1, synthetic_stats(1000, 100)), "b": (1, synthetic_stats(1000, 500)), "c": (1, synthetic_stats(1000, 250))},
    )
    cur = synthetic_result(
        {"a": (1, synthetic_stats(1000, 100)), "b": (1, synthetic_stats(1000, 250)), "c": (1, synthetic_stats(1000, 500))},
    )
    c = compare([base], [cur], ThresholdSet.parse(["gap_fraction:+0.02"]), baseline_sources=["b.json"], current_sources=["c.json"])
    assert [(v.key, v.status) for v in c.ordered()] == [("c", "regression"), ("b", "improved"), ("a", "ok")]
    d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert d["schema"] == "gapscope.comparison/1"
    assert (d["passed"], d["exit_code"]) == (False, 1)
    assert d["headline"] == "FAIL: 1 regression: range c gap_fraction"
    assert d["baseline"] == {"runs": 1, "sources": ["b.json"]}
    assert d["thresholds"] == ["gap_fraction:+0.02"]
    assert d["counts"]["regression"] == 1 and d["counts"]["improved"] == 1 and d["counts"]["ok"] == 1
    assert d["verdicts"][0] == {
        "scope": "range", "key": "c", "match": {"name": "c"}, "metric": "gap_fraction",
        "status": "regression", "baseline": 0.25, "current": 0.5, "delta": 0.25, "relative_delta": 1.0,
        "threshold": "gap_fraction:+0.02", "limit": 0.02, "noise": 0.0, "baseline_spread": 0.0,
        "current_spread": 0.0, "baseline_runs": 1, "current_runs": 1, "baseline_count": 1.0,
        "current_count": 1.0,
    }


def test_option_mismatch_warns() -> None:
    base = synthetic_result({"d": (1, synthetic_stats(1000, 250))})
    cur = synthetic_result({"d": (1, synthetic_stats(1000, 250))}, count_memops=True)
    c = compare([base], [cur])
    assert c.warnings == [
        "baseline and current differ in count_memops option (false vs true); the comparison may not be like for like"
    ]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.pop("schema"), "baseline[0] is not a gapscope result (no 'schema' field; expected gapscope.analysis/2)"),
        (lambda r: r.update(schema="other/1"), "baseline[0] is not a gapscope result (schema 'other/1'; expected gapscope.analysis/2)"),
        (lambda r: r.pop("streams"), "baseline[0]: result has no 'streams' list"),
        (lambda r: r["by_name"][0].pop("gap_fraction"), "baseline[0]: range d has no 'gap_fraction' field"),
        (lambda r: r["by_name"][0].update(gap_fraction="x"),
         "baseline[0]: by_name[0].gap_fraction is 'x', not a fraction in [0, 1]; not a result gapscope wrote"),
        (lambda r: r["by_name"][0].pop("name"), "baseline[0]: by_name[0] has no 'name' field"),
        (lambda r: r["devices"].append({"gap_fraction": 0.1}), "baseline[0]: devices[0] has no 'device' field"),
    ],
)
def test_malformed_results_raise_one_clear_error(mutate: Any, message: str) -> None:
    bad = synthetic_result({"d": (1, synthetic_stats(1000, 250))})
    mutate(bad)
    good = synthetic_result({"d": (1, synthetic_stats(1000, 250))})
    with pytest.raises(GapscopeError) as info:
        compare([bad], [good])
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
        "t.nsys-rep": ("x", f"{tmp_path / 't.nsys-rep'}: an Nsight Systems report, which gapscope reads by exporting it with nsys, and there is no nsys to run (GAPSCOPE_NSYS {tmp_path / 'no-nsys'}: no executable nsys there): install Nsight Systems or set GAPSCOPE_NSYS, or export it where nsys is (`nsys export --type parquetdir -o DIR {tmp_path / 't.nsys-rep'}`) and give gapscope DIR (gapscope reads {READS})"),
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
