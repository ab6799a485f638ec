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


# --------------------------------------------------------------------------------------------
# Damaged exports: the rules of docs/robustness.md, applied row by row in plain Python, then the
# same sort-and-merge as above over the rows that survive. Reads with typeof(), so no value is
# converted on the way; opens the file immutable (it creates nothing beside it).

TIME_LIMIT = 2**53 - 1
REFUSE_SHARE = 0.10
EVENT_TYPES = (59, 60, 75)


def _is_int(v) -> bool:
    return type(v) is int


def _ok_time(v, limit: int) -> bool:
    return _is_int(v) and 0 <= v <= limit


def _optional(v, hi: int) -> tuple[int, bool]:
    """(value, damaged) of a column whose damage reads as unknown (-1)."""
    if v is None or not _is_int(v):
        return -1, True
    return (v, False) if v == -1 or 0 <= v <= hi else (-1, True)


def _proc(gpid) -> tuple[int, bool]:
    if gpid is None or not _is_int(gpid):
        return -1, True
    proc = gpid >> 24
    return (proc, False) if proc == -1 or 0 <= proc < 2**40 else (-1, True)


def _text(v) -> tuple[str | None, bool]:
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8"), False
        except UnicodeDecodeError:
            return v.decode("utf-8", "replace"), True
    return v, False


class Refused(Exception):
    """The rules say this export must be refused (too much of one frame is damaged)."""


def _check_share(what: str, damaged: int, total: int) -> None:
    if damaged and damaged > REFUSE_SHARE * total:
        raise Refused(f"{damaged} of {total} {what} damaged")


def expected(path: str, *, syncs: bool = True) -> dict:
    """What gapscope must report for an export that may be damaged: ``kernels`` (with their
    launching call, as :func:`kernels` gives them), ``ranges`` (as :func:`ranges`), and
    ``damaged`` (rows left out or read as unknown, per frame); raises Refused when more than
    REFUSE_SHARE of a frame is damaged. Only for exports with the columns gapscope needs."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    conn.text_factory = bytes
    try:
        return _expected(conn, syncs)
    finally:
        conn.close()


def _expected(conn: sqlite3.Connection, syncs: bool) -> dict:
    tables = {r[0].decode("utf-8", "replace") for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    def cols(table):
        return {r[1].decode("utf-8", "replace") for r in conn.execute(f"PRAGMA table_info({table})")}

    def pick(table, *names, missing="-1"):
        """The columns as SQL; ``missing`` for an optional one the table lacks."""
        have = cols(table)
        return ", ".join(n if n in have else missing for n in names)

    limit = TIME_LIMIT
    if "ANALYSIS_DETAILS" in tables:
        ends = [v for c in ("stopTime", "duration") if c in cols("ANALYSIS_DETAILS")
                for (v,) in conn.execute(f"SELECT {c} FROM ANALYSIS_DETAILS") if _is_int(v) and v > 0]
        if ends:
            limit = min(2 * max(ends), TIME_LIMIT)
    damaged = {}

    # API calls: backtrace repeats and quiet calls are not selected.
    quiet = set()
    names = "StringIds" in tables and {"id", "value"} <= cols("StringIds")
    runtime = "CUPTI_ACTIVITY_KIND_RUNTIME" in tables
    if names and runtime and "nameId" in cols("CUPTI_ACTIVITY_KIND_RUNTIME"):  # as the reader asks
        from gapscope.trace.cuda_api import QUIET_CALLS

        for name in QUIET_CALLS:
            quiet |= {i for (i,) in conn.execute(
                "SELECT id FROM StringIds WHERE value = ? OR value LIKE ? ESCAPE '!'", (name, name + "!_v%"))
                if _is_int(i)}
    calls = {}
    bad_api = n_api = 0
    if runtime:
        select = pick("CUPTI_ACTIVITY_KIND_RUNTIME", "start", "end", "globalTid", "correlationId", "nameId")
        # Selected in SQL as the reader selects them, so that a damaged record of a row neither
        # reads is not read here either.
        rc = cols("CUPTI_ACTIVITY_KIND_RUNTIME")
        where = ["eventClass IS NOT 67"] if "eventClass" in rc else []
        if quiet and "nameId" in rc:
            where.append(f"nameId IS NULL OR nameId NOT IN ({', '.join(map(str, sorted(quiet)))})")
        where_sql = f" WHERE {' AND '.join(f'({w})' for w in where)}" if where else ""
        for s, e, tid, corr, name_id in conn.execute(
                f"SELECT {select} FROM CUPTI_ACTIVITY_KIND_RUNTIME{where_sql} ORDER BY rowid"):
            n_api += 1
            ok = _ok_time(s, limit) and _ok_time(e, limit) and e >= s and _is_int(tid) and tid >= 0
            corr, bad_corr = _optional(corr, 2**40 - 1)
            _, bad_name = _optional(name_id, 2**63 - 1)
            bad_api += (not ok) or bad_corr or bad_name
            if ok and corr > 0:
                calls.setdefault((tid >> 24, corr), (tid, s))
    _check_share("API rows", bad_api, n_api)
    damaged["api"] = bad_api

    out, bad_act, n_act = [], 0, 0
    for table, busy in (("CUPTI_ACTIVITY_KIND_KERNEL", True), ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", True),
                        ("CUPTI_ACTIVITY_KIND_MEMCPY", False), ("CUPTI_ACTIVITY_KIND_MEMSET", False)):
        if table not in tables:
            continue
        select = pick(table, "start", "end", "deviceId", "streamId", "correlationId", "globalPid")
        for s, e, dev, stream, corr, gpid in conn.execute(f"SELECT {select} FROM {table} ORDER BY rowid"):
            n_act += 1
            ok = (_ok_time(s, limit) and _ok_time(e, limit) and e >= s and _is_int(dev) and 0 <= dev < 2**31
                  and _is_int(stream) and 0 <= stream < 2**32)
            proc, bad_proc = _proc(gpid)
            corr, bad_corr = _optional(corr, 2**40 - 1)
            bad_act += (not ok) or bad_proc or bad_corr
            if ok and busy:
                call = calls.get((proc, corr)) if corr > 0 else None
                out.append({"start": s, "end": e, "device": dev, "stream": stream, "pid": proc & 0xFFFFFF,
                            "call": call})
    _check_share("GPU activity rows", bad_act, n_act)
    damaged["activities"] = bad_act

    rngs, bad_nvtx, n_nvtx = [], 0, 0
    if "NVTX_EVENTS" in tables:
        nc = cols("NVTX_EVENTS")
        def string(i):  # one id at a time, as the reader's join looks them up
            row = conn.execute("SELECT value FROM StringIds WHERE id = ?", (i,)).fetchone() if names else None
            return None if row is None else row[0]

        text = "CAST(text AS BLOB)" if "text" in nc else "NULL"
        domain = "domainId" if "domainId" in nc else "0"
        select = pick("NVTX_EVENTS", "start", "end", "eventType", missing="NULL")
        for s, e, typ, txt, tid_, tid, dom in conn.execute(
                f"SELECT {select}, {text}, {pick('NVTX_EVENTS', 'textId', missing='NULL')}, globalTid, {domain} "
                f"FROM NVTX_EVENTS WHERE eventType IN {EVENT_TYPES} ORDER BY rowid"):
            n_nvtx += 1
            open_end = e is None or e == -1
            ok = (_ok_time(s, limit) and _is_int(tid) and tid >= 0
                  and (open_end or (_ok_time(e, limit) and e >= s)))
            _, bad_dom = (0, False) if dom is None else _optional(dom, 2**63 - 1)
            if txt is None and _is_int(tid_) and "textId" in nc:
                txt = string(tid_)
            name, _ = _text(txt)
            bad_nvtx += (not ok) or bad_dom  # a name that is not UTF-8 is kept (and warned)
            if ok and typ != 75 and not open_end:
                rngs.append({"start": s, "end": e, "name": "[unnamed]" if name is None else name, "tid": tid})
    _check_share("NVTX rows", bad_nvtx, n_nvtx)
    damaged["nvtx"] = bad_nvtx

    if syncs and "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables:
        sc = cols("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
        where = " WHERE syncType = 2" if "syncType" in sc else ""
        bad = n = 0
        select = pick("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "start", "deviceId", "streamId", "globalPid")
        for s, dev, stream, gpid in conn.execute(f"SELECT {select} FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION{where}"):
            n += 1
            ok = _ok_time(s, limit) and _is_int(dev) and 0 <= dev < 2**31 and _is_int(stream) and 0 <= stream < 2**32
            bad += (not ok) or _proc(gpid)[1]
        _check_share("stream-wait rows", bad, n)
        damaged["syncs"] = bad
    return {"kernels": out, "ranges": sorted(rngs, key=lambda r: r["start"]), "damaged": damaged}


def by_pid_stream(ks: list[dict]) -> dict[tuple[int, int, int], tuple[int, int, list[int]]]:
    """(span, gap, gaps) per (pid, device, stream), as gapscope's stream rows key them."""
    groups = defaultdict(list)
    for k in ks:
        groups[(k["pid"], k["device"], k["stream"])].append((k["start"], k["end"]))
    return {key: merge(iv) for key, iv in groups.items()}


