"""The typed frames every trace format becomes, and what the analysis asks of a trace's names.

All times are integer nanoseconds on one clock, counted from the session's start; integer
columns use -1 for "none". A reader (one module per format in this package) fills these frames
with exactly the columns below and hands them to gapscope.trace.validation, which leaves out
damaged rows, so every metric, category and renderer works the same whatever file the trace
came from.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd

from gapscope.errors import GapscopeError


class ActivityKind(enum.IntEnum):
    """What a row of the GPU activity frame is."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    GRAPH = 3  # one whole graph launch, as nsys records it with --cuda-graph-trace=graph


@dataclass(frozen=True)
class TraceMeta:
    """Facts about the trace file itself: where it is, which format and tool wrote it."""

    path: str
    format: str
    nsys_version: str | None
    export_schema: str | None
    tables: frozenset[str] = frozenset()
    gpu_names: dict[int, str] = field(default_factory=dict)
    #: The session's end as the trace records it (ns), if it does: bounds valid timestamps
    #: (gapscope.trace.validation).
    session_end_ns: int | None = None
    #: The framework operators the tracer recorded (a PyTorch profiler trace's ``cpu_op``
    #: events) and its kernel launch calls (those inside a graph capture too), by which the
    #: prediction counts the tracer's cost; None for a format without operators.
    operators: int | None = None
    launch_calls: int | None = None
    #: The CUDA calls it recorded other than kernel and graph launches (event records, stream
    #: waits, copies, synchronizations), each of which costs the tracer too; None as above.
    other_calls: int | None = None
    #: The eager launches of torch.compile's Triton code it recorded (Inductor's
    #: ``triton_*_fused`` kernels launched by a kernel launch call, not by a graph replay), each
    #: of which Inductor wraps in a record function of its own while the profiler runs; None as
    #: above.
    inductor_launches: int | None = None


@dataclass(frozen=True)
class RowCounts:
    """What a trace holds, counted before it is read (gapscope.analysis.memory estimates the
    memory of analyzing it from these): the rows of its GPU activity tables (kernels, graph
    executions, copies, memsets), of its CUDA API table, of its synchronization records and of
    its NVTX table, as the file stores them (the reader leaves some out: quiet calls, backtraces,
    other kinds of NVTX event). A PyTorch profiler trace, one JSON stream, says only how many
    bytes of JSON it holds (``json_bytes``, decompressed), its row counts None. ``format``: the
    reader that reads the rows (an Nsight Systems report's export's)."""

    format: str
    activities: int | None = None
    api: int | None = None
    syncs: int | None = None
    nvtx: int | None = None
    json_bytes: int | None = None


class Names(Protocol):
    """Name lookups a trace answers while it is open (a closed trace raises ClosedTraceError)."""

    def lookup(self, ids: Iterable[int]) -> dict[int, str]:
        """Map each string id to its text ('[unknown]' where the trace has none)."""

    def activity_name_ids(self, kind: ActivityKind, rows: np.ndarray) -> np.ndarray:
        """The name id (kernels) or graph id (graph executions) of activities of one kind, by
        their ``row`` numbers; -1 where there is none."""


class ClosedTraceError(RuntimeError):
    """A trace's names were asked for after the trace was closed: a bug in the caller."""


#: Columns of each frame (docs/architecture.md, "Frames").
ACTIVITY_COLUMNS = ("row", "start", "end", "device", "stream", "proc", "corr")
API_COLUMNS = ("start", "end", "tid", "corr", "name_id")
NVTX_COLUMNS = ("start", "end", "tid", "event_type", "domain_id", "name")
SYNC_COLUMNS = ("start", "device", "stream", "proc")
STREAM_COLUMNS = ("proc", "device", "stream", "kind")

#: NVTX_EVENTS.eventType values (nsys's ENUM_NSYS_EVENT_TYPE), used by every format's nvtx frame.
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75


def empty_frame(names: tuple[str, ...]) -> pd.DataFrame:
    """A frame with these columns and no rows (text for ``name``, int64 otherwise)."""
    return pd.DataFrame({c: np.zeros(0, dtype=object if c == "name" else np.int64) for c in names})


