"""The analysis pipeline: from a trace's frames to an AnalysisResult, in one pass.

Data flows one way: frames (gapscope.trace) -> launch links and range membership
(gapscope.analysis.ranges) -> timeline metrics per (range, device) pair, device and stream
(gapscope.analysis.metrics) -> gap categories (gapscope.analysis.attribution), launch statistics
(gapscope.analysis.launches) and the graph payoff (gapscope.analysis.payoff) -> one
AnalysisResult, built once at the end (gapscope.analysis.result).

:class:`AnalysisArrays` keeps the arrays computed on the way (gap lists with their categories, the
per-pair statistics) for transforms that need more than the result: plots, the many-trace merge
and the case figures use them instead of computing them again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gapscope import heap
from gapscope.analysis import communication, memory, windows
from gapscope.analysis.attribution import (
    CATEGORY_LABELS, Attributor, IdleCategory, api_names, category_sums, distinct_gaps, longest_gaps,
)
from gapscope.analysis.host_timeline import DEFAULT_STALL_THRESHOLD_NS
from gapscope.analysis.keys import narrowed, pair_code, small_codes, stream_key, unpack_stream_key
from gapscope.analysis.launches import launch_stats
from gapscope.analysis.metrics import (
    STATS_FIELDS, ActivityArrays, GapList, level_stats, level_table, member_kernels, rollup_stats,
)
from gapscope.analysis.payoff import ceilings, measured_pairs
from gapscope.analysis.ranges import (
    CallIndex, RangeTable, is_library_domain, link_launches, process_work_counts, range_members, range_table,
)
from gapscope.analysis.replays import Replays, figures as replay_figures
from gapscope.analysis.result import AnalysisResult
from gapscope.analysis.rows import Nested, RowTable, rows_of
from gapscope.analysis.verdicts import column_verdicts
from gapscope.errors import GapscopeError
from gapscope.trace.cuda_api import GRAPH_LAUNCH_CALLS, base_name
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


def _warnings(frames: TraceFrames, launch: np.ndarray, ranges: RangeTable, mode: str,
              elsewhere: list[str]) -> list[str]:
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
    out += elsewhere
    return out


def _with_categories(columns: dict[str, Any], sums: np.ndarray, with_ceiling: bool) -> None:
    """A section's ``gap_by_category_ns`` column added (and, ``with_ceiling``, the graph ceiling's
    two, gapscope.analysis.payoff.ceilings, for every row at once); like the other ``_with_``
    helpers it adds to the pipeline's own columns, not yet in a result."""
    sums = np.asarray(sums, dtype=np.int64)
    columns["gap_by_category_ns"] = Nested(CATEGORY_LABELS, sums)
    if with_ceiling:
        columns["graph_ceiling_span_ns"], columns["graph_ceiling_speedup"] = ceilings(
            columns["gpu_span_ns"], sums[:, IdleCategory.LAUNCH], sums[:, IdleCategory.HOST])


def _named(rf: pd.DataFrame, domains: Sequence[str]) -> tuple[int, str]:
    """(how many ranges, their names with counts, up to four) of some ranges; libraries' own
    ranges (XLA's compile passes, ...) are left out unless domains were asked for."""
    if not domains:
        rf = rf[~rf["domain"].map(is_library_domain).to_numpy(dtype=bool)]
    counts = rf.groupby("group", sort=False).size()
    named = [f"{g} x{n}" for g, n in counts.items()]
    return len(rf), ", ".join(named[:4]) + (f" and {len(named) - 4} more names" if len(named) > 4 else "")


