"""Many traces at once (gapscope.fleet, gapscope.fleet.executors): the merged report on the real H200
exports through the process pool and a Dask LocalCluster equals the single-file figures
exactly; stragglers on synthetic ranks computed by hand; failing files reported, exit 1."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest

from paths import ROOT, TRACES
from gapscope.analysis import analyze
from gapscope.errors import GapscopeError
from gapscope.inputs import READS
from gapscope.fleet.executors import DaskCluster, InProcess, Outcome, ProcessPool, choose_executor
from gapscope.fleet.merge import analyze_fleet, merge
from gapscope.fleet.result import FleetResult
from gapscope.render import render
from gapscope.inputs import expand as trace_paths
from gapscope.analysis.metrics import STATS_FIELDS
from gapscope.cli.progress import FileProgress
from clirun import gapscope
from synthetic import Synthetic

# The real H200 exports of traces/README.md, in natural order; one GPU each.
REAL = [str(TRACES / f"{n}.sqlite") for n in
        ("cupy_paths_graph", "cupy_paths_node", "run_sweep_node", "torch_decode", "torch_decode_sync")]
RANK_KEYS = ("rank", "label", "file")





@pytest.fixture(scope="module")
def singles():
    return {p: analyze(p) for p in REAL}


@pytest.fixture(scope="module")
def pooled():
    return analyze_fleet(REAL, ProcessPool(2, ["gapscope.fleet"]))


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster  # the test extra installs dask[distributed]

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        yield c


def _stats(row):
    return {k: row[k] for k in ("name", "count", *STATS_FIELDS, "gap_by_category_ns")}


def check_equals_single_files(fleet: FleetResult, singles) -> None:
    """Every merged figure that has a single-file twin equals it exactly."""
    assert [f["path"] for f in fleet.files] == REAL
    assert fleet.failed == []
    assert len(fleet.devices) == len(REAL)  # every real trace has one GPU: one rank per file
    for rank, path in enumerate(REAL):
        one = singles[path]
        row = fleet.devices[rank]
        assert (row["rank"], row["label"], row["file"]) == (rank, Path(path).stem, path)
        assert {k: v for k, v in row.items() if k not in RANK_KEYS} == one.devices[0]
        streams = [{k: v for k, v in s.items() if k not in ("rank", "label")}
                   for s in fleet.streams if s["rank"] == rank]
        assert streams == one.streams
        names = [_stats(r) for r in fleet.rank_names if r["rank"] == rank]
        assert names == [_stats(r) for r in one.by_name if r["kernels"] > 0]
        assert fleet.files[rank]["graph_trace"] == one.trace["graph_trace"]
        assert fleet.files[rank]["warnings"] == one.warnings


def test_pool_equals_single_files(pooled, singles):
    check_equals_single_files(pooled, singles)


def test_dask_local_cluster_equals_single_files_and_pool(cluster, pooled, singles):
    fleet = analyze_fleet(REAL, DaskCluster(cluster.scheduler_address))
    check_equals_single_files(fleet, singles)
    assert fleet.to_dict() == pooled.to_dict()


def test_in_process_equals_pool(pooled):
    assert analyze_fleet(REAL, InProcess()).to_dict() == pooled.to_dict()


def test_decode_steps_aligned_across_the_two_torch_ranks(pooled, singles):
    """torch_decode and torch_decode_sync both run 64 decode_step ranges: step i of one is set
    against step i of the other; with two ranks the median is their mean."""
    plain, sync = (str(TRACES / f"{n}.sqlite") for n in ("torch_decode", "torch_decode_sync"))
    r_plain, r_sync = REAL.index(plain), REAL.index(sync)
    a = [r for r in singles[plain].ranges if r["name"] == "decode_step"]
    b = [r for r in singles[sync].ranges if r["name"] == "decode_step"]
    steps = [s for s in pooled.steps if s["name"] == "decode_step"]
    assert len(a) == len(b) == len(steps) == 64
    assert r_plain < r_sync
    excess = {r_plain: 0.0, r_sync: 0.0}
    ties = 0
    for i, (s, x, y) in enumerate(zip(steps, a, b)):
        gx, gy = x["gap_ns"], y["gap_ns"]
        median = (gx + gy) / 2
        assert s["occurrence"] == i and s["ranks"] == 2
        assert (s["gap_ns"]["min"], s["gap_ns"]["max"], s["gap_ns"]["median"]) == (min(gx, gy), max(gx, gy), median)
        assert s["slowest_rank"] == (r_plain if gx >= gy else r_sync)  # a tie goes to the lower rank
        assert s["excess_gap_ns"] == max(gx, gy) - median
        ties += gx == gy
        assert s["gpu_span_ns"]["median"] == (x["gpu_span_ns"] + y["gpu_span_ns"]) / 2
        excess[r_plain] += gx - median
        excess[r_sync] += gy - median
    assert ties == 1  # step 42: 44,480 ns on both
    rows = {r["rank"]: r for r in pooled.rank_names if r["name"] == "decode_step"}
    assert rows[r_plain]["excess_gap_ns"] == excess[r_plain] == -excess[r_sync]
    pooled_row = next(n for n in pooled.by_name if n["name"] == "decode_step")
    one = [next(n for n in singles[p].by_name if n["name"] == "decode_step") for p in (plain, sync)]
    assert pooled_row["count"] == 128 and pooled_row["ranks"] == 2
    assert pooled_row["gap_ns"] == one[0]["gap_ns"] + one[1]["gap_ns"]
    assert pooled_row["gap_fraction"] == (one[0]["gap_ns"] + one[1]["gap_ns"]) / (
        one[0]["gpu_span_ns"] + one[1]["gpu_span_ns"])


def test_spread_of_device_gap_fraction(pooled, singles):
    fractions = [singles[p].devices[0]["gap_fraction"] for p in REAL]
    device = pooled.spread[0]
    assert device["scope"] == "device" and device["ranks"] == 5
    assert device["gap_fraction"] == {
        "min": min(fractions), "median": sorted(fractions)[2], "max": max(fractions),
        "min_rank": fractions.index(min(fractions)), "max_rank": fractions.index(max(fractions)),
    }


def test_ranges_without_gpu_work_are_not_ranks_rows(saxpy):
    """saxpy-mpi: 5 saxpy ranges launched kernels; the MPI_* ranges launched none."""
    fleet = analyze_fleet([str(saxpy), REAL[0]], InProcess())
    names = [(r["name"], r["count"], r["kernels"]) for r in fleet.rank_names if r["rank"] == 0]
    assert names == [("saxpy", 5, 5)]


# --------------------------------------------------------------------------------------------
# stragglers, by hand


def rank_trace(path: Path, gaps: list[int]) -> Path:
    """One decode_step per gap: two 1 us kernels, the second `gap` ns after the first ends, so
    a step's span is 2,000 + gap and its gap time is gap."""
    t = Synthetic()
    for i, gap in enumerate(gaps):
        t0 = i * 100_000
        t.range(t0, t0 + 50_000, "decode_step")
        t.launch(t0 + 100, t0 + 1_000, t0 + 2_000, 2 * i + 1)
        t.launch(t0 + 200, t0 + 2_000 + gap, t0 + 3_000 + gap, 2 * i + 2)
    return t.write(path)


