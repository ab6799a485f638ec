"""Reading a PyTorch profiler trace (Kineto's Chrome trace JSON, ``export_chrome_trace`` or
TensorBoard's ``*.pt.trace.json[.gz]``) into typed frames (gapscope.trace.frames).

The file is streamed (ijson, gzip or plain): events are parsed one at a time and only those the
analysis reads are kept, so a trace of several GB needs memory for its GPU and CUDA events, not
for its JSON. Times are microseconds with three decimals (Kineto writes integer nanoseconds as
``{ns / 1000}.{ns % 1000:03}``, relative to a base time rounded down to three months), parsed
exactly as decimals into integer nanoseconds.

What each event becomes (docs/formats.md says what differs from an nsys trace):

=================================  =============================================================
event (``ph`` X, by ``cat``)       frame
=================================  =============================================================
``kernel``                         activities, ActivityKind.KERNEL: ``args.device``,
                                   ``args.stream``, ``args.correlation``
``gpu_memcpy``, ``gpu_memset``     activities, MEMCPY / MEMSET
``cuda_runtime``, ``cuda_driver``  api: ``args.correlation``, thread ``(pid << 24) | tid``
``user_annotation``                nvtx, as push/pop ranges of their CPU thread, no domain
                                   (``record_function`` ranges and ``ProfilerStep#N``)
``cuda_sync`` "Stream Wait Event"  syncs (recorded only with Kineto's cuda sync events on)
=================================  =============================================================

GPU events carry the device as their ``pid``, not the process: every activity belongs to the
process that made the trace's CUDA calls. Kernel names are Kineto's demangled signatures; the
name a report shows is the function's own name, as nsys's ``shortName`` is.
"""

from __future__ import annotations

import decimal
import gzip
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd

from gapscope.errors import GapscopeError
from gapscope.trace.cuda_api import QUIET_CALLS, base_name
from gapscope.trace.frames import (
    ACTIVITY_COLUMNS, NVTX_PUSH_POP, SYNC_COLUMNS, ActivityKind, ClosedTraceError, TraceFrames, TraceMeta,
    build_frames,
)

FORMAT = "kineto"
GZIP_MAGIC = b"\x1f\x8b"
#: Kineto's Chrome trace schema versions this reader was checked against.
KNOWN_SCHEMA_VERSIONS = (1,)

#: GPU activity categories and what they are.
GPU_CATEGORIES = {"kernel": ActivityKind.KERNEL, "gpu_memcpy": ActivityKind.MEMCPY,
                  "gpu_memset": ActivityKind.MEMSET}
#: Host-side CUDA call categories.
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")
#: Range categories: record_function and the profiler's own ProfilerStep#N.
RANGE_CATEGORY = "user_annotation"
#: Kernels the CUDA driver runs for the memcpy nodes of a CUDA graph: Kineto records them as
#: ``kernel`` events, nsys (from the same CUPTI records) as memcpys; they are read as memcpys.
GRAPH_COPY_KERNEL = re.compile(r"memcpy\d+_post")
#: Synchronization records, and the one kind the analysis reads (a cudaStreamWaitEvent's).
SYNC_CATEGORY = "cuda_sync"
STREAM_WAIT = "Stream Wait Event"

_THREAD_BITS = 24
_NS = 1000  # nanoseconds per microsecond

_READ_ERRORS = (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, decimal.InvalidOperation)


def open_binary(path: Path) -> IO[bytes]:
    """The trace's bytes: decompressed on the fly when the file is gzipped."""
    fh = open(path, "rb")
    if fh.read(2) == GZIP_MAGIC:
        fh.close()
        return gzip.open(path, "rb")
    fh.seek(0)
    return fh


def short_kernel_name(name: str) -> str:
    """A kernel's own name from its demangled signature, as nsys's ``shortName``:
    ``void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>(int, float)``
    gives ``vectorized_layer_norm_kernel``; a plain name (``nvjet_sm90_...``) is kept."""
    s = name.strip()
    pairs = {")": "(", ">": "<"}
    while s and s[-1] in pairs:  # trailing parameter list, then template arguments
        close, opening, depth = s[-1], pairs[s[-1]], 0
        for i in range(len(s) - 1, -1, -1):
            if s[i] == close:
                depth += 1
            elif s[i] == opening:
                depth -= 1
                if depth == 0:
                    break
        if depth != 0 or i == 0:
            return name
        s = s[:i].rstrip()
    depth, start = 0, 0
    for i, c in enumerate(s):  # after the last "::" or space outside brackets
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        elif depth == 0 and (c == " " or (c == ":" and s[i - 1 : i + 1] == "::")):
            start = i + 1
    return s[start:] or name


