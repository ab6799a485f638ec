"""NVTX ranges and the GPU work each one launched.

A range's GPU work is every kernel, memcpy, memset or graph execution whose launching CUDA
runtime/driver call started inside the range (``range.start <= call.start <= range.end``) on
the range's own thread. Calls and GPU work are matched on (process, correlationId); a
``cudaGraphLaunch`` carries the correlation id of every kernel of that graph launch, so a graph
launched inside a range brings all of its kernels.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gapscope.analysis.intervals import expand_slices
from gapscope.analysis.keys import TimeKeys, call_key
from gapscope.errors import GapscopeError
from gapscope.trace.frames import NVTX_DOMAIN_CREATE, TraceFrames


@dataclass(frozen=True)
class RangeTable:
    """NVTX range instances in start order, with their nesting depth."""

    frame: pd.DataFrame  # name, domain, pid, thread, tid (globalTid), start_ns, end_ns, depth


class CallIndex:
    """Finds CUDA API calls by (process, correlationId), the key that ties GPU work and
    synchronization records to the call that issued them."""

    def __init__(self, api: pd.DataFrame) -> None:
        codes, self._procs = pd.factorize(api["proc"].to_numpy())
        corr = api["corr"].to_numpy()
        key = np.where(corr > 0, call_key(codes, corr), -1)
        self._order = np.argsort(key, kind="stable")
        self._keys = key[self._order]

    def find(self, proc: np.ndarray, corr: np.ndarray) -> np.ndarray:
        """Index of the call with each (proc, corr), -1 where there is none."""
        if self._keys.size == 0:
            return np.full(np.asarray(proc).size, -1, dtype=np.int64)
        p = pd.Index(self._procs).get_indexer(proc).astype(np.int64)
        key = call_key(p, corr)
        pos = np.minimum(np.searchsorted(self._keys, key), self._keys.size - 1)
        hit = (p >= 0) & (corr > 0) & (self._keys[pos] == key)
        return np.where(hit, self._order[pos], -1)


def link_launches(frames: TraceFrames, calls: CallIndex) -> np.ndarray:
    """Index into ``frames.api`` of the call that launched each activity, -1 where none."""
    acts = frames.activities
    return calls.find(acts["proc"].to_numpy(), acts["corr"].to_numpy())


def _depth(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of each range among the ranges of its thread (0 = outermost)."""
    n = tid.size
    depth = np.zeros(n, dtype=np.int64)
    if n == 0:
        return depth
    order = np.lexsort((-end, start, tid))
    t, s = tid[order], start[order]
    heads = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
    bounds = np.r_[heads, n]
    for a, b in zip(bounds[:-1], bounds[1:]):  # one step per thread, not per range
        ends = np.sort(end[order[a:b]])
        rank = np.arange(b - a)
        ended = np.searchsorted(ends, s[a:b], side="right")
        depth[order[a:b]] = np.maximum(rank - ended, 0)
    return depth


def range_table(frames: TraceFrames, patterns: Sequence[str] = ()) -> RangeTable:
    """The trace's NVTX ranges (push/pop and start/end), filtered by name globs if given."""
    nvtx = frames.nvtx
    domains = nvtx[nvtx["event_type"] == NVTX_DOMAIN_CREATE]
    domain_names = dict(zip(domains["domain_id"].tolist(), domains["name"].tolist()))
    rng = nvtx[(nvtx["event_type"] != NVTX_DOMAIN_CREATE) & (nvtx["end"] >= nvtx["start"])]
    names = rng["name"].fillna("[unnamed]").astype(str).to_numpy(dtype=object)
    if patterns:
        uniq = pd.unique(names)
        keep = {u for u in uniq if any(u == p or fnmatch.fnmatchcase(u, p) for p in patterns)}
        if not keep and names.size == 0:
            raise GapscopeError(
                f"no NVTX range matches {', '.join(repr(p) for p in patterns)}: this trace has no NVTX ranges"
            )
        if not keep:
            shown = ", ".join(sorted(map(str, uniq))[:8]) or "none"
            more = f" (and {len(uniq) - 8} more)" if len(uniq) > 8 else ""
            raise GapscopeError(
                f"no NVTX range matches {', '.join(repr(p) for p in patterns)}; "
                f"range names in this trace: {shown}{more}"
            )
        sel = pd.Series(names).isin(keep).to_numpy()
        rng = rng[sel]
        names = names[sel]
    tid = rng["tid"].to_numpy()
    start = rng["start"].to_numpy()
    end = rng["end"].to_numpy()
    dom = rng["domain_id"].to_numpy()
    frame = pd.DataFrame(
        {
            "name": names,
            "domain": pd.Series(dom).map(domain_names).to_numpy(dtype=object),
            "pid": (tid >> 24) & 0xFFFFFF,
            "thread": tid & 0xFFFFFF,
            "tid": tid,
            "start_ns": start,
            "end_ns": end,
            "depth": _depth(tid, start, end),
        }
    )
    frame = frame.sort_values(["start_ns", "depth"], kind="stable").reset_index(drop=True)
    return RangeTable(frame)


def range_members(
    frames: TraceFrames, launch: np.ndarray, ranges: RangeTable
) -> tuple[np.ndarray, np.ndarray]:
    """(range index, activity index) for every activity launched inside every range."""
    rf = ranges.frame
    linked = np.flatnonzero(launch >= 0)
    if len(rf) == 0 or linked.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    api = frames.api
    call = launch[linked]
    call_tid = api["tid"].to_numpy()[call]
    call_start = api["start"].to_numpy()[call]
    # Sort launches by (thread, call start); a range is then one slice of that order.
    t_inv, threads = pd.factorize(np.concatenate([call_tid, rf["tid"].to_numpy()]))
    t_call, t_rng = t_inv[: call.size].astype(np.int64), t_inv[call.size :].astype(np.int64)
    tk = TimeKeys([call_start, rf["start_ns"].to_numpy(), rf["end_ns"].to_numpy()], threads.size)
    key_call = tk.key(t_call, call_start)
    order = np.argsort(key_call, kind="stable")
    sorted_keys = key_call[order]
    lo = np.searchsorted(sorted_keys, tk.key(t_rng, rf["start_ns"].to_numpy()), "left")
    hi = np.searchsorted(sorted_keys, tk.key(t_rng, rf["end_ns"].to_numpy()), "right")
    owner, pos = expand_slices(lo, hi)
    return owner, linked[order[pos]]