@dataclass
class TraceFrames:
    """The typed frames an analysis needs, all times in integer nanoseconds.

    ``activities``: one row per kernel, memcpy, memset or graph-level execution with columns
    row (its row number in its source table), start, end, device, stream, proc, corr, kind
    (ActivityKind) and name_id (a kernel's name id, a graph execution's graph id, -1 or the
    format's own id for copies; its text through ``names.lookup``).
    ``api``: CUDA runtime and driver calls: start, end, tid (globalTid), corr, name_id, proc.
    ``nvtx``: NVTX push/pop and start/end ranges and domain creations: start, end, tid,
    event_type, domain_id, name.
    ``syncs``: stream-wait-event records: start (inside the cudaStreamWaitEvent call that issued
    the wait), device, stream, proc.
    ``streams``: what each stream was created as, where the format records it (nsys's
    TARGET_INFO_CUDA_STREAM; empty elsewhere): proc, device, stream and kind (an index into
    gapscope.catalog.STREAM_KINDS: unknown, blocking, non-blocking, the legacy default stream).
    ``proc`` is the process part of nsys's globalPid/globalTid (``>> 24``): the key that makes
    correlation ids unique across processes.
    ``warnings``: what the reader has to say about the trace (a field its format lacks, a
    mapping that differs from nsys's), then what gapscope.trace.validation found damaged and
    left out; every analysis of these frames repeats them.
    """

    meta: TraceMeta
    activities: pd.DataFrame
    api: pd.DataFrame
    nvtx: pd.DataFrame
    syncs: pd.DataFrame
    names: Names
    warnings: list[str] = field(default_factory=list)
    streams: pd.DataFrame = field(default_factory=lambda: empty_frame(STREAM_COLUMNS))

    def release(self, columns: Mapping[str, Iterable[str]]) -> None:
        """Drop these columns (by frame name) from the frames, in place, so that their memory
        goes back once nothing else holds them: an analysis that has read them for good (the
        launch links' ids) lets them go before its peak. Columns absent are skipped."""
        for key, names in columns.items():
            frame = getattr(self, key)
            for c in names:
                if c in frame.columns:
                    del frame[c]  # column by column: no copy of the columns kept

    def narrow_name_ids(self) -> None:
        """The activities' name ids in 16 bits, in place, where every one fits (a trace of fewer
        than 32,767 strings): 2 bytes an activity, not 4, for an analysis that reads its result
        only (what reads them casts them to int64 first)."""
        a = self.activities
        if "name_id" in a and a["name_id"].dtype != np.int16 and fits_narrow(a["name_id"].to_numpy(), 2**15 - 1):
            a["name_id"] = a["name_id"].to_numpy().astype(np.int16)

    def activity_labels(self, idx: np.ndarray | None = None) -> tuple[np.ndarray, list[str], list[ActivityKind]]:
        """(code per activity, label per code, kind per code) of the activities ``idx`` (every
        activity when None). A label is the kernel's short name, ``graph <id>``, ``memcpy`` or
        ``memset``; each distinct (kind, name id) is one code, looked up once, so labelling a
        million activities is a factorize and a lookup of their distinct names. Name ids are read
        for just these rows when not loaded."""
        a = self.activities
        kind = a["kind"].to_numpy()
        rows = np.arange(kind.size) if idx is None else np.asarray(idx, dtype=np.int64)
        kind = kind[rows]
        if "name_id" in a:
            name_id = a["name_id"].to_numpy()[rows]
        else:
            name_id = np.full(rows.size, -1, dtype=np.int64)
            source_rows = a["row"].to_numpy()[rows]
            for k in (ActivityKind.KERNEL, ActivityKind.GRAPH):
                sel = np.flatnonzero(kind == k)
                if sel.size:
                    name_id[sel] = self.names.activity_name_ids(k, source_rows[sel])
        key = kind.astype(np.int64)  # (kind, name id) as one int64, built in place
        del kind
        key <<= 40
        key += name_id
        del name_id
        key += 1
        codes, uniq = pd.factorize(key)
        del key
        u_kind, u_id = (uniq >> 40).tolist(), ((uniq & ((1 << 40) - 1)) - 1).tolist()
        kernel_names = self.names.lookup(i for k, i in zip(u_kind, u_id) if k == ActivityKind.KERNEL)
        labels = [kernel_names.get(i, "?") if k == ActivityKind.KERNEL else f"graph {i}"
                  if k == ActivityKind.GRAPH else ActivityKind(k).name.lower() for k, i in zip(u_kind, u_id)]
        return codes.astype(np.int64, copy=False), labels, [ActivityKind(k) for k in u_kind]

    def activity_names(self, idx: np.ndarray) -> list[str]:
        """A readable name per activity index (:meth:`activity_labels`' label)."""
        codes, labels, _ = self.activity_labels(idx)
        return np.asarray(labels, dtype=object)[codes].tolist() if codes.size else []


