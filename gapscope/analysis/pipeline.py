"""The analysis pipeline: from a trace's frames to an AnalysisResult, in one pass.

Data flows one way, in the five steps of :func:`run_analysis`:

1. link (:func:`_linked`): the activities as arrays, each one's launching call, the NVTX ranges
   and the work each owns (gapscope.analysis.ranges);
2. levels (:func:`_levels_kept`, or :func:`_levels_windowed` one window at a time): the timeline
   metrics per (range, device) pair, device and stream (gapscope.analysis.metrics,
   gapscope.analysis.windows), the gap categories (gapscope.analysis.attribution), the launch
   statistics (gapscope.analysis.launches) and the longest gaps;
3. rollups (:func:`_rollups`): the pairs per range instance and per range name;
4. sections (:func:`_sections`): each section's rows with their graph replays
   (gapscope.analysis.replays), categories and graph payoff (gapscope.analysis.payoff), verdicts
   and communication figures;
5. one AnalysisResult, built once at the end (gapscope.analysis.result).

Each step is a function whose temporaries go when it returns; the memory hand-backs between
them (frame columns read for good, the heap's free pages) are :class:`_Memory`'s.

:class:`AnalysisArrays` keeps the arrays computed on the way (gap lists with their categories, the
per-pair statistics) for transforms that need more than the result: plots, the many-trace merge
and the case figures use them instead of computing them again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gapscope import heap
from gapscope.analysis import answer, communication, memory, prediction, time_window, windows
from gapscope.analysis.attribution import (
    CATEGORY_LABELS, Attributor, LongStalls, api_names, category_sums, distinct_gaps, longest_gaps,
    setup_sums,
)
from gapscope.analysis.host_timeline import DEFAULT_STALL_THRESHOLD_NS
from gapscope.analysis.keys import code_dtype, narrowed, pair_code, small_codes, stream_key, unpack_stream_key
from gapscope.analysis.launches import launch_stats
from gapscope.analysis.metrics import (
    QUANTILES, STATS_FIELDS, ActivityArrays, GapList, group_medians, kernel_counts, level_stats, level_table,
    member_kernels, rollup_quantiles, rollup_stats, rollup_table,
)
from gapscope.analysis.payoff import measured_pairs
from gapscope.analysis.ranges import (
    CallIndex, RangeTable, is_library_domain, link_launches, process_work_counts, range_calls, range_members,
    range_table,
)
from gapscope.analysis.recording import name_recording, range_recording
from gapscope.analysis.replays import Replays, figures as replay_figures
from gapscope.analysis.result import AnalysisResult
from gapscope.analysis.rows import Nested, RowTable, rows_of
from gapscope.analysis.verdicts import column_verdicts
from gapscope import catalog
from gapscope.catalog import CATEGORY_NAMES, GRAPH_SHARE, process_of
from gapscope.errors import GapscopeError
from gapscope.trace.cuda_api import GRAPH_LAUNCH_CALLS, QUIET_CALLS, base_name
from gapscope.trace.frames import ActivityKind, TraceFrames
from gapscope.trace.nsys_schema import KNOWN_SCHEMA_MAJORS


@dataclass(frozen=True)
class RangePairs:
    """Range work split by device: one *pair* per (range instance, device), numbered
    ``range * n_devices + device code``. ``stats``: STATS per pair (span, busy, gap, counts;
    percentiles left NaN, as they only make sense over the groups pairs roll up into);
    ``gap_lengths``: every range-level gap's (row = its pair, length); ``categories``: gap time
    per pair and IdleCategory (None without attribution)."""

    n_devices: int
    stats: pd.DataFrame
    gap_lengths: tuple[np.ndarray, np.ndarray]
    categories: np.ndarray | None

    @property
    def range_of(self) -> np.ndarray:
        """The range instance of each pair."""
        return np.arange(len(self.stats)) // self.n_devices

    @property
    def device_code_of(self) -> np.ndarray:
        """The device code (index into ActivityArrays.device_ids) of each pair."""
        return np.arange(len(self.stats)) % self.n_devices


@dataclass(frozen=True)
class AnalysisArrays:
    """Everything computed on the way to the result: the frames, launch links, range
    membership, per-pair statistics and the gap lists of every level with their categories.
    The links and the membership are 32-bit arrays where the trace allows (fewer than 2**31
    calls, activities and ranges), as the activity arrays' device and stream codes are. The
    memberships (``member_act``, ``member_pair``, ``member_range``, one entry per activity in a
    range) come in no set order: range by range, or (measured in windows) window by window."""

    frames: TraceFrames
    acts: ActivityArrays
    launch: np.ndarray
    ranges: RangeTable
    name_of_range: np.ndarray  # the result's by_name row of each range
    member_range: np.ndarray
    member_act: np.ndarray
    member_pair: np.ndarray  # each membership's (range, device) pair: range * devices + device code
    pairs: RangePairs | None  # None for an analysis run without ``gaps`` or ``merge`` (run_analysis)
    range_gaps: GapList | None
    device_gaps: GapList | None
    stream_keys: pd.DataFrame
    stream_gaps: GapList | None
    result: AnalysisResult
    #: Seconds spent opening the trace and reading its frames (analysis_of measures it; None
    #: for frames read elsewhere). Shown in report headers, never written into the result.
    read_seconds: float | None = None
    #: The communication kernels (gapscope.analysis.communication), None when the trace ran none.
    comm: communication.CommKernels | None = None


#: The frames' columns read only up to the range memberships (run_analysis's ``release_ids``):
#: processes and correlation ids (the launch links), the activities' devices and streams and
#: the calls' name ids (their codes are kept). An activity's source row goes too
#: where its name id is loaded (the row is read only to look a name id up).
READ_ONCE = {"activities": ("proc", "corr", "device", "stream"), "api": ("proc", "corr", "name_id")}
#: The calls' columns read up to the levels' end (the launch statistics, the attribution).
READ_BY_LEVELS = {"api": ("start", "end", "tid")}


def _read_once(frames: TraceFrames) -> dict[str, tuple[str, ...]]:
    """READ_ONCE, with the activities' source row where their name ids are loaded."""
    if "name_id" not in frames.activities:
        return READ_ONCE
    return {**READ_ONCE, "activities": (*READ_ONCE["activities"], "row")}


def activity_arrays(frames: TraceFrames, count_memops: bool) -> ActivityArrays:
    """The activity columns as arrays, with kernels (and graph executions) always busy and
    memcpy/memset busy only when ``count_memops`` is set, and device and stream codes."""
    a = frames.activities
    kind = a["kind"].to_numpy()
    is_kernel = (kind == ActivityKind.KERNEL) | (kind == ActivityKind.GRAPH)
    is_memop = (kind == ActivityKind.MEMCPY) | (kind == ActivityKind.MEMSET)
    dev_codes, device_ids = pd.factorize(a["device"].to_numpy(), sort=True)
    dev_codes = small_codes(dev_codes, len(device_ids))  # a byte an activity where there are few devices
    s_codes, s_keys = pd.factorize(
        stream_key(a["proc"].to_numpy(), dev_codes, a["stream"].to_numpy()), sort=True
    )
    start, end = a["start"].to_numpy(), a["end"].to_numpy()
    if (end < start).any():  # an activity that ends before it starts lasts no time (else: no copy)
        end = np.maximum(end, start)
    return ActivityArrays(
        start=start,
        end=end,
        is_kernel=is_kernel,
        is_memop=is_memop,
        busy=is_kernel | (is_memop & count_memops),
        device_code=dev_codes,
        device_ids=np.asarray(device_ids, dtype=np.int64),
        stream_code=small_codes(s_codes, len(s_keys)),
        stream_keys=np.asarray(s_keys, dtype=np.int64),
    )


