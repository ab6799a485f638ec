"""Synthetic nsys-like SQLite exports for edge cases (named as synthetic: not real traces).

They carry the tables and columns gapscope reads, laid out as nsys 2025 exports them.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

PID = 4242
GLOBAL_PID = PID << 24


def gtid(tid: int, pid: int = PID) -> int:
    """nsys's globalTid packing: pid in bits 24-47, tid in bits 0-23."""
    return (pid << 24) | tid


@dataclass
class Synthetic:
    """Rows of a synthetic export; ``write`` makes the SQLite file."""

    kernels: list[tuple] = field(default_factory=list)  # start, end, device, stream, corr, name, pid
    runtime: list[tuple] = field(default_factory=list)  # start, end, tid, corr, name, pid
    nvtx: list[tuple] = field(default_factory=list)  # start, end, type, text, tid, domain, pid
    memcpy: list[tuple] = field(default_factory=list)  # start, end, device, stream, corr, pid
    memset: list[tuple] = field(default_factory=list)  # start, end, device, stream, corr, pid
    graphs: list[tuple] = field(default_factory=list)  # start, end, device, stream, corr, pid
    syncs: list[tuple] = field(default_factory=list)  # start, end, device, stream, corr, type, pid
    #: stream, flag (ENUM_CUPTI_STREAM_TYPE: 1 blocking, 2 non-blocking, 3 the null stream), device,
    #: pid: TARGET_INFO_CUDA_STREAM, with one TARGET_INFO_CUDA_CONTEXT_INFO row per (pid, device)
    #: (context id device + 1, its null stream the flag-3 stream, else 0)
    streams: list[tuple] = field(default_factory=list)
    schema: str = "3.20.0"
    strings: dict[str, int] = field(default_factory=dict)

    def sid(self, s: str) -> int:
        return self.strings.setdefault(s, len(self.strings) + 1)

    def kernel(self, start, end, corr, *, device=0, stream=7, name="k", pid=PID):
        self.kernels.append((start, end, device, stream, corr, name, pid))
        return self

    def call(self, start, end, corr, *, tid=1, name="cudaLaunchKernel_v7000", pid=PID):
        self.runtime.append((start, end, tid, corr, name, pid))
        return self

    def launch(self, call_start, k_start, k_end, corr, **kw):
        """A cudaLaunchKernel of 1 us at call_start and its kernel."""
        tid = kw.pop("tid", 1)
        pid = kw.get("pid", PID)
        self.call(call_start, call_start + 1000, corr, tid=tid, pid=pid)
        return self.kernel(k_start, k_end, corr, **kw)

    def range(self, start, end, text, *, tid=1, event_type=59, domain=0, pid=PID):
        self.nvtx.append((start, end, event_type, text, tid, domain, pid))
        return self

    def write(self, path: Path) -> Path:
        path.unlink(missing_ok=True)
        conn = sqlite3.connect(path)
        c = conn.cursor()
        c.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
        c.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
            ("EXPORT_PRODUCT_VERSION", "2025.3.1.90-synthetic"),
            ("EXPORT_SCHEMA_VERSION", self.schema),
        ])
        c.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        act_cols = ("start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, streamId INTEGER, "
                    "correlationId INTEGER, globalPid INTEGER")
        if self.kernels:
            c.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({act_cols}, demangledName INTEGER, "
                      "shortName INTEGER, graphNodeId INTEGER)")
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,1,?,?,?,?,?,NULL)", [
                (s, e, d, st, corr, pid << 24, self.sid(n), self.sid(n)) for s, e, d, st, corr, n, pid in self.kernels
            ])
        if self.memcpy:
            c.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY ({act_cols}, bytes INTEGER, copyKind INTEGER)")
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,1,?,?,?,64,1)", [
                (s, e, d, st, corr, pid << 24) for s, e, d, st, corr, pid in self.memcpy
            ])
        if self.memset:
            c.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET ({act_cols}, value INTEGER, bytes INTEGER)")
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,1,?,?,?,0,64)", [
                (s, e, d, st, corr, pid << 24) for s, e, d, st, corr, pid in self.memset
            ])
        if self.streams:
            c.execute("CREATE TABLE TARGET_INFO_CUDA_STREAM (streamId INTEGER NOT NULL, hwId INTEGER NOT NULL, "
                      "vmId INTEGER NOT NULL, processId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
                      "priority INTEGER NOT NULL, flag INTEGER NOT NULL)")
            c.executemany("INSERT INTO TARGET_INFO_CUDA_STREAM VALUES (?,0,0,?,?,0,?)", [
                (st, pid, d + 1, flag) for st, flag, d, pid in self.streams])
            c.execute("CREATE TABLE TARGET_INFO_CUDA_CONTEXT_INFO (nullStreamId INTEGER NOT NULL, hwId INTEGER NOT "
                      "NULL, vmId INTEGER NOT NULL, processId INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
                      "contextId INTEGER NOT NULL, parentContextId INTEGER, isGreenContext INTEGER)")
            contexts = sorted({(pid, d) for _, _, d, pid in self.streams})
            c.executemany("INSERT INTO TARGET_INFO_CUDA_CONTEXT_INFO VALUES (?,0,0,?,?,?,0,0)", [
                (next((st for st, flag, dd, pp in self.streams if (pp, dd, flag) == (pid, d, 3)), 0), pid, d, d + 1)
                for pid, d in contexts])
        if self.graphs:
            c.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE ({act_cols}, graphId INTEGER, graphExecId INTEGER)")
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?,?,?,1,?,?,?,1,1)", [
                (s, e, d, st, corr, pid << 24) for s, e, d, st, corr, pid in self.graphs
            ])
        if self.syncs:
            c.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION ({act_cols}, syncType INTEGER, eventId INTEGER)")
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?,?,?,1,?,?,?,?,0)", [
                (s, e, d, st, corr, pid << 24, t) for s, e, d, st, corr, t, pid in self.syncs
            ])
        if self.runtime:
            c.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, "
                      "globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER)")
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,0,?,?,?,0)", [
                (s, e, gtid(t, pid), corr, self.sid(n)) for s, e, t, corr, n, pid in self.runtime
            ])
        if self.nvtx:
            c.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, "
                      "globalTid INTEGER, textId INTEGER, domainId INTEGER)")
            rows = []
            for s, e, typ, text, tid, dom, pid in self.nvtx:
                # Registered strings go through textId, as nsys exports them; others inline.
                if text.startswith("@"):
                    rows.append((s, e, typ, None, gtid(tid, pid), self.sid(text[1:]), dom))
                else:
                    rows.append((s, e, typ, text, gtid(tid, pid), None, dom))
            c.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?)", rows)
        c.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in self.strings.items()])
        conn.commit()
        conn.close()
        return path
