"""CUDA Graph recording inside ranges (docs/metrics.md, "Graph recording"): how many executable
graphs a range's thread made or updated inside it (instantiate and update calls), and the time
its recording took (capture, instantiate and update calls, and the calls made while a capture
was open). A graph recorded once is a capture; one recorded for every replay or so is
re-recorded, which costs more than the replay saves.
"""

from __future__ import annotations

import numpy as np

from gapscope.analysis.keys import TimeKeys
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


def _captured(tid: np.ndarray, start: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per call: made on a thread while a stream capture begun there was open (the thread's last
    begin-capture call started before it, and no end-capture call of the thread since)."""
    _, threads = np.unique(tid, return_inverse=True)
    tk = TimeKeys([start], int(threads.max()) + 1 if threads.size else 1)
    key = tk.key(threads, start)
    opened = np.sort(key[begin])
    closed = np.sort(key[end])
    last_open = np.searchsorted(opened, key, side="left") - 1  # the last begin before the call; -1: none
    last_close = np.searchsorted(closed, key, side="left") - 1
    open_key = np.where(last_open >= 0, opened[np.maximum(last_open, 0)], -1)
    # A capture never closed in the trace (its end call cut off, or its name damaged) stays open.
    close_key = np.where(last_close >= 0, closed[np.maximum(last_close, 0)], -1) if closed.size else \
        np.full(key.size, -1, dtype=np.int64)
    same_thread = (open_key >= 0) & (open_key // tk.width == threads)
    return same_thread & (open_key > close_key)


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
