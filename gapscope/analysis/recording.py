"""CUDA Graph recording inside ranges (docs/metrics.md, "Graph recording"): how many executable
graphs a range's thread made or updated inside it (instantiate and update calls), and the time
its recording took (capture, instantiate and update calls, and the calls made while a capture
was open). A graph recorded once is a capture; one recorded for every replay or so is
re-recorded, which costs more than the replay saves.
"""

from __future__ import annotations

import numpy as np

from gapscope.analysis.ranges import RangeTable, range_calls
from gapscope.trace.cuda_api import (
    CAPTURE_BEGIN_CALLS,
    CAPTURE_END_CALLS,
    GRAPH_INSTANTIATE_CALLS,
    GRAPH_RECORD_CALLS,
)
from gapscope.trace.frames import TraceFrames

#: The fields this module adds to range rows, and to name rows (docs/schema.md).
RANGE_FIELDS = ("graph_recordings", "recording_ns")
NAME_FIELDS = (*RANGE_FIELDS, "recording_instances", "first_recording_instance", "last_recording_instance")


#: Calls :func:`_captured` tests against a thread's capture intervals at a time.
CAPTURE_BLOCK = 1 << 20


def _capture_intervals(b_start: np.ndarray, e_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One thread's open captures as disjoint intervals (lo, hi] of call starts, sorted: each
    begin-capture call at ``b`` opens (b, the first end-capture call at or after b] (no end:
    open to the end of the trace; an end at the begin's own start closes it at once)."""
    b = np.sort(b_start)
    e = np.sort(e_start)
    at = np.searchsorted(e, b, side="left")
    hi = np.full(b.size, np.iinfo(np.int64).max, dtype=np.int64)
    closed = at < e.size
    hi[closed] = e[at[closed]]
    keep = hi > b  # (b, b]: closed as it opened
    lo, hi = b[keep], hi[keep]
    if lo.size == 0:
        return lo, hi
    # Merge: an interval starting before the ones before it end joins them.
    reach = np.maximum.accumulate(hi)
    new = np.concatenate(([True], lo[1:] >= reach[:-1]))
    first = np.flatnonzero(new)
    last = np.concatenate((first[1:], [lo.size])) - 1
    return lo[first], reach[last]


def _captured(tid: np.ndarray, start: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per call: made on a thread while a stream capture begun there was open (the thread's last
    begin-capture call started before it, and no end-capture call of the thread since). Each
    thread that began a capture has its captures as a few intervals; the calls are tested
    against them CAPTURE_BLOCK at a time (nothing held per call but the answer)."""
    out = np.zeros(tid.size, dtype=bool)
    b_idx = np.flatnonzero(begin)
    e_idx = np.flatnonzero(end)
    b_tid, e_tid = tid[b_idx], tid[e_idx]
    for thread in np.unique(b_tid).tolist():  # the threads that began a capture: a few
        lo, hi = _capture_intervals(start[b_idx[b_tid == thread]], start[e_idx[e_tid == thread]])
        if lo.size == 0:
            continue
        for a in range(0, tid.size, CAPTURE_BLOCK):
            s = start[a:a + CAPTURE_BLOCK]
            j = np.searchsorted(hi, s, side="left")  # the first interval ending at or after s
            inside = (j < hi.size) & (lo[np.minimum(j, hi.size - 1)] < s)
            out[a:a + CAPTURE_BLOCK] |= inside & (tid[a:a + CAPTURE_BLOCK] == thread)
    return out


def range_recording(frames: TraceFrames, table: RangeTable, names: tuple[np.ndarray, np.ndarray]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(graph recordings, recording time in ns) per range: the instantiate and update calls its
    thread started inside it; the summed duration of its capture, instantiate and update calls
    and of the calls made while a capture was open (the captured launches)."""
    n = len(table.frame)
    code, table_names = names
    record = np.isin(table_names, sorted(GRAPH_RECORD_CALLS))[code] if code.size else np.zeros(0, dtype=bool)
    if n == 0 or not record.any():
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    recordings, _ = range_calls(frames, table, np.isin(table_names, sorted(GRAPH_INSTANTIATE_CALLS))[code])
    begin = np.isin(table_names, sorted(CAPTURE_BEGIN_CALLS))[code]
    timed = record
    if begin.any():
        end = np.isin(table_names, sorted(CAPTURE_END_CALLS))[code]
        timed = record | _captured(frames.api["tid"].to_numpy(), frames.api["start"].to_numpy(), begin, end)
    _, ns = range_calls(frames, table, timed)
    return recordings, ns


def name_recording(recordings: np.ndarray, ns: np.ndarray, range_name: np.ndarray, n_names: int
                   ) -> dict[str, np.ndarray]:
    """The name rows' recording columns: recordings and time summed over the instances, how
    many instances recorded a graph, and the first and last of them (range ids; NaN: none)."""
    recorded = np.flatnonzero(recordings > 0)
    first = np.full(n_names, np.inf)
    last = np.full(n_names, -np.inf)
    np.minimum.at(first, range_name[recorded], recorded)
    np.maximum.at(last, range_name[recorded], recorded)
    return {
        "graph_recordings": np.bincount(range_name, weights=recordings, minlength=n_names).astype(np.int64),
        "recording_ns": np.bincount(range_name, weights=ns, minlength=n_names).astype(np.int64),
        "recording_instances": np.bincount(range_name[recorded], minlength=n_names).astype(np.int64),
        "first_recording_instance": np.where(np.isfinite(first), first, np.nan),
        "last_recording_instance": np.where(np.isfinite(last), last, np.nan),
    }