def _other_thread_warnings(frames: TraceFrames, launch: np.ndarray, table: RangeTable, member_range: np.ndarray,
                           threads: str, domains: Sequence[str]) -> list[str]:
    """With ``threads="same"``: warnings naming the ranges that got no GPU work on their own
    thread while other threads of their process launched work inside them, and those that got
    some but miss what other threads launched inside them."""
    if threads != "same" or len(table.frame) == 0 or not (launch >= 0).any():
        return []
    called = np.zeros(len(frames.api), dtype=bool)  # the calls that launched work (a byte a call)
    called[launch[launch >= 0]] = True
    launching = pd.unique(frames.api["tid"].to_numpy()[called])  # globalTids: process in bits 24+
    del called
    holding = pd.unique(table.frame["tid"].to_numpy())
    pairs = pd.DataFrame({"p": holding >> 24, "r": holding}).merge(pd.DataFrame({"p": launching >> 24, "t": launching}))
    if not (pairs["t"] != pairs["r"]).any():  # no other thread launches in a range's process
        return []
    own = np.bincount(member_range, minlength=len(table.frame))
    extra = process_work_counts(frames, launch, table) - own
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


def _with_verdicts(columns: dict[str, Any]) -> None:
    """A section's machine-readable ``verdict`` and the ``reading`` the tables show added:
    each row's ``verdicts.verdict``, decided over the columns (``verdicts.column_verdicts``)."""
    columns["verdict"], columns["reading"] = column_verdicts(columns, rows_of(columns))


@dataclass(frozen=True)
class Levels:
    """What the three timeline levels give the result: STATS per range pair (percentiles NaN),
    device and stream, every range pair gap's (row, length) for the rollups' percentiles, gap
    time inside graph replays per range and device, gap time per category per pair, device and
    stream (None without attribution), the longest gaps and the launch statistics; the gap lists
    themselves only when they were kept (``gaps``)."""

    pair_stats: pd.DataFrame
    pair_gap_lengths: tuple[np.ndarray, np.ndarray]
    device_stats: pd.DataFrame
    stream_stats: pd.DataFrame
    range_inside: np.ndarray
    device_inside: np.ndarray
    pair_cats: np.ndarray | None
    device_cats: np.ndarray | None
    stream_cats: np.ndarray | None
    top_gaps: list[dict] | None
    launch_rows: list[dict]
    pair_gaps: GapList | None = None
    range_gaps: GapList | None = None
    device_gaps: GapList | None = None
    stream_gaps: GapList | None = None


#: From this many activities on, the steps that ran side by side on two threads run one after
#: the other (:func:`_one_at_a_time`). Side by side is faster on few cores, one after the other needs less memory: at 10M
#: kernels on 2 cores 48 s and 1,936-1,971 MiB against 42-44 s and 2,189-2,239 MiB
#: (docs/performance.md, "Tried and dropped").
SERIAL_ACTIVITIES = 1 << 22


def _one_at_a_time(acts: ActivityArrays) -> bool:
    """Whether the analysis of these activities runs its large steps one after the other: the
    attribution's build before the windows, the launch statistics before both, the two rollups
    in turn; so that no two steps' temporaries are held at once (docs/performance.md)."""
    return acts.start.size >= SERIAL_ACTIVITIES


def _launch_rows(frames: TraceFrames, launch: np.ndarray, acts: ActivityArrays,
                 names: tuple[np.ndarray, np.ndarray]) -> list[dict]:
    """The launch statistics of the calls ``launch`` links (gapscope.analysis.launches)."""
    return launch_stats(launch, acts.start, frames.api["start"].to_numpy(), frames.api["end"].to_numpy(), *names)


def _attributor(pool: ThreadPoolExecutor, frames: TraceFrames, acts: ActivityArrays, launch: np.ndarray,
                names: tuple[np.ndarray, np.ndarray], attribution: bool,
                stall_threshold_ns: int, start_order: np.ndarray | None = None) -> "Future[Attributor] | None":
    """The attribution's indexes being built on ``pool``, when ``attribution`` (``start_order``:
    Attributor's, the windows' order of the activities)."""
    return pool.submit(Attributor, frames, acts, launch, names, stall_threshold_ns=stall_threshold_ns,
                       start_order=start_order) if attribution else None


