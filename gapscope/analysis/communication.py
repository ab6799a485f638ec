"""Communication kernels against compute: per device, range and range name, the time in
collective libraries' kernels, the time in everything else, and the communication nothing
else on the device overlapped (exposed); and, per communication kernel, what a report across
ranks pairs with the other ranks' (gapscope.fleet.collectives).

A kernel is communication when its name matches one of :data:`COMM_LIBRARIES` (the function's
own name: ``void vllm::cross_device_reduce_1stage<...>(...)`` reads as
``cross_device_reduce_1stage``). Every other busy interval (kernels, graph executions, copies
with ``--count-memops``) is compute. docs/metrics.md ("Communication and compute",
"Collectives across ranks") defines every figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gapscope.analysis.intervals import covered_ns, union_blocks
from gapscope.analysis.metrics import ActivityArrays
from gapscope.analysis.rows import rows_of
from gapscope.trace.frames import ActivityKind, TraceFrames

if TYPE_CHECKING:  # the pipeline imports this module
    from gapscope.analysis.pipeline import AnalysisArrays

#: The libraries whose kernels are communication, with the pattern their kernel names start
#: with (a regular expression matched at the start of the function's own name).
COMM_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("NCCL (ncclDevKernel_*, ncclKernel_*)", r"nccl"),
    ("RCCL", r"rccl"),
    ("MSCCL, MSCCL++", r"msccl"),
    ("NVSHMEM", r"nvshmem"),
    ("PyTorch symmetric memory (one_shot_all_reduce_kernel, multimem_all_gather_kernel, ...)",
     r"(?:one_shot|two_shot|multimem)_\w*(?:all_reduce|all_gather|reduce)"),
    ("vLLM, SGLang and AIter custom all-reduce (cross_device_reduce_1stage, _2stage)", r"cross_device_reduce_"),
)
#: A kernel name whose function (after an optional ``void`` and namespaces) is communication.
COMM_NAME = re.compile(r"^(?:void\s+)?(?:[A-Za-z_]\w*::)*(?:" + "|".join(p for _, p in COMM_LIBRARIES) + ")")

#: The fields a RANGE, NAME and DEVICE row gains when the trace ran communication kernels.
FIELDS = ("comm_kernels", "comm_ns", "compute_ns", "exposed_comm_ns")

#: The columns of :func:`instances`: one entry per communication kernel.
INSTANCE_COLUMNS = ("device", "sequence", "occurrence", "name", "start", "end", "before_gap_ns")


def is_communication(name: str) -> bool:
    """Whether a kernel of this name belongs to a collective library (:data:`COMM_LIBRARIES`)."""
    return COMM_NAME.match(name) is not None


@dataclass(frozen=True)
class CommKernels:
    """The communication kernels of a trace: their activity indices (ascending) and names."""

    index: np.ndarray
    name: np.ndarray

    def mask(self, n: int) -> np.ndarray:
        """True for the communication kernels among ``n`` activities."""
        out = np.zeros(n, dtype=bool)
        out[self.index] = True
        return out


#: Activities :func:`find` matches against the communication names at a time.
FIND_BLOCK = 1 << 20


def find(frames: TraceFrames) -> CommKernels | None:
    """The trace's communication kernels, None when it ran none. Names are looked up once per
    distinct kernel name, so the trace must be open; the activities are matched against the
    communication names' ids a block at a time (a byte an activity, not a code)."""
    a = frames.activities
    kernel = a["kind"].to_numpy() == ActivityKind.KERNEL
    name_id = a["name_id"].to_numpy()
    ids = pd.unique(name_id[kernel])
    text = frames.names.lookup(int(i) for i in ids if i >= 0)
    comm_ids = np.array(sorted(int(i) for i in ids if is_communication(text.get(int(i), ""))), dtype=np.int64)
    if comm_ids.size == 0:
        return None
    hit = np.zeros(name_id.size, dtype=bool)
    for lo in range(0, name_id.size, FIND_BLOCK):
        part = name_id[lo:lo + FIND_BLOCK]
        at = np.minimum(np.searchsorted(comm_ids, part), comm_ids.size - 1)
        hit[lo:lo + part.size] = comm_ids[at] == part
    hit &= kernel
    index = np.flatnonzero(hit)
    names = np.array([text[int(i)] for i in comm_ids], dtype=object)
    return CommKernels(index, names[np.searchsorted(comm_ids, name_id[index])])


def _sum(groups: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, groups, values)
    return out