def mismatches(result: dict, want: dict) -> list[str]:
    """How a result dict (docs/schema.md) differs from :func:`expected` figures: devices,
    streams and ranges (kernels, span, gap); empty when it agrees."""
    ks = want["kernels"]
    out = []
    devs = by_device(ks)
    counts = defaultdict(int)
    for k in ks:
        counts[k["device"]] += 1
    got_devs = {d["device"]: d for d in result["devices"]}
    for dev in set(devs) | set(got_devs):
        span, gap, gaps = devs.get(dev, (0, 0, []))
        g = got_devs.get(dev)
        have = None if g is None else (g["kernels"], g["gpu_span_ns"], g["gap_ns"], g["gap_count"])
        if have != (counts.get(dev, 0), span, gap, len(gaps)):
            out.append(f"device {dev}: {have} != {(counts.get(dev, 0), span, gap, len(gaps))}")
    streams = by_pid_stream(ks)
    got_streams = {(s["pid"], s["device"], s["stream"]): s for s in result["streams"] if s["kernels"]}
    for key in set(streams) | set(got_streams):
        span, gap, gaps = streams.get(key, (0, 0, []))
        s = got_streams.get(key)
        have = None if s is None else (s["gpu_span_ns"], s["gap_ns"], s["gap_count"])
        if have != (span, gap, len(gaps)):
            out.append(f"stream {key}: {have} != {(span, gap, len(gaps))}")
    got_ranges = sorted((r["start_ns"], r["end_ns"], r["name"], r["kernels"], r["gpu_span_ns"], r["gap_ns"])
                        for r in result["ranges"])
    want_ranges = sorted((r["start"], r["end"], r["name"], *range_metrics(r, ks)) for r in want["ranges"])
    if got_ranges != want_ranges:
        out.append(f"ranges: {len(got_ranges)} rows != {len(want_ranges)} expected, or their figures differ")
    return out
