"""The Perfetto / Chrome Trace Event export: valid Trace Event Format JSON with what Perfetto's
JSON importer needs (phases, microsecond timestamps, integer pid/tid, process and thread names,
no two slices of a track crossing), and its gap slices read back, number for number, by a plain
reader written here against an independent sort-and-merge of the trace's kernels."""

from __future__ import annotations

import io
import json
import re
import sqlite3
from collections import defaultdict

import numpy as np
import pytest

from clirun import assert_one_line_error, gapscope
from gapscope.analysis.pipeline import opened_analysis
from gapscope.render import render
from gapscope.render.tracks import crossing, disjoint_lanes
from paths import TRACES
from synthetic import Synthetic

METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def export(path, **options) -> dict:
    out = io.StringIO()
    with opened_analysis(path, all_calls=True, **options) as analysis:
        render(analysis, "perfetto", out)
    return json.loads(out.getvalue())


def check_trace_event_format(doc: dict) -> dict[tuple[int, int], list[dict]]:
    """Every rule of the format the export relies on; returns the slices per (pid, tid)."""
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    owner: dict[int, int] = {}
    tracks = defaultdict(list)
    for e in events:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], int) and e["pid"] > 0
        if e["ph"] == "M":
            assert e["name"] in METADATA and isinstance(e["args"], dict)
            continue
        assert isinstance(e["tid"], int) and isinstance(e["name"], str) and isinstance(e["cat"], str)
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        assert (e["pid"], e["tid"]) in threads and e["pid"] in names
        assert owner.setdefault(e["tid"], e["pid"]) == e["pid"]  # a tid belongs to one process
        tracks[(e["pid"], e["tid"])].append(e)
    for key, slices in tracks.items():  # a stack per track: a slice may nest, never cross an end
        open_ends: list[int] = []
        for e in sorted(slices, key=lambda e: (ns(e["ts"]), -ns(e["dur"]))):
            s, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            while open_ends and open_ends[-1] <= s:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], (threads[key], e)
            if e["cat"] in ("kernel", "memcpy", "memset", "graph", "gap", "cuda_api"):
                assert not open_ends, (threads[key], e)  # GPU work, gaps, calls: not even nested
            open_ends.append(end)
    return tracks


def ns(us: float) -> int:
    """Microseconds with three decimals back to integer nanoseconds."""
    return int(round(us * 1000))