def split(groups: np.ndarray, act: np.ndarray, acts: ActivityArrays, comm: np.ndarray,
          n_groups: int) -> dict[str, np.ndarray]:
    """The :data:`FIELDS` of groups ``0..n_groups-1`` of activities (``act[i]`` belongs to
    ``groups[i]``, one group per device): communication kernels, the union of their intervals,
    the union of the other busy intervals, and the union of all minus that of compute."""
    groups = np.asarray(groups, dtype=np.int64)
    act = np.asarray(act, dtype=np.int64)
    busy = acts.busy[act]
    g, a = groups[busy], act[busy]
    label = comm[a].astype(np.int64)
    k, bs, be = union_blocks(g * 2 + label, acts.start[a], acts.end[a])
    by_label = _sum(k, be - bs, 2 * n_groups)
    k, bs, be = union_blocks(g, acts.start[a], acts.end[a])
    every = _sum(k, be - bs, n_groups)
    compute = by_label[0::2]
    return {"comm_kernels": np.bincount(g[label == 1], minlength=n_groups).astype(np.int64),
            "comm_ns": by_label[1::2], "compute_ns": compute, "exposed_comm_ns": every - compute}


def with_fields(comm: CommKernels | None, acts: ActivityArrays, member_act: np.ndarray, member_pair: np.ndarray,
                range_name: np.ndarray, columns: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> None:
    """The :data:`FIELDS` added to the (range, name, device) columns of an analysis (in place:
    columns the pipeline has not yet put in a result), when the trace ran communication
    kernels; nothing otherwise. A range's figures are measured per device and summed over its
    devices, a name's summed over its instances (as STATS are)."""
    if comm is None:
        return
    range_cols, name_cols, device_cols = columns
    mask = comm.mask(acts.start.size)
    n_dev, n_ranges, n_names = acts.device_ids.size, len(range_name), rows_of(name_cols)
    per_device = split(acts.device_code, np.arange(acts.start.size), acts, mask, n_dev)
    per_pair = split(member_pair, member_act, acts, mask, n_ranges * n_dev)
    per_range = {k: v.reshape(n_ranges, n_dev).sum(axis=1) for k, v in per_pair.items()}
    per_name = {k: _sum(range_name, v, n_names) for k, v in per_range.items()}
    for out, figures in ((range_cols, per_range), (name_cols, per_name), (device_cols, per_device)):
        out.update((k, np.asarray(figures[k], dtype=np.int64)) for k in FIELDS)


def instances(a: AnalysisArrays) -> dict[str, np.ndarray] | None:
    """One entry per communication kernel (:data:`INSTANCE_COLUMNS`), None without any: its
    device, its *sequence* (the index of its stream among the device's streams that ran
    communication, in (process, stream) order), its *occurrence* in that sequence (start
    order), name, start and end, and ``before_gap_ns``: the device's gap time
    in the window before it, from the end of the previous kernel of its sequence (for the first,
    from the device's first busy interval) to its start."""
    comm = a.comm
    if comm is None:
        return None
    acts = a.acts
    idx = comm.index
    dev, stream_code = acts.device_code[idx], acts.stream_code[idx]
    start, end = acts.start[idx], acts.end[idx]
    # Sequences: a device's communication streams, numbered in stream-key order (process, stream).
    codes = pd.DataFrame({"dev": dev, "code": stream_code})
    sequence = codes.groupby("dev")["code"].rank(method="dense").to_numpy(np.int64) - 1
    order = np.lexsort((start, sequence, dev))
    dev, sequence, start, end = dev[order], sequence[order], start[order], end[order]
    names = comm.name[order]
    group = pd.Series(dev * (int(sequence.max()) + 1) + sequence)
    occurrence = group.groupby(group.to_numpy()).cumcount().to_numpy(np.int64)
    first_busy = np.full(acts.device_ids.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_busy, acts.device_code[acts.busy], acts.start[acts.busy])
    lo = np.empty_like(start)
    lo[1:] = end[:-1]
    lo[occurrence == 0] = first_busy[dev[occurrence == 0]]
    lo = np.minimum(lo, start)
    gaps = a.device_gaps
    before = covered_ns(gaps.row, gaps.start, gaps.start + gaps.length, dev, lo, start)
    out: dict[str, Any] = {
        "device": acts.device_ids[dev].astype(np.int64), "sequence": sequence, "occurrence": occurrence,
        "name": names, "start": start, "end": end, "before_gap_ns": before,
    }
    return out
