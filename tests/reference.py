"""An independent, deliberately plain computation of the gap metrics (sort and merge in
Python loops), used to check gapscope's vectorized numbers on real traces. Rows are read with
the stdlib sqlite3 module (SQLite exports), pyarrow's plain table readers (parquetdir and
arrowdir exports) and json/gzip (PyTorch profiler traces); none of gapscope's readers is used."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from collections import defaultdict
from decimal import Decimal
from pathlib import Path


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


# ------------------------------------------------------------------ nsys parquetdir / arrowdir


def table_rows(folder: str | Path, table: str) -> list[dict]:
    """Every row of one table of a columnar export, as dicts (pyarrow, whole table)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    if (folder / f"{table}.parquet").exists():
        return pq.read_table(folder / f"{table}.parquet").to_pylist()
    path = folder / f"{table}.arrow"
    if not path.exists():
        return []
    with pa.OSFile(str(path), "rb") as fh:
        return pa.ipc.open_stream(fh).read_all().to_pylist()


def _signed(v: int | None) -> int | None:
    """An unsigned 64-bit value as SQLite stores it (two's complement)."""
    return v - (1 << 64) if v is not None and v >= 1 << 63 else v


def columnar_kernels(folder: str | Path) -> list[dict]:
    """Every kernel of a parquetdir/arrowdir export with its launching call (as kernels())."""
    calls = {}
    for r in table_rows(folder, "CUPTI_ACTIVITY_KIND_RUNTIME"):
        tid = _signed(r["globalTid"])
        if r["eventClass"] != 67:
            calls.setdefault((tid >> 24, r["correlationId"]), (tid, r["start"]))
    out = []
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
        for r in table_rows(folder, table):
            out.append({"start": r["start"], "end": r["end"], "device": r["deviceId"], "stream": r["streamId"],
                        "call": calls.get((_signed(r["globalPid"]) >> 24, r["correlationId"]))})
    return out


def columnar_ranges(folder: str | Path) -> list[dict]:
    """NVTX push/pop and start/end ranges of a columnar export, names resolved, in start order."""
    strings = {r["id"]: r["value"] for r in table_rows(folder, "StringIds")}
    out = [{"start": r["start"], "end": r["end"], "tid": _signed(r["globalTid"]),
            "name": r["text"] if r["text"] is not None else strings.get(r["textId"])}
           for r in table_rows(folder, "NVTX_EVENTS") if r["eventType"] in (59, 60) and r["end"] is not None]
    return sorted(out, key=lambda r: r["start"])


# ------------------------------------------------------------------ PyTorch profiler (Kineto) traces


def kineto_events(path: str | Path) -> list[dict]:
    """The traceEvents of a PyTorch profiler trace, numbers as exact decimals (json.load)."""
    opener = gzip.open if Path(path).read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh, parse_float=Decimal)["traceEvents"]


def ns(us) -> int:
    """Kineto's microseconds (three decimals) as integer nanoseconds."""
    return int(Decimal(us) * 1000)


def kineto_kernels(path: str | Path) -> list[dict]:
    """Every kernel of a Kineto trace with its launching call: the cuda_runtime/cuda_driver event
    with the same args.correlation, its thread packed as (pid << 24) | tid. The driver's kernels
    for graph memcpy nodes (memcpyNN_post) are copies, as nsys records them."""
    events = kineto_events(path)
    calls = {e["args"]["correlation"]: ((e["pid"] << 24) | e["tid"], ns(e["ts"]))
             for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    return [{"start": ns(e["ts"]), "end": ns(e["ts"]) + ns(e["dur"]), "device": e["args"]["device"],
             "stream": e["args"]["stream"], "call": calls.get(e["args"]["correlation"])}
            for e in events if e.get("cat") == "kernel" and not re.fullmatch(r"memcpy\d+_post", e["name"])]


def kineto_ranges(path: str | Path) -> list[dict]:
    """The user_annotation events (record_function, ProfilerStep#N) as ranges, in start order."""
    out = [{"start": ns(e["ts"]), "end": ns(e["ts"]) + ns(e["dur"]), "tid": (e["pid"] << 24) | e["tid"],
            "name": e["name"]} for e in kineto_events(path) if e.get("cat") == "user_annotation"]
    return sorted(out, key=lambda r: r["start"])
