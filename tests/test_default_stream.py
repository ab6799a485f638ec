"""The legacy default stream's implicit synchronization, and a memop on a kernel's own stream
(docs/metrics.md, "Gap attribution"): `gapscope run`'s default-stream case (a real H200 trace,
traces/case_default_stream.sqlite) checked against a plain sqlite3 walk of the export that applies
the documented rules, and SYNTHETIC exports (tests/synthetic.py, not real traces) for the other
direction, the inclusive bound, the host-side exception, memsets, and damaged stream tables."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from paths import TRACES
from synthetic import PID, Synthetic

from gapscope import catalog
from gapscope.analysis import analyze
from gapscope.trace.handle import open_trace

TRACE = TRACES / "case_default_stream.sqlite"
#: docs/metrics.md, "The stall threshold": the default of --stall-threshold.
STALL_NS = 1_000_000
#: ENUM_CUPTI_STREAM_TYPE: created with default flags, and the legacy default (NULL) stream.
BLOCKING, NULL_STREAM = 1, 3
HOST_SIDE = ("launch", "host", "stall", "setup", "sync")


def plain_categories(path: Path, count_memops: bool = False) -> dict[str, dict[str, int]]:
    """Per `default-stream/*` range: its gap time that is `dependency`, `memop`, `pipeline`, and
    `host side` (L had not returned at the gap's start: gapscope splits it over the launching
    thread's states), by the rules of docs/metrics.md applied to the export's rows with plain
    sqlite3 and Python (one device, one process in this trace)."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    flag = {(pid, s): f for s, pid, f in c.execute("SELECT streamId, processId, flag FROM TARGET_INFO_CUDA_STREAM")}
    acts = []  # (start, end, stream, is a copy or memset, correlation id, pid)
    for table, memop in (("CUPTI_ACTIVITY_KIND_KERNEL", False), ("CUPTI_ACTIVITY_KIND_MEMCPY", True),
                         ("CUPTI_ACTIVITY_KIND_MEMSET", True)):
        acts += [(s, e, st, memop, corr, (gpid >> 24) & 0xFFFFFF) for s, e, st, corr, gpid in c.execute(
            f"SELECT start, end, streamId, correlationId, globalPid FROM {table}")]
        assert [d for (d,) in c.execute(f"SELECT DISTINCT deviceId FROM {table}")] == [0]
    acts.sort()
    calls = {corr: (s, e, tid) for s, e, tid, corr in c.execute(
        "SELECT start, end, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
    waits = c.execute("SELECT start, streamId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE syncType = 2").fetchall()
    ranges = c.execute("SELECT n.start, n.end, n.globalTid, s.value FROM NVTX_EVENTS n JOIN StringIds s "
                       "ON s.id = n.textId WHERE n.eventType = 59 AND s.value LIKE 'default-stream/%'").fetchall()
    c.close()
    idle_memops = [(s, e) for s, e, _, m, _, _ in acts if m and not count_memops]
    on_stream: dict[int, list] = {}
    for a in acts:
        on_stream.setdefault(a[2], []).append(a)

    def covered(g0: int, g1: int) -> int:  # the union of the idle memops inside [g0, g1)
        total, upto = 0, g0
        for s, e in idle_memops:
            s, e = max(s, upto), min(e, g1)
            if e > s:
                total, upto = total + e - s, e
        return total

    out = {}
    for r0, r1, tid, name in ranges:
        busy = [a for a in acts if (count_memops or not a[3]) and a[4] in calls
                and r0 <= calls[a[4]][0] <= r1 and calls[a[4]][2] == tid]
        cats = dict.fromkeys(("dependency", "memop", "pipeline", "host side"), 0)
        end = busy[0][1]
        for k in busy[1:]:
            g0, g1 = end, k[0]
            end = max(end, k[1])
            if g1 <= g0:
                continue
            call_start, call_end, _ = calls[k[4]]
            ops = on_stream[k[2]]
            prev = ops[ops.index(k) - 1] if ops.index(k) else None
            # a stream wait issued on K's stream after the previous launch there
            since = calls[prev[4]][0] if prev and prev[4] in calls else -1
            waited = any(st == k[2] and since < s <= call_start for s, st in waits)
            # the streams K's stream implicitly synchronizes with, and their work that ended in
            # [max(g0, L.end), g1]
            other = {NULL_STREAM: BLOCKING, BLOCKING: NULL_STREAM}.get(flag.get((k[5], k[2])))
            lo = max(g0, call_end)
            implicit = [a for a in acts if other is not None and a[5] == k[5] and flag.get((a[5], a[2])) == other
                        and lo <= a[1] <= g1]
            host_side = call_end > g0
            category = "host side"
            if host_side and (waited or implicit or g1 - call_end > STALL_NS) and g1 - call_end > call_end - g0:
                host_side, category = False, "dependency"
            if call_end <= g0:
                category = "pipeline"
                if prev and prev[3] and prev[1] > g0:
                    category = "memop"  # a copy or memset of K's own stream
                if waited or implicit:
                    category = "dependency"
            waited_for_a_memop = not host_side and any(a[3] for a in implicit)
            if 2 * covered(g0, g1) >= g1 - g0 and not waited_for_a_memop:
                category = "memop"
            cats[category] += g1 - g0
        out[name] = cats
    return out


def gapscope_categories(result) -> dict[str, dict[str, int]]:
    """The same split from gapscope's rows (the host-side states summed)."""
    out = {}
    for row in result.ranges:
        g = row["gap_by_category_ns"]
        assert sum(g.values()) == row["gap_ns"] and g["unknown"] == 0
        out[row["name"]] = {"dependency": g["dependency"], "memop": g["memop"], "pipeline": g["pipeline"],
                            "host side": sum(g[c] for c in HOST_SIDE)}
    return out


@pytest.mark.parametrize("count_memops", [False, True], ids=["memops-idle", "count-memops"])
def test_the_default_stream_case_against_a_plain_walk(analyzed, count_memops):
    plain = plain_categories(TRACE, count_memops)
    got = analyzed("case_default_stream", count_memops=count_memops)
    assert gapscope_categories(got) == plain
    assert set(plain) == {"default-stream/legacy", "default-stream/user-streams", "default-stream/nonblocking"}
    legacy = plain["default-stream/legacy"]
    # The kernels on the legacy stream waited on the blocking stream's copies, and its copies on
    # its kernels (counted as busy, each copy's gap starts where the kernel it waited for ended).
    assert legacy["dependency"] > 0.9 * sum(legacy.values())
    for variant in ("user-streams", "nonblocking"):  # streams that do not synchronize: no dependency
        assert plain[f"default-stream/{variant}"]["dependency"] == 0


def test_the_legacy_range_reads_waits_on_other_streams(analyzed):
    r = analyzed("case_default_stream")
    by = {row["name"]: row for row in r.by_name}
    assert catalog.READINGS["dependency"] == "waits on other streams"
    assert by["default-stream/legacy"]["verdict"] == "dependency"
    assert by["default-stream/legacy"]["reading"].startswith("waits on other streams: ")
    for variant in ("user-streams", "nonblocking"):  # as before the rule: their copies cover their gaps
        assert by[f"default-stream/{variant}"]["verdict"] == "memop"
        assert by[f"default-stream/{variant}"]["reading"].startswith("idle behind copies: ")


def plain_stream_kinds(path: Path) -> list[tuple[int, int, int, int]]:
    """(pid, device, stream, kind) of every stream: TARGET_INFO_CUDA_STREAM's flag, its device
    from TARGET_INFO_CUDA_CONTEXT_INFO (plain sqlite3)."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = c.execute("SELECT s.processId, c.deviceId, s.streamId, s.flag FROM TARGET_INFO_CUDA_STREAM s "
                     "JOIN TARGET_INFO_CUDA_CONTEXT_INFO c ON c.processId = s.processId AND c.contextId = s.contextId "
                     "AND c.hwId = s.hwId AND c.vmId = s.vmId").fetchall()
    c.close()
    return sorted(rows)


@pytest.mark.parametrize("name", ["case_default_stream.sqlite", "case_multi_gpu.sqlite", "torch_decode_small.sqlite",
                                  "torch_decode_small_parquet", "torch_decode_small_arrow"])
def test_the_streams_frame_holds_the_exports_stream_kinds(name):
    path = TRACES / name
    sqlite = TRACES / (name.split("_parquet")[0].split("_arrow")[0].removesuffix(".sqlite") + ".sqlite")
    with open_trace(path) as trace:
        frames = trace.frames()
    s = frames.streams
    pids = s["proc"].to_numpy() & 0xFFFFFF  # the process key's low 24 bits: the OS process id
    got = sorted(zip(pids.tolist(), s["device"].tolist(), s["stream"].tolist(), s["kind"].tolist()))
    assert got == plain_stream_kinds(sqlite) and len(got) == len(s)
    # The process key is the activities' (globalPid >> 24), so the streams match on it.
    assert set(s["proc"]) == set(frames.activities["proc"])


def test_the_shipped_exports_stream_kinds_by_name():
    """What the issue read off the exports, in the catalog's names: the legacy stream 7 (device 0)
    and 15 (device 1 of case_multi_gpu), the default-stream case's blocking and non-blocking
    streams."""
    def kinds(name: str) -> dict[tuple[int, int], str]:
        with open_trace(TRACES / name) as trace:
            s = trace.frames().streams
        return {(d, st): catalog.STREAM_KINDS[k] for d, st, k in zip(s["device"], s["stream"], s["kind"])}

    case = kinds("case_default_stream.sqlite")
    assert {s: case[(0, s)] for s in (7, 13, 14, 15, 16)} == {
        7: "null", 13: "blocking", 14: "blocking", 15: "non-blocking", 16: "non-blocking"}
    assert sorted(k for k, v in kinds("case_multi_gpu.sqlite").items() if v == "null") == [(0, 7), (1, 15)]


def test_a_pytorch_profiler_trace_records_no_stream_kinds():
    with open_trace(TRACES / "torch_decode_small.pt.trace.json.gz") as trace:
        assert len(trace.frames().streams) == 0


# -- SYNTHETIC exports ---------------------------------------------------------------------
# Kernels launched long before the GPU went idle (queued) unless said otherwise; a launch call
# lasts 1 us. Stream 7 is the null stream, 13 a blocking stream, 15 a non-blocking one.
STREAMS = [(7, NULL_STREAM, 0, PID), (13, BLOCKING, 0, PID), (15, 2, 0, PID)]


def device_categories(t: Synthetic, tmp_path: Path, **kw) -> dict[str, int]:
    r = analyze(t.write(tmp_path / "synthetic.sqlite"), **kw)
    row = r.devices[0]
    assert sum(row["gap_by_category_ns"].values()) == row["gap_ns"]
    return {k: v for k, v in row["gap_by_category_ns"].items() if v}


def synthetic_copy_between(kernel_stream: int, copy: tuple[int, int], kinds: bool) -> Synthetic:
    """SYNTHETIC: kernel [0, 1000) and kernel K [3000, 4000) on ``kernel_stream``, a copy on the
    null stream 7 at ``copy``, all issued early; with or without the stream tables."""
    t = Synthetic().launch(0, 0, 1_000, 1, stream=kernel_stream)
    t.call(10, 20, 2, name="cudaMemcpyAsync_v3020")
    t.memcpy.append((*copy, 0, 7, 2, PID))
    t.call(30, 40, 3).kernel(3_000, 4_000, 3, stream=kernel_stream)
    if kinds:
        t.streams += STREAMS
    return t


def test_a_blocking_streams_kernel_waits_on_the_null_streams_copy(tmp_path):
    # The copy [1200, 1500) covers 300 of the 2000 ns gap; it ended inside it, on the null
    # stream, which a blocking stream's later work waits for: the whole gap is dependency.
    assert device_categories(synthetic_copy_between(13, (1_200, 1_500), True), tmp_path) == {"dependency": 2_000}
    # A non-blocking stream does not wait for it, and a trace without the stream tables cannot say.
    assert device_categories(synthetic_copy_between(15, (1_200, 1_500), True), tmp_path) == {"pipeline": 2_000}
    assert device_categories(synthetic_copy_between(13, (1_200, 1_500), False), tmp_path) == {"pipeline": 2_000}


def test_the_copy_waited_for_is_a_dependency_however_much_it_covers(tmp_path):
    # The null stream's copy [1000, 2800) covers 1800 of the 2000 ns gap: idle behind copies by
    # the coverage rule, but the blocking stream's kernel waited for that very copy.
    assert device_categories(synthetic_copy_between(13, (1_000, 2_800), True), tmp_path) == {"dependency": 2_000}
    assert device_categories(synthetic_copy_between(15, (1_000, 2_800), True), tmp_path) == {"memop": 2_000}


def test_work_that_ended_at_the_gaps_start_was_waited_for(tmp_path):
    # A null-stream kernel [0, 1000), then a blocking stream's kernel [3000, 4000): the second
    # waited for the first (its end is the gap's start): dependency; on a non-blocking stream,
    # the device's own turnaround.
    for stream, expected in ((13, {"dependency": 2_000}), (15, {"pipeline": 2_000})):
        t = Synthetic().launch(0, 0, 1_000, 1, stream=7)
        t.call(10, 20, 2).kernel(3_000, 4_000, 2, stream=stream)
        t.streams += STREAMS
        assert device_categories(t, tmp_path) == expected


def test_a_kernel_queued_behind_the_implicit_synchronization_is_not_launch(tmp_path):
    # K's launch call [900, 1100) returned 100 ns after the GPU went idle at 1000; K then waited
    # until 3000 for a blocking stream's copy that ended at 2600 (after the call returned): the
    # gap is that wait (dependency). Without the stream tables it is launch: 100 ns inside the
    # call, 1900 ns in flight after it.
    for kinds, expected in ((True, {"dependency": 2_000}), (False, {"launch": 2_000})):
        t = Synthetic().launch(0, 0, 1_000, 1, stream=7)
        t.call(10, 20, 2, name="cudaMemcpyAsync_v3020")
        t.memcpy.append((2_000, 2_600, 0, 13, 2, PID))
        t.call(900, 1_100, 3).kernel(3_000, 4_000, 3, stream=7)
        if kinds:
            t.streams += STREAMS
        assert device_categories(t, tmp_path) == expected


def test_a_memset_on_the_kernels_own_stream_is_memop(tmp_path):
    # cuBLAS's workspace memset between two GEMMs of one stream: kernel [0, 1000), memset
    # [1000, 1200), kernel [3000, 4000) on stream 13. The memset covers 200 of the 2000 ns gap,
    # but it is the stream's own previous operation: memop, not a wait on another stream.
    t = Synthetic().launch(0, 0, 1_000, 1, stream=13)
    t.call(10, 20, 2, name="cudaMemsetAsync_v3020")
    t.memset.append((1_000, 1_200, 0, 13, 2, PID))
    t.call(30, 40, 3).kernel(3_000, 4_000, 3, stream=13)
    assert device_categories(t, tmp_path) == {"memop": 2_000}
    t.streams += STREAMS  # the stream's kind does not change it: nothing of the null stream ran
    assert device_categories(t, tmp_path) == {"memop": 2_000}


def test_damaged_stream_tables_leave_those_streams_unknown_and_are_never_refused(tmp_path):
    # SYNTHETIC: the blocking stream 13's row names a context the export does not hold, and the
    # non-blocking stream 15's flag is text: 2 of 3 stream-kind rows damaged (over the 10 % that
    # refuses a frame of events), warned, and stream 13 of unknown kind: the gap is pipeline.
    t = synthetic_copy_between(13, (1_200, 1_500), True)
    path = t.write(tmp_path / "synthetic.sqlite")
    c = sqlite3.connect(path)
    c.execute("UPDATE TARGET_INFO_CUDA_STREAM SET contextId = 99 WHERE streamId = 13")
    c.execute("UPDATE TARGET_INFO_CUDA_STREAM SET flag = 'x' WHERE streamId = 15")
    c.commit()
    c.close()
    r = analyze(path)
    assert {k: v for k, v in r.devices[0]["gap_by_category_ns"].items() if v} == {"pipeline": 2_000}
    assert "left out 1 of 3 stream-kind rows as damaged (device NULL: 1); every figure covers the other rows" \
        in r.warnings
    assert "1 of 3 stream-kind rows had a damaged kind (not an integer: 1): kept, the stream's kind read as " \
        "unknown" in r.warnings
