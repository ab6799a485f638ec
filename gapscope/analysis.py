"""`gapscope analyze`: from an nsys SQLite export to an AnalysisResult.

Data flows one way: trace frames (gapscope.trace) -> launch links and range membership
(gapscope.ranges) -> timeline metrics (gapscope.metrics) -> AnalysisResult (gapscope.result).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from gapscope.attribution import Attributor, as_dicts, base_name, category_sums, longest_gaps
from gapscope.errors import GapscopeError
from gapscope.launches import launch_stats
from gapscope.metrics import (
    STATS_FIELDS, ActivityArrays, GapList, level_stats, rollup_stats, stream_key,
)
from gapscope.payoff import ceiling, measured_pairs
from gapscope.ranges import CallIndex, RangeTable, link_launches, range_members, range_table
from gapscope.result import AnalysisResult, clean_rows
from gapscope.trace import KNOWN_SCHEMA_MAJORS, ActivityKind, TraceFrames, load_trace


@dataclass
class Analysis:
    """Everything computed on the way to the result, for transforms that need the raw arrays
    (gap attribution, plots): the frames, launch links, range membership and gap lists."""

    frames: TraceFrames
    acts: ActivityArrays
    launch: np.ndarray
    ranges: RangeTable
    member_range: np.ndarray
    member_act: np.ndarray
    range_gaps: GapList
    device_gaps: GapList
    stream_keys: pd.DataFrame
    stream_gaps: GapList
    result: AnalysisResult


def activity_arrays(frames: TraceFrames, count_memops: bool) -> ActivityArrays:
    """The activity columns as arrays, with kernels (and graph executions) always busy and
    memcpy/memset busy only when ``count_memops`` is set, and device and stream codes."""
    a = frames.activities
    kind = a["kind"].to_numpy()
    is_kernel = (kind == ActivityKind.KERNEL) | (kind == ActivityKind.GRAPH)
    is_memop = (kind == ActivityKind.MEMCPY) | (kind == ActivityKind.MEMSET)
    dev_codes, device_ids = pd.factorize(a["device"].to_numpy(), sort=True)
    dev_codes = dev_codes.astype(np.int64)
    s_codes, s_keys = pd.factorize(
        stream_key(a["proc"].to_numpy(), dev_codes, a["stream"].to_numpy()), sort=True
    )
    return ActivityArrays(
        start=a["start"].to_numpy(),
        end=np.maximum(a["end"].to_numpy(), a["start"].to_numpy()),
        device=a["device"].to_numpy(),
        is_kernel=is_kernel,
        is_memop=is_memop,
        busy=is_kernel | (is_memop & count_memops),
        device_code=dev_codes,
        device_ids=np.asarray(device_ids, dtype=np.int64),
        stream_code=s_codes.astype(np.int64),
        stream_keys=np.asarray(s_keys, dtype=np.int64),
    )


def _rows(keys: pd.DataFrame, stats: pd.DataFrame) -> list[dict]:
    return clean_rows(
        pd.concat([keys.reset_index(drop=True), stats[list(STATS_FIELDS)]], axis=1).to_dict("records")
    )


#: API calls that launch a whole CUDA graph (names without the _vNNNN suffix).
GRAPH_LAUNCH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch")


def _graph_trace_mode(frames: TraceFrames, launch: np.ndarray) -> str:
    """How graphs were traced: ``node`` when kernels were launched by a graph launch call
    (nsys's --cuda-graph-trace=node), ``graph`` when graph executions are opaque rows."""
    kind = frames.activities["kind"].to_numpy()
    graph_level = bool((kind == ActivityKind.GRAPH).any())
    node_level = False
    kernel_calls = launch[(kind == ActivityKind.KERNEL) & (launch >= 0)]
    if kernel_calls.size:
        ids = pd.unique(frames.api["name_id"].to_numpy()[kernel_calls])
        names = frames.strings.lookup(int(i) for i in ids)
        node_level = any(base_name(n) in GRAPH_LAUNCH_CALLS for n in names.values())
    if graph_level and node_level:
        return "mixed"
    return "graph" if graph_level else "node" if node_level else "none"


def _warnings(frames: TraceFrames, launch: np.ndarray, ranges: RangeTable, mode: str) -> list[str]:
    out = []
    major = (frames.meta.export_schema or "").split(".")[0]
    if major.isdigit() and int(major) not in KNOWN_SCHEMA_MAJORS:
        checked = ", ".join(f"{m}.x" for m in KNOWN_SCHEMA_MAJORS)
        out.append(f"export schema {frames.meta.export_schema} is not one gapscope was checked on ({checked})")
    if mode in ("graph", "mixed"):
        out.append(
            "CUDA graphs were traced at graph level: each graph launch is one opaque busy "
            "interval, so gaps inside graphs are invisible; record with "
            "`nsys profile --cuda-graph-trace=node` to see them"
        )
    if len(frames.nvtx) == 0:
        out.append("no NVTX ranges in this trace: per-range figures are empty; devices and streams cover the whole trace")
    elif len(ranges.frame) == 0:
        out.append("the trace has NVTX events but no closed NVTX ranges")
    if len(frames.api) == 0:
        out.append("no CUDA API calls in this trace (record with -t cuda): GPU work cannot be tied to NVTX ranges")
    else:
        unlinked = int((launch < 0).sum())
        if unlinked:
            out.append(f"{unlinked} GPU activities have no launching API call in the trace and belong to no range")
    return out


def run_analysis(
    frames: TraceFrames, *, ranges: Sequence[str] = (), count_memops: bool = False,
    attribution: bool = True, top: int = 10,
) -> Analysis:
    """Compute every metric of docs/metrics.md on loaded frames (``attribution``: also the
    gap categories, launch statistics, graph payoff and the ``top`` longest gaps)."""
    acts = activity_arrays(frames, count_memops)
    calls = CallIndex(frames.api)
    launch = link_launches(frames, calls)
    table = range_table(frames, ranges)
    member_range, member_act = range_members(frames, launch, table)
    n_ranges = len(table.frame)

    every = np.arange(acts.start.size, dtype=np.int64)
    device_ids = acts.device_ids
    n_dev = device_ids.size
    s_keys = acts.stream_keys
    stream_keys = pd.DataFrame({
        "pid": s_keys >> 40,
        "device": device_ids[(s_keys >> 32) & 0xFF],
        "stream": s_keys & 0xFFFFFFFF,
    })
    n_str = len(stream_keys)
    # Three independent levels (and the attribution's indexes), on two threads: their numpy
    # sorts and searches release the GIL.
    with ThreadPoolExecutor(2) as pool:
        attributor = pool.submit(Attributor, frames, acts, launch) if attribution else None
        # Ranges: one pair per (range, device), numbered range * n_dev + device code.
        ranged = pool.submit(
            level_stats, acts, member_act, member_range * n_dev + acts.device_code[member_act],
            np.repeat(np.arange(n_ranges, dtype=np.int64), n_dev), n_ranges,
        )
        devices = pool.submit(level_stats, acts, every, acts.device_code, np.arange(n_dev), n_dev)
        streams = pool.submit(level_stats, acts, every, acts.stream_code, np.arange(n_str), n_str)
        range_stats, range_gaps = ranged.result()
        device_stats, device_gaps = devices.result()
        stream_stats, stream_gaps = streams.result()
        attributor = attributor.result() if attributor else None

    # Range names.
    rf = table.frame
    name_codes, name_uniques = pd.factorize(rf["name"].to_numpy(), sort=False)
    name_stats = rollup_stats(
        range_stats, name_codes.astype(np.int64), len(name_uniques), range_gaps, acts,
        member_act, member_range,
    )

    mode = _graph_trace_mode(frames, launch)
    range_keys = rf[["name", "domain", "pid", "thread", "start_ns", "end_ns", "depth"]].copy()
    range_keys.insert(0, "id", np.arange(n_ranges))
    by_name = _rows(
        pd.DataFrame({"name": np.asarray(name_uniques, dtype=object),
                      "count": np.bincount(name_codes, minlength=len(name_uniques))}),
        name_stats,
    )
    result = AnalysisResult(
        trace={
            "path": frames.meta.path,
            "name": Path(frames.meta.path).name,
            "nsys_version": frames.meta.nsys_version,
            "export_schema": frames.meta.export_schema,
            "graph_trace": mode,
            "gpus": {str(k): v for k, v in sorted(frames.meta.gpu_names.items())},
        },
        options={"count_memops": count_memops, "range_filter": list(ranges)},
        warnings=_warnings(frames, launch, table, mode),
        ranges=_rows(range_keys, range_stats),
        by_name=by_name,
        devices=_rows(pd.DataFrame({"device": np.asarray(device_ids)}), device_stats),
        streams=_rows(stream_keys, stream_stats),
    )
    if attribution:
        range_gaps, device_gaps, stream_gaps = _attribute(
            result, frames, acts, attributor, launch, range_gaps, device_gaps, stream_gaps,
                   name_codes.astype(np.int64), len(name_uniques), top)
    if ranges and not (range_stats["kernels"].to_numpy() > 0).any():
        raise GapscopeError(
            f"the ranges matching {', '.join(repr(r) for r in ranges)} launched no GPU work"
        )
    return Analysis(
        frames=frames, acts=acts, launch=launch, ranges=table, member_range=member_range,
        member_act=member_act, range_gaps=range_gaps,
        device_gaps=device_gaps, stream_keys=stream_keys, stream_gaps=stream_gaps, result=result,
    )


def _attribute(
    result: AnalysisResult, frames: TraceFrames, acts: ActivityArrays, attributor: Attributor,
    launch: np.ndarray,
    range_gaps: GapList, device_gaps: GapList, stream_gaps: GapList, name_codes: np.ndarray,
    n_names: int, top: int,
) -> tuple[GapList, GapList, GapList]:
    """Add gap categories, the graph payoff ceiling, launch statistics and the longest gaps to
    the result; return the three gap lists with their categories."""
    with ThreadPoolExecutor(2) as pool:
        launches = pool.submit(
            launch_stats, launch, acts.start, attributor.api_start, attributor.api_end,
            attributor.name_codes, attributor.name_table,
        )
        range_gaps, device_gaps, stream_gaps = pool.map(
            lambda g: replace(g, category=attributor.classify(g)), (range_gaps, device_gaps, stream_gaps)
        )
        result.extras["launch"] = launches.result()
    levels = (
        (result.ranges, range_gaps.row, range_gaps),
        (result.by_name, name_codes[range_gaps.row] if name_codes.size else range_gaps.row, range_gaps),
        (result.devices, device_gaps.row, device_gaps),
        (result.streams, stream_gaps.row, stream_gaps),
    )
    for rows, row_of_gap, gaps in levels:
        sums = as_dicts(category_sums(row_of_gap, gaps.length, gaps.category, len(rows)))
        for row, by_cat in zip(rows, sums):
            row["gap_by_category_ns"] = by_cat
    for row in (*result.ranges, *result.by_name, *result.devices):
        span, speedup = ceiling(row["gpu_span_ns"], row["gap_by_category_ns"])
        row["graph_ceiling_span_ns"] = span
        row["graph_ceiling_speedup"] = speedup
    result.extras["payoff"] = measured_pairs(result.by_name)
    result.extras["top_gaps"] = longest_gaps(
        frames, device_gaps, device_gaps.category, launch, attributor.name_codes,
        attributor.name_table, acts.busy, top
    )
    return range_gaps, device_gaps, stream_gaps


def analysis_of(
    path: str | Path, *, ranges: Sequence[str] = (), count_memops: bool = False,
    attribution: bool = True, top: int = 10,
) -> Analysis:
    """Load and analyze one nsys SQLite export, keeping the raw arrays beside the result (for
    transforms such as plots that need the gaps themselves)."""
    frames = load_trace(path, syncs=attribution)
    try:
        return run_analysis(frames, ranges=ranges, count_memops=count_memops,
                            attribution=attribution, top=top)
    finally:
        frames.strings.close()


def analyze(
    path: str | Path, *, ranges: Sequence[str] = (), count_memops: bool = False,
    attribution: bool = True, top: int = 10,
) -> AnalysisResult:
    """Analyze one nsys SQLite export: gap fraction per NVTX range, range name, device and
    stream, and (``attribution``) why the GPU sat idle."""
    return analysis_of(path, ranges=ranges, count_memops=count_memops,
                       attribution=attribution, top=top).result