def _levels_kept(frames: TraceFrames, acts: ActivityArrays, launch: np.ndarray,
                 member_act: np.ndarray, member_pair: np.ndarray, n_pairs: int, pair_range: np.ndarray,
                 n_ranges: int, stream_keys: pd.DataFrame, rp: Replays, names: tuple[np.ndarray, np.ndarray],
                 stats_launch: np.ndarray, attribution: bool, stall_threshold_ns: int, top: int,
                 selected: bool) -> Levels:
    """The levels measured over the whole trace at once, every gap list kept (with its
    categories): what plots, the per-gap tables and the many-trace merge read."""
    name_codes, name_table = names
    n_dev, n_str = acts.device_ids.size, len(stream_keys)
    every = np.arange(acts.start.size, dtype=np.int64)  # the devices' and streams' members: every activity
    # The levels and the attribution's indexes on two threads: their numpy sorts and searches
    # release the GIL. The streams come last, reusing the device level's gap split.
    with ThreadPoolExecutor(2) as pool:
        attributor = _attributor(pool, frames, acts, launch, names, attribution, stall_threshold_ns)
        launches = pool.submit(_launch_rows, frames, stats_launch, acts, names)
        paired = pool.submit(level_stats, acts, member_act, member_pair, np.arange(n_pairs), n_pairs,
                             percentiles=False)
        devices = pool.submit(level_stats, acts, every, acts.device_code, np.arange(n_dev), n_dev)
        pair_stats, pair_gaps = paired.result()
        device_stats, device_gaps = devices.result()
        attributor = attributor.result() if attributor else None
        launch_rows = launches.result()
    del paired, devices  # the futures hold the levels' gap lists
    pair_cats = device_cats = stream_cats = top_gaps = None
    if attributor is not None:
        # The range and stream levels reuse the device level's split for the gaps they share
        # (one classification of most gaps).
        device_gaps, pair_gaps = attributor.attribute([device_gaps, pair_gaps])
        pair_cats = category_sums(pair_gaps, n_pairs)
        device_cats = category_sums(device_gaps, n_dev)
    stream_stats, stream_gaps = level_stats(acts, every, acts.stream_code, np.arange(n_str), n_str)
    if attributor is not None:
        stream_gaps = attributor.attribute([device_gaps, stream_gaps])[1]
        stream_cats = category_sums(stream_gaps, n_str)
    range_gaps = replace(pair_gaps, row=pair_range[pair_gaps.row])
    if attributor is not None:
        # With a selection, the longest gaps are those of the selected ranges' work.
        top_gaps = longest_gaps(frames, distinct_gaps(range_gaps) if selected else device_gaps, launch,
                                name_codes, name_table, acts, top)
    return Levels(pair_stats, (pair_gaps.row, pair_gaps.length), device_stats, stream_stats,
                  rp.inside_ns(range_gaps, n_ranges), rp.inside_ns(device_gaps, n_dev), pair_cats, device_cats,
                  stream_cats, top_gaps, launch_rows, pair_gaps, range_gaps, device_gaps, stream_gaps)


