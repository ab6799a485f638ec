"""`--window START:END` of `gapscope analyze` and `gapscope compare` (issue 40): the frames cut to
a time window before the analysis (gapscope.analysis.time_window, docs/metrics.md "A time
window"), checked against a plain recomputation of the window from the export's rows
(tests/reference.py), on real recordings."""

from __future__ import annotations

import json

import pytest

import reference as R
from clirun import assert_one_line_error, gapscope
from paths import CLOVERLEAF_NAME, FSDP_NAME, TRACES, thirdparty

LOOP32 = TRACES / "truth" / "loop32.sqlite"
MS = 1_000_000


def _clipped(trace: R.Trace, lo: int, hi: int) -> list[dict]:
    """The trace's activities that overlap [lo, hi), cut to it (the rule, written plainly)."""
    out = []
    for a in trace.acts:
        if a["start"] < hi and (a["end"] > lo or (a["start"] >= lo and a["start"] == a["end"])):
            out.append({**a, "start": max(a["start"], lo), "end": min(a["end"], hi)})
    return out


@pytest.fixture(scope="module")
def loop32() -> R.Trace:
    return R.Trace(str(LOOP32))


@pytest.mark.parametrize("window", [(650, 700), (700, 730), (600, None), (None, 612), (150, None)])
def test_window_device_figures_match_the_rows_cut_by_hand(loop32: R.Trace, window: tuple) -> None:
    """The device row of a window: its kernels, span, gap and gap count, and the time per gap
    category, as a plain merge and attribution of the export's rows cut to the window give them
    (each gap attributed as in the whole trace: the calls around the window's edges kept; at
    150 ms: without each thread's last call before the window, a host stretch crossing its start
    would be cut short and read as host time instead of a stall)."""
    from gapscope.analysis.pipeline import analyze

    a, b = (None if w is None else w * MS for w in window)
    result = analyze(LOOP32, window=(a, b))
    origin = min(x["start"] for x in loop32.acts)
    lo = origin + (a or 0)
    hi = origin + b if b is not None else max(x["end"] for x in loop32.acts) + 1
    acts = _clipped(loop32, lo, hi)
    busy = [x for x in acts if x["kind"] != "memop"]
    span, gap, gaps = R.merge([(x["start"], x["end"]) for x in busy])
    row = result.devices[0]
    assert (row["kernels"], row["gpu_span_ns"], row["gap_ns"], row["gap_count"]) == \
        (len(busy), span, gap, len([g for g in gaps if g > 0]))
    want = R.Attribution(loop32).categories(acts)
    assert row["gap_by_category_ns"] == want
    assert result.options["window"] == {"start_ns": a, "end_ns": b, "origin_ns": origin, "from_ns": lo,
                                        "to_ns": min(hi, max(x["end"] for x in loop32.acts))}


def test_ranges_inside_the_window_read_as_in_the_whole_trace() -> None:
    """A range instance wholly inside the window owns the same work, so its row is the whole
    trace's; one cut by the window's start (the `eager` loop) keeps only its work inside it."""
    from gapscope.analysis.pipeline import analyze

    whole = analyze(LOOP32)
    cut = analyze(LOOP32, window=(650 * MS, 700 * MS))
    origin = cut.options["window"]["origin_ns"]
    lo, hi = origin + 650 * MS, origin + 700 * MS
    inside = [r for r in whole.ranges if r["start_ns"] >= lo and r["end_ns"] <= hi and r["kernels"]]
    assert len(inside) == 13  # decode_step 11 .. 23 of the eager loop (3.6 ms each)
    by_start = {(r["name"], r["start_ns"]): r for r in cut.ranges}
    # what the range's own work measures (the prediction reads trace-wide launch costs besides)
    measured = ("end_ns", "kernels", "memops", "memop_ns", "gpu_span_ns", "busy_ns", "gap_ns", "gap_count",
                "gap_p50_ns", "gap_p90_ns", "gap_p99_ns", "gap_max_ns", "kernel_median_ns", "wall_ns",
                "graph_kernels", "graph_replays", "gap_between_replays_ns", "gap_inside_replays_ns",
                "gap_by_category_ns", "one_off_by_category_ns")
    for r in inside:
        mine = by_start[(r["name"], r["start_ns"])]
        assert {k: mine[k] for k in measured} == {k: r[k] for k in measured}
    # the host side of the window starts with the first call that launched work inside it
    loop = R.Trace(str(LOOP32))
    kept = _clipped(loop, lo, hi)
    host_from = min([lo, *(loop.calls[x["call"]][0] for x in kept if x["call"] is not None)])
    assert host_from < lo  # queued work: launched before the window, run inside it
    eager = next(r for r in cut.ranges if r["name"] == "eager")
    assert (eager["start_ns"], eager["end_ns"]) == (host_from, hi)
    owned = [x for x in kept if x["kind"] != "memop" and x["call"] is not None
             and host_from <= loop.calls[x["call"]][0] <= hi]
    assert eager["kernels"] == len(owned)