#: The columns of each frame that build_frames requires, by frame.
FRAME_COLUMNS = {
    "activities": (*ACTIVITY_COLUMNS, "kind", "name_id"),
    "api": (*API_COLUMNS, "proc"),
    "nvtx": NVTX_COLUMNS,
    "syncs": SYNC_COLUMNS,
    "streams": STREAM_COLUMNS,
}


#: Id and code columns held in 32 bits when every value fits (times and thread ids stay int64):
#: 4 bytes a row each, not 8, in the two frames that grow with the trace.
NARROW_COLUMNS = {
    "activities": ("row", "device", "stream", "proc", "corr", "name_id"),
    "api": ("corr", "name_id", "proc"),
}
#: The largest value a narrowed column holds: below 2**31 with room for the +1 and +2 the
#: analysis adds to ids, so no arithmetic on them can leave 32 bits.
NARROW_LIMIT = 2**30


def fits_narrow(values: np.ndarray, limit: int = NARROW_LIMIT) -> bool:
    """Whether every value of an id column lies in ``[-1, limit)`` (-1: none; NARROW_LIMIT: the
    range an id keeps in 32 bits, where 8- and 16-bit unsigned values always fit: no scan)."""
    if not values.size or (limit == NARROW_LIMIT and values.dtype in (np.uint8, np.uint16)):
        return True
    return int(values.min()) >= -1 and int(values.max()) < limit


def id_dtype(low: int, high: int) -> type:
    """The integer type of an id column whose values run from ``low`` to ``high`` (a row number,
    a process made without scanning a column): int32 when they fit, as :func:`fits_narrow` reads
    a column (from -1 to below NARROW_LIMIT), else int64."""
    return np.int32 if low >= -1 and high < NARROW_LIMIT else np.int64


def narrow_ids(values: np.ndarray) -> np.ndarray:
    """An id column as int32 when it :func:`fits_narrow`, else as it is (no copy either way when
    it is int32 already)."""
    return values.astype(np.int32, copy=False) if fits_narrow(values) else values


def build_frames(meta: TraceMeta, *, activities: pd.DataFrame, api: pd.DataFrame, nvtx: pd.DataFrame,
                 syncs: pd.DataFrame, names: Names, warnings: Iterable[str] = (),
                 cells: Mapping[str, Mapping[str, np.ndarray]] | None = None,
                 streams: pd.DataFrame | None = None) -> TraceFrames:
    """The one place every reader's frames are made: each frame is checked to hold its columns
    (integers as int64, or, for NARROW_COLUMNS' ids, int32 as a reader may give them; once
    checked, those ids in 32 bits where they fit),
    every value passes the damage rules of gapscope.trace.validation (``cells``: the reader's
    Cell codes of cells that held no integer, by frame and column; damaged rows left out with a
    warning, or the trace refused), and a trace without a single kernel execution is refused
    (GapscopeError, exit 2) whatever its format. ``streams``: the stream kinds, where the
    format records them (None: an empty frame)."""
    from gapscope.trace.validation import validate

    if streams is None:
        streams = empty_frame(STREAM_COLUMNS)
    given = {"activities": activities, "api": api, "nvtx": nvtx, "syncs": syncs, "streams": streams}
    for key, frame in given.items():
        missing = [c for c in FRAME_COLUMNS[key] if c not in frame.columns]
        if missing:  # a reader's bug, not the user's file
            raise TypeError(f"{meta.format} reader: the {key} frame lacks {', '.join(missing)}")
        narrow = NARROW_COLUMNS.get(key, ())
        for c in frame.columns:
            if c == "name" or (key == "activities" and c == "kind"):
                continue
            if frame[c].dtype != np.int64 and not (c in narrow and frame[c].dtype == np.int32):
                frame[c] = frame[c].to_numpy().astype(np.int64)
    frames = validate(TraceFrames(meta=meta, activities=activities, api=api, nvtx=nvtx, syncs=syncs,
                                  names=names, warnings=list(warnings), streams=streams), cells)
    for key, columns in NARROW_COLUMNS.items():
        frame = getattr(frames, key)
        for c in columns:
            values = frame[c].to_numpy()
            narrowed = narrow_ids(values)
            if narrowed is not values:  # setting a column copies it: only those that change
                frame[c] = narrowed
    kind = frames.activities["kind"].to_numpy()
    if not ((kind == ActivityKind.KERNEL) | (kind == ActivityKind.GRAPH)).any():
        raise GapscopeError(f"{meta.path}: the trace holds no kernel executions: nothing to analyze")
    return frames
