"""An independent, deliberately plain computation of the gap metrics (sort and merge in
Python loops), used to check gapscope's vectorized numbers on real traces. Rows are read with
the stdlib sqlite3 module (SQLite exports), pyarrow's plain table readers (parquetdir and
arrowdir exports) and json/gzip (PyTorch profiler traces); none of gapscope's readers is used."""

from __future__ import annotations

import bisect
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


def has_nvtx(path: str) -> bool:
    """Whether the export has an NVTX_EVENTS table."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    found = conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone()[0]
    conn.close()
    return bool(found)


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


# ----------------------------------------------------------------------------- gap attribution
#
# The rules of docs/metrics.md ("Gap attribution"), written again in plain Python over rows read
# with sqlite3: per gap, a walk over the launching thread's calls. Nothing here is shared with
# gapscope.analysis.

# The calls by role, written out here (not taken from gapscope.trace.cuda_api), by the roles of
# docs/metrics.md ("Gap attribution"); names without nsys's _vNNNN tail.
#
# Left out of gapscope's API frame (matched with any _vNNNN tail): event record and query,
# stream waits, device and capture queries, attribute and function lookups.
QUIET = frozenset({
    "cuCtxGetCurrent", "cuCtxGetDevice", "cuCtxSetCurrent", "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxGetState", "cuEventElapsedTime", "cuEventQuery", "cuEventRecord",
    "cuEventRecordWithFlags", "cuFuncGetAttribute", "cuFuncSetAttribute", "cuGetProcAddress",
    "cuKernelGetAttribute", "cuKernelGetFunction", "cuKernelGetName", "cuLibraryGetKernel",
    "cuLibraryGetModule", "cuModuleGetFunction", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuPointerGetAttribute", "cuStreamGetCaptureInfo", "cuStreamIsCapturing", "cuStreamWaitEvent",
    "cudaDeviceGetAttribute", "cudaEventElapsedTime", "cudaEventQuery", "cudaEventRecord",
    "cudaEventRecordWithFlags", "cudaFuncGetAttributes", "cudaFuncSetAttribute", "cudaGetDevice",
    "cudaGetDeviceCount", "cudaGetLastError", "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
    "cudaPeekAtLastError", "cudaPointerGetAttributes", "cudaSetDevice", "cudaStreamGetCaptureInfo",
    "cudaStreamIsCapturing", "cudaStreamWaitEvent",
})

# The calling thread blocks until GPU work is done: synchronizes, synchronous copies and memsets.
SYNC = frozenset({
    "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpy", "cuMemcpy2D", "cuMemcpy3D",
    "cuMemcpyDtoD", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyPeer", "cuStreamSynchronize",
    "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D",
    "cudaMemcpyFromSymbol", "cudaMemcpyPeer", "cudaMemcpyToSymbol", "cudaMemset", "cudaMemset2D",
    "cudaMemset3D", "cudaStreamSynchronize", "cudaThreadSynchronize",
})

# Resources prepared, no work issued: modules and libraries, device and host memory, streams
# and events, graph capture, construction, instantiation, upload and teardown, contexts.
SETUP = frozenset({
    "cuArray3DCreate", "cuArrayCreate", "cuArrayDestroy", "cuCtxCreate", "cuCtxDestroy",
    "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxRetain",
    "cuEventCreate", "cuEventDestroy", "cuGraphAddChildGraphNode", "cuGraphAddEmptyNode",
    "cuGraphAddEventRecordNode", "cuGraphAddEventWaitNode", "cuGraphAddHostNode",
    "cuGraphAddKernelNode", "cuGraphAddMemcpyNode", "cuGraphAddMemsetNode", "cuGraphAddNode",
    "cuGraphClone", "cuGraphCreate", "cuGraphDestroy", "cuGraphExecDestroy", "cuGraphInstantiate",
    "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams", "cuGraphUpload", "cuInit",
    "cuLibraryLoadData", "cuLibraryLoadFromFile", "cuLibraryUnload", "cuLinkAddData",
    "cuLinkAddFile", "cuLinkComplete", "cuLinkCreate", "cuLinkDestroy", "cuMemAddressFree",
    "cuMemAddressReserve", "cuMemAlloc", "cuMemAllocAsync", "cuMemAllocFromPoolAsync",
    "cuMemAllocHost", "cuMemAllocManaged", "cuMemAllocPitch", "cuMemCreate",
    "cuMemExportToShareableHandle", "cuMemFree", "cuMemFreeAsync", "cuMemFreeHost",
    "cuMemHostAlloc", "cuMemHostRegister", "cuMemHostUnregister", "cuMemImportFromShareableHandle",
    "cuMemMap", "cuMemMapArrayAsync", "cuMemPoolCreate", "cuMemPoolDestroy", "cuMemPoolTrimTo",
    "cuMemRelease", "cuMemSetAccess", "cuMemUnmap", "cuModuleLoad", "cuModuleLoadData",
    "cuModuleLoadDataEx", "cuModuleLoadFatBinary", "cuModuleUnload", "cuStreamBeginCapture",
    "cuStreamBeginCaptureToGraph", "cuStreamCreate", "cuStreamCreateWithPriority",
    "cuStreamDestroy", "cuStreamEndCapture", "cudaDeviceReset", "cudaDeviceSetLimit",
    "cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventDestroy", "cudaFree", "cudaFreeArray",
    "cudaFreeAsync", "cudaFreeHost", "cudaFreeMipmappedArray", "cudaGraphAddChildGraphNode",
    "cudaGraphAddEmptyNode", "cudaGraphAddEventRecordNode", "cudaGraphAddEventWaitNode",
    "cudaGraphAddHostNode", "cudaGraphAddKernelNode", "cudaGraphAddMemcpyNode",
    "cudaGraphAddMemsetNode", "cudaGraphAddNode", "cudaGraphClone", "cudaGraphCreate",
    "cudaGraphDestroy", "cudaGraphExecDestroy", "cudaGraphInstantiate",
    "cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams", "cudaGraphUpload",
    "cudaHostAlloc", "cudaHostRegister", "cudaHostUnregister", "cudaInitDevice",
    "cudaLibraryLoadData", "cudaLibraryLoadFromFile", "cudaLibraryUnload", "cudaMalloc",
    "cudaMalloc3D", "cudaMalloc3DArray", "cudaMallocArray", "cudaMallocAsync",
    "cudaMallocFromPoolAsync", "cudaMallocHost", "cudaMallocManaged", "cudaMallocMipmappedArray",
    "cudaMallocPitch", "cudaMemPoolCreate", "cudaMemPoolDestroy", "cudaMemPoolTrimTo",
    "cudaStreamBeginCapture", "cudaStreamBeginCaptureToGraph", "cudaStreamCreate",
    "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority", "cudaStreamDestroy",
    "cudaStreamEndCapture",
})

# GPU work issued: kernel, cooperative, host-function and graph launches, asynchronous copies,
# memsets and prefetches.
LAUNCH = frozenset({
    "cuGraphLaunch", "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernelMultiDevice",
    "cuLaunchGrid", "cuLaunchGridAsync", "cuLaunchHostFunc", "cuLaunchKernel", "cuLaunchKernelEx",
    "cuMemPrefetchAsync", "cuMemcpy2DAsync", "cuMemcpy3DAsync", "cuMemcpy3DPeerAsync",
    "cuMemcpyAsync", "cuMemcpyAtoHAsync", "cuMemcpyDtoDAsync", "cuMemcpyDtoHAsync",
    "cuMemcpyHtoAAsync", "cuMemcpyHtoDAsync", "cuMemcpyPeerAsync", "cuMemsetD16Async",
    "cuMemsetD2D16Async", "cuMemsetD2D32Async", "cuMemsetD2D8Async", "cuMemsetD32Async",
    "cuMemsetD8Async", "cudaGraphLaunch", "cudaLaunch", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cudaLaunchHostFunc", "cudaLaunchKernel",
    "cudaLaunchKernelExC", "cudaMemPrefetchAsync", "cudaMemcpy2DAsync",
    "cudaMemcpy2DFromArrayAsync", "cudaMemcpy2DToArrayAsync", "cudaMemcpy3DAsync",
    "cudaMemcpy3DPeerAsync", "cudaMemcpyAsync", "cudaMemcpyFromSymbolAsync", "cudaMemcpyPeerAsync",
    "cudaMemcpyToSymbolAsync", "cudaMemset2DAsync", "cudaMemset3DAsync", "cudaMemsetAsync",
})

CATEGORIES = ("launch", "host", "stall", "setup", "sync", "dependency", "memop", "pipeline", "unknown")


def _quiet(name: str) -> bool:
    return any(name == q or name.startswith(q + "_v") for q in QUIET)


def _base(name: str) -> str:
    head, sep, tail = name.rpartition("_v")
    return head if sep and tail.isdigit() else name


class Trace:
    """An export's rows, read plainly: activities in the order gapscope reads them (kernels,
    graph executions, memcpys, memsets, each in rowid order), calls, stream waits, ranges."""

    def __init__(self, path: str) -> None:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        strings = dict(conn.execute("SELECT id, value FROM StringIds"))
        self.calls = []  # (start, end, tid, name) of the calls gapscope reads
        self.call_of = {}  # (pid, corr) -> index in self.calls
        for s, e, tid, corr, name_id, cls in conn.execute(
                "SELECT start, end, globalTid, correlationId, nameId, eventClass FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
            name = strings.get(name_id, "")
            if cls == 67 or _quiet(name):
                continue
            self.call_of.setdefault((tid >> 24, corr), len(self.calls))
            self.calls.append((s, e, tid, _base(name)))
        self.acts = []  # dict per activity
        for table, kind in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"), ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "graph"),
                            ("CUPTI_ACTIVITY_KIND_MEMCPY", "memop"), ("CUPTI_ACTIVITY_KIND_MEMSET", "memop")):
            if table not in tables:
                continue
            for s, e, dev, stream, corr, gpid in conn.execute(
                    f"SELECT start, end, deviceId, streamId, correlationId, globalPid FROM {table} ORDER BY rowid"):
                call = self.call_of.get((gpid >> 24, corr)) if corr and corr > 0 else None
                self.acts.append({"i": len(self.acts), "start": s, "end": max(e, s), "device": dev, "stream": stream,
                                  "pid": gpid >> 24, "kind": kind, "call": call})
        self.waits = []  # (start, pid, device, stream) of stream-wait records
        if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables:
            self.waits = conn.execute("SELECT start, globalPid >> 24, deviceId, streamId FROM "
                                      "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE syncType = 2").fetchall()
        # (OS pid, device, stream) -> the stream's flag (1 blocking, 2 non-blocking, 3 the null stream)
        self.kinds = {}
        if {"TARGET_INFO_CUDA_STREAM", "TARGET_INFO_CUDA_CONTEXT_INFO"} <= tables:
            for pid, dev, stream, flag, null in conn.execute(
                    "SELECT s.processId, c.deviceId, s.streamId, s.flag, c.nullStreamId FROM TARGET_INFO_CUDA_STREAM s "
                    "JOIN TARGET_INFO_CUDA_CONTEXT_INFO c ON c.processId = s.processId AND c.contextId = s.contextId "
                    "AND c.hwId = s.hwId AND c.vmId = s.vmId"):
                self.kinds.setdefault((pid, dev, stream), 3 if stream == null else flag)
        conn.close()
        times = [t for a in self.acts for t in (a["start"], a["end"])] + [t for c in self.calls for t in c[:2]]
        self.lo = min(times)


def _long_stretches(calls: list[tuple], lo: int, threshold: int) -> list[tuple[int, int | None]]:
    """The stretches longer than ``threshold`` in which a process made no call on any thread
    (from ``lo`` to its first call, between its calls, after its last: never ending, None)."""
    out, cur = [], lo
    first = True
    for s, e in sorted((c[0], c[1]) for c in calls):
        if s > cur and (s - cur > threshold):
            out.append((cur, s))
        cur = e if first else max(cur, e)
        first = False
    out.append((cur, None))
    return out


def _segments(calls: list[tuple], stalls: list[tuple[int, int | None]], lo: int,
              threshold: int) -> tuple[list[int], list[str]]:
    """(starts, categories) of one thread's segments: its calls sorted by start, the stretches
    between them (host), a lead stretch from ``lo``, and its process's long no-call stretches
    (stall) laid over them; the last segment never ends."""
    calls = sorted(calls, key=lambda c: c[0])
    items = []  # (time, rank, category): at one time a stretch, then a stall, a resume, a call
    if calls[0][0] > lo:
        items.append((lo, 0, "host"))
    block_end = None  # the latest end of the calls since the last stretch
    for i, (s, e, name) in enumerate(calls):
        block_end = e if block_end is None else max(block_end, e)
        if name in SYNC:
            cat = "sync"
        elif name in SETUP:
            cat = "setup"
        elif name in ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"):  # however long: never a stall
            cat = "launch"
        elif e - s > threshold:
            cat = "stall"
        elif name in LAUNCH:
            cat = "launch"
        else:
            cat = "host"
        items.append((s, 3, cat))
        nxt = calls[i + 1][0] if i + 1 < len(calls) else None
        if nxt is not None and nxt < block_end:
            continue  # the next call starts inside this block of calls: it takes over there
        if nxt is None or nxt > block_end:
            items.append((block_end, 0, "host"))
        block_end = None
    for s, e in stalls:
        items.append((s, 1, "stall"))
        if e is not None:
            items.append((e, 2, "host"))
    items.sort(key=lambda x: (x[0], x[1]))
    return [x[0] for x in items], [x[2] for x in items]


class Attribution:
    """Gap categories of any set of busy intervals of one trace, by the documented rules."""

    def __init__(self, trace: Trace, threshold: int = 1_000_000) -> None:
        self.t = trace
        self.threshold = threshold
        per_thread, per_proc = defaultdict(list), defaultdict(list)
        for s, e, tid, name in trace.calls:
            per_thread[tid].append((s, e, name))
            per_proc[tid >> 24].append((s, e))
        stalls = {pid: _long_stretches(c, trace.lo, threshold) for pid, c in per_proc.items()}
        self.segs = {tid: _segments(c, stalls[tid >> 24], trace.lo, threshold) for tid, c in per_thread.items()}
        self.memops = defaultdict(list)  # device -> merged memop blocks
        for a in trace.acts:
            if a["kind"] == "memop":
                self.memops[a["device"]].append((a["start"], a["end"]))
        for dev, iv in self.memops.items():
            merged = []
            for s, e in sorted(iv):
                if merged and s <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], e)
                else:
                    merged.append([s, e])
            self.memops[dev] = merged
        # previous operation on each activity's stream, by GPU start (ties in reading order)
        self.prev = {}
        by_stream = defaultdict(list)
        for a in trace.acts:
            by_stream[(a["pid"], a["device"], a["stream"])].append(a)
        for acts in by_stream.values():
            acts.sort(key=lambda a: (a["start"], a["i"]))
            for p, a in zip([None] + acts[:-1], acts):
                self.prev[a["i"]] = p
        pairs = defaultdict(set)
        for key in by_stream:
            pairs[(key[0], key[2])].add(key)
        # The legacy default stream's implicit synchronization: per (OS pid, device, flag), the
        # sorted (end, is a memop) of the activities of the null (3) and blocking (1) streams.
        self.sync_ends = defaultdict(list)
        for a in trace.acts:
            flag = trace.kinds.get((a["pid"] & 0xFFFFFF, a["device"], a["stream"]))
            if flag in (1, 3):
                self.sync_ends[(a["pid"] & 0xFFFFFF, a["device"], flag)].append((a["end"], a["kind"] == "memop"))
        for ends in self.sync_ends.values():
            ends.sort()
        self.waits = defaultdict(list)
        for s, pid, dev, stream in trace.waits:
            keys = pairs.get((pid, stream), set())
            key = next(iter(keys)) if len(keys) == 1 else (pid, dev, stream)
            self.waits[key].append(s)

    def _walk(self, tid: int, a: int, b: int) -> dict[str, int]:
        starts, cats = self.segs[tid]
        out = defaultdict(int)
        i = bisect.bisect_right(starts, a) - 1
        t = a
        while t < b:
            end = starts[i + 1] if i + 1 < len(starts) else b
            step = min(end, b) - t
            out[cats[i]] += step
            t += step
            i += 1
        return out

    def _implicit(self, k: dict, lo: int, g1: int) -> list[bool]:
        """Whether each activity of a stream k's stream implicitly synchronizes with (the null
        stream and the blocking streams of its process and device, either way) that ended in
        [lo, g1] is a memop."""
        pid = k["pid"] & 0xFFFFFF
        other = {3: 1, 1: 3}.get(self.t.kinds.get((pid, k["device"], k["stream"])))
        ends = self.sync_ends.get((pid, k["device"], other), [])
        i = bisect.bisect_left(ends, (lo, False))
        j = bisect.bisect_right(ends, (g1, True))
        return [m for _, m in ends[i:j]]

    def classify(self, g0: int, length: int, k: dict) -> dict[str, int]:
        """Time per category of the gap [g0, g0 + length) ended by activity k."""
        g1 = g0 + length
        covered = sum(max(0, min(e, g1) - max(s, g0)) for s, e in self.memops.get(k["device"], []))
        call = self.t.calls[k["call"]] if k["call"] is not None else None
        implicit = self._implicit(k, max(g0, call[1]), g1) if call is not None else []
        if 2 * covered >= length and covered > 0:
            queued = call is not None and (call[1] <= g0 or g1 - call[1] > call[1] - g0)
            if not (queued and any(implicit)):  # unless a copy K waited for ended in it
                return {"memop": length}
        if k["call"] is None:
            return {"unknown": length}
        call_start, call_end, tid, _ = self.t.calls[k["call"]]
        prev = self.prev[k["i"]]
        t_prev = self.t.lo
        if prev is not None and prev["call"] is not None:
            t_prev = self.t.calls[prev["call"]][0]
        waited = any(t_prev < w <= call_start for w in self.waits.get((k["pid"], k["device"], k["stream"]), []))
        if call_end > g0 and (waited or implicit or g1 - call_end > self.threshold) and g1 - call_end > call_end - g0:
            return {"dependency": length}  # queued (a stream wait or the null stream's, or longer than a launch)
        if call_end > g0:
            upto = min(g1, call_end)
            out = self._walk(tid, g0, upto)
            out["launch"] += g1 - upto
            starts, cats = self.segs[tid]
            if cats[bisect.bisect_right(starts, g0) - 1] == "sync":
                kept = {c: out.get(c, 0) for c in ("stall", "setup")}
                out = {**kept, "sync": length - sum(kept.values())}
            return dict(out)
        prev = self.prev[k["i"]]
        t_prev = self.t.lo
        if prev is not None and prev["call"] is not None:
            t_prev = self.t.calls[prev["call"]][0]
        waits = self.waits.get((k["pid"], k["device"], k["stream"]), [])
        if any(t_prev < w <= call_start for w in waits) or implicit:
            return {"dependency": length}
        if prev is not None and prev["kind"] == "memop" and prev["end"] > g0:
            return {"memop": length}  # its own stream's copy or memset
        return {"pipeline": length}

    def gaps(self, acts: list[dict]) -> list[tuple[int, int, dict, dict]]:
        """(start, length, the activity before, the one after) of every gap of these busy
        activities, per device."""
        out = []
        per_dev = defaultdict(list)
        for a in acts:
            per_dev[a["device"]].append(a)
        for dev in sorted(per_dev):
            iv = sorted(per_dev[dev], key=lambda a: (a["start"], a["i"]))
            cur, holder = iv[0]["end"], iv[0]
            for a in iv[1:]:
                if a["start"] > cur:
                    out.append((cur, a["start"] - cur, holder, a))
                if a["end"] >= cur:
                    cur, holder = a["end"], a
        return out

    def categories(self, acts: list[dict]) -> dict[str, int]:
        """Gap time per category of a timeline made of these activities (busy ones only)."""
        total = dict.fromkeys(CATEGORIES, 0)
        for g0, length, _, k in self.gaps([a for a in acts if a["kind"] != "memop"]):
            for c, v in self.classify(g0, length, k).items():
                total[c] += v
        return total

    def inside_replays(self, acts: list[dict]) -> int:
        """Gap time whose two sides were issued by one graph launch call."""
        graph_calls = {i for i, c in enumerate(self.t.calls) if c[3] in ("cudaGraphLaunch", "cuGraphLaunch")}
        return sum(length for _, length, before, after in self.gaps([a for a in acts if a["kind"] != "memop"])
                   if before["call"] is not None and before["call"] == after["call"] and before["call"] in graph_calls)


def activity_names(path: str) -> list[str]:
    """Every activity's name in Trace's order (kernels by rowid: the StringIds text of shortName,
    else demangledName; graph executions as ``graph <graphId>``; ``memcpy``, ``memset``)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    strings = dict(conn.execute("SELECT id, value FROM StringIds"))
    out = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        cols = {r[1] for r in conn.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        col = "shortName" if "shortName" in cols else "demangledName"
        out += [strings.get(i, "?") for (i,) in conn.execute(f"SELECT {col} FROM CUPTI_ACTIVITY_KIND_KERNEL "
                                                              "ORDER BY rowid")]
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables:
        out += [f"graph {g}" for (g,) in conn.execute("SELECT graphId FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE "
                                                       "ORDER BY rowid")]
    for table, label in (("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        if table in tables:
            out += [label] * conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    conn.close()
    return out


def innermost(candidates: list[int], ranges: list[dict]) -> int | None:
    """Of some ranges (indices into ``ranges``, reference.ranges rows) of one thread, the innermost:
    the latest to start, the shortest of those; None when there are none."""
    if not candidates:
        return None
    return max(candidates, key=lambda i: (ranges[i]["start"], -ranges[i]["end"]))


def range_acts(trace: Trace, rng: dict, process: bool = False) -> list[dict]:
    """The activities launched inside a range (``reference.ranges`` row) from its thread, or
    from any thread of its process."""
    def owner(tid: int) -> int:
        return tid >> 24 if process else tid

    return [a for a in trace.acts if a["call"] is not None
            and owner(trace.calls[a["call"]][2]) == owner(rng["tid"])
            and rng["start"] <= trace.calls[a["call"]][0] <= rng["end"]]


def longest_gaps_end_in(path, name: str, n: int) -> list[tuple[int, str]]:
    """(length, name of the kernel ending it) of the ``n`` longest gaps between the kernels that
    the range called ``name`` launched, longest first: a plain walk over Trace's kernels
    in start order."""
    trace, names = Trace(str(path)), activity_names(str(path))
    rng = next(r for r in ranges(str(path)) if r["name"] == name)
    kernels = sorted((a for a in range_acts(trace, rng) if a["kind"] == "kernel"), key=lambda a: a["start"])
    gaps, busy_until = [], None
    for a in kernels:
        if busy_until is not None and a["start"] > busy_until:
            gaps.append((a["start"] - busy_until, names[a["i"]]))
        busy_until = a["end"] if busy_until is None else max(busy_until, a["end"])
    return sorted(gaps, reverse=True)[:n]


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
        for name in sorted(QUIET):
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


# ----------------------------------------------------------------------- communication, by hand
#
# docs/metrics.md ("Communication and compute", "Collectives across ranks") written again with
# plain loops over rows read with sqlite3. Which kernels are communication is a definition (the
# names of gapscope.analysis.communication.COMM_LIBRARIES); a test passes the predicate.


def union_length(intervals: list[tuple[int, int]]) -> int:
    """The length of the union of [start, end) intervals."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def gap_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The idle stretches [start, end) between the intervals' union blocks."""
    out, cur = [], None
    for s, e in sorted(intervals):
        if cur is not None and s > cur:
            out.append((cur, s))
        cur = e if cur is None else max(cur, e)
    return out


def named_kernels(path: str) -> list[dict]:
    """Every kernel with its device, stream, times and name (shortName, else demangledName)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    strings = dict(conn.execute("SELECT id, value FROM StringIds"))
    cols = {r[1] for r in conn.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
    name = "coalesce(shortName, demangledName)" if "demangledName" in cols else "shortName"
    out = [{"device": d, "stream": st, "pid": (gp >> 24) & 0xFFFFFF, "start": s, "end": e, "name": strings.get(n, "")}
           for d, st, gp, s, e, n in conn.execute(
               f"SELECT deviceId, streamId, globalPid, start, end, {name} FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    conn.close()
    return out


def comm_split(ks: list[dict], is_comm) -> dict[int, dict[str, int]]:
    """Per device: communication kernels, comm, compute and exposed communication time."""
    out = {}
    for dev in sorted({k["device"] for k in ks}):
        mine = [k for k in ks if k["device"] == dev]
        comm = [(k["start"], k["end"]) for k in mine if is_comm(k["name"])]
        compute = [(k["start"], k["end"]) for k in mine if not is_comm(k["name"])]
        every = union_length(comm + compute)
        out[dev] = {"comm_kernels": len(comm), "comm_ns": union_length(comm), "compute_ns": union_length(compute),
                    "exposed_comm_ns": every - union_length(compute)}
    return out


def paired_collectives(ks: list[dict], is_comm, shift: dict[int, int] | None = None) -> dict:
    """The i-th communication kernel of every device (one communication stream per device),
    paired by start order, on one clock (``shift``: ns added to a device's times). Returns per
    device the totals of docs/metrics.md ("Collectives across ranks") and the list of instances."""
    shift = shift or {}
    devices = sorted({k["device"] for k in ks})
    comm = {d: sorted((k["start"] + shift.get(d, 0), k["end"] + shift.get(d, 0))
                      for k in ks if k["device"] == d and is_comm(k["name"])) for d in devices}
    gaps = {d: gap_intervals([(k["start"] + shift.get(d, 0), k["end"] + shift.get(d, 0))
                              for k in ks if k["device"] == d]) for d in devices}
    first = {d: min(k["start"] + shift.get(d, 0) for k in ks if k["device"] == d) for d in devices}

    def gap_in(d: int, lo: int, hi: int) -> int:
        return sum(max(0, min(e, hi) - max(s, lo)) for s, e in gaps[d])

    totals = {d: {"collectives": 0, "comm_ns": 0, "wait_ns": 0, "wait_from_gaps_ns": 0, "waited_on": defaultdict(int),
                  "late_count": 0, "caused_wait_ns": 0, "late_gap_ns": 0} for d in devices}
    instances = []
    for i in range(min(len(v) for v in comm.values())):
        arrive = {d: comm[d][i][0] for d in devices}
        last = max(arrive.values())
        late = min(d for d in devices if arrive[d] == last)
        before = {d: gap_in(d, comm[d][i - 1][1] if i else first[d], arrive[d]) for d in devices}
        waits = {d: min(last, comm[d][i][1]) - arrive[d] for d in devices}
        for d in devices:
            t = totals[d]
            t["collectives"] += 1
            t["comm_ns"] += comm[d][i][1] - comm[d][i][0]
            t["wait_ns"] += waits[d]
            t["wait_from_gaps_ns"] += min(waits[d], max(0, before[late] - before[d]))
            t["waited_on"][late] += waits[d]
        if last > min(arrive.values()):
            totals[late]["late_count"] += 1
            totals[late]["caused_wait_ns"] += sum(waits.values())
            totals[late]["late_gap_ns"] += before[late]
        instances.append({"late": late, "lateness": last - min(arrive.values()), "wait": sum(waits.values()),
                          "late_gap": before[late]})
    return {"totals": totals, "instances": instances}


# ------------------------------------------------------------------ steady state and prediction
# docs/metrics.md, "Steady state" and "Predicted CUDA Graph speedup", written again plainly.

def one_off(attr: Attribution, acts: list[dict], threshold: int = 1_000_000) -> tuple[dict[str, int], int]:
    """(one-off gap time per category, how many long stall gaps were left out) of a timeline:
    every gap whose largest category (the first in CATEGORIES on a tie) is setup; and of the gaps
    whose largest is stall and that last ``threshold`` or longer, all but those within a factor
    of 2 of their median length when there are at least 3 such."""
    out = dict.fromkeys(CATEGORIES, 0)
    stalls = []
    for g0, length, _, k in attr.gaps([a for a in acts if a["kind"] != "memop"]):
        split = attr.classify(g0, length, k)
        largest = max(CATEGORIES, key=lambda c: (split.get(c, 0), -CATEGORIES.index(c)))
        if largest == "setup":
            for c, v in split.items():
                out[c] += v
        elif largest == "stall" and length >= threshold:
            stalls.append((length, split))
    lengths = sorted(n for n, _ in stalls)
    mid = len(lengths) // 2
    median = (lengths[mid] if len(lengths) % 2 else (lengths[mid - 1] + lengths[mid]) / 2) if lengths else 0
    near = [median / 2 <= n <= 2 * median for n, _ in stalls]
    repeating = sum(near) >= 3
    left_out = 0
    for (_, split), is_near in zip(stalls, near):
        if not (is_near and repeating):
            left_out += 1
            for c, v in split.items():
                out[c] += v
    return out, left_out


def predicted(row: dict, one_off_cats: dict[str, int], launch_call_ns: float, turnaround_ns: float,
              instances: int = 1, overhead_ns: float | None = None) -> dict[str, float]:
    """The model of docs/metrics.md for one row, with the H200 calibration spelled out: under nsys
    the tracer adds per eager launch the traced launch call ``launch_call_ns`` less an untraced
    one's 2.0 us (``overhead_ns``, when given, is the tracer's cost instead: a torch.profiler
    trace's, which its test computes); a graph launch costs 5 us + 7 ns per node;
    ``turnaround_ns`` is the replay turnaround per kernel boundary (from the trace's replays or
    the GPU's calibration, as the caller takes it); a replay spends the eager memop gap time behind copies, at least the copies' own
    time; the ceiling keeps of it only the copies' own time, at most that gap time, and the
    kernels' busy time less 100 ns an eager kernel."""
    cats = {c: row["gap_by_category_ns"][c] - one_off_cats[c] for c in CATEGORIES}
    span = row["gpu_span_ns"] - sum(one_off_cats.values())
    busy, kernels, memops = row["busy_ns"], row["kernels"], row["memops"]
    launches = max(kernels - row["graph_kernels"], 0) + memops
    over = launches * max(launch_call_ns - 2000, 0) if overhead_ns is None else overhead_ns
    floor = busy + cats["pipeline"] + cats["dependency"] + cats["memop"]
    e = max(span - min(cats["launch"] + cats["host"], over), floor)

    nodes = (kernels + memops) / instances
    host = instances * (5000 + 7 * nodes) + cats["stall"] + cats["setup"]
    device = busy + max(row["memop_ns"], cats["memop"]) + max(kernels - instances, 0) * turnaround_ns
    replay = device + host + cats["sync"] if cats["sync"] > 0 else max(device, host)
    # an eager kernel may run up to 150 ns shorter inside a replay, the kernels at least half their time
    floor = max(busy - 150 * max(kernels - row["graph_kernels"], 0), busy / 2)
    ceiling_span = max(floor + min(row["memop_ns"], cats["memop"]), cats["stall"])
    return {"steady_span_ns": span, "eager_untraced_ns": e, "graph_predicted_ns": replay,
            "graph_predicted_speedup": e / replay, "graph_ceiling_speedup": span / ceiling_span}


def first_activity(path) -> int:
    """The start of a SQLite export's first GPU activity (kernel, copy, memset, graph execution),
    read with sqlite3."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    starts = [conn.execute(f"SELECT min(start) FROM {t}").fetchone()[0] for t in (
        "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_GRAPH_TRACE") if t in tables]
    conn.close()
    return min(s for s in starts if s is not None)