@pytest.fixture()
def ranks(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    # rank10 has one step only; natural order puts it last.
    for name, gaps in (("rank10", [201]), ("rank0", [100, 100]), ("rank1", [100, 300]), ("rank2", [500, 100])):
        rank_trace(folder / f"{name}.sqlite", gaps)
    return folder


def test_stragglers_by_hand(ranks):
    # step 0: gaps 100, 100, 500, 201 -> median (100 + 201) / 2 = 150.5; step 1: 100, 300, 100 -> 100.
    fleet = analyze_fleet(trace_paths([str(ranks)]), InProcess(), stragglers=2)
    assert [r["label"] for r in fleet.devices] == ["rank0", "rank1", "rank2", "rank10"]
    excess = {r["label"]: r["excess_gap_ns"] for r in fleet.rank_names}
    assert excess == {"rank0": -50.5, "rank1": -50.5 + 200, "rank2": 349.5, "rank10": 50.5}
    # A few hundred ns above the step medians is within what identical work differs by
    # (STRAGGLER_FLOOR_NS, 2 us a step): no straggler (test_stragglers_above_the_floor).
    assert fleet.stragglers == []
    s0, s1 = fleet.steps
    assert (s0["occurrence"], s0["ranks"], s0["gap_ns"]) == (
        0, 4, {"min": 100, "median": 150.5, "max": 500, "min_rank": 0, "max_rank": 2})
    assert (s0["slowest_label"], s0["excess_gap_ns"]) == ("rank2", 349.5)
    assert (s1["occurrence"], s1["ranks"], s1["gap_ns"]) == (
        1, 3, {"min": 100, "median": 100, "max": 300, "min_rank": 0, "max_rank": 1})
    assert s1["gpu_span_ns"] == {"min": 2_100, "median": 2_100, "max": 2_300, "min_rank": 0, "max_rank": 1}
    # Per rank: gap 200, 400, 600, 201 over spans 4,200, 4,400, 4,600, 2,201.
    (spread,) = [s for s in fleet.spread if s["name"] == "decode_step"]
    assert spread["gap_ns"] == {"min": 200, "median": 300.5, "max": 600, "min_rank": 0, "max_rank": 2}
    assert spread["gap_fraction"]["min_rank"] == 0 and spread["gap_fraction"]["max_rank"] == 2
    assert spread["gap_fraction"]["max"] == 600 / 4_600
    (name,) = fleet.by_name
    assert (name["count"], name["ranks"], name["gpu_span_ns"], name["gap_ns"], name["gap_count"],
            name["gap_max_ns"]) == (7, 4, 15_401, 1_401, 7, 500)
    assert name["gap_fraction"] == 1_401 / 15_401
    assert fleet.warnings == ["range 'decode_step': 1 to 2 instances per rank; steps past the first 1 "
                              "are compared among fewer ranks"]


def test_stragglers_above_the_floor(tmp_path):
    """The same job with every gap 20 times longer: step 0's gaps 2,000, 2,000, 10,000, 4,020
    (median 3,010), step 1's 2,000, 6,000, 2,000 (median 2,000). rank2's excess 6,990 over its 2
    steps passes the floor (2 x 2,000); rank1's 2,990 (-1,010 + 4,000) does not, nor rank10's
    1,010 over 1 step."""
    folder = tmp_path / "job"
    folder.mkdir()
    for name, gaps in (("rank10", [4_020]), ("rank0", [2_000, 2_000]), ("rank1", [2_000, 6_000]),
                       ("rank2", [10_000, 2_000])):
        rank_trace(folder / f"{name}.sqlite", gaps)
    fleet = analyze_fleet(trace_paths([str(folder)]), InProcess(), stragglers=2)
    excess = {r["label"]: r["excess_gap_ns"] for r in fleet.rank_names}
    assert excess == {"rank0": -1_010, "rank1": -1_010 + 4_000, "rank2": 6_990, "rank10": 1_010}
    assert [(s["label"], s["excess_gap_ns"], s["slowest_steps"], s["steps"], s["worst_step"],
             s["worst_step_excess_ns"]) for s in fleet.stragglers] == [("rank2", 6_990, 1, 2, 0, 6_990)]
    # The table lists the steps that differ by the floor or more: step 0 (6,990) and step 1 (4,000).
    out = io.StringIO()
    render(fleet, "table", out)
    text = out.getvalue()
    assert "Steps aligned across ranks, largest excess first (name #occurrence)\n" in text


def test_several_devices_in_one_file_are_several_ranks(tmp_path):
    """One process drives two GPUs: per step 100 ns of gap on GPU 0, 400 ns on GPU 1."""
    t = Synthetic()
    for i in range(2):
        t0, c = i * 100_000, 4 * i
        t.range(t0, t0 + 50_000, "decode_step")
        t.launch(t0 + 100, t0 + 1_000, t0 + 2_000, c + 1, device=0)
        t.launch(t0 + 200, t0 + 2_100, t0 + 3_000, c + 2, device=0)
        t.launch(t0 + 300, t0 + 1_000, t0 + 2_000, c + 3, device=1, stream=9)
        t.launch(t0 + 400, t0 + 2_400, t0 + 3_000, c + 4, device=1, stream=9)
    path = t.write(tmp_path / "node0.sqlite")
    other = rank_trace(tmp_path / "node1.sqlite", [100, 100])
    fleet = analyze_fleet([str(path), str(other)], InProcess())
    assert [(r["label"], r["device"]) for r in fleet.devices] == [
        ("node0/gpu0", 0), ("node0/gpu1", 1), ("node1", 0)]
    rows = [(r["label"], r["count"], r["gpu_span_ns"], r["busy_ns"], r["gap_ns"]) for r in fleet.rank_names]
    assert rows == [("node0/gpu0", 2, 4_000, 3_800, 200), ("node0/gpu1", 2, 4_000, 3_200, 800),
                    ("node1", 2, 4_200, 4_000, 200)]
    for r in fleet.rank_names:  # gap categories per device add up to the device's gap time
        assert sum(r["gap_by_category_ns"].values()) == r["gap_ns"]
    # The file's own by_name sums the devices.
    one = analyze(path).by_name[0]
    assert (one["gpu_span_ns"], one["gap_ns"]) == (8_000, 1_000)
    # Each step: gaps 100, 400, 100 -> median 100; GPU 1 is 300 above it twice, within the
    # straggler floor (2 us a step).
    assert [(r["label"], r["excess_gap_ns"], r["slowest_steps"]) for r in fleet.rank_names] == [
        ("node0/gpu0", 0, 0), ("node0/gpu1", 600, 2), ("node1", 0, 0)]
    assert fleet.stragglers == []
    assert [s["rank"] for s in fleet.streams] == [0, 1, 2]


# --------------------------------------------------------------------------------------------
# failures, inputs, progress


def test_failing_file_reported_others_complete_exit_1(tmp_path):
    bad = tmp_path / "notes.sqlite"
    bad.write_text("hello")
    good = REAL[0]
    proc = gapscope("analyze", good, str(bad), "--jobs", "2", "-f", "json")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"gapscope: error: {bad}: not a SQLite file, a PyTorch profiler trace or a gapscope result JSON (gapscope reads {READS})",
        "gapscope: error: 1 of 2 traces failed (listed above); the report covers the others",
    ]
    data = json.loads(proc.stdout)
    assert data["schema"] == "gapscope.fleet/2"
    files = {f["path"]: f for f in data["files"]}
    assert files[str(bad)]["error"] == f"{bad}: not a SQLite file, a PyTorch profiler trace or a gapscope result JSON (gapscope reads {READS})"
    assert files[str(bad)]["ranks"] == [] and files[good]["error"] is None
    (rank,) = data["devices"]
    assert {k: v for k, v in rank.items() if k not in RANK_KEYS} == analyze(good).to_dict()["devices"][0]