def _levels_windowed(frames: TraceFrames, acts: ActivityArrays, launch: np.ndarray,
                     member_act: np.ndarray, member_pair: np.ndarray, n_pairs: int, pair_range: np.ndarray,
                     n_ranges: int, stream_keys: pd.DataFrame, rp: Replays, names: tuple[np.ndarray, np.ndarray],
                     stats_launch: np.ndarray, attribution: bool, stall_threshold_ns: int, top: int,
                     selected: bool, plan: windows.WindowPlan, device_gaps: bool = False,
                     release_ids: bool = False) -> Levels:
    """The levels measured one window of activities at a time (gapscope.analysis.windows), no
    gap list held whole but, with ``device_gaps``, the device level's: the same figures as
    :func:`_levels_kept`, in less memory. ``plan``: the windows (gapscope.analysis.windows.planned),
    the memberships given in its order; ``release_ids``: the calls' threads are let go from
    ``frames`` once the attribution's timeline has their codes (on a large trace, before the
    windows)."""
    name_codes, name_table = names
    n_dev, n_str = acts.device_ids.size, len(stream_keys)
    # Between the large steps the heap's free pages go back (heap.give_back_for): a step's
    # window- and block-sized temporaries are freed scattered over the heap, and the pages they
    # leave would stay resident under the next step's peak (at 10M kernels some 400 MiB).
    serial = _one_at_a_time(acts)
    launch_rows = None
    if serial:
        # The launch statistics first, on their own: beside the attribution's build and the
        # first windows their temporaries (some 50 bytes a call) made a large trace's peak.
        heap.give_back_for(acts.start.size)
        launch_rows = _launch_rows(frames, stats_launch, acts, names)
    with ThreadPoolExecutor(1 if serial else 2) as pool:
        attributor = _attributor(pool, frames, acts, launch, names, attribution, stall_threshold_ns, plan.order)
        if serial and attributor is not None:
            attributor.result()  # built before the windows' own set-up, not beside it
            if release_ids:  # the launch statistics and the timeline have read them
                frames.release({"api": ("tid",)})
            heap.give_back_for(acts.start.size)
        launches = None
        if not serial:  # the statistics beside the windows, once the indexes are built
            def statistics() -> list[dict]:
                if attributor is not None:
                    wait([attributor])
                return _launch_rows(frames, stats_launch, acts, names)
            launches = pool.submit(statistics)
        pairs, devices, streams, longest = windows.measure(acts, member_act, member_pair, plan, n_pairs, pair_range,
                                                           n_ranges, rp, attributor, top, selected,
                                                           keep_device_gaps=device_gaps)
        if launches is not None:
            launch_rows = launches.result()
    del attributor  # its indexes (some 40 bytes an activity) are not read again
    heap.give_back_for(acts.start.size)

    def stats(level: windows.LevelSums, m_act: np.ndarray | None, m_row: np.ndarray, n: int,
              kernels: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
        tl = level.timelines
        return level_table(acts, m_act, m_row, n, tl.span_ns, tl.gap_ns, tl.gap_count,
                           level.lengths() if kernels is not None else None, kernels)

    top_gaps = None
    if longest is not None:
        top_gaps = longest_gaps(frames, longest[0], launch, name_codes, name_table, acts, top)
    pair_stats = stats(pairs, member_act, member_pair, n_pairs)
    # The device and stream tables read the same kernels' durations, one level after the other
    # (each level's gap lengths are let go before the next is read).
    kern = narrowed(np.flatnonzero(acts.is_kernel), acts.start.size)
    k_dur = acts.narrow_durations(kern)
    device_stats = stats(devices, None, acts.device_code, n_dev, (acts.device_code[kern], k_dur))
    stream_stats = stats(streams, None, acts.stream_code, n_str, (acts.stream_code[kern], k_dur))
    del kern, k_dur
    return Levels(pair_stats, pairs.lengths(), device_stats, stream_stats,
                  pairs.inside, devices.inside, pairs.categories, devices.categories, streams.categories,
                  top_gaps, launch_rows, device_gaps=devices.kept())


def run_analysis(
    frames: TraceFrames, *, ranges: Sequence[str] = (), domains: Sequence[str] = (),
    count_memops: bool = False, attribution: bool = True, top: int = 10,
    stall_threshold_ns: int = DEFAULT_STALL_THRESHOLD_NS, threads: str = "same", normalize: bool = True,
    gaps: bool = True, merge: bool = False, release_ids: bool = False,
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
    result (:func:`opened_analysis` without ``gaps`` nor ``all_calls``)."""
    if stall_threshold_ns < 0:
        raise GapscopeError(f"the stall threshold must be 0 or more, not {stall_threshold_ns} ns")
    acts = activity_arrays(frames, count_memops)
    launch = link_launches(frames, CallIndex(frames.api))  # the index is let go once the links are found
    table = range_table(frames, ranges, domains=domains, normalize=normalize)
    member_range, member_act = range_members(frames, launch, table, threads)
    n_ranges = len(table.frame)
    name_codes, name_table = api_names(frames)
    selected = bool(ranges or domains)
    # What reads the link ids (the other threads' work, the calls' names) is done before they go.
    elsewhere = _other_thread_warnings(frames, launch, table, member_range, threads, domains)
    mode = _graph_trace_mode(frames, launch)
    if release_ids:
        frames.release(_read_once(frames))

    device_ids = acts.device_ids
    n_dev = device_ids.size
    pid, dev_code, stream = unpack_stream_key(acts.stream_keys)
    stream_keys = pd.DataFrame({"pid": pid, "device": device_ids[dev_code], "stream": stream})
    n_pairs = n_ranges * n_dev
    member_pair = narrowed(pair_code(member_range, acts.device_code[member_act], n_dev), n_pairs)
    # The range of a membership is its pair's (pair // devices): made again once the levels and
    # rollups, the peak of the analysis, are done, not held through them.
    range_dtype = member_range.dtype
    del member_range
    # With a selection, the launch statistics cover the selected ranges' work only.
    stats_launch = launch
    if selected:
        stats_launch = np.full(launch.size, -1, dtype=launch.dtype)
        stats_launch[member_act] = launch[member_act]
    pair_range = np.arange(n_pairs, dtype=np.int64) // max(n_dev, 1)
    graph_call = np.isin(name_table, list(GRAPH_LAUNCH_CALLS))[name_codes]
    rp = Replays(frames.activities["kind"].to_numpy(), launch, graph_call)
    plan = None
    if not gaps:
        # The memberships in the windows' order, those passed let go (no index of every
        # membership held through the windows beside them); every later step only sums them.
        member_act, member_pair, plan = windows.planned(acts, member_act, member_pair)
    levels = (frames, acts, launch, member_act, member_pair, n_pairs, pair_range, n_ranges, stream_keys, rp,
              (name_codes, name_table), stats_launch, attribution, stall_threshold_ns, top, selected)
    # (the windows' plan is used up by the windows: its order goes with them)
    lv = _levels_kept(*levels) if gaps else _levels_windowed(*levels, device_gaps=merge, plan=plan,
                                                                        release_ids=release_ids)
    del levels
    if release_ids:
        frames.release(READ_BY_LEVELS)

    rf = table.frame
    range_name, name_keys = _name_groups(rf)
    n_names = len(name_keys)
    heap.give_back_for(acts.start.size)
    kernels = member_kernels(acts, member_act, member_pair)  # what both rollups' kernel medians read
    # The two rollups side by side (their percentile sorts release the GIL), but one after the
    # other for a large trace: side by side their sort keys (8 bytes a gap and a kernel each)
    # are held at once, at the analysis's peak.
    rollups = (partial(rollup_stats, lv.pair_stats, pair_range, n_ranges, lv.pair_gap_lengths, kernels),
               partial(rollup_stats, lv.pair_stats, range_name[pair_range] if n_pairs else pair_range,
                       n_names, lv.pair_gap_lengths, kernels))
    if _one_at_a_time(acts):
        range_stats, name_stats = (rollup() for rollup in rollups)
    else:
        with ThreadPoolExecutor(2) as pool:
            range_stats, name_stats = (f.result() for f in [pool.submit(rollup) for rollup in rollups])
    del kernels
    heap.give_back_for(acts.start.size)
    # Before the rows are built: the match's temporaries never sit beside every range's row.
    comm = communication.find(frames)
    member_range = (member_pair // max(n_dev, 1)).astype(range_dtype)
    if selected and not (range_stats["kernels"].to_numpy() > 0).any():
        chosen = [*(repr(r) for r in ranges), *(f"domain {d!r}" for d in domains)]
        raise GapscopeError(f"the ranges matching {', '.join(chosen)} launched no GPU work")

    range_keys = rf[["name", "domain", "pid", "thread", "start_ns", "end_ns", "depth"]].copy()
    range_keys.insert(0, "id", np.arange(n_ranges))
    # Each section's rows as columns (gapscope.analysis.rows): a dict per row is made only when read.
    range_cols = _columns(range_keys, range_stats)
    name_cols = _columns(name_keys, name_stats)
    device_cols = _columns(pd.DataFrame({"device": np.asarray(device_ids)}), lv.device_stats)
    stream_cols = _columns(stream_keys, lv.stream_stats)

    # Graph replays: graph kernels, replays, and gap time inside them, per range, name, device.
    r_kernels, r_replays = rp.counts(member_act, member_range, n_ranges)
    d_kernels, d_replays = rp.counts(None, acts.device_code, n_dev)

    def by_name_sum(values: np.ndarray) -> np.ndarray:
        return np.bincount(range_name, weights=values, minlength=n_names).astype(np.int64) if n_ranges \
            else np.zeros(n_names, dtype=np.int64)

    range_cols.update(replay_figures(r_kernels, r_replays, range_stats["gap_ns"].to_numpy(), lv.range_inside))
    name_cols.update(replay_figures(by_name_sum(r_kernels), by_name_sum(r_replays), name_stats["gap_ns"].to_numpy(),
                                    by_name_sum(lv.range_inside)))
    device_cols.update(replay_figures(d_kernels, d_replays, lv.device_stats["gap_ns"].to_numpy(), lv.device_inside))

    payoff = None
    if lv.pair_cats is not None:
        pair_cats = lv.pair_cats
        range_cats = pair_cats.reshape(n_ranges, n_dev, -1).sum(axis=1) if n_pairs else \
            np.zeros((n_ranges, pair_cats.shape[1]), dtype=np.int64)
        _with_categories(range_cols, range_cats, True)
        name_cats = np.zeros((n_names, range_cats.shape[1]), dtype=np.int64)
        np.add.at(name_cats, range_name, range_cats)
        _with_categories(name_cols, name_cats, True)
        _with_categories(device_cols, lv.device_cats, True)
        _with_categories(stream_cols, lv.stream_cats, False)
        payoff = measured_pairs(RowTable(name_cols))
    for columns in (range_cols, name_cols, device_cols):
        _with_verdicts(columns)
    communication.with_fields(comm, acts, member_act, member_pair, range_name, (range_cols, name_cols, device_cols))

    result = AnalysisResult(
        trace={
            "path": frames.meta.path,
            "name": Path(frames.meta.path).name,
            "format": frames.meta.format,
            "nsys_version": frames.meta.nsys_version,
            "export_schema": frames.meta.export_schema,
            "graph_trace": mode,
            "gpus": {str(k): v for k, v in sorted(frames.meta.gpu_names.items())},
        },
        options={"count_memops": count_memops, "range_filter": list(ranges), "domain_filter": list(domains),
                 "threads": threads, "normalize_names": normalize,
                 "stall_threshold_ns": int(stall_threshold_ns) if attribution else None},
        warnings=_warnings(frames, launch, table, mode, elsewhere),
        ranges=RowTable(range_cols, n_ranges),
        by_name=RowTable(name_cols, n_names),
        devices=RowTable(device_cols, n_dev),
        streams=RowTable(stream_cols, len(stream_keys)),
        launch=lv.launch_rows,
        payoff=payoff,
        top_gaps=lv.top_gaps,
    )
    return AnalysisArrays(
        frames=frames, acts=acts, launch=launch, ranges=table, name_of_range=range_name, member_range=member_range,
        member_act=member_act, member_pair=member_pair,
        pairs=RangePairs(n_dev, lv.pair_stats, lv.pair_gap_lengths, lv.pair_cats) if gaps or merge else None,
        range_gaps=lv.range_gaps, device_gaps=lv.device_gaps, stream_keys=stream_keys, stream_gaps=lv.stream_gaps,
        result=result, comm=comm,
    )


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
        rows = trace.activity_rows()
        # A trace too large for the machine: refused now, by what this analysis keeps.
        memory.check(trace.path, rows, gaps=options.get("gaps", True), all_calls=all_calls,
                     merge=options.get("merge", False))
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