def test_fsdp_windows_split_the_trace(tmp_path) -> None:
    """Two windows of the 2-GPU FSDP export, 0-150 ms and 150 ms to the end: each device's
    kernels are those overlapping each window (a kernel across 150 ms counts in both)."""
    path = thirdparty(FSDP_NAME)
    from gapscope.analysis.pipeline import analyze

    ks = R.kernels(str(path))
    origin = R.first_activity(path)
    first, second = (analyze(path, window=w) for w in ((0, 150 * MS), (150 * MS, None)))
    cut = origin + 150 * MS
    for result, keep in ((first, lambda k: k["start"] < cut), (second, lambda k: k["end"] > cut or k["start"] >= cut)):
        want = {d: sum(1 for k in ks if k["device"] == d and keep(k)) for d in (0, 1)}
        assert {r["device"]: r["kernels"] for r in result.devices} == want


def test_cli_window_header_json_and_sections(tmp_path) -> None:
    out = tmp_path / "w.json"
    proc = gapscope("analyze", str(LOOP32), "--window", "650ms:700ms", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert "window: 650 ms to 700 ms, counted from the first GPU activity" in first
    assert "Devices (window)" in proc.stdout and "Devices (whole trace)" not in proc.stdout
    assert gapscope("analyze", str(LOOP32), "-w", "650ms:700ms", "-o", str(out), "--no-cache").returncode == 0
    saved = json.loads(out.read_text())
    assert saved["options"]["window"]["start_ns"] == 650 * MS and saved["options"]["window"]["end_ns"] == 700 * MS
    again = gapscope("analyze", str(out))  # a saved windowed result re-renders with its window
    assert again.returncode == 0 and "window: 650 ms to 700 ms" in again.stdout.splitlines()[0]
    skip = gapscope("analyze", str(LOOP32), "--window", "600ms:", "--no-cache")
    assert "window: from 600 ms to the end, counted from the first GPU activity" in skip.stdout.splitlines()[0]


@pytest.mark.parametrize("window, needle", [
    ("-1s:", "cannot be negative"),
    ("1s", "--window wants START:END"),
    ("2s:1s", "the end must come after the start"),
    (":", "--window wants START:END"),
    ("10s:", "the window is empty (the trace's GPU work lasts 735,603,145 ns from its first activity)"),
    ("100ms:101ms", "--window holds no kernel"),
    ("1x:2s", "is not a time"),
])
def test_bad_windows_are_one_line(window: str, needle: str) -> None:
    assert_one_line_error(gapscope("analyze", str(LOOP32), "--window", window, "--no-cache"), needle)


def test_window_refused_where_it_cannot_apply(tmp_path) -> None:
    saved = tmp_path / "r.json"
    assert gapscope("analyze", str(LOOP32), "-o", str(saved), "--no-cache").returncode == 0
    assert_one_line_error(gapscope("analyze", str(saved), "--window", "1s:"), "--window applies to traces")
    other = TRACES / "cmp_base_1.sqlite"
    assert_one_line_error(gapscope("analyze", str(LOOP32), str(other), "--window", "1s:"), "analyze one trace")
    assert_one_line_error(gapscope("compare", str(saved), str(LOOP32), "--window", "1s:"),
                          "--window cuts traces, and this is a saved result")


def test_a_window_without_ranges_says_so() -> None:
    """loop32's first 600 ms are start-up before its first range."""
    from gapscope.analysis.pipeline import analyze

    result = analyze(LOOP32, window=(100 * MS, 400 * MS))
    assert "no NVTX range in this window: per-range figures are empty; the devices and streams cover the window" \
        in result.warnings


def test_no_ranges_warning_says_what_to_do() -> None:
    """A trace without NVTX ranges (CloverLeaf: no NVTX table at all)."""
    from gapscope.analysis.pipeline import analyze

    result = analyze(thirdparty(CLOVERLEAF_NAME))
    assert ("no NVTX ranges in this trace: per-range figures are empty and the devices cover the whole trace, "
            "start-up included; to see the loop alone, mark it with NVTX ranges (torch.cuda.nvtx.range_push/pop, "
            "nvtx.annotate) or torch.profiler.record_function, record only it (gapscope profile --capture-range "
            "nvtx:NAME), or analyze a time window after the start-up (--window 2s: skips the first 2 s)") \
        in result.warnings


def test_compare_window_cuts_both_traces() -> None:
    """`compare --window` analyzes each trace over the same window: the devices compared hold
    the kernels of that window only."""
    proc = gapscope("compare", str(LOOP32), str(TRACES / "truth" / "loop64.sqlite"), "--window", "0:650ms",
                    "--scope", "device", "--format", "json", "--no-cache")
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    kernels = next(v for v in data["verdicts"] if v["metric"] == "kernels")
    acts = R.Trace(str(LOOP32)).acts
    origin = min(a["start"] for a in acts)  # the first GPU activity: a copy, before any kernel
    assert kernels["baseline"] == sum(1 for a in acts if a["kind"] != "memop" and a["start"] < origin + 650 * MS)