def _columns(keys: pd.DataFrame, stats: pd.DataFrame) -> dict[str, Any]:
    """A section's first columns: its keys, then its STATS_FIELDS (gapscope.analysis.rows)."""
    return {**{c: keys[c].to_numpy() for c in keys.columns}, **{c: stats[c].to_numpy() for c in STATS_FIELDS}}


def _graph_trace_mode(frames: TraceFrames, launch: np.ndarray) -> str:
    """How graphs were traced: ``node`` when kernels were launched by a graph launch call
    (nsys's --cuda-graph-trace=node), ``graph`` when graph executions are opaque rows."""
    kind = frames.activities["kind"].to_numpy()
    graph_level = bool((kind == ActivityKind.GRAPH).any())
    node_level = False
    kernel_calls = launch[(kind == ActivityKind.KERNEL) & (launch >= 0)]
    if kernel_calls.size:
        ids = pd.unique(frames.api["name_id"].to_numpy()[kernel_calls])
        names = frames.names.lookup(int(i) for i in ids)
        node_level = any(base_name(n) in GRAPH_LAUNCH_CALLS for n in names.values())
    if graph_level and node_level:
        return "mixed"
    return "graph" if graph_level else "node" if node_level else "none"


#: What to do about a trace without NVTX ranges, in its warning.
NO_RANGES_ADVICE = ("mark it with NVTX ranges (torch.cuda.nvtx.range_push/pop, nvtx.annotate) or "
                    "torch.profiler.record_function, record only it (gapscope profile --capture-range nvtx:NAME), "
                    "or analyze a time window after the start-up (--window 2s: skips the first 2 s)")


def _warnings(frames: TraceFrames, launch: np.ndarray, ranges: RangeTable, mode: str,
              elsewhere: list[str], windowed: bool = False) -> list[str]:
    out = list(frames.warnings)  # what the reader says (damaged rows left out, fields its format lacks) comes first
    major = (frames.meta.export_schema or "").split(".")[0]
    nsys = frames.meta.format.startswith("nsys")  # other formats check their own schema
    if nsys and major.isdigit() and int(major) not in KNOWN_SCHEMA_MAJORS:
        checked = ", ".join(f"{m}.x" for m in KNOWN_SCHEMA_MAJORS)
        out.append(f"export schema {frames.meta.export_schema} is not one gapscope was checked on ({checked})")
    if mode in ("graph", "mixed"):
        out.append(
            "CUDA graphs were traced at graph level: each graph launch is one opaque busy "
            "interval, so gaps inside graphs are invisible; record with "
            "`nsys profile --cuda-graph-trace=node` to see them"
        )
    if windowed and len(ranges.frame) == 0:
        out.append("no NVTX range in this window: per-range figures are empty; the devices and streams cover "
                   "the window")
    elif len(frames.nvtx) == 0:
        out.append("no NVTX ranges in this trace: per-range figures are empty and the devices cover the whole "
                   f"trace, start-up included; to see the loop alone, {NO_RANGES_ADVICE}")
    elif len(ranges.frame) == 0:
        out.append("the trace has NVTX events but no closed NVTX ranges")
    if len(frames.api) == 0:
        out.append("no CUDA API calls in this trace (record with -t cuda): GPU work cannot be tied to NVTX ranges")
    else:
        unlinked = int((launch < 0).sum())
        if unlinked:
            out.append(f"{unlinked} GPU activities have no launching API call in the trace and belong to no range")
    out += elsewhere
    return out


def _with_categories(columns: dict[str, Any], sums: np.ndarray) -> None:
    """A section's ``gap_by_category_ns`` column added; like the other ``_with_`` helpers it adds
    to the pipeline's own columns, not yet in a result."""
    columns["gap_by_category_ns"] = Nested(CATEGORY_LABELS, np.asarray(sums, dtype=np.int64))


def _with_prediction(columns: dict[str, Any], sums: np.ndarray, setup: np.ndarray, stalls: LongStalls,
                     costs: prediction.TraceCosts, frames: TraceFrames) -> None:
    """A section's steady state (its one-off gaps: every setup gap and the long stalls that do
    not repeat, attribution.LongStalls.one_off, with the libraries whose kernels they ended
    in), its predicted CUDA Graph speedup and its graph ceiling
    (gapscope.analysis.prediction), for every row at once."""
    n = len(sums)
    stalled, columns["one_off_stalls"] = stalls.one_off(n)
    columns["one_off_libraries"] = stalls.libraries(n, frames)
    one_off = np.asarray(setup, dtype=np.int64) + stalled
    columns["one_off_by_category_ns"] = Nested(CATEGORY_LABELS, one_off)
    instances = np.asarray(columns["count"]) if "count" in columns else np.ones(n)
    predicted = prediction.predict(columns, sums, one_off, instances, costs)
    for field in prediction.FIELDS:
        values = predicted[field]
        columns[field] = np.rint(values).astype(np.int64) if field in prediction.WHOLE_NS else values


