"""Graphs that did not run, or ran badly, read right (docs/metrics.md, "Graph coverage", "Graph
replays", "Verdicts"): eager fallback among replayed steps, a replay traced at graph level, a
4,000-node graph's long launch. Real H200 traces of traces/truth (traces/README.md, "Ground
truth"), each figure checked against a plain walk over the export's rows with sqlite3."""

from __future__ import annotations

import itertools
import sqlite3
import statistics
from functools import cache

from paths import TRACES

from gapscope.analysis import analyze
from gapscope.analysis.answer import lines
from gapscope.catalog import AMORTIZED
from gapscope.render.units import fmt_ns

TRUTH = TRACES / "truth"
GRAPH_LAUNCH = ("cudaGraphLaunch_v10000", "cudaGraphLaunch")


def connect(path):
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


@cache
def instances(path, name):
    """Per NVTX range called ``name`` (start order): (start, end, kernels, graph kernels, GPU span
    of its kernels), the kernels being those launched by calls its thread started inside it."""
    db = connect(path)
    calls = list(db.execute(
        "SELECT r.start, r.globalTid, r.correlationId, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN StringIds s ON s.id = r.nameId"))
    kernels: dict[int, list[tuple[int, int]]] = {}
    for start, end, corr in db.execute("SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"):
        kernels.setdefault(corr, []).append((start, end))
    out = []
    for start, end, tid in db.execute("SELECT start, end, globalTid FROM NVTX_EVENTS WHERE text = ? ORDER BY start",
                                      (name,)):
        mine = [c for c in calls if c[1] == tid and start <= c[0] <= end and c[2] in kernels]
        ks = [k for c in mine for k in kernels[c[2]]]
        graph = sum(len(kernels[c[2]]) for c in mine if c[3] in GRAPH_LAUNCH)
        span = max(e for _, e in ks) - min(s for s, _ in ks) if ks else 0
        out.append((start, end, len(ks), graph, span))
    return out


def test_eager_fallback_among_replayed_steps():
    """fallback.sqlite: the graph phase's batches of 16 have no captured graph and run eager;
    with the eager phase, 20 of the 32 steps ran eager, 12 replayed."""
    path = TRUTH / "fallback.sqlite"
    steps = instances(str(path), "step")
    replayed = [s for s in steps if s[2] and 2 * s[3] > s[2]]
    eager = [s for s in steps if s[2] and not 2 * s[3] > s[2]]
    assert (len(eager), len(replayed)) == (20, 12)
    r = analyze(path).to_dict()
    ids = {(row["start_ns"], row["end_ns"]): row["id"] for row in r["ranges"]}
    row = next(x for x in r["by_name"] if x["name"] == "step")
    assert (row["eager_instances"], row["replayed_instances"]) == (20, 12)
    assert (row["first_eager_instance"], row["last_eager_instance"]) == \
        (min(ids[s[:2]] for s in eager), max(ids[s[:2]] for s in eager))
    e_span = statistics.median(s[4] for s in eager)
    r_span = statistics.median(s[4] for s in replayed)
    assert (row["eager_instance_span_ns"], row["replayed_instance_span_ns"]) == (e_span, r_span)
    entry = next(e for e in r["answer"] if e["name"] == "step")
    assert lines(entry)[2].startswith(f"  20 of 32 ran eager: +{fmt_ns(e_span - r_span)} each")


def test_a_replay_traced_at_graph_level_reads_as_a_replay_not_amortized():
    """tiny_graphlevel.sqlite: the graph range's 16 replays are 16 graph-level executions; its gap
    fraction is below the amortized threshold, yet it reads as a replay whose inside was not
    traced, and says how to see it."""
    path = TRUTH / "tiny_graphlevel.sqlite"
    db = connect(path)
    (start, end, tid), = db.execute("SELECT start, end, globalTid FROM NVTX_EVENTS WHERE text = 'graph'")
    executions = db.execute(
        "SELECT g.start, g.end FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE g JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = g.correlationId WHERE r.globalTid = ? AND r.start BETWEEN ? AND ? ORDER BY g.start",
        (tid, start, end)).fetchall()
    gap = sum(max(0, b[0] - a[1]) for a, b in itertools.pairwise(executions))
    span = executions[-1][1] - executions[0][0]
    assert len(executions) == 16 and gap / span < AMORTIZED
    row = next(x for x in analyze(path).to_dict()["by_name"] if x["name"] == "graph")
    assert (row["graph_replays"], row["gap_ns"], row["gpu_span_ns"]) == (16, gap, span)
    assert (row["verdict"], row["reading"]) == \
        ("graph_replay", "graphs (inside not traced: record with --cuda-graph-trace=node)")


def test_a_long_graph_launch_is_launch_time_never_a_stall():
    """biggraph.sqlite: the 4,000-node graph's launch calls run for milliseconds under node-level
    tracing, longer than the 1 ms stall threshold; the graph range holds no stall time, and the
    answer gives the traced launch beside the calibrated untraced one (5 us + 7 ns a node)."""
    path = TRUTH / "biggraph.sqlite"
    db = connect(path)
    durations = [e - s for s, e in db.execute(
        "SELECT r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value LIKE 'cudaGraphLaunch%'")]
    assert min(durations) > 1_000_000
    r = analyze(path).to_dict()
    graph = next(x for x in r["by_name"] if x["name"] == "graph")
    assert graph["gap_by_category_ns"]["stall"] == 0
    assert graph["verdict"] == "graph_replay"
    entry = next(e for e in r["answer"] if e["name"] == "graph")
    nodes = graph["graph_kernels"] / graph["graph_replays"]
    assert nodes == 4000
    assert entry["graph_launch_untraced_ns"] == 5_000 + 7 * nodes
    launch = next(x for x in r["launch"] if x["api"] == "cudaGraphLaunch")
    assert entry["graph_launch_ns"] == launch["host_median_ns"]
    assert f"graph launch {fmt_ns(launch['host_median_ns'])} (~{fmt_ns(33_000)} untraced)" in lines(entry)[1]
