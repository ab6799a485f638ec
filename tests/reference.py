"""An independent, deliberately plain computation of the gap metrics (sort and merge in
Python loops, stdlib sqlite3), used to check gapscope's vectorized numbers on real traces."""

from __future__ import annotations

import sqlite3
from collections import defaultdict


def merge(intervals: list[tuple[int, int]]) -> tuple[int, int, list[int]]:
    """(span, gap, individual gaps) of a list of [start, end) intervals."""
    iv = sorted(intervals)
    if not iv:
        return 0, 0, []
    gaps = []
    cur_end = iv[0][1]
    for s, e in iv[1:]:
        if s > cur_end:
            gaps.append(s - cur_end)
        cur_end = max(cur_end, e)
    span = cur_end - iv[0][0]
    return span, sum(gaps), gaps


def kernels(path: str) -> list[dict]:
    """Every kernel (and graph-level execution) of an export, with its launching call."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    calls = {}
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        for s, tid, corr, cls in conn.execute(
            "SELECT start, globalTid, correlationId, eventClass FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        ):
            if cls != 67:
                calls.setdefault((tid >> 24, corr), (tid, s))
    out = []
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
        if table not in tables:
            continue
        for s, e, dev, stream, corr, gpid in conn.execute(
            f"SELECT start, end, deviceId, streamId, correlationId, globalPid FROM {table}"
        ):
            out.append({"start": s, "end": e, "device": dev, "stream": stream,
                        "call": calls.get((gpid >> 24, corr))})
    conn.close()
    return out


def by_device(ks: list[dict]) -> dict[int, tuple[int, int, list[int]]]:
    groups = defaultdict(list)
    for k in ks:
        groups[k["device"]].append((k["start"], k["end"]))
    return {d: merge(iv) for d, iv in groups.items()}


def by_stream(ks: list[dict]) -> dict[tuple[int, int], tuple[int, int, list[int]]]:
    groups = defaultdict(list)
    for k in ks:
        groups[(k["device"], k["stream"])].append((k["start"], k["end"]))
    return {key: merge(iv) for key, iv in groups.items()}


def ranges(path: str) -> list[dict]:
    """NVTX push/pop and start/end ranges, with names resolved, in start order."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    strings = dict(conn.execute("SELECT id, value FROM StringIds"))
    out = []
    for s, e, text, text_id, tid in conn.execute(
        "SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS "
        "WHERE eventType IN (59, 60) AND end IS NOT NULL ORDER BY start"
    ):
        out.append({"start": s, "end": e, "name": text if text is not None else strings.get(text_id),
                    "tid": tid})
    conn.close()
    return out


def range_metrics(rng: dict, ks: list[dict]) -> tuple[int, int, int]:
    """(kernels, span, gap) of one range: its kernels, grouped per device, summed."""
    mine = [k for k in ks if k["call"] and k["call"][0] == rng["tid"]
            and rng["start"] <= k["call"][1] <= rng["end"]]
    per_dev = defaultdict(list)
    for k in mine:
        per_dev[k["device"]].append((k["start"], k["end"]))
    span = gap = 0
    for iv in per_dev.values():
        s, g, _ = merge(iv)
        span += s
        gap += g
    return len(mine), span, gap
