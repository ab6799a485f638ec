"""Graph recording inside ranges (docs/metrics.md, "Graph recording"): the instantiate and update
calls per range and the time of capture, instantiate, update and captured calls, checked against
a plain walk over the export's own rows (sqlite3, no gapscope code) on real H200 traces."""

from __future__ import annotations

import re
import sqlite3
from functools import cache

import numpy as np
from paths import TRACES

from gapscope.analysis import analyze
from gapscope.analysis.answer import lines
from gapscope.analysis.recording import _captured
from gapscope.render.units import fmt_ns
from gapscope.trace.cuda_api import QUIET_CALLS

BEGIN = {"cudaStreamBeginCapture", "cuStreamBeginCapture"}
END = {"cudaStreamEndCapture", "cuStreamEndCapture"}
MAKE = {"cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "cuGraphInstantiateWithFlags",
        "cudaGraphExecUpdate", "cuGraphExecUpdate"}


@cache
def walk(path):
    """Per NVTX range (start, end, thread): (graphs made or updated, recording time in ns), by
    walking the thread's CUDA calls in start order with a flag for an open capture. Calls that
    gapscope does not read (QUIET_CALLS) are left out, as the definition says."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    calls = [(s, e, t, re.sub(r"_v\d+$", "", n)) for s, e, t, n in db.execute(
        "SELECT r.start, r.end, r.globalTid, s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "JOIN StringIds s ON s.id = r.nameId ORDER BY r.start")]
    calls = [c for c in calls if c[3] not in QUIET_CALLS]
    timed = []  # (start, thread, duration, makes a graph) of every recording call or captured call
    open_on: set[int] = set()
    for s, e, t, name in calls:
        if name in BEGIN:
            open_on.add(t)
        recording = name in BEGIN | END | MAKE or t in open_on
        if name in END:
            open_on.discard(t)
        if recording:
            timed.append((s, t, e - s, name in MAKE))
    out = {}
    for start, end, tid in db.execute("SELECT start, end, globalTid FROM NVTX_EVENTS WHERE end IS NOT NULL"):
        mine = [c for c in timed if c[1] == tid and start <= c[0] <= end]
        out[(start, end)] = (sum(c[3] for c in mine), sum(c[2] for c in mine))
    return out


def test_every_range_of_the_rerecord_program_against_the_walk():
    """rerecord.sqlite: 16 eager steps, then 16 steps that each capture a new 50-kernel graph and
    replay it once; every range's figures equal the walk's."""
    path = TRACES / "truth" / "rerecord.sqlite"
    expected = walk(str(path))
    r = analyze(path).to_dict()
    got = {(row["start_ns"], row["end_ns"]): (row["graph_recordings"], row["recording_ns"]) for row in r["ranges"]}
    assert got == {k: v for k, v in expected.items() if k in got} and len(got) == 34
    steps = [row for row in r["ranges"] if row["name"] == "step"]
    recorded = [row["id"] for row in steps if row["graph_recordings"]]
    assert len(recorded) == 16 and [row["graph_recordings"] for row in steps].count(1) == 16
    name = next(row for row in r["by_name"] if row["name"] == "step")
    total = sum(row["recording_ns"] for row in steps)
    assert (name["graph_recordings"], name["recording_ns"], name["recording_instances"]) == (16, total, 16)
    assert (name["first_recording_instance"], name["last_recording_instance"]) == (min(recorded), max(recorded))
    # the captured launches are in the time: each recording step holds 50 of them beside the
    # begin, end and instantiate calls
    assert all(expected[(row["start_ns"], row["end_ns"])][1] > 0 for row in steps if row["graph_recordings"])


def test_the_rerecord_program_reads_and_answers_as_re_recording():
    r = analyze(TRACES / "truth" / "rerecord.sqlite").to_dict()
    graph = next(row for row in r["by_name"] if row["name"] == "graph")
    # one range, 16 replays, 16 graphs made: a recording for every replay
    assert (graph["graph_replays"], graph["graph_recordings"]) == (16, 16)
    assert (graph["verdict"], graph["reading"]) == ("graph_replay", "graphs: re-recorded, not reused")
    step = next(e for e in r["answer"] if e["name"] == "step")
    each = fmt_ns(step["recording_ns"] / 16)
    assert f"graph re-recorded in 16 of 32 (ids {step['first_recording_instance']:.0f}-" \
           f"{step['last_recording_instance']:.0f}): {each} each" in lines(step)[2]


def test_graph_updates_count_as_recordings():
    """case_graph_update.sqlite: 32 cudaGraphExecUpdate calls in the exec-update range, 32
    recaptures in the recapture range (the walk's counts)."""
    path = TRACES / "case_graph_update.sqlite"
    expected = walk(str(path))
    r = analyze(path).to_dict()
    for row in r["ranges"]:
        assert (row["graph_recordings"], row["recording_ns"]) == expected[(row["start_ns"], row["end_ns"])]
    by = {row["name"]: row for row in r["by_name"]}
    assert by["graph-update/exec-update"]["graph_recordings"] == 32
    assert by["graph-update/recapture"]["graph_recordings"] == 32


def test_a_program_that_records_once_reads_no_re_recording():
    """jax_train.sqlite: XLA records its graph in the first train_step only."""
    r = analyze(TRACES / "jax_train.sqlite").to_dict()
    step = next(row for row in r["by_name"] if row["name"] == "train_step")
    assert (step["count"], step["recording_instances"]) == (12, 1)
    assert step["reading"] != "graphs: re-recorded, not reused"
    assert not any("re-recorded" in line for e in r["answer"] for line in lines(e))


def test_a_capture_is_open_only_on_its_own_thread():
    """Synthetic calls: thread 7 begins a capture at 10 and ends it at 40; thread 9's call at 20
    is not captured, thread 7's at 20 and 30 are, and its end call; after the end nothing is."""
    tid = np.array([7, 7, 9, 7, 7, 7])
    start = np.array([10, 20, 20, 30, 40, 50])
    begin = np.array([True, False, False, False, False, False])
    end = np.array([False, False, False, False, True, False])
    assert _captured(tid, start, begin, end).tolist() == [False, True, False, True, True, False]


def test_a_capture_never_ended_stays_open():
    """Synthetic calls: thread 7 begins a capture at 10 and the trace holds no end call (cut off,
    or its name damaged: the fuzz campaign's seed 30076, a parquetdir export whose StringIds ids
    were null): every later call of thread 7 is captured, thread 9's is not."""
    tid = np.array([7, 7, 9, 7])
    start = np.array([10, 20, 20, 30])
    begin = np.array([True, False, False, False])
    end = np.zeros(4, dtype=bool)
    assert _captured(tid, start, begin, end).tolist() == [False, True, False, True]


def test_captured_calls_match_the_rule_call_by_call():
    """Synthetic calls on three threads, begin- and end-capture calls among them at random (equal
    starts included, captures nested, never closed, closed twice), in more than one block of
    calls: a call is captured exactly when, among its own thread's begin and end calls that
    started before it, the latest begin is later than the latest end, as a plain walk over each
    call finds it."""
    import gapscope.analysis.recording as recording

    rng = np.random.default_rng(42)
    n = 5_000
    tid = rng.choice([3, 7, 9], n)
    start = rng.integers(0, 2_000, n)
    kind = rng.choice(3, n, p=[0.96, 0.02, 0.02])
    begin, end = kind == 1, kind == 2
    want = []
    for i in range(n):
        mine = (tid == tid[i]) & (start < start[i])
        last_b = start[mine & begin].max(initial=-1)
        last_e = start[mine & end].max(initial=-1)
        want.append(bool(last_b >= 0 and last_b > last_e))
    old_block = recording.CAPTURE_BLOCK
    try:
        recording.CAPTURE_BLOCK = 777  # several blocks
        assert _captured(tid, start, begin, end).tolist() == want
    finally:
        recording.CAPTURE_BLOCK = old_block
    assert 50 < sum(want) < n - 50  # both answers occur