def _instance_kinds(range_cols: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(replayed, eager) per range instance with GPU work: replayed where more than GRAPH_SHARE of
    its kernels came from graph launches, eager otherwise (docs/metrics.md, "Graph coverage")."""
    kernels = np.asarray(range_cols["kernels"])
    replayed = (np.asarray(range_cols["graph_replays"]) > 0) & (kernels > 0) & \
        (np.asarray(range_cols["graph_kernels"]) > GRAPH_SHARE * kernels)
    return replayed, (kernels > 0) & ~replayed


def _with_coverage(range_cols: dict[str, Any], name_cols: dict[str, Any], range_name: np.ndarray) -> None:
    """Graph coverage per range name (docs/metrics.md, "Graph coverage"): how many of its
    instances with GPU work ran as replays and how many eagerly, the first and last eager
    instance's id, and the median span of each kind."""
    n_names = len(name_cols["name"])
    replayed, eager = _instance_kinds(range_cols)
    name_cols["replayed_instances"] = np.bincount(range_name[replayed], minlength=n_names)
    name_cols["eager_instances"] = np.bincount(range_name[eager], minlength=n_names)
    e = np.flatnonzero(eager)
    first = np.full(n_names, np.inf)
    last = np.full(n_names, -np.inf)
    np.minimum.at(first, range_name[e], e)
    np.maximum.at(last, range_name[e], e)
    name_cols["first_eager_instance"] = np.where(np.isfinite(first), first, np.nan)  # range ids; null: none
    name_cols["last_eager_instance"] = np.where(np.isfinite(last), last, np.nan)
    span = np.asarray(range_cols["gpu_span_ns"], dtype=np.float64)
    for field, mask in (("eager_instance_span_ns", eager), ("replayed_instance_span_ns", replayed)):
        name_cols[field] = group_medians(span, mask, range_name, n_names)


def _host_speed_warnings(range_cols: dict[str, Any], name_cols: dict[str, Any], range_name: np.ndarray
                         ) -> list[str]:
    """A warning per launch- or host-bound range name (the program's own, not a library's) whose
    eager instances of the same work (its most common kernel count, at least MIN_KERNELS) varied
    in steady host-side gap time (launch and host) as catalog.HOST_SPEED_SPREAD says: the host's
    speed changed during the recording, and the prediction takes the recorded speed as the
    untraced program's (docs/metrics.md, "Steady state"). None without attribution."""
    from gapscope.render.units import fmt_ns  # the warning's words, as the answer's (analysis.answer)

    if "one_off_by_category_ns" not in range_cols:
        return []
    _, eager = _instance_kinds(range_cols)
    kernels = np.asarray(range_cols["kernels"])
    bound = np.isin(np.asarray(name_cols["verdict"], dtype=object), ("launch_bound", "host_bound"))
    counted = eager & (kernels >= catalog.MIN_KERNELS) & bound[range_name]
    steady = range_cols["gap_by_category_ns"].values - range_cols["one_off_by_category_ns"].values
    host_side = steady[:, [CATEGORY_NAMES.index("launch"), CATEGORY_NAMES.index("host")]].sum(axis=1)
    frame = pd.DataFrame({"name": range_name[counted], "kernels": kernels[counted],
                          "host": host_side[counted].astype(np.float64)})
    sizes = frame.groupby(["name", "kernels"]).size()
    work = sizes[sizes >= catalog.HOST_SPEED_INSTANCES].reset_index(name="n").sort_values(
        ["name", "n", "kernels"], ascending=[True, False, True]).drop_duplicates("name")
    if work.empty:
        return []
    same = frame.merge(work[["name", "kernels"]])
    out = []
    for (code, kernels_each), host in same.groupby(["name", "kernels"])["host"]:
        q1, q3 = host.quantile(0.25), host.quantile(0.75)
        if q3 < catalog.HOST_SPEED_SPREAD * q1 or is_library_domain(name_cols["domain"][code]):
            continue
        out.append(f"the host's speed varied during the recording: the {len(host)} eager instances of "
                   f"{name_cols['name'][code]!r} with {kernels_each:,} kernels each spent {fmt_ns(q1)}-{fmt_ns(q3)} "
                   f"in launch and host gaps between their quartiles ({fmt_ns(host.min())}-{fmt_ns(host.max())} "
                   "in all); its predicted speedup takes the recorded host speed as the untraced program's "
                   "(docs/metrics.md, \"Steady state\")")
    return out


def _named(rf: pd.DataFrame, domains: Sequence[str]) -> tuple[int, str]:
    """(how many ranges, their names with counts, up to four) of some ranges; libraries' own
    ranges (XLA's compile passes, ...) are left out unless domains were asked for."""
    if not domains:
        rf = rf[~rf["domain"].map(is_library_domain).to_numpy(dtype=bool)]
    counts = rf.groupby("group", sort=False).size()
    named = [f"{g} x{n}" for g, n in counts.items()]
    return len(rf), ", ".join(named[:4]) + (f" and {len(named) - 4} more names" if len(named) > 4 else "")


def _other_thread_work(frames: TraceFrames, launch: np.ndarray, table: RangeTable, member_range: np.ndarray,
                       threads: str) -> tuple[np.ndarray, np.ndarray]:
    """Per range, (the GPU work it counts, the GPU work other threads of its process launched
    inside it that it does not count) with ``threads="same"``; zeros both with ``"process"``, or
    where no other thread launched (its own work then not counted here)."""
    n = len(table.frame)
    none = np.zeros(n, dtype=np.int64)
    if threads != "same" or n == 0 or not (launch >= 0).any():
        return none, none
    launching = _launching_threads(frames, launch)  # globalTids: process in bits 24+
    holding = pd.unique(table.frame["tid"].to_numpy())
    pairs = pd.DataFrame({"p": process_of(holding), "r": holding}).merge(
        pd.DataFrame({"p": process_of(launching), "t": launching}))
    if not (pairs["t"] != pairs["r"]).any():  # no other thread launches in a range's process
        return none, none
    own = np.bincount(member_range, minlength=n)
    return own, process_work_counts(frames, launch, table) - own


def _other_thread_warnings(table: RangeTable, own: np.ndarray, extra: np.ndarray, domains: Sequence[str]) -> list[str]:
    """Warnings naming the ranges that got no GPU work on their own thread while other threads
    of their process launched work inside them, and those that got some but miss what other
    threads launched inside them (``own``, ``extra``: :func:`_other_thread_work`)."""
    if not extra.any():
        return []
    out = []
    for sel, text in (((own == 0) & (extra > 0), "launched no GPU work on their own thread while other threads of "
                       "their process launched work inside them; `--threads process` gives them that work"),
                      ((own > 0) & (extra > 0), "miss GPU work that other threads of their process launched inside "
                       "them (PyTorch's autograd thread launches the backward pass), so their gaps hold that "
                       "work's time; `--threads process` counts it")):
        n, shown = _named(table.frame.iloc[np.flatnonzero(sel)], domains)
        if n:
            out.append(f"{n} NVTX ranges ({shown}) {text}")
    return out


def _launching_threads(frames: TraceFrames, launch: np.ndarray) -> np.ndarray:
    """The threads (globalTids) of the calls that launched work."""
    called = np.zeros(len(frames.api), dtype=bool)  # a byte a call
    called[launch[launch >= 0]] = True
    return pd.unique(frames.api["tid"].to_numpy()[called])


def _name_groups(rf: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """(name row of each range, the name rows' keys): one row per (domain, group name), in
    first-appearance order."""
    codes = rf.groupby(["domain", "group"], sort=False, dropna=False).ngroup().to_numpy(np.int64)
    n = int(codes.max()) + 1 if codes.size else 0
    first = np.full(n, codes.size, dtype=np.int64)
    np.minimum.at(first, codes, np.arange(codes.size))
    keys = pd.DataFrame({
        "name": rf["group"].to_numpy(dtype=object)[first],
        "domain": rf["domain"].to_numpy(dtype=object)[first],
        "count": np.bincount(codes, minlength=n),
    })
    return codes, keys


def _with_verdicts(columns: dict[str, Any], graph_level: bool) -> None:
    """A section's machine-readable ``verdict`` and the ``reading`` the tables show added:
    each row's ``verdicts.verdict``, decided over the columns (``verdicts.column_verdicts``)."""
    columns["verdict"], columns["reading"] = column_verdicts(columns, rows_of(columns), graph_level)


class _Memory:
    """The analysis's memory hand-backs, all of them: the frame columns it has read for good are
    dropped from ``frames`` (with ``release_ids``: TraceFrames.release), and once the result is
    built the C heap's free pages go back to the system (gapscope.heap, from heap.TRIM_ROWS
    activities on). Not between the steps: each step's arrays reuse the heap's blocks the steps
    before freed, where pages handed back would be zeroed again (docs/performance.md); except a
    large trace's (heap.LARGE_ROWS activities on), whose large blocks are mapped apart during its
    analysis, and whose frame columns let go are handed back as they go. The steps' own arrays
    go when the step that made them returns."""

    def __init__(self, frames: TraceFrames, release_ids: bool) -> None:
        self.frames = frames
        self.release_ids = release_ids
        self.rows = len(frames.activities)
        heap.map_apart_for(self.rows)  # a large trace's arrays mapped apart (gapscope.heap)

    def drop(self, columns: Mapping[str, Sequence[str]]) -> None:
        """Let go of these frame columns, read for good (only with ``release_ids``)."""
        if self.release_ids:
            self.frames.release(columns)
            self.holes()

    def narrow(self) -> None:
        """The activities' name ids kept in 16 bits where they fit (only with ``release_ids``:
        TraceFrames.narrow_name_ids)."""
        if self.release_ids:
            self.frames.narrow_name_ids()
            self.holes()

    def holes(self) -> None:
        """A large trace's blocks just freed in the heap handed back (heap.give_back_holes_for)."""
        heap.give_back_holes_for(self.rows)

    def give_back(self) -> None:
        """Hand the heap's free pages back, the analysis done."""
        heap.give_back_for(self.rows)


@dataclass(frozen=True)
class Linked:
    """The frames linked up, the pipeline's first step, which every later step reads: the
    activities as arrays, each one's launching call (-1 for none), the NVTX ranges, each call's
    name code with the names (attribution.api_names), the graph replays, the streams' keys and
    the range of each (range, device) pair; with what was read while the link ids were there:
    how graphs were traced (``graph_trace``) and the warnings about other threads' work."""

    frames: TraceFrames
    acts: ActivityArrays
    launch: np.ndarray
    table: RangeTable
    names: tuple[np.ndarray, np.ndarray]
    replays: Replays
    stream_keys: pd.DataFrame
    pair_range: np.ndarray
    graph_trace: str
    elsewhere: list[str]
    #: per range, the CUDA calls its thread made inside it and their summed duration
    host_calls: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    #: per range, the graphs its thread recorded inside it and the recording's time (recording.py)
    recording: tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    #: per range, the GPU work other threads launched inside it that it does not count
    other_thread_work: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def n_ranges(self) -> int:
        return len(self.table.frame)

    @property
    def n_dev(self) -> int:
        return self.acts.device_ids.size

    @property
    def n_pairs(self) -> int:
        return self.pair_range.size

    @property
    def n_str(self) -> int:
        return len(self.stream_keys)


@dataclass(frozen=True)
class Memberships:
    """The GPU work each range owns: one entry per (range, activity), in no set order (range by
    range, or window by window: :meth:`in_windows`), ``act`` the activity and ``pair`` its
    (range, device) pair, ``range * devices + device code``, 32-bit where they fit. The range
    of an entry is its pair's (:meth:`ranges`): not held through the analysis's peak."""

    act: np.ndarray
    pair: np.ndarray
    range_dtype: np.dtype

    def in_windows(self, acts: ActivityArrays) -> tuple[Memberships, windows.WindowPlan]:
        """The same memberships in the windows' order, and the windows' plan
        (gapscope.analysis.windows.planned); the caller lets these go."""
        act, pair, plan = windows.planned(acts, self.act, self.pair)
        return Memberships(act, pair, self.range_dtype), plan

    def ranges(self, n_dev: int) -> np.ndarray:
        """The range of each membership."""
        return (self.pair // max(n_dev, 1)).astype(self.range_dtype)


@dataclass(frozen=True)
class LevelOptions:
    """What shapes the levels: ``attribution`` (the gap categories and the longest gaps), the
    stall threshold, the ``top`` longest gaps kept, and whether ranges were ``selected`` by
    name or domain (the launch statistics and the longest gaps then cover their work only)."""

    attribution: bool
    stall_threshold_ns: int
    top: int
    selected: bool


@dataclass(frozen=True)
class Level:
    """One timeline level's figures: STATS per row (range pairs: percentiles left NaN, as they
    only make sense over the groups pairs roll up into), gap time per row and IdleCategory (None
    without attribution), gap time inside graph replays (range pairs: per range; none for
    streams), and the level's gap list when it is kept."""

    stats: pd.DataFrame
    categories: np.ndarray | None
    inside: np.ndarray | None = None
    gaps: GapList | None = None
    #: setup gap time per (row, category) and the long stall gaps (range pairs and devices)
    setup: np.ndarray | None = None
    long_stalls: LongStalls | None = None


@dataclass(frozen=True)
class Levels:
    """What the three timeline levels give the result: the range pairs, devices and streams,
    every range pair gap's (row, length) for the rollups' percentiles, the longest gaps (None
    without attribution) and the launch statistics; the range level's gap list (the pairs' gaps
    by range) only when every gap list was kept."""

    pairs: Level
    devices: Level
    streams: Level
    pair_gap_lengths: tuple[np.ndarray, np.ndarray] | None  # None once the rollups let them go
    top_gaps: list[dict] | None
    launch_rows: list[dict]
    range_gaps: GapList | None = None


#: The calls' ends and threads, read up to the attribution's host timeline (which keeps the
#: threads' codes; the attribution, the calls' lengths), where the launch statistics came first.
READ_BY_ATTRIBUTION = {"api": ("end", "tid")}

#: From this many activities on, the steps that ran side by side on two threads run one after
#: the other (:func:`_one_at_a_time`). Side by side is faster on few cores, one after the other
#: needs less memory (docs/performance.md, "Tried and dropped"). The size from which its large
#: blocks are mapped apart as well (gapscope.heap).
SERIAL_ACTIVITIES = heap.LARGE_ROWS


def _one_at_a_time(acts: ActivityArrays) -> bool:
    """Whether the analysis of these activities runs its large steps one after the other: the
    attribution's build before the windows, the launch statistics before both, the two rollups
    in turn; so that no two steps' temporaries are held at once (docs/performance.md)."""
    return acts.start.size >= SERIAL_ACTIVITIES


def _linked(frames: TraceFrames, ranges: Sequence[str], domains: Sequence[str], count_memops: bool,
            threads: str, normalize: bool, memory: _Memory) -> tuple[Linked, Memberships]:
    """Step 1: each activity, the call that launched it, the ranges and the work each owns.
    What reads the link ids (the other threads' work, the calls' names) is done before they go."""
    acts = activity_arrays(frames, count_memops)
    launch = link_launches(frames, CallIndex(frames.api))  # the index is let go once the links are found
    table = range_table(frames, ranges, domains=domains, normalize=normalize)
    member_range, member_act = range_members(frames, launch, table, threads)
    names = api_names(frames)
    quiet = np.isin(names[1], sorted(QUIET_CALLS))
    host_calls = range_calls(frames, table, ~quiet[names[0]] if quiet.any() else None)
    recorded = range_recording(frames, table, names)
    own_work, other_work = _other_thread_work(frames, launch, table, member_range, threads)
    elsewhere = _other_thread_warnings(table, own_work, other_work, domains)
    mode = _graph_trace_mode(frames, launch)
    memory.drop(_read_once(frames))
    memory.narrow()
    n_dev = acts.device_ids.size
    pid, dev_code, stream = unpack_stream_key(acts.stream_keys)
    stream_keys = pd.DataFrame({"pid": pid, "device": acts.device_ids[dev_code], "stream": stream})
    n_pairs = len(table.frame) * n_dev
    members = Memberships(member_act, narrowed(pair_code(member_range, acts.device_code[member_act], n_dev), n_pairs),
                          member_range.dtype)
    graph_call = np.isin(names[1], list(GRAPH_LAUNCH_CALLS))[names[0]]
    replays = Replays(frames.activities["kind"].to_numpy(), launch, graph_call)
    pair_range = np.arange(n_pairs, dtype=np.int64) // max(n_dev, 1)
    return Linked(frames, acts, launch, table, names, replays, stream_keys, pair_range, mode, elsewhere,
                  host_calls, recorded, other_work), members


def _launch_rows(w: Linked, m: Memberships, o: LevelOptions, after: Future | None = None) -> list[dict]:
    """The launch statistics (gapscope.analysis.launches) of the calls that launched work; with
    a selection, of the selected ranges' work only. ``after``: a step to wait for first."""
    if after is not None:
        wait([after])
    launch = w.launch
    if o.selected:
        launch = np.full(w.launch.size, -1, dtype=w.launch.dtype)
        launch[m.act] = w.launch[m.act]
    return launch_stats(launch, w.acts.start, w.frames.api["start"].to_numpy(), w.frames.api["end"].to_numpy(),
                        *w.names, o.stall_threshold_ns)


def _attributor(pool: ThreadPoolExecutor, w: Linked, o: LevelOptions, start_order: np.ndarray | None = None,
                read: Callable[[], None] | None = None) -> Future[Attributor] | None:
    """The attribution's indexes being built on ``pool``, when ``attribution`` (``start_order``:
    Attributor's, the windows' order of the activities; ``read``: Attributor's)."""
    return pool.submit(Attributor, w.frames, w.acts, w.launch, w.names, stall_threshold_ns=o.stall_threshold_ns,
                       start_order=start_order, read=read) if o.attribution else None


def _top_gaps(w: Linked, o: LevelOptions, candidates: GapList | None) -> list[dict] | None:
    """The ``top`` longest gaps of the ``candidates`` (None without attribution): the device
    level's, or with a selection the selected ranges' distinct gaps."""
    if candidates is None:
        return None
    return longest_gaps(w.frames, candidates, w.launch, *w.names, w.acts, o.top)


def _levels_kept(w: Linked, m: Memberships, o: LevelOptions) -> Levels:
    """The levels measured over the whole trace at once, every gap list kept (with its
    categories): what plots, the per-gap tables and the many-trace merge read."""
    acts = w.acts
    every = np.arange(acts.start.size, dtype=np.int64)  # the devices' and streams' members: every activity
    (pair_stats, pair_gaps), (device_stats, device_gaps), attributor, launch_rows = _kept_beside(w, m, o, every)
    attributed = attributor is not None
    if attributed:
        # The range and stream levels reuse the device level's split for the gaps they share
        # (one classification of most gaps).
        device_gaps, pair_gaps = attributor.attribute([device_gaps, pair_gaps])
    pair_cats, device_cats = _sums(pair_gaps, w.n_pairs, attributed), _sums(device_gaps, w.n_dev, attributed)
    # The streams last, reusing the device level's gap split.
    stream_stats, stream_gaps = level_stats(acts, every, acts.stream_code, np.arange(w.n_str), w.n_str)
    if attributed:
        stream_gaps = attributor.attribute([device_gaps, stream_gaps])[1]
    stream_cats = _sums(stream_gaps, w.n_str, attributed)
    range_gaps = replace(pair_gaps, row=w.pair_range[pair_gaps.row])
    longest = None
    if attributed:
        # With a selection, the longest gaps are those of the selected ranges' work.
        longest = distinct_gaps(range_gaps) if o.selected else device_gaps
    top_gaps = _top_gaps(w, o, longest)
    thr = o.stall_threshold_ns
    pair_one_off = (setup_sums(pair_gaps, w.n_pairs), LongStalls.of(pair_gaps, thr)) if attributed else (None, None)
    device_one_off = (setup_sums(device_gaps, w.n_dev), LongStalls.of(device_gaps, thr)) if attributed else \
        (None, None)
    return Levels(Level(pair_stats, pair_cats, w.replays.inside_ns(range_gaps, w.n_ranges), pair_gaps, *pair_one_off),
                  Level(device_stats, device_cats, w.replays.inside_ns(device_gaps, w.n_dev), device_gaps,
                        *device_one_off),
                  Level(stream_stats, stream_cats, None, stream_gaps),
                  (pair_gaps.row, pair_gaps.length), top_gaps, launch_rows, range_gaps)


def _sums(gaps: GapList, n_rows: int, attributed: bool) -> np.ndarray | None:
    """Gap time per row and category of a level's attributed gaps (attribution.category_sums);
    None without attribution."""
    return category_sums(gaps, n_rows) if attributed else None


def _kept_beside(w: Linked, m: Memberships, o: LevelOptions, every: np.ndarray
                 ) -> tuple[tuple[pd.DataFrame, GapList], tuple[pd.DataFrame, GapList], Attributor | None, list[dict]]:
    """(range pair stats and gaps, device stats and gaps, the Attributor or None, the launch
    statistics): the range pairs' and the devices' levels, the attribution's indexes and the
    launch statistics on two threads, whose numpy sorts and searches release the GIL."""
    acts, n_pairs, n_dev = w.acts, w.n_pairs, w.n_dev
    with ThreadPoolExecutor(2) as pool:
        attributor = _attributor(pool, w, o)
        launches = pool.submit(_launch_rows, w, m, o)
        paired = pool.submit(level_stats, acts, m.act, m.pair, np.arange(n_pairs), n_pairs, percentiles=False)
        devices = pool.submit(level_stats, acts, every, acts.device_code, np.arange(n_dev), n_dev)
        return paired.result(), devices.result(), attributor.result() if attributor else None, launches.result()


def _levels_windowed(w: Linked, m: Memberships, o: LevelOptions, plan: windows.WindowPlan, memory: _Memory,
                     device_gaps: bool) -> Levels:
    """The levels measured one window of activities at a time (gapscope.analysis.windows), no
    gap list held whole but, with ``device_gaps``, the device level's: the same figures as
    :func:`_levels_kept`, in less memory. ``plan``: the windows (Memberships.in_windows), the
    memberships given in its order."""
    pairs, devices, streams, longest, launch_rows = _windows_beside(w, m, o, plan, memory, device_gaps)
    top_gaps = _top_gaps(w, o, longest[0] if longest is not None else None)
    pair_stats, device_stats, stream_stats = _level_tables(w, m, pairs, devices, streams)
    pair_gap_lengths = pairs.lengths()
    def stalls(level: windows.LevelSums) -> LongStalls | None:
        return None if level.long_stalls is None else LongStalls.concat(level.long_stalls)

    return Levels(Level(pair_stats, pairs.categories, pairs.inside, None, pairs.setup, stalls(pairs)),
                  Level(device_stats, devices.categories, devices.inside, devices.kept(), devices.setup,
                        stalls(devices)),
                  Level(stream_stats, streams.categories), pair_gap_lengths, top_gaps, launch_rows)


def _windows_beside(w: Linked, m: Memberships, o: LevelOptions, plan: windows.WindowPlan, memory: _Memory,
                    device_gaps: bool) -> tuple[windows.LevelSums, windows.LevelSums, windows.LevelSums,
                                                tuple[GapList, np.ndarray] | None, list[dict]]:
    """(pairs, devices, streams, longest: windows.measure's; the launch statistics): the levels
    summed window by window (``device_gaps``: the device level's gaps kept) while the
    attribution's indexes are built, and then the launch statistics computed, beside them; for a
    large trace (:func:`_one_at_a_time`) the launch statistics first, then the indexes, then the
    windows. The indexes go when this returns."""
    serial = _one_at_a_time(w.acts)
    launch_rows = None
    if serial:
        # The launch statistics first, on their own: beside the attribution's build and the
        # first windows their temporaries (some 50 bytes a call) made a large trace's peak.
        launch_rows = _launch_rows(w, m, o)
        memory.holes()  # its temporaries, block by block from the heap, not under the indexes' peak
    with ThreadPoolExecutor(1 if serial else 2) as pool:
        # Large: the launch statistics and the host timeline have read the calls' ends and
        # threads once the timeline is built, before the rest of the indexes.
        attributor = _attributor(pool, w, o, plan.order, partial(memory.drop, READ_BY_ATTRIBUTION) if serial else None)
        if serial and attributor is not None:
            attributor.result()  # built before the windows' own set-up, not beside it
        # Beside the windows, once the indexes are built.
        launches = None if serial else pool.submit(_launch_rows, w, m, o, attributor)
        measured = windows.measure(w.acts, m.act, m.pair, plan, w.n_pairs, w.pair_range, w.n_ranges, w.replays,
                                   attributor, o.top, o.selected, keep_device_gaps=device_gaps)
        return (*measured, launch_rows if launches is None else launches.result())


def _level_tables(w: Linked, m: Memberships, pairs: windows.LevelSums, devices: windows.LevelSums,
                  streams: windows.LevelSums) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """STATS of the range pairs, devices and streams from their sums over the windows; the
    devices' and streams' with the percentiles of their gaps and kernels."""
    acts = w.acts

    def stats(level: windows.LevelSums, m_act: np.ndarray | None, m_row: np.ndarray, n: int,
              kernels: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
        tl = level.timelines
        return level_table(acts, m_act, m_row, n, tl.span_ns, tl.gap_ns, tl.gap_count,
                           level.lengths() if kernels is not None else None, kernels)

    pair_stats = stats(pairs, m.act, m.pair, w.n_pairs)
    # The device and stream tables read the same kernels' durations, one level after the other
    # (each level's gap lengths are let go before the next is read).
    kern = narrowed(np.flatnonzero(acts.is_kernel), acts.start.size)
    k_dur = acts.narrow_durations(kern)
    device_stats = stats(devices, None, acts.device_code, w.n_dev, (acts.device_code[kern], k_dur))
    stream_stats = stats(streams, None, acts.stream_code, w.n_str, (acts.stream_code[kern], k_dur))
    return pair_stats, device_stats, stream_stats


def _rollups(w: Linked, m: Memberships, pairs: Level, gap_lengths: list[tuple[np.ndarray, np.ndarray]],
             range_name: np.ndarray, n_names: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Step 3: STATS per range instance and per range name, rolled up from the range pairs (the
    percentiles from every pair gap's length and every member kernel's duration).
    ``gap_lengths``: the pair gaps' (row, length), in a list this step empties, so that the gap
    lengths go once both rollups have read them where nothing else holds them."""
    by_name = range_name[w.pair_range] if w.n_pairs else w.pair_range
    groupings = ((w.pair_range, w.n_ranges), (by_name, n_names))
    # One after the other for a large trace, each input let go once both rollups have read it:
    # the gap lengths before the member kernels are gathered, the kernels after their medians;
    # so that neither is held beside the other's sort keys, at the analysis's peak.
    if _one_at_a_time(w.acts):
        pair_gap_lengths = gap_lengths.pop()
        gap_q = [rollup_quantiles(group, n, pair_gap_lengths, QUANTILES) for group, n in groupings]
        del pair_gap_lengths
        kernels = member_kernels(w.acts, m.act, m.pair)
        kernel_q = [rollup_quantiles(group, n, kernels, (0.5,)) for group, n in groupings]
        del kernels
        range_stats, name_stats = (rollup_table(pairs.stats, group, n, gq, kq)
                                   for (group, n), gq, kq in zip(groupings, gap_q, kernel_q))
        return range_stats, name_stats
    kernels = member_kernels(w.acts, m.act, m.pair)  # what both rollups' kernel medians read
    pair_gap_lengths = gap_lengths.pop()
    rollups = [partial(rollup_stats, pairs.stats, group, n, pair_gap_lengths, kernels) for group, n in groupings]
    # The two rollups side by side (their percentile sorts release the GIL).
    with ThreadPoolExecutor(2) as pool:
        range_stats, name_stats = (f.result() for f in [pool.submit(rollup) for rollup in rollups])
        return range_stats, name_stats


def _sections(w: Linked, m: Memberships, lv: Levels, range_stats: pd.DataFrame, name_stats: pd.DataFrame,
              range_name: np.ndarray, name_keys: pd.DataFrame, comm: communication.CommKernels | None,
              member_range: np.ndarray) -> dict[str, Any]:
    """Step 4: the result's row sections as columns (gapscope.analysis.rows), ``ranges``,
    ``by_name``, ``devices`` and ``streams`` as RowTables, the ``payoff`` rows and the
    prediction's trace-wide inputs (``costs``, None without attribution), the warnings of a host
    whose speed varied during the recording (``host_speed``): each
    section's keys and STATS, its graph replays, its gap categories and graph ceiling (with
    attribution), its verdicts and its communication figures."""
    range_keys = w.table.frame[["id", "name", "domain", "pid", "thread", "start_ns", "end_ns", "depth"]].copy()
    # A dict per row is made only when read.
    range_cols = _columns(range_keys, range_stats)
    name_cols = _columns(name_keys, name_stats)
    device_cols = _columns(pd.DataFrame({"device": np.asarray(w.acts.device_ids)}), lv.devices.stats)
    stream_cols = _columns(w.stream_keys, lv.streams.stats)
    range_cols["wall_ns"] = (range_keys["end_ns"] - range_keys["start_ns"]).to_numpy(np.int64)
    name_cols["wall_ns"] = np.bincount(range_name, weights=range_cols["wall_ns"], minlength=len(name_keys)
                                       ).astype(np.int64) if w.n_ranges else np.zeros(len(name_keys), dtype=np.int64)
    _with_host_calls(w, range_name, range_cols, name_cols)
    _with_kernel_counts(w, m, range_name, member_range, name_cols, device_cols)
    _with_replays(w, m, lv, range_name, member_range, range_cols, name_cols, device_cols)
    _with_coverage(range_cols, name_cols, range_name)
    payoff = costs = None
    if lv.pairs.categories is not None:
        costs = _with_all_categories(w, lv, range_name, range_cols, name_cols, device_cols, stream_cols)
        payoff = measured_pairs(RowTable(name_cols))
    for columns in (range_cols, name_cols, device_cols):
        _with_verdicts(columns, w.graph_trace == "graph")
    host_speed = _host_speed_warnings(range_cols, name_cols, range_name) if w.n_ranges else []
    communication.with_fields(comm, w.acts, m.act, m.pair, range_name, (range_cols, name_cols, device_cols))
    return {"ranges": RowTable(range_cols, w.n_ranges), "by_name": RowTable(name_cols, len(name_keys)),
            "devices": RowTable(device_cols, w.n_dev), "streams": RowTable(stream_cols, w.n_str), "payoff": payoff,
            "costs": costs, "host_speed": host_speed}


def _with_kernel_counts(w: Linked, m: Memberships, range_name: np.ndarray, member_range: np.ndarray,
                        name_cols: dict[str, Any], device_cols: dict[str, Any]) -> None:
    """The name and device sections' kernels counted by kernel name (``kernel_counts``), which
    `gapscope compare` reads to tell more of the same work from a kernel split."""
    acts = w.acts
    kernels = np.flatnonzero(acts.is_kernel)
    codes, labels, _ = w.frames.activity_labels(kernels)
    names, text_code = np.unique(np.asarray(labels, dtype=str), return_inverse=True)
    label = np.full(acts.start.size, -1, dtype=code_dtype(names.size))
    label[kernels] = text_code.reshape(-1)[codes]
    del codes
    names = names.tolist()
    name_cols["kernel_counts"] = kernel_counts(label, names, m.act, member_range, len(name_cols["name"]),
                                               row_of=range_name)
    device_cols["kernel_counts"] = kernel_counts(label, names, None, acts.device_code, acts.device_ids.size)


def _with_host_calls(w: Linked, range_name: np.ndarray, range_cols: dict[str, Any], name_cols: dict[str, Any]) -> None:
    """The range and name sections' host work (docs/metrics.md, "Host work"): the CUDA calls
    the range's thread made inside it and their summed duration (a name sums its instances'), and
    of those, the graph recording calls (docs/metrics.md, "Graph recording"); and the GPU work
    other threads launched inside the range that it does not count (``threads="same"``)."""
    calls, call_ns = w.host_calls
    range_cols["api_calls"], range_cols["api_ns"] = calls, call_ns
    n_names = len(name_cols["name"])
    recordings, recording_ns = w.recording
    range_cols["graph_recordings"], range_cols["recording_ns"] = recordings, recording_ns
    name_cols.update(name_recording(recordings, recording_ns, range_name, n_names))
    range_cols["other_thread_work"] = w.other_thread_work
    for column, values in (("api_calls", calls), ("api_ns", call_ns), ("other_thread_work", w.other_thread_work)):
        name_cols[column] = np.bincount(range_name, weights=values, minlength=n_names).astype(np.int64) \
            if w.n_ranges else np.zeros(n_names, dtype=np.int64)


def _with_replays(w: Linked, m: Memberships, lv: Levels, range_name: np.ndarray, member_range: np.ndarray,
                  range_cols: dict[str, Any], name_cols: dict[str, Any], device_cols: dict[str, Any]) -> None:
    """The range, name and device sections' graph replay columns added (gapscope.analysis.replays):
    graph kernels, replays, and gap time inside them."""
    n_names = len(name_cols["name"])
    r_kernels, r_replays = w.replays.counts(m.act, member_range, w.n_ranges)
    d_kernels, d_replays = w.replays.counts(None, w.acts.device_code, w.n_dev)

    def by_name_sum(values: np.ndarray) -> np.ndarray:
        return np.bincount(range_name, weights=values, minlength=n_names).astype(np.int64) if w.n_ranges \
            else np.zeros(n_names, dtype=np.int64)

    range_cols.update(replay_figures(r_kernels, r_replays, range_cols["gap_ns"], lv.pairs.inside))
    name_cols.update(replay_figures(by_name_sum(r_kernels), by_name_sum(r_replays), name_cols["gap_ns"],
                                    by_name_sum(lv.pairs.inside)))
    device_cols.update(replay_figures(d_kernels, d_replays, device_cols["gap_ns"], lv.devices.inside))


def _with_all_categories(w: Linked, lv: Levels, range_name: np.ndarray, range_cols: dict[str, Any],
                         name_cols: dict[str, Any], device_cols: dict[str, Any], stream_cols: dict[str, Any]
                         ) -> prediction.TraceCosts:
    """Every section's gap categories added, the range pairs' summed per range and per name;
    and but for the streams, the steady state, the prediction and the graph ceiling. Returns the
    prediction's trace-wide inputs."""
    def by_range(pair_values: np.ndarray) -> np.ndarray:
        return pair_values.reshape(w.n_ranges, w.n_dev, -1).sum(axis=1) if w.n_pairs else \
            np.zeros((w.n_ranges, pair_values.shape[1]), dtype=np.int64)

    def by_name(range_values: np.ndarray) -> np.ndarray:
        out = np.zeros((len(name_cols["name"]), range_values.shape[1]), dtype=np.int64)
        np.add.at(out, range_name, range_values)
        return out

    range_cats, range_setup = by_range(lv.pairs.categories), by_range(lv.pairs.setup)
    costs = _trace_costs(w, lv, device_cols, range_cols, range_name, range_cats)
    range_stalls = lv.pairs.long_stalls.regrouped(w.pair_range)
    for columns, cats, setup, stalls in (
            (range_cols, range_cats, range_setup, range_stalls),
            (name_cols, by_name(range_cats), by_name(range_setup), range_stalls.regrouped(range_name)),
            (device_cols, lv.devices.categories, lv.devices.setup, lv.devices.long_stalls)):
        _with_categories(columns, cats)
        _with_prediction(columns, cats, setup, stalls, costs, w.frames)
    _with_categories(stream_cols, lv.streams.categories)
    return costs


def _trace_costs(w: Linked, lv: Levels, device_cols: dict[str, Any], range_cols: dict[str, Any],
                 range_name: np.ndarray, range_cats: np.ndarray) -> prediction.TraceCosts:
    """What the prediction takes from the trace as a whole (gapscope.analysis.prediction): its
    tracer, its eager launch calls' durations, its GPU, the turnaround inside its replays, the
    one its graph-level replays measure against eager instances of the same range names, and
    the framework operators, other CUDA calls and launches of torch.compile's Triton code its
    tracer recorded."""
    meta = w.frames.meta
    tracer = catalog.trace_format(meta.format).tracer if meta.format in catalog.FORMAT_NAMES else "nsys"
    gpu = next(iter(meta.gpu_names.values()), None) if meta.gpu_names else None
    inside = float(np.asarray(device_cols["gap_inside_replays_ns"]).sum())
    bounds = float(np.maximum(np.asarray(device_cols["graph_kernels"]) - np.asarray(device_cols["graph_replays"]),
                              0).sum())
    # A replay traced at graph level is one opaque interval per graph launch (as many graph
    # kernels as replays); the eager side, instances that launched no graph at all.
    replayed, eager = _instance_kinds(range_cols)
    graph_replays = np.asarray(range_cols["graph_replays"])
    opaque = replayed & (np.asarray(range_cols["graph_kernels"]) == graph_replays)
    copies = prediction.behind_copies(np.asarray(range_cols["memop_ns"], dtype=np.float64),
                                      range_cats[:, CATEGORY_NAMES.index("memop")])
    graph_level = prediction.opaque_replay_turnaround(
        range_name, eager & (graph_replays == 0), opaque, np.asarray(range_cols["gpu_span_ns"]),
        np.asarray(range_cols["busy_ns"]), copies, np.asarray(range_cols["kernels"])) if opaque.any() else float("nan")
    return prediction.trace_costs(tracer, lv.launch_rows, gpu, inside, bounds, meta.operators, meta.launch_calls,
                                  meta.other_calls, graph_level, meta.inductor_launches)


def run_analysis(
    frames: TraceFrames, *, ranges: Sequence[str] = (), domains: Sequence[str] = (),
    count_memops: bool = False, attribution: bool = True, top: int = 10,
    stall_threshold_ns: int = DEFAULT_STALL_THRESHOLD_NS, threads: str = "same", normalize: bool = True,
    gaps: bool = True, merge: bool = False, release_ids: bool = False,
    window: tuple[int | None, int | None] | None = None,
) -> AnalysisArrays:
    """Compute every metric of docs/metrics.md on loaded frames (``attribution``: also the
    gap categories, graph payoff and the ``top`` longest gaps). ``ranges``/``domains`` select
    NVTX ranges by name and domain; ``threads``: whose launches a range owns (``same`` thread
    or its whole ``process``); ``normalize``: group names without emit_nvtx suffixes.

    ``gaps``: keep every level's gap list in the returned arrays (plots, the per-gap tables,
    the timeline export and the many-trace merge read them). Without, the levels are measured
    one window of activities at a time (gapscope.analysis.windows) and each window's gaps are
    let go once its figures are summed, which lowers the peak memory (docs/performance.md);
    ``pairs``, ``range_gaps``, ``device_gaps`` and ``stream_gaps`` are then None, except with
    ``merge``: ``pairs`` and ``device_gaps`` kept, what the many-trace merge reads. The result
    is the same either way.

    ``release_ids``: let go of the frames' columns once read for good (dropped from ``frames``
    in place, so the returned ``frames`` lack them): :data:`READ_ONCE` once the range
    memberships are found, :data:`READ_BY_LEVELS` once the levels are measured; some 20 bytes
    an activity and 36 a call less under the analysis's peaks. For a caller that reads only the
    result (:func:`opened_analysis` without ``gaps`` nor ``all_calls``).

    ``window``: (start, end) offsets in ns from the trace's first GPU activity (None: the edge),
    the frames cut to that time window before anything is measured (gapscope.analysis.time_window;
    the result's ``options.window`` says where it lay)."""
    if stall_threshold_ns < 0:
        raise GapscopeError(f"the stall threshold must be 0 or more, not {stall_threshold_ns} ns")
    placed = None
    if window is not None:
        frames, placed = time_window.cut(frames, window)
    memory = _Memory(frames, release_ids)
    start_ns = trace_start(frames)  # before any column is let go
    options = LevelOptions(attribution, stall_threshold_ns, top, bool(ranges or domains))
    # 1. Each activity, the call that launched it, the ranges and the work each owns.
    w, members = _linked(frames, ranges, domains, count_memops, threads, normalize, memory)
    # 2. The three timeline levels (range pairs, devices, streams), their gaps attributed; the
    # launch statistics and the longest gaps beside them.
    if gaps:
        lv = _levels_kept(w, members, options)
    else:
        # The memberships in the windows' order, those passed let go (no index of every
        # membership held through the windows beside them); every later step only sums them.
        members, plan = members.in_windows(w.acts)
        lv = _levels_windowed(w, members, options, plan, memory, device_gaps=merge)  # the plan is used up
    memory.drop(READ_BY_LEVELS)
    # 3. The range pairs rolled up per range instance and per range name.
    range_name, name_keys = _name_groups(w.table.frame)
    gap_lengths = [lv.pair_gap_lengths]  # the rollups' to let go, unless the result keeps them
    if not (gaps or merge):
        lv = replace(lv, pair_gap_lengths=None)
    range_stats, name_stats = _rollups(w, members, lv.pairs, gap_lengths, range_name, len(name_keys))
    # 4. Each section's rows, with their replays, categories, verdicts and communication. Before
    # the rows are built: the match's temporaries never sit beside every range's row.
    comm = communication.find(frames)
    member_range = members.ranges(w.n_dev)
    if options.selected and not (range_stats["kernels"].to_numpy() > 0).any():
        chosen = [*(repr(r) for r in ranges), *(f"domain {d!r}" for d in domains)]
        raise GapscopeError(f"the ranges matching {', '.join(chosen)} launched no GPU work")
    sections = _sections(w, members, lv, range_stats, name_stats, range_name, name_keys, comm, member_range)
    # 5. The result, built once.
    trace = _trace_fields(frames, w.graph_trace, start_ns)
    costs, host_speed = sections.pop("costs"), sections.pop("host_speed")
    if costs is not None:  # the prediction's trace-wide inputs (with attribution)
        trace["prediction"] = costs.inputs()
    result = AnalysisResult(
        trace=trace,
        options={"count_memops": count_memops, "range_filter": list(ranges), "domain_filter": list(domains),
                 "threads": threads, "normalize_names": normalize,
                 "stall_threshold_ns": int(stall_threshold_ns) if attribution else None,
                 **({"window": placed.to_dict()} if placed is not None else {})},
        warnings=_warnings(frames, w.launch, w.table, w.graph_trace, w.elsewhere, windowed=placed is not None)
        + host_speed,
        **sections, launch=lv.launch_rows, top_gaps=lv.top_gaps,
        answer=answer.build(sections["by_name"], sections["devices"], sections["payoff"], lv.launch_rows, trace),
    )
    memory.give_back()  # the steps' temporaries, for a program that goes on
    return AnalysisArrays(
        frames=frames, acts=w.acts, launch=w.launch, ranges=w.table, name_of_range=range_name,
        member_range=member_range, member_act=members.act, member_pair=members.pair,
        pairs=RangePairs(w.n_dev, lv.pairs.stats, lv.pair_gap_lengths, lv.pairs.categories) if gaps or merge else None,
        range_gaps=lv.range_gaps, device_gaps=lv.devices.gaps, stream_keys=w.stream_keys, stream_gaps=lv.streams.gaps,
        result=result, comm=comm,
    )


def trace_start(frames: TraceFrames) -> int | None:
    """The trace's start: its earliest GPU activity, CUDA call or NVTX event (in the trace's own
    clock; None for a trace with none). Reports show times from here."""
    firsts = [int(t[t >= 0].min()) for t in (frames.activities["start"].to_numpy(), frames.api["start"].to_numpy(),
                                              frames.nvtx["start"].to_numpy()) if (t >= 0).any()]
    return min(firsts) if firsts else None


def _trace_fields(frames: TraceFrames, graph_trace: str, start_ns: int | None) -> dict[str, Any]:
    """The result's ``trace`` object: the file, its format and versions, how graphs were
    traced, its GPUs, where it starts."""
    meta = frames.meta
    return {
        "path": meta.path,
        "name": Path(meta.path).name,
        "format": meta.format,
        "nsys_version": meta.nsys_version,
        "export_schema": meta.export_schema,
        "graph_trace": graph_trace,
        "gpus": {str(k): v for k, v in sorted(meta.gpu_names.items())},
        "start_ns": start_ns,
    }


#: What :func:`opened_analysis` tells its ``progress`` callback: the step starting ("reading",
#: "analyzing") and the trace's GPU activity rows (None where the format does not say cheaply).
Progress = Callable[[str, int | None], None]


@contextmanager
def opened_analysis(path: str | Path, *, all_calls: bool = False, progress: Progress | None = None,
                    **options: Any) -> Iterator[AnalysisArrays]:
    """The analysis of one trace (:func:`run_analysis`'s ``options``) that stays open inside the
    ``with`` block, so that any name (every kernel's, for the timeline export) can still be looked
    up; ``all_calls``: also read every activity's name id and every CUDA API call (the figures
    are the same). ``read_seconds`` says how long opening and reading took; ``progress`` is
    called as each step starts (the command line's status line on a terminal)."""
    from gapscope.trace.handle import open_trace

    started = time.perf_counter()
    with open_trace(path) as trace:
        counts = trace.row_counts()
        rows = None if counts is None else counts.activities
        # A trace too large for the machine: refused now, by its format, its counts and what
        # this analysis keeps.
        memory.check(trace.path, counts, gaps=options.get("gaps", True), all_calls=all_calls,
                     merge=options.get("merge", False))
        heap.map_apart_for(rows or 0)  # a large trace's read too (gapscope.heap; run_analysis sets it back)
        if progress is not None:
            progress("reading", rows)
        frames = trace.frames(syncs=options.get("attribution", True), all_calls=all_calls)
        read = time.perf_counter() - started
        if progress is not None:
            progress("analyzing", rows)
        # Only the result is read: the link ids go once used (run_analysis's release_ids).
        release = not options.get("gaps", True) and not all_calls
        yield replace(run_analysis(frames, release_ids=release, **options), read_seconds=read)


def analysis_of(path: str | Path, **options: Any) -> AnalysisArrays:
    """Open, read and analyze one trace with :func:`run_analysis`'s ``options``, keeping the raw
    arrays beside the result (for transforms such as plots that need the gaps themselves). The
    trace is closed on return."""
    with opened_analysis(path, **options) as analysis:
        return analysis


def analyze(path: str | Path, **options: Any) -> AnalysisResult:
    """Analyze one trace (:func:`run_analysis`'s ``options``): gap fraction per NVTX range,
    range name, device and stream, and (``attribution``) why the GPU sat idle."""
    return analysis_of(path, **{"gaps": False, **options}).result