def reference_gaps(path) -> dict[int, list[tuple[int, int, str]]]:
    """Per device, every gap between its kernels: (start, length, the API call that launched the
    kernel after it), by a plain sort and merge of the trace's own tables."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    strings = dict(conn.execute("SELECT id, value FROM StringIds"))
    calls = {}
    for tid, corr, name_id in conn.execute(
            "SELECT globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass != 67"):
        calls.setdefault((tid >> 24, corr), re.sub(r"_v\d+$", "", strings[name_id]))
    per_dev = defaultdict(list)
    for s, e, dev, corr, gpid in conn.execute(
            "SELECT start, end, deviceId, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL"):
        per_dev[dev].append((s, e, calls.get((gpid >> 24, corr))))
    conn.close()
    out = {}
    for dev, ks in per_dev.items():
        ks.sort(key=lambda k: (k[0], k[1]))
        gaps, cur = [], ks[0][1]
        for s, e, call in ks[1:]:
            if s > cur:
                gaps.append((cur, s - cur, call))
            cur = max(cur, e)
        out[dev] = gaps
    return out


def read_gaps(doc: dict) -> dict[int, list[tuple[int, int, str]]]:
    """The gap slices of an export, per device: (start ns, length ns, launched_by)."""
    events = doc["traceEvents"]
    device_of = {e["pid"]: int(re.match(r"GPU (\d+)", e["args"]["name"]).group(1))
                 for e in events if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"].startswith("GPU")}
    out = defaultdict(list)
    for e in events:
        if e["ph"] == "X" and e["cat"] == "gap":
            out[device_of[e["pid"]]].append((ns(e["ts"]), ns(e["dur"]), e["args"]["launched_by"]))
    return {d: sorted(g) for d, g in out.items()}


@pytest.mark.parametrize("name", ["torch_decode", "cupy_paths_node", "case_multi_gpu"])
def test_the_gap_slices_read_back_number_for_number(name, analyzed):
    path = TRACES / f"{name}.sqlite"
    doc = export(path)
    check_trace_event_format(doc)
    got, want = read_gaps(doc), reference_gaps(path)
    assert got == want
    # Each gap's split (args CATEGORY_ns) sums to its length and is largest in the category it is
    # named by; summed per device, the splits are the result's gap time by category.
    by_cat = defaultdict(lambda: defaultdict(int))
    device_of = {e["pid"]: int(e["args"]["name"].split()[1]) for e in doc["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"].startswith("GPU")}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "gap":
            split = {k.removesuffix("_ns"): v for k, v in e["args"].items() if k.endswith("_ns")}
            assert sum(split.values()) == ns(e["dur"]) and all(v > 0 for v in split.values())
            assert split[e["name"].removesuffix(" gap")] == max(split.values())
            for k, v in split.items():
                by_cat[device_of[e["pid"]]][k] += v
    for row in analyzed(name).devices:
        assert {k: v for k, v in row["gap_by_category_ns"].items() if v} == dict(by_cat[row["device"]])


def test_torch_decode_tracks_and_counts(analyzed):
    doc = export(TRACES / "torch_decode.sqlite")
    tracks = check_trace_event_format(doc)
    events = doc["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert sorted(procs.values()) == ["GPU 0 · NVIDIA H200", "process 720"]
    assert sorted(names.values()) == ["gaps (device idle)", "stream 13", "stream 17", "stream 7", "thread 720",
                                      "thread 720 · CUDA API"]
    result = analyzed("torch_decode")
    count = {names[k]: len(v) for k, v in tracks.items()}
    assert count["gaps (device idle)"] == result.devices[0]["gap_count"] == 5231
    assert [count[f"stream {s['stream']}"] for s in result.streams] == [s["kernels"] + s["memops"] for s in result.streams]
    nvtx = sorted((ns(e["ts"]), e["name"]) for e in tracks[next(k for k, v in names.items() if v == "thread 720")])
    assert len(nvtx) == 66 and nvtx[0][1] == "eager" and [n for _, n in nvtx].count("decode_step") == 64
    kernel = next(e for e in events if e.get("cat") == "kernel")
    assert set(kernel) == {"ph", "cat", "pid", "tid", "name", "ts", "dur", "bind_id", "flow_in", "args"}
    assert doc["otherData"]["trace"] == "torch_decode.sqlite"


def test_overlapping_work_and_crossing_ranges_get_lanes_of_their_own(tmp_path):
    """SYNTHETIC: two kernels overlap on stream 7; NVTX start/end ranges that cross."""
    t = Synthetic()
    t.range(0, 10_000, "outer").range(100, 500, "inner")
    t.range(1_000, 6_000, "a", event_type=60).range(4_000, 9_000, "b", event_type=60)  # b crosses a's end
    t.launch(100, 1_000, 3_000, 1).launch(200, 2_000, 4_000, 2).launch(300, 5_000, 6_000, 3)
    doc = export(t.write(tmp_path / "synthetic.sqlite"))
    tracks = check_trace_event_format(doc)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    by_name = {names[k]: sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in v) for k, v in tracks.items()}
    assert by_name["stream 7"] == [(1_000, 3_000), (5_000, 6_000)]
    assert by_name["stream 7 (overlap 1)"] == [(2_000, 4_000)]
    assert by_name["thread 1"] == [(0, 10_000), (100, 500), (4_000, 9_000)]
    assert by_name["thread 1 (2)"] == [(1_000, 6_000)]
    assert by_name["gaps (device idle)"] == [(4_000, 5_000)]


def test_lanes_and_crossings_by_hand():
    track = np.array([0, 0, 0, 0, 1])
    start = np.array([0, 5, 7, 20, 5])
    end = np.array([10, 6, 20, 30, 9])
    # [0,10) first; [5,6) and [7,20) start before 10: next lane, where both fit; [20,30) after all.
    assert disjoint_lanes(track, start, end).tolist() == [0, 1, 1, 0, 0]
    # [7,20) starts inside [0,10) and ends after it: [0,10) is crossed. Nested [5,6) is fine.
    assert crossing(track, start, end).tolist() == [True, False, False, False, False]


def test_cli_export(tmp_path):
    out = tmp_path / "timeline.json"
    proc = gapscope("export", "traces/cupy_paths_node.sqlite", "--perfetto", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    doc = json.loads(out.read_text())
    check_trace_event_format(doc)
    saved = tmp_path / "r.json"
    assert gapscope("analyze", "traces/cupy_paths_node.sqlite", "-o", str(saved)).returncode == 0
    assert_one_line_error(gapscope("export", str(saved), "--perfetto", str(tmp_path / "x.json")),
                          "export reads a trace or a `gapscope run` output")
    assert_one_line_error(gapscope("export", "traces/cupy_paths_node.sqlite"), "Missing option '--perfetto'")
    copy = tmp_path / "t.sqlite"
    copy.write_bytes((TRACES / "cupy_paths_node.sqlite").read_bytes())
    assert_one_line_error(gapscope("export", str(copy), "--perfetto", str(copy)), "refusing to overwrite input")
    assert copy.read_bytes() == (TRACES / "cupy_paths_node.sqlite").read_bytes()


def test_a_flow_arrow_from_each_launch_call_to_its_work():
    """Every kernel, copy and memset whose launching call the trace holds gets the arrow's end,
    its call the start: matched here by process and correlation id read from the SQLite file,
    not by gapscope's link."""
    path = TRACES / "torch_decode_small.sqlite"
    doc = export(path)
    check_trace_event_format(doc)
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    process = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
               if e["ph"] == "M" and e["name"] == "process_name"}
    out = {e["bind_id"]: e for e in events if e.get("flow_out")}
    into = [e for e in events if e.get("flow_in")]
    assert all(e["cat"] == "cuda_api" for e in out.values())
    assert {e["cat"] for e in into} <= {"kernel", "memcpy", "memset", "graph"}
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    calls = {(g >> 24, c) for g, c in conn.execute(
        "SELECT globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass != 67")}
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    work = [(g >> 24, c) for t in ("KERNEL", "MEMCPY", "MEMSET") if f"CUPTI_ACTIVITY_KIND_{t}" in tables
            for g, c in conn.execute(f"SELECT globalPid, correlationId FROM CUPTI_ACTIVITY_KIND_{t}")]
    conn.close()
    assert len(into) == sum(1 for w in work if w in calls) > 1_000
    for e in into:
        call = out[e["bind_id"]]  # every arrow has its start
        assert call["args"]["correlation"] == e["args"]["correlation"]
        assert process[call["pid"]].startswith("process ") and ns(call["ts"]) <= ns(e["ts"])


def test_the_page_lists_every_slice_name_and_category():
    from gapscope.catalog import CATEGORY_NAMES
    from paths import ROOT

    page = (ROOT / "docs" / "perfetto.md").read_text(encoding="utf-8")
    doc = export(TRACES / "torch_decode.sqlite")
    gap_names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "gap"}
    cats = {e["cat"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert gap_names <= {f"{c} gap" for c in CATEGORY_NAMES}
    for name in [*(f"{c} gap" for c in CATEGORY_NAMES), "gap", *cats]:
        assert f"`{name}`" in page, name