@dataclass
class _Events:
    """The events the analysis reads, as columns (times in integer ns), and the string table
    their name ids point into."""

    gpu: dict[str, np.ndarray]  # kind, start, end, device, stream, corr, name_id
    calls: dict[str, np.ndarray]  # start, end, pid, tid, corr, name_id
    ranges: dict[str, Any]  # start, end, pid, tid, name (object)
    waits: dict[str, np.ndarray]  # start, device, stream
    strings: list[str]
    syncs_seen: int
    copy_kernels: int  # graph memcpy-node kernels read as memcpys
    skipped: Counter
    short: np.ndarray | None = None  # per string id, the id of its short kernel name


def _columns(rows: list[tuple], names: tuple[str, ...], text: tuple[str, ...] = ()) -> dict[str, Any]:
    cols = list(zip(*rows)) if rows else [()] * len(names)
    return {n: np.array(c, dtype=object) if n in text else np.array(c, dtype=np.int64)
            for n, c in zip(names, cols)}


def _ns(value: Any) -> int:
    """Microseconds (a JSON number, parsed as an exact decimal) as integer nanoseconds."""
    if isinstance(value, bool) or not isinstance(value, (int, decimal.Decimal, float)):
        raise ValueError("not a number")
    return round(value * _NS)


def _parse(events: Iterator[Any]) -> _Events:
    """One pass over the trace's events, keeping only what the frames need."""
    ids: dict[str, int] = {}

    def sid(text: Any) -> int:
        text = str(text)
        found = ids.get(text)
        if found is None:
            found = ids[text] = len(ids)
        return found

    gpu: list[tuple] = []
    calls: list[tuple] = []
    ranges: list[tuple] = []
    waits: list[tuple] = []
    syncs_seen = copy_kernels = 0
    skipped: Counter = Counter()
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        try:
            if cat in GPU_CATEGORIES:
                args = ev["args"]
                start = _ns(ev["ts"])
                kind = GPU_CATEGORIES[cat]
                if kind is ActivityKind.KERNEL and GRAPH_COPY_KERNEL.fullmatch(str(ev.get("name", ""))):
                    kind = ActivityKind.MEMCPY
                    copy_kernels += 1
                gpu.append((int(kind), start, start + _ns(ev.get("dur", 0)), int(args["device"]),
                            int(args["stream"]), int(args.get("correlation", -1)), sid(ev.get("name", "?"))))
            elif cat in CALL_CATEGORIES:
                start = _ns(ev["ts"])
                calls.append((start, start + _ns(ev.get("dur", 0)), int(ev["pid"]), int(ev["tid"]),
                              int(ev.get("args", {}).get("correlation", -1)), sid(ev.get("name", "?"))))
            elif cat == RANGE_CATEGORY:
                start = _ns(ev["ts"])
                ranges.append((start, start + _ns(ev.get("dur", 0)), int(ev["pid"]), int(ev["tid"]),
                               str(ev.get("name", "[unnamed]"))))
            elif cat == SYNC_CATEGORY:
                syncs_seen += 1
                if ev.get("name") == STREAM_WAIT:
                    args = ev["args"]
                    waits.append((_ns(ev["ts"]), int(args["device"]), int(args["stream"])))
        except (KeyError, TypeError, ValueError, AttributeError, decimal.InvalidOperation):
            skipped[cat] += 1
    return _Events(
        gpu=_columns(gpu, ("kind", "start", "end", "device", "stream", "corr", "name_id")),
        calls=_columns(calls, ("start", "end", "pid", "tid", "corr", "name_id")),
        ranges=_columns(ranges, ("start", "end", "pid", "tid", "name"), text=("name",)),
        waits=_columns(waits, ("start", "device", "stream")),
        strings=list(ids), syncs_seen=syncs_seen, copy_kernels=copy_kernels, skipped=skipped,
    )


def _read_head(fh: IO[bytes], path: Path) -> dict[str, Any]:
    """The top-level fields written before ``traceEvents`` (Kineto writes schemaVersion and
    deviceProperties there): parsed token by token, stopping where the events begin."""
    import ijson

    head: dict[str, Any] = {"devices": {}}
    device: dict[str, Any] = {}
    try:
        for prefix, event, value in ijson.parse(fh, use_float=False):
            if prefix == "" and event not in ("start_map", "map_key", "end_map"):
                raise GapscopeError(f"{path}: a JSON {event.replace('start_', '')}, not a PyTorch "
                                    "profiler trace (an object with traceEvents)")
            if prefix == "traceEvents" and event == "start_array":
                head["events"] = True
                break
            if prefix == "schemaVersion" and event == "number":
                head["schema"] = value
            elif prefix == "deviceProperties.item" and event == "start_map":
                device = {}
            elif prefix in ("deviceProperties.item.id", "deviceProperties.item.name"):
                device[prefix.rsplit(".", 1)[1]] = value
            elif prefix == "deviceProperties.item" and event == "end_map" and "id" in device:
                head["devices"][int(device["id"])] = str(device.get("name", "?"))
    except _READ_ERRORS + (ijson.JSONError,) as exc:
        raise _unreadable(path, exc) from None
    return head


