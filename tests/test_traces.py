"""gapscope analyze on the real H200 exports in traces/ (provenance in traces/README.md).

Every number asserted here was checked by tests/reference.py, an independent plain
sort-and-merge over rows read with the stdlib sqlite3 module; the tests check both.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import reference
from paths import TRACES
from gapscope.analysis import analyze

REAL = ["cupy_paths_node", "cupy_paths_graph", "torch_decode", "torch_decode_sync"]


@pytest.fixture(scope="module")
def results():
    return {name: analyze(TRACES / f"{name}.sqlite") for name in REAL}


def name_row(result, name):
    return next(r for r in result.by_name if r["name"] == name)


@pytest.mark.parametrize("name", REAL)
def test_every_range_matches_the_reference(results, name):
    path = str(TRACES / f"{name}.sqlite")
    ks = reference.kernels(path)
    refs = reference.ranges(path)
    got = results[name].ranges
    assert len(got) == len(refs) > 0
    for g, w in zip(got, refs):
        assert g["name"] == w["name"]
        assert (g["kernels"], g["gpu_span_ns"], g["gap_ns"]) == reference.range_metrics(w, ks)
    span, gap, gaps = reference.by_device(ks)[0]
    dev = results[name].devices[0]
    assert (dev["gpu_span_ns"], dev["gap_ns"], dev["gap_count"]) == (span, gap, len(gaps))
    for (device, stream), (s_span, s_gap, s_gaps) in reference.by_stream(ks).items():
        row = next(r for r in results[name].streams if (r["device"], r["stream"]) == (device, stream))
        assert (row["gpu_span_ns"], row["gap_ns"], row["gap_count"]) == (s_span, s_gap, len(s_gaps))


# (kernels, span, busy, gap, gap count) per range name, from the reference computation.
CUPY_NODE = {
    "eager/k=2us": (300, 2_314_818, 345_856, 1_968_962, 299),
    "multistream/k=2us": (300, 3_117_954, 346_400, 2_771_554, 299),
    "graph/k=2us": (300, 450_816, 369_312, 81_504, 299),
    "eager/k=50us": (300, 15_124_554, 14_751_946, 372_608, 299),
    "multistream/k=50us": (300, 5_587_011, 5_423_299, 163_712, 74),
    "graph/k=50us": (300, 14_852_745, 14_771_017, 81_728, 299),
}


@pytest.mark.parametrize("name,expected", CUPY_NODE.items())
def test_cupy_node_level_paths(results, name, expected):
    row = name_row(results["cupy_paths_node"], name)
    assert (row["kernels"], row["gpu_span_ns"], row["busy_ns"], row["gap_ns"], row["gap_count"]) == expected
    assert row["gap_fraction"] == pytest.approx(expected[3] / expected[1])


def test_seed_criterion_on_the_h200(results):
    """Short kernels: eager is mostly gaps, the graph is not; long kernels: gaps amortized."""
    r = results["cupy_paths_node"]
    f = {n: name_row(r, n)["gap_fraction"] for n in CUPY_NODE}
    assert f["eager/k=2us"] > 0.8 and f["graph/k=2us"] < 0.2
    assert f["eager/k=50us"] < 0.03 and f["graph/k=50us"] < 0.01


def test_graph_level_trace_hides_graph_kernels(results):
    r = results["cupy_paths_graph"]
    assert r.trace["graph_trace"] == "graph"
    assert any("--cuda-graph-trace=node" in w for w in r.warnings)
    g = name_row(r, "graph/k=2us")
    assert (g["kernels"], g["gpu_span_ns"], g["gap_ns"]) == (1, 413_025, 0)


def test_torch_decode_eager_vs_graph(results):
    r = results["torch_decode"]
    eager, graph = name_row(r, "eager"), name_row(r, "graph")
    assert (eager["kernels"], eager["gpu_span_ns"], eager["busy_ns"]) == (2496, 107_313_249, 7_050_083)
    assert (graph["kernels"], graph["gpu_span_ns"], graph["busy_ns"]) == (2496, 8_885_670, 7_320_453)
    step = name_row(r, "decode_step")
    assert (step["count"], step["kernels"]) == (64, 4992)


# ------------------------------------------------------------------ why the GPU sat idle


def test_eager_decode_gaps_are_launch_and_host_gaps(results):
    """The GPU waits on the CPU: inside launch calls (launch) or between them, in Python
    (host); a CUDA Graph replay removes both. Checked against tests/reference.py in
    tests/test_verdicts.py."""
    eager = name_row(results["torch_decode"], "eager")
    cats = eager["gap_by_category_ns"]
    assert (cats["launch"], cats["host"], cats["setup"]) == (28_039_394, 72_036_096, 187_676)
    assert sum(cats.values()) == eager["gap_ns"] == 100_263_166
    # The reading says the cause and the predicted win (tests/test_prediction.py checks the model).
    assert (eager["verdict"], eager["reading"]) == ("host_bound", "host-bound: graphs ~10x")
    cupy = name_row(results["cupy_paths_node"], "eager/k=2us")
    assert (cupy["gap_by_category_ns"]["launch"], cupy["gap_by_category_ns"]["host"]) == (1_932_459, 36_503)
    assert cupy["gap_by_category_ns"]["launch"] + cupy["gap_by_category_ns"]["host"] == cupy["gap_ns"]
    assert cupy["verdict"] == "launch_bound"


def test_the_ceiling_is_the_steady_span_over_the_least_a_replay_takes(results):
    """The graph ceiling (docs/metrics.md, "Graph ceiling"): the steady span (the one-off setup
    gaps of the first kernels' module loading left out: 325,856 ns) over the least a replay could
    take, the device's busy time less 150 ns for each of its eager kernels (what a replay can save
    on a kernel) or the host's stall time (neither eager row stalled). torch_decode eager: 106,987,393
    / (7,050,083 - 2,496 x 150) = 16.03x (the rule before, which kept every device-side gap and the
    first-use loading, gave 14.83x)."""
    eager = name_row(results["torch_decode"], "eager")
    assert (eager["gpu_span_ns"] - eager["steady_span_ns"], eager["graph_ceiling_span_ns"]) == (325_856, 6_675_683)
    assert eager["graph_ceiling_speedup"] == pytest.approx(106_987_393 / (7_050_083 - 2_496 * 150))
    cupy = name_row(results["cupy_paths_node"], "eager/k=2us")
    assert cupy["graph_ceiling_speedup"] == pytest.approx(2_314_818 / (345_856 - 300 * 150))


def test_sync_after_every_step_shows_up_as_sync(results):
    graph = name_row(results["torch_decode_sync"], "graph")
    cats = graph["gap_by_category_ns"]
    # The copies run on the replays' own stream: the gaps behind them are memop, not dependency.
    assert cats == {"launch": 0, "host": 0, "stall": 0, "setup": 0, "sync": 4_741_191, "dependency": 0,
                    "memop": 310_881, "pipeline": 1_100_832, "unknown": 0}
    assert sum(cats.values()) == graph["gap_ns"]
    # A graph replay, but the synchronize is what idles it. A replay keeps it, but not the
    # device's turnaround and the copies' hand-offs: the ceiling is the span over busy plus the
    # copies' own time, 160 copies of 160,032 ns in all (13,471,688 / (7,318,784 + 160,032)).
    assert (graph["verdict"], graph["graph_replays"], graph["memops"], graph["memop_ns"]) == ("sync", 32, 160, 160_032)
    assert graph["graph_ceiling_speedup"] == pytest.approx(graph["gpu_span_ns"] / (7_318_784 + 160_032))
    assert name_row(results["torch_decode"], "graph")["gap_by_category_ns"]["sync"] == 0


def test_graph_replay_gaps_are_device_turnaround(results):
    g = name_row(results["cupy_paths_node"], "graph/k=2us")
    assert g["gap_by_category_ns"]["pipeline"] == g["gap_ns"] == 81_504
    # Even the replay's own turnaround could in principle shrink: the ceiling is span / busy.
    assert g["graph_ceiling_speedup"] == pytest.approx(450_816 / 369_312)


def test_multistream_fork_join_gaps_are_dependencies(results):
    m = name_row(results["cupy_paths_node"], "multistream/k=50us")
    assert m["gap_by_category_ns"]["dependency"] == m["gap_ns"] == 163_712


@pytest.mark.parametrize("name", REAL)
def test_categories_sum_to_gap_everywhere(results, name):
    r = results[name]
    for row in (*r.ranges, *r.by_name, *r.devices, *r.streams):
        assert sum(row["gap_by_category_ns"].values()) == row["gap_ns"]


def test_payoff_ceiling_beside_measured(results):
    (small, large) = results["cupy_paths_node"].payoff
    assert (small["eager"], small["graph"]) == ("eager/k=2us", "graph/k=2us")
    assert small["measured_speedup"] == pytest.approx(2_314_818 / 450_816)
    # 300 eager kernels each: their busy time less 150 ns a kernel
    assert small["ceiling_speedup"] == pytest.approx(2_314_818 / (345_856 - 300 * 150))
    assert small["measured_speedup"] <= small["ceiling_speedup"]
    assert large["measured_speedup"] <= large["ceiling_speedup"] == pytest.approx(15_124_554 / (14_751_946 - 300 * 150))
    # Steady state against steady state: the eager range's first-use loading left out.
    (torch_pair,) = results["torch_decode"].payoff
    assert torch_pair["measured_speedup"] == pytest.approx(106_987_393 / 8_885_670)


def test_launch_statistics(results):
    launch = {r["api"]: r for r in results["torch_decode"].launch}
    assert launch["cudaLaunchKernel"]["calls"] == 1756
    assert launch["cudaGraphLaunch"]["calls"] == 32
    assert all("_v" not in api for api in launch)


def shipped_units() -> list[str]:
    """Every trace and measurement shipped in traces/, as traces/README.md names it: an entry of
    traces/ or of traces/truth/ (a file, or an export's folder), or a peer's file under
    traces/thirdparty/ as ``peer/file``; the recipes, the provenance files, READMEs and licences
    aside."""
    units = []
    for entry in sorted(TRACES.iterdir()):
        if entry.name in ("recipes", "provenance", "README.md", "__pycache__"):
            continue
        if entry.name == "truth":
            units += [p.name for p in sorted(entry.iterdir()) if p.name != "__pycache__"]
        elif entry.name == "thirdparty":
            units += [f"{peer.name}/{p.name}" for peer in sorted(entry.iterdir()) if peer.is_dir()
                      for p in sorted(peer.iterdir()) if p.name != "LICENSE"]
        else:
            units.append(entry.name)
    return units


def test_every_shipped_trace_has_its_provenance_in_the_readme():
    """traces/README.md names each shipped file (or its folder): literally in backticks, or by
    a pattern it gives: ``<case>`` for any name part, ``CASE`` for a case of its table of the
    ground truth's programs, ``{a,b}`` for either."""
    import fnmatch
    import re

    text = (TRACES / "README.md").read_text(encoding="utf-8")
    cases = [c.strip() for row in re.findall(r"^\| ([a-z0-9_, ]+) \| (?:calibration|validation|coverage) \|",
                                             text, flags=re.M) for c in row.split(",")]
    assert "tiny" in cases and "biggraph" in cases
    patterns = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        token = token.strip("/")
        brace = re.search(r"\{([^}]*)\}", token)
        for alt in [token] if not brace else [token[:brace.start()] + a + token[brace.end():]
                                              for a in brace.group(1).split(",")]:
            alt = re.sub(r"<[^>]+>", "*", alt)
            patterns.update([alt.replace("CASE", c) for c in cases] if "CASE" in alt else [alt])
    unnamed = [u for u in shipped_units()
               if not any(fnmatch.fnmatchcase(u, p) or fnmatch.fnmatchcase(u.split("/")[-1], p) for p in patterns)]
    assert unnamed == []
