"""gapscope analyze on synthetic exports (edge cases, hand-computed) and on third-party real
exports (checked against tests/reference.py's plain sort-and-merge)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import reference
from gapscope.analysis import analyze
from gapscope.errors import GapscopeError
from paths import TRACES
from synthetic import Synthetic



def by(rows, key, value):
    return next(r for r in rows if r[key] == value)


# ---------------------------------------------------------------- synthetic: hand-checked


def test_overlapping_streams_count_once(tmp_path):
    # Device 0: [0,100) on stream 7, [50,150) on stream 8, [200,300) stream 7.
    # Union = [0,150) + [200,300) = 250; span 300; one gap of 50.
    t = Synthetic()
    t.launch(0, 0, 100, 1, stream=7).launch(0, 50, 150, 2, stream=8).launch(0, 200, 300, 3, stream=7)
    r = analyze(t.write(tmp_path / "synthetic.sqlite"))
    d = r.devices[0]
    assert (d["gpu_span_ns"], d["busy_ns"], d["gap_ns"], d["gap_count"]) == (300, 250, 50, 1)
    assert d["gap_fraction"] == pytest.approx(50 / 300)
    s7 = by(r.streams, "stream", 7)
    assert (s7["gpu_span_ns"], s7["busy_ns"], s7["gap_ns"]) == (300, 200, 100)
    s8 = by(r.streams, "stream", 8)
    assert (s8["gpu_span_ns"], s8["gap_ns"], s8["gap_fraction"]) == (100, 0, 0.0)


def test_range_gets_work_launched_inside_it_on_its_thread(tmp_path):
    t = Synthetic()
    t.range(0, 10_000, "step", tid=1)
    t.launch(1_000, 20_000, 21_000, 1, tid=1)   # inside, thread 1
    t.launch(2_000, 23_000, 24_000, 2, tid=1)   # inside: gap 2000 after the first
    t.launch(3_000, 21_500, 22_000, 3, tid=2)   # inside in time, other thread: not the range's
    t.launch(11_000, 30_000, 31_000, 4, tid=1)  # after the range
    r = analyze(t.write(tmp_path / "synthetic.sqlite"))
    (step,) = r.ranges
    assert (step["kernels"], step["gpu_span_ns"], step["busy_ns"], step["gap_ns"]) == (2, 4_000, 2_000, 2_000)
    assert step["gap_fraction"] == 0.5
    assert step["gap_p50_ns"] == 2_000 and step["gap_max_ns"] == 2_000
    # The device timeline has all four kernels: [20,21)[21.5,22)[23,24)[30,31) us.
    d = r.devices[0]
    assert (d["kernels"], d["gpu_span_ns"], d["gap_ns"], d["gap_count"]) == (4, 11_000, 7_500, 3)
    assert d["gap_p50_ns"] == 1_000 and d["gap_max_ns"] == 6_000


def test_nested_ranges_and_by_name(tmp_path):
    t = Synthetic()
    t.range(0, 100_000, "decode")
    for i in range(3):  # three steps of two kernels each
        base = 10_000 + i * 30_000
        t.range(base, base + 20_000, "@step")  # name registered: through textId
        t.launch(base + 100, base + 1_000, base + 2_000, 10 * i + 1)
        t.launch(base + 200, base + 5_000, base + 6_000, 10 * i + 2)
    r = analyze(t.write(tmp_path / "synthetic.sqlite"))
    assert [x["name"] for x in r.ranges] == ["decode", "step", "step", "step"]
    assert [x["depth"] for x in r.ranges] == [0, 1, 1, 1]
    step = by(r.by_name, "name", "step")
    # Each step: span 5000, busy 2000, gap 3000.
    assert (step["count"], step["kernels"], step["gpu_span_ns"], step["gap_ns"]) == (3, 6, 15_000, 9_000)
    assert step["gap_fraction"] == pytest.approx(0.6)
    decode = by(r.by_name, "name", "decode")
    # decode: span 11000..76000 = 65000, busy 6000; gaps 3x3000 inside steps, 2x25000 between.
    assert (decode["kernels"], decode["gpu_span_ns"], decode["busy_ns"]) == (6, 65_000, 6_000)
    assert decode["gap_count"] == 5 and decode["gap_max_ns"] == 25_000


def test_range_filter_glob_and_exact(tmp_path):
    t = Synthetic()
    t.range(0, 10_000, "decode_step").range(20_000, 30_000, "prefill")
    t.launch(100, 1_000, 2_000, 1).launch(21_000, 40_000, 41_000, 2)
    path = t.write(tmp_path / "synthetic.sqlite")
    assert [x["name"] for x in analyze(path, ranges=["decode*"]).ranges] == ["decode_step"]
    assert [x["name"] for x in analyze(path, ranges=["prefill"]).ranges] == ["prefill"]
    with pytest.raises(GapscopeError, match="no NVTX range matches 'nope'"):
        analyze(path, ranges=["nope"])


def test_correlation_ids_repeat_across_processes(tmp_path):
    # Same correlationId 1 in two processes: each kernel must go to its own process's range.
    t = Synthetic()
    t.range(0, 10_000, "a", pid=100).range(0, 10_000, "b", pid=200)
    t.launch(100, 1_000, 2_000, 1, pid=100)
    t.launch(100, 5_000, 9_000, 1, pid=200)
    r = analyze(t.write(tmp_path / "synthetic.sqlite"))
    assert by(r.ranges, "name", "a")["gpu_span_ns"] == 1_000
    assert by(r.ranges, "name", "b")["gpu_span_ns"] == 4_000


def test_memops_reported_apart_unless_counted(tmp_path):
    t = Synthetic()
    t.launch(0, 0, 100, 1).launch(0, 300, 400, 2)
    t.call(0, 10, 3, name="cudaMemcpyAsync_v3020")
    t.memcpy.append((100, 300, 0, 7, 3, 4242))
    path = t.write(tmp_path / "synthetic.sqlite")
    d = analyze(path).devices[0]
    assert (d["gap_ns"], d["memops"], d["memop_ns"]) == (200, 1, 200)
    d = analyze(path, count_memops=True).devices[0]
    assert (d["gap_ns"], d["busy_ns"], d["kernels"], d["memops"]) == (0, 400, 2, 1)


def test_graph_level_trace_is_opaque_and_warned(tmp_path):
    t = Synthetic()
    t.range(0, 10_000, "graph")
    t.call(100, 200, 1, name="cudaGraphLaunch_v10000")
    t.graphs.append((1_000, 5_000, 0, 7, 1, 4242))
    r = analyze(t.write(tmp_path / "synthetic.sqlite"))
    assert r.trace["graph_trace"] == "graph"
    assert any("--cuda-graph-trace=node" in w for w in r.warnings)
    assert (r.ranges[0]["kernels"], r.ranges[0]["busy_ns"], r.ranges[0]["gap_ns"]) == (1, 4_000, 0)


def test_start_end_ranges_and_unclosed_ranges(tmp_path):
    t = Synthetic()
    t.range(0, 10_000, "se", event_type=60)
    t.range(0, None, "open")  # never closed: ignored
    t.launch(100, 1_000, 2_000, 1)
    r = analyze(t.write(tmp_path / "synthetic.sqlite"))
    assert [x["name"] for x in r.ranges] == ["se"]
    assert r.ranges[0]["kernels"] == 1


def test_multi_device_range_sums_per_device_spans(tmp_path):
    t = Synthetic()
    t.range(0, 10_000, "mg")
    t.launch(100, 0, 1_000, 1, device=0).launch(200, 3_000, 4_000, 2, device=0)
    t.launch(300, 100_000, 101_000, 3, device=1)
    r = analyze(t.write(tmp_path / "synthetic.sqlite"))
    (mg,) = r.ranges
    # Device 0: span 4000, gap 2000; device 1: span 1000, gap 0. The 96 us between devices is not a gap.
    assert (mg["gpu_span_ns"], mg["gap_ns"], mg["busy_ns"]) == (5_000, 2_000, 3_000)
    assert [d["device"] for d in r.devices] == [0, 1]


# ---------------------------------------------------------------- real third-party exports

def test_cloverleaf_device_and_stream_exact(cloverleaf):
    r = analyze(cloverleaf)
    assert r.trace["nsys_version"] == "2024.5.1.113" and r.trace["export_schema"] == "3.13.2"
    assert r.ranges == [] and any("no NVTX" in w for w in r.warnings)
    (d,) = r.devices
    assert (d["kernels"], d["memops"], d["gpu_span_ns"], d["busy_ns"], d["gap_ns"], d["gap_count"]) == (
        1312, 279, 342_340_707, 294_404_540, 47_936_167, 1311)
    span, gap, gaps = reference.by_device(reference.kernels(str(cloverleaf)))[0]
    assert (span, gap, len(gaps)) == (d["gpu_span_ns"], d["gap_ns"], d["gap_count"])
    assert d["gap_p50_ns"] == pytest.approx(np.percentile(gaps, 50))
    assert d["gap_p99_ns"] == pytest.approx(np.percentile(gaps, 99))
    assert d["gap_max_ns"] == max(gaps) == 2_863_896


def test_saxpy_old_schema_ranges_match_reference(saxpy):
    r = analyze(saxpy)
    assert r.trace["export_schema"] == "2.9.1"
    ks = reference.kernels(str(saxpy))
    refs = reference.ranges(str(saxpy))
    assert len(r.ranges) == len(refs) == 22
    for got, want in zip(r.ranges, refs):
        assert got["name"] == want["name"]
        assert (got["kernels"], got["gpu_span_ns"], got["gap_ns"]) == reference.range_metrics(want, ks)
    saxpy = by(r.by_name, "name", "saxpy")
    assert (saxpy["count"], saxpy["kernels"], saxpy["gpu_span_ns"], saxpy["gap_ns"]) == (5, 5, 88_573_480, 0)
    assert by(r.ranges, "name", "MPI_Init")["domain"] == "MPI"


def test_stdlib_sqlite_fallback_gives_the_same_result(monkeypatch):
    """Without ADBC installed, the stdlib sqlite3 reader must produce identical results."""
    import builtins

    trace = Path(__file__).resolve().parents[1] / "traces" / "torch_decode_sync.sqlite"
    with_adbc = analyze(trace).to_dict()
    real_import = builtins.__import__

    def no_adbc(name, *args, **kwargs):
        if name.startswith("adbc_driver_sqlite"):
            raise ImportError("no adbc in this test")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_adbc)
    without = analyze(trace).to_dict()
    assert without == with_adbc
    assert without["by_name"][0]["kernels"] > 0


def test_unknown_schema_major_still_loads_with_a_warning(tmp_path):
    t = Synthetic(schema="4.1.0")
    t.launch(0, 1_000, 2_000, 1)
    r = analyze(t.write(tmp_path / "synthetic.sqlite"))
    assert r.devices[0]["kernels"] == 1
    assert "export schema 4.1.0 is not one gapscope was checked on (2.x, 3.x)" in r.warnings


# ------------------------------------ no gap list kept (the levels in windows): the same result

SHIPPED = sorted([*TRACES.glob("*.sqlite"), *TRACES.glob("*.pt.trace.json.gz"),
                  TRACES / "torch_decode_small_parquet", TRACES / "profile_torch_decode_graph_arrow"])


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_analysis_without_gap_lists_gives_the_same_result(path):
    """run_analysis(gaps=False) measures the levels window by window (gapscope.analysis.windows)
    and drops each window's gaps once summed; its result must be the in-memory path's, field for
    field, with the defaults, without attribution, with memops busy and with one range name
    selected (tests/test_windows.py forces small windows)."""
    from gapscope.analysis.pipeline import run_analysis
    from gapscope.trace.handle import open_trace

    with open_trace(path) as trace:
        frames = trace.frames(syncs=True)
        kept = run_analysis(frames)
        assert kept.device_gaps.length.size == sum(d["gap_count"] for d in kept.result.devices)
        variants = [{}, {"attribution": False}, {"count_memops": True}]
        working = [r["name"] for r in kept.result.by_name if r["kernels"] > 0]
        if working:  # a trace without NVTX ranges has no range to select
            variants.append({"ranges": (working[0],)})
        for options in variants:
            expected = kept if not options else run_analysis(frames, **options)
            lean = run_analysis(frames, gaps=False, **options)
            assert lean.result.to_dict() == expected.result.to_dict(), options
            assert (lean.device_gaps, lean.stream_gaps, lean.range_gaps, lean.pairs) == (None, None, None, None)