def test_failing_file_through_dask(cluster, tmp_path):
    bad = tmp_path / "notes.sqlite"
    bad.write_text("hello")
    fleet = analyze_fleet([REAL[0], str(bad)], DaskCluster(cluster.scheduler_address))
    assert [(f["path"], f["error"]) for f in fleet.files] == [
        (REAL[0], None), (str(bad), f"{bad}: not a SQLite file, a PyTorch profiler trace or a gapscope result JSON (gapscope reads {READS})")]
    assert [r["file"] for r in fleet.devices] == [REAL[0]]


def test_errors_become_one_line_outcomes():
    (o,) = InProcess().run(_task_with_a_bug, ["x.sqlite"])
    assert o.error == "x.sqlite: internal error: ZeroDivisionError: division by zero"
    (o,) = InProcess().run(_task_with_a_long_message, ["y.sqlite"])
    assert o.error == "y.sqlite: boom: broken input"


def _task_with_a_long_message(path: str) -> dict:
    raise GapscopeError("boom:\nbroken input")


def _task_with_a_bug(path: str) -> dict:
    return {"x": 1 / 0}


def _task_kills_its_worker(path: str) -> dict:
    if path == "crash":
        os._exit(3)
    return {"path": path}


def test_a_killed_worker_is_a_failed_file_not_a_crash():
    outcomes = sorted(ProcessPool(2).run(_task_kills_its_worker, ["crash", "fine"]), key=lambda o: o.index)
    assert len(outcomes) == 2
    assert outcomes[0].error.startswith("crash: worker process failed (BrokenProcessPool")


