"""What every nsys export holds, whatever its file format: the tables and columns gapscope reads,
their codes, and how the rows read from them become the typed frames (gapscope.trace.frames).

Two readers share it: ``nsys_sqlite`` (the SQLite export) and ``nsys_columnar`` (the
``parquetdir`` and ``arrowdir`` exports, one file per table). Both read the same tables with
the same columns, so one report gives the same frames, row for row, from any of its exports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from gapscope import catalog
from gapscope.trace.frames import (
    ACTIVITY_COLUMNS, API_COLUMNS, NARROW_COLUMNS, NVTX_COLUMNS, STREAM_COLUMNS, SYNC_COLUMNS, ActivityKind, Names,
    TraceFrames, TraceMeta, build_frames, empty_frame,
)
from gapscope.trace.validation import Cell

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC_TABLE = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX_TABLE = "NVTX_EVENTS"
STRINGS_TABLE = "StringIds"
GPU_TABLE = "TARGET_INFO_GPU"
#: Every stream the session saw, with the flag it was created with (ENUM_CUPTI_STREAM_TYPE:
#: catalog.STREAM_KINDS), and every CUDA context, with its device and its legacy default stream.
STREAM_TABLE = "TARGET_INFO_CUDA_STREAM"
CONTEXT_TABLE = "TARGET_INFO_CUDA_CONTEXT_INFO"
#: The system's facts (name, value); its ``GpuInfo`` row names the GPUs as JSON where an export
#: has no TARGET_INFO_GPU rows.
ENV_TABLE = "TARGET_INFO_SYSTEM_ENV"
GPU_INFO = "GpuInfo"
#: The longest GpuInfo text read (a few hundred bytes a GPU).
GPU_INFO_MAX = 1 << 20
#: The export's own meta data (EXPORT_META_DATA is its name before nsys 2023).
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")

def gpu_info_names(text: object) -> dict[int, str]:
    """The GPU names of a GpuInfo value (``{"Gpus": [{"Id": 0, "Name": "NVIDIA H200", ...}]}``),
    by id; empty for anything else (no GPUs, damaged or oversized JSON)."""
    import json

    if not isinstance(text, str) or len(text) > GPU_INFO_MAX:
        return {}
    try:
        gpus = json.loads(text).get("Gpus")
    except (ValueError, AttributeError, RecursionError):
        return {}
    if not isinstance(gpus, list):
        return {}
    return {g["Id"]: g["Name"] for g in gpus if isinstance(g, dict) and type(g.get("Id")) is int
            and isinstance(g.get("Name"), str) and g["Name"].strip()}


#: The activity tables, in the order their rows are stacked into the activity frame.
ACTIVITY_TABLES: dict[str, ActivityKind] = {
    KERNEL_TABLE: ActivityKind.KERNEL, GRAPH_TABLE: ActivityKind.GRAPH,
    MEMCPY_TABLE: ActivityKind.MEMCPY, MEMSET_TABLE: ActivityKind.MEMSET,
}

# CUPTI_ACTIVITY_KIND_RUNTIME.eventClass of rows that repeat a call for its backtrace.
EVENT_CLASS_BACKTRACE = 67
# CUPTI_ACTIVITY_KIND_SYNCHRONIZATION.syncType of cudaStreamWaitEvent records.
SYNC_TYPE_STREAM_WAIT_EVENT = 2

#: Export schema major versions the nsys readers were checked against.
KNOWN_SCHEMA_MAJORS = (2, 3)

#: Source columns of each frame's columns (frames.ACTIVITY_COLUMNS etc.), ``row`` aside.
ACTIVITY_SOURCE = {"start": "start", "end": "end", "device": "deviceId", "stream": "streamId",
                   "proc": "globalPid", "corr": "correlationId"}
API_SOURCE = {"start": "start", "end": "end", "tid": "globalTid", "corr": "correlationId",
              "name_id": "nameId"}
SYNC_SOURCE = {"start": "start", "device": "deviceId", "stream": "streamId", "proc": "globalPid"}
#: The stream and context tables' columns, by the names :func:`stream_kinds` reads them under:
#: both name a process by its parts (no globalPid) and a context by its id inside the process.
STREAM_SOURCE = {"hw": "hwId", "vm": "vmId", "pid": "processId", "context": "contextId", "stream": "streamId",
                 "flag": "flag"}
CONTEXT_SOURCE = {"hw": "hwId", "vm": "vmId", "pid": "processId", "context": "contextId", "device": "deviceId",
                  "null_stream": "nullStreamId"}
#: Columns without which the tables say nothing (``hwId`` and ``vmId`` read as 0 where absent).
STREAM_REQUIRED = ("processId", "contextId", "streamId", "flag")
CONTEXT_REQUIRED = ("processId", "contextId", "deviceId")
#: Columns without which an activity table cannot be read.
ACTIVITY_REQUIRED = ("start", "end", "deviceId", "streamId")

#: The frame columns every nsys reader keeps in 32 bits as it reads them, while their values fit:
#: frames.NARROW_COLUMNS but ``proc``, which is read as the whole globalPid and becomes its process
#: part (``>> 24``) only once assembled. Times and thread ids stay int64.
READ_NARROW = {key: frozenset(columns) - {"proc"} for key, columns in NARROW_COLUMNS.items()}


def name_column(columns: Iterable[str], kind: ActivityKind) -> str | None:
    """The column that names an activity of this kind (kernels: shortName, else demangledName,
    StringIds ids; graph executions: graphId), None when the table has none."""
    cols = set(columns)
    wanted = {ActivityKind.KERNEL: ("shortName", "demangledName"), ActivityKind.GRAPH: ("graphId",)}
    return next((c for c in wanted.get(kind, ()) if c in cols), None)


def stream_kinds(streams: pd.DataFrame, contexts: pd.DataFrame, stream_cells: Mapping[str, np.ndarray],
                 context_cells: Mapping[str, np.ndarray]) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """The streams frame (frames.STREAM_COLUMNS) from the rows of :data:`STREAM_TABLE` and
    :data:`CONTEXT_TABLE` (:data:`STREAM_SOURCE`, :data:`CONTEXT_SOURCE`), with the Cell codes
    of its damaged values: one row per stream, its device from its context, its kind from its
    flag (catalog.STREAM_KINDS; a flag CUPTI does not define reads as unknown), or the null
    stream where it is its context's ``nullStreamId``. A stream whose context is damaged or
    absent has a NULL device (the row is left out, warned); a damaged process part makes its
    process unknown. A context listed twice counts once (the first)."""
    def code(cells: Mapping[str, np.ndarray], columns: tuple[str, ...], n: int) -> np.ndarray:
        """The worst Cell code of each row's ``columns`` (NOT_INTEGER over NULL over OK)."""
        out = np.zeros(n, dtype=np.uint8)
        for c in columns:
            if c in cells:
                out = np.maximum(out, cells[c].astype(np.uint8))
        return out

    def bad(cells: Mapping[str, np.ndarray], columns: tuple[str, ...], n: int) -> np.ndarray:
        return code(cells, columns, n) != Cell.OK

    key = ["hw", "vm", "pid", "context"]
    contexts = contexts.reset_index(drop=True)
    ctx = contexts.loc[~bad(context_cells, ("hw", "vm", "pid", "context", "device"), len(contexts))]
    ctx = ctx.drop_duplicates(key)
    null_ok = ~bad(context_cells, ("null_stream",), len(contexts))[ctx.index.to_numpy()]
    ctx = ctx.assign(null_stream=np.where(null_ok, ctx["null_stream"].to_numpy(), -1))[[*key, "device", "null_stream"]]
    n = len(streams)
    joined = streams[key].merge(ctx, on=key, how="left")  # one row per stream: the context keys are unique
    device = joined["device"].to_numpy(dtype=np.float64)
    stream = streams["stream"].to_numpy()
    flag = streams["flag"].to_numpy()
    is_null = joined["null_stream"].to_numpy(dtype=np.float64) == stream
    kind = np.where(is_null, catalog.STREAM_NULL,
                    np.where((flag >= 0) & (flag < len(catalog.STREAM_KINDS)), flag, catalog.STREAM_UNKNOWN))
    frame = pd.DataFrame({
        "proc": catalog.process_key(streams["pid"].to_numpy(), streams["vm"].to_numpy(), streams["hw"].to_numpy()),
        "device": np.nan_to_num(device, nan=-1).astype(np.int64),
        "stream": stream.astype(np.int64),
        "kind": kind.astype(np.int64),
    }, columns=list(STREAM_COLUMNS))
    cells: dict[str, np.ndarray] = {}
    keys = code(stream_cells, ("hw", "vm", "pid", "context"), n)
    for column, damaged in (("proc", code(stream_cells, ("hw", "vm", "pid"), n)),
                            ("device", np.where(np.isnan(device) & (keys == Cell.OK), np.uint8(Cell.NULL), keys)),
                            ("stream", code(stream_cells, ("stream",), n)),
                            ("kind", np.where(is_null, np.uint8(Cell.OK), code(stream_cells, ("flag",), n)))):
        if damaged.any():
            cells[column] = damaged.astype(np.uint8)
    return frame, cells