def _unreadable(path: Path, exc: BaseException) -> GapscopeError:
    """One line for a trace that cannot be parsed, with the parser's own first line."""
    from gapscope.inputs import READS

    first = (str(exc).splitlines() or [type(exc).__name__])[0] or type(exc).__name__
    return GapscopeError(f"{path}: cannot read the PyTorch profiler trace ({first}): the file is "
                         f"truncated, or not a JSON (or gzipped JSON) trace (gapscope reads {READS})")


class Kineto:
    """An open PyTorch profiler trace: its meta data, its frames on demand (the events are parsed
    once, on the first load), and name lookups that answer until :meth:`close`."""

    format = FORMAT

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._events: _Events | None = None
        self._closed = False
        try:
            with open_binary(self.path) as fh:
                head = _read_head(fh, self.path)
        except OSError as exc:
            raise _unreadable(self.path, exc) from None
        if "events" not in head:
            from gapscope.inputs import READS

            raise GapscopeError(f"{self.path}: a JSON object without traceEvents: not a PyTorch profiler "
                                f"trace (gapscope reads {READS})")
        schema = head.get("schema")
        self.meta = TraceMeta(path=str(self.path), format=FORMAT, nsys_version=None,
                              export_schema=None if schema is None else str(schema),
                              tables=frozenset({"traceEvents"}), gpu_names=dict(head["devices"]))

    # -- the file ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed, self._events = True, None  # the parsed events go with the trace

    def _live(self) -> _Events:
        if self._closed:
            raise ClosedTraceError(f"{self.path}: the trace is closed; read it inside its `with` block")
        if self._events is None:
            import ijson

            try:
                with open_binary(self.path) as fh:
                    self._events = _parse(ijson.items(fh, "traceEvents.item", use_float=False))
            except _READ_ERRORS + (ijson.JSONError,) as exc:
                raise _unreadable(self.path, exc) from None
        return self._events

    # -- frames -----------------------------------------------------------------------------
    def load(self, *, syncs: bool = False, all_calls: bool = False) -> TraceFrames:
        """The frames an analysis needs (``syncs``: also the stream-wait records; ``all_calls``:
        every CUDA call, not only those that can launch or synchronize); every activity's name
        id either way."""
        ev = self._live()
        g, c, r = ev.gpu, ev.calls, ev.ranges
        if not (g["kind"] == ActivityKind.KERNEL).any():
            what = ("its GPU work has no kernel" if g["kind"].size else
                    "none of its events is a PyTorch profiler (Kineto) kernel, gpu_memcpy or gpu_memset")
            raise GapscopeError(f"{self.path}: a trace (traceEvents) without GPU kernels: {what}; profile "
                                "with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
        warnings = self._warnings(ev)
        pids, counts = np.unique(c["pid"], return_counts=True)
        host = int(pids[np.argmax(counts)]) if pids.size else 0
        if pids.size > 1:
            warnings.append(f"CUDA calls from {pids.size} processes in one PyTorch profiler trace: "
                            f"its GPU events do not say which process launched them, so they are "
                            f"matched to calls by correlation id alone (as process {host})")
        # GPU work, stacked like nsys's tables: kernels, then copies, then memsets.
        order = np.argsort(g["kind"], kind="stable")
        kind = g["kind"][order]
        row = np.arange(kind.size, dtype=np.int64) - np.searchsorted(kind, kind, side="left")
        activities = pd.DataFrame({
            "row": row, "start": g["start"][order], "end": g["end"][order], "device": g["device"][order],
            "stream": g["stream"][order], "proc": np.full(kind.size, host, dtype=np.int64),
            "corr": g["corr"][order], "kind": kind.astype(np.int8)})[[*ACTIVITY_COLUMNS, "kind"]]
        activities["name_id"] = self._short_ids(ev)[g["name_id"][order]]
        keep = np.ones(c["start"].size, dtype=bool)
        if not all_calls:
            quiet = [i for i, s in enumerate(ev.strings) if base_name(s) in QUIET_CALLS]
            keep = ~np.isin(c["name_id"], quiet)
        api = pd.DataFrame({"start": c["start"], "end": c["end"], "tid": _thread(c["pid"], c["tid"]),
                            "corr": c["corr"], "name_id": c["name_id"],
                            "proc": np.full(c["start"].size, host, dtype=np.int64) if pids.size > 1
                            else c["pid"]})[keep].reset_index(drop=True)
        nvtx = pd.DataFrame({"start": r["start"], "end": r["end"], "tid": _thread(r["pid"], r["tid"]),
                             "event_type": np.full(r["start"].size, NVTX_PUSH_POP, dtype=np.int64),
                             "domain_id": np.zeros(r["start"].size, dtype=np.int64), "name": r["name"]})
        w = ev.waits if syncs else {k: v[:0] for k, v in ev.waits.items()}
        sync_frame = pd.DataFrame({**w, "proc": np.full(w["start"].size, host, dtype=np.int64)})[list(SYNC_COLUMNS)]
        return build_frames(self.meta, activities=activities, api=api, nvtx=nvtx, syncs=sync_frame,
                            names=self, warnings=warnings)

    def _warnings(self, ev: _Events) -> list[str]:
        out = ["read from a PyTorch profiler trace: ranges are its user_annotation events "
               "(record_function, ProfilerStep#N) on their CPU threads, without NVTX domains; "
               "see docs/formats.md"]
        schema = self.meta.export_schema
        if schema is not None and schema not in {str(v) for v in KNOWN_SCHEMA_VERSIONS}:
            checked = ", ".join(map(str, KNOWN_SCHEMA_VERSIONS))
            out.append(f"PyTorch profiler trace schema {schema} is not one gapscope was checked on ({checked})")
        if ev.syncs_seen == 0:
            out.append("no cuda_sync events in this PyTorch profiler trace: waits on other streams "
                       "are not seen, so the gaps they cause count as pipeline, not dependency "
                       "(record them with experimental_config=_ExperimentalConfig("
                       "enable_cuda_sync_events=True))")
        if ev.copy_kernels:
            out.append(f"{ev.copy_kernels} kernel events named memcpyNN_post (the CUDA driver's kernels "
                       "for the memcpy nodes of CUDA graphs, which nsys records as memcpys) are "
                       "counted as memcpys")
        for cat, n in sorted(ev.skipped.items()):
            out.append(f"{n} {cat} events without the fields gapscope reads (ts, dur, args.device, "
                       "args.stream, pid, tid) were left out")
        if (ev.calls["pid"] >= 1 << _THREAD_BITS).any() or (ev.calls["tid"] >= 1 << _THREAD_BITS).any() \
                or (ev.ranges["tid"] >= 1 << _THREAD_BITS).any():
            out.append("process or thread ids of 2**24 and above are shown modulo 2**24")
        return out

    def _short_ids(self, ev: _Events) -> np.ndarray:
        """For every string id, the id of its short kernel name (added to the string table);
        computed once per distinct kernel name, on first use."""
        if ev.short is not None:
            return ev.short
        out = np.arange(len(ev.strings), dtype=np.int64)
        kernel_ids = np.unique(ev.gpu["name_id"][ev.gpu["kind"] == ActivityKind.KERNEL])
        index = {s: i for i, s in enumerate(ev.strings)}
        for i in kernel_ids.tolist():
            short = short_kernel_name(ev.strings[i])
            if short not in index:
                index[short] = len(ev.strings)
                ev.strings.append(short)
            out[i] = index[short]
        ev.short = np.concatenate([out, np.arange(out.size, len(ev.strings), dtype=np.int64)])
        return ev.short

    # -- names (gapscope.trace.frames.Names) --------------------------------------------------
    def lookup(self, ids: Iterable[int]) -> dict[int, str]:
        """Map each string id to its text ('[unknown]' where there is none)."""
        strings = self._live().strings
        return {int(i): strings[int(i)] if 0 <= int(i) < len(strings) else "[unknown]" for i in ids}

    def activity_name_ids(self, kind: ActivityKind, rows: np.ndarray) -> np.ndarray:
        """The short-name id of kernels by their row among the trace's kernels (-1 otherwise)."""
        ev = self._live()
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(rows.size, -1, dtype=np.int64)
        if kind is not ActivityKind.KERNEL:
            return out
        mine = np.flatnonzero(ev.gpu["kind"] == ActivityKind.KERNEL)  # file order = row order
        inside = (rows >= 0) & (rows < mine.size)
        out[inside] = self._short_ids(ev)[ev.gpu["name_id"][mine[rows[inside]]]]
        return out


def _thread(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """nsys's globalTid layout: the process above bit 24, the thread below."""
    mask = (1 << _THREAD_BITS) - 1
    return ((pid & mask) << _THREAD_BITS) | (tid & mask)