def test_cli_scheduler(cluster, pooled):
    relative = [str(Path(p).relative_to(ROOT)) for p in REAL]
    proc = gapscope("analyze", *relative, "--scheduler", cluster.scheduler_address, "-f", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    expected = json.loads(json.dumps(pooled.to_dict()))
    # Paths as given (relative here); the workers got them absolute.
    assert [f["path"] for f in data["files"]] == relative
    for section in ("devices", "rank_names", "by_name", "spread", "steps", "stragglers", "streams"):
        got = [{k: v for k, v in r.items() if k != "file"} for r in data[section]]
        assert got == [{k: v for k, v in r.items() if k != "file"} for r in expected[section]], section


def test_cli_usage_errors_one_line(tmp_path):
    for args, needle in (
        ([REAL[0], REAL[1], "--jobs", "2", "--scheduler", "tcp://127.0.0.1:1"], "give --jobs or --scheduler"),
        ([str(tmp_path / "nothing*.sqlite")], "no file matches"),
        ([str(tmp_path)], "is a directory with no traces in it (no .sqlite exports, PyTorch profiler traces, "
                          "export folders or .nsys-rep reports)"),
        ([REAL[0], str(tmp_path / "saved.json")], "several inputs must all be traces"),
    ):
        proc = gapscope("analyze", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.splitlines() == [proc.stderr.splitlines()[0]] and needle in proc.stderr, proc.stderr


def test_one_file_keeps_the_single_file_output(tmp_path):
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(REAL[0], folder / "only.sqlite")
    direct = gapscope("analyze", str(folder / "only.sqlite"), "-f", "json")
    via_folder = gapscope("analyze", str(folder), "--jobs", "2", "-f", "json")
    assert direct.returncode == via_folder.returncode == 0
    assert json.loads(direct.stdout)["schema"] == "gapscope.analysis/3"
    assert direct.stdout == via_folder.stdout


def test_trace_paths_natural_order_and_duplicates(ranks):
    got = trace_paths([str(ranks / "rank1.sqlite"), str(ranks / "rank*.sqlite")])
    assert [Path(p).name for p in got] == ["rank0.sqlite", "rank1.sqlite", "rank2.sqlite", "rank10.sqlite"]


def test_saved_fleet_json_rerenders_and_compares(tmp_path):
    """A fleet JSON re-renders like a result JSON, and compare reads it: the sync-per-step rank
    regresses the pooled `graph` gap fraction (17.6% -> 45.7%)."""
    node = str(TRACES / "cupy_paths_node.sqlite")
    base, cur = tmp_path / "base.json", tmp_path / "cur.json"
    assert gapscope("analyze", str(TRACES / "torch_decode.sqlite"), node, "-f", "json", "-o", str(base)).returncode == 0
    assert gapscope("analyze", str(TRACES / "torch_decode_sync.sqlite"), node, "-f", "json", "-o",
                    str(cur)).returncode == 0
    again = gapscope("analyze", str(base), "-f", "json")
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(base.read_text())
    table = gapscope("analyze", str(base))
    assert table.returncode == 0 and "Stragglers" not in table.stdout  # no name shared by two ranks
    assert "torch_decode" in table.stdout and "2 traces (0 failed), 2 ranks" in table.stdout
    proc = gapscope("compare", str(base), str(cur))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines()[0] == "FAIL: 1 regression: range graph gap_fraction"


def test_progress_advances_per_file_and_prints_failures():
    out = io.StringIO()
    with FileProgress(2, out, bar=True) as progress:
        progress.done(Outcome(0, "a.sqlite", {"path": "a.sqlite"}))
        progress.done(Outcome(1, "b.sqlite", None, "b.sqlite: not a SQLite file"))
    text = out.getvalue()
    assert "gapscope: error: b.sqlite: not a SQLite file\n" in text
    assert "2/2" in text and progress.failures == 1
    quiet = io.StringIO()  # not a terminal: no bar, failures still printed
    with FileProgress(1, quiet) as progress:
        progress.done(Outcome(0, "c.sqlite", None, "c.sqlite: no such file"))
    assert quiet.getvalue() == "gapscope: error: c.sqlite: no such file\n"


def test_choose_executor():
    assert isinstance(choose_executor(1, jobs=8), InProcess)
    assert isinstance(choose_executor(5, jobs=1), InProcess)
    pool = choose_executor(3, jobs=8)
    assert isinstance(pool, ProcessPool) and pool.jobs == 3
    assert isinstance(choose_executor(3, scheduler="tcp://h:8786"), DaskCluster)


def test_merge_of_only_failures_has_no_ranks():
    fleet = merge([Outcome(0, "a.sqlite", None, "a.sqlite: no such file")], options={})
    assert fleet.devices == [] and [f["error"] for f in fleet.failed] == ["a.sqlite: no such file"]
    assert FleetResult.from_dict(json.loads(json.dumps(fleet.to_dict()))).to_dict() == fleet.to_dict()