def process_of(global_id: np.ndarray) -> np.ndarray:
    """The process part of an nsys globalPid / globalTid (gapscope.catalog's id layout)."""
    return catalog.process_of(np.asarray(global_id, dtype=np.int64))


def _stacked(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The parts' rows one after the other, joined a column at a time, each part's column let go
    once joined (a whole-frame concat would hold every column twice at once). The parts are
    emptied."""
    names = list(parts[0].columns)
    joined = {c: np.concatenate([p.pop(c).to_numpy() for p in parts]) for c in names}
    return pd.DataFrame(joined, copy=False)


def assemble_frames(meta: TraceMeta, got: Mapping[str, pd.DataFrame], names: Names,
                    warnings: Iterable[str] = (), cells: Mapping[str, Mapping[str, np.ndarray]] | None = None,
                    ) -> TraceFrames:
    """The frames from what a reader read: ``got`` maps each activity table it read to its rows
    (frames.ACTIVITY_COLUMNS, plus name_id when names were read), or ``activities`` to every
    activity table's rows stacked in ACTIVITY_TABLES' order with their ``kind``, and ``api``, ``nvtx``,
    ``syncs`` to theirs, ``proc`` still the whole globalPid, and ``stream_info`` and
    ``contexts`` to the rows of the stream and context tables (:func:`stream_kinds`); absent
    keys give empty frames.
    ``cells``, by the same keys: the gapscope.trace.validation Cell codes of columns in which
    the reader found cells that held no integer (NULL, text, ...). The activity tables' frames
    are taken apart as they are stacked."""
    cells = cells or {}
    parts, part_cells = [], []
    for table, kind in ACTIVITY_TABLES.items():
        if table in got:
            df = got[table]
            df["kind"] = np.full(len(df), int(kind), dtype=np.int8)
            parts.append(df)
            part_cells.append(cells.get(table, {}))
    if "activities" in got:  # stacked by the reader, with its kind column
        parts, part_cells = [got["activities"]], [cells.get("activities", {})]
    if not parts:
        parts = [empty_frame((*ACTIVITY_COLUMNS, "kind", "name_id"))]
    sizes = [len(p) for p in parts]
    activities = _stacked(parts) if len(parts) > 1 else parts[0]
    activities["proc"] = process_of(activities["proc"].to_numpy())
    api = got.get("api", empty_frame(API_COLUMNS))
    api["proc"] = process_of(api["tid"].to_numpy())
    syncs = got.get("syncs", empty_frame(SYNC_COLUMNS))
    syncs["proc"] = process_of(syncs["proc"].to_numpy())
    columns = {c for codes in part_cells for c in codes}
    frame_cells = {key: cells.get(key, {}) for key in ("api", "nvtx", "syncs")}
    streams = None
    if "stream_info" in got and "contexts" in got:
        streams, frame_cells["streams"] = stream_kinds(got["stream_info"], got["contexts"],
                                                        cells.get("stream_info", {}), cells.get("contexts", {}))
    frame_cells["activities"] = {  # stacked as the rows are, zeros where a part had no codes
        c: np.concatenate([codes.get(c, np.zeros(n, np.uint8)) for codes, n in zip(part_cells, sizes)])
        for c in columns}
    return build_frames(meta, activities=activities, api=api, nvtx=got.get("nvtx", empty_frame(NVTX_COLUMNS)),
                        syncs=syncs, names=names, warnings=warnings, cells=frame_cells, streams=streams)
