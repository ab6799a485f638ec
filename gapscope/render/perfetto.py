"""The timeline as a Chrome Trace Event / Perfetto JSON file: open it in ui.perfetto.dev (or
chrome://tracing) to see gapscope's gaps beside the kernels that bound them.

What it holds, as complete slices (``"ph": "X"``, times in microseconds with nanosecond
decimals):

* one process per GPU, with a track of its device-level gaps (docs/metrics.md), each named by
  its category (``launch gap``, ``sync gap``, ...: Perfetto colours slices by name), its length
  the slice's duration, with the call that launched the work after it (``launched_by``); then
  one track per stream with its kernels, copies and memsets (``correlation``: the id nsys ties
  each to its launching call by);
* one process per CPU process, with each thread's NVTX ranges (nested as pushed) and a track of
  the CUDA calls that launched GPU work or waited for it;
* a flow arrow from each launch call to the work it launched (``bind_id`` with ``flow_out`` on
  the call's slice, ``flow_in`` on the kernel's: Perfetto's flow events on complete slices).

Tracks are named with ``process_name`` / ``thread_name`` metadata and ordered with the sort-index
metadata. Every pid and tid is gapscope's own small number (the trace's pids and OS thread ids
are in the names), so no two tracks share one. No two slices of a track overlap
(gapscope.render.tracks): overlapping kernels of one stream go to extra lanes, NVTX ranges that
cross each other to lanes of their own.

Why a renderer of an :class:`~gapscope.analysis.pipeline.AnalysisArrays` (kind ``timeline`` in the
registry) and not of the result: the file needs every kernel, call and gap with its category,
which only the analysis holds; the saved result has the summaries. It also needs every kernel's
name, so the trace must still be open: render inside
``gapscope.analysis.pipeline.opened_analysis(path, all_calls=True)``.

Lines are built column-wise with pyarrow (one string array per kind of slice), not a Python
loop per kernel: a million kernels write in about a second (benchmarks/bench_export.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gapscope import __version__
from gapscope.catalog import CATEGORIES, GAP_PERFETTO, process_of, thread_of
from gapscope.render.tracks import crossing, disjoint_lanes
from gapscope.trace.frames import ActivityKind

if TYPE_CHECKING:
    from gapscope.analysis.pipeline import AnalysisArrays

#: chrome://tracing's reserved colour per gap category (Perfetto colours by name instead); a gap
#: slice is named by its largest category.
CATEGORY_CNAMES = {**{c.name: c.perfetto for c in CATEGORIES}, "gap": GAP_PERFETTO}
KIND_CATEGORIES = {ActivityKind.KERNEL: "kernel", ActivityKind.MEMCPY: "memcpy", ActivityKind.MEMSET: "memset",
                   ActivityKind.GRAPH: "graph"}


def us_text(ns: np.ndarray) -> pa.Array:
    """Integer nanoseconds as microsecond decimals with three places (``1234`` -> ``1.234``),
    exact for any int64, as one Arrow cast."""
    ns = np.ascontiguousarray(ns, dtype=np.int64)
    wide = np.empty(2 * ns.size, dtype=np.int64)
    wide[0::2] = ns
    wide[1::2] = np.where(ns < 0, -1, 0)  # the high word of a two's-complement int128
    dec = pa.Array.from_buffers(pa.decimal128(21, 3), ns.size, [None, pa.py_buffer(wide)])
    return pc.cast(dec, pa.string())


def int_text(values: np.ndarray) -> pa.Array:
    """Integers as decimal text."""
    return pc.cast(pa.array(np.asarray(values, dtype=np.int64)), pa.string())


def taken(table: list[str], codes: np.ndarray) -> pa.Array:
    """``table[code]`` per row, as one Arrow take."""
    return pa.array(table, type=pa.string()).take(pa.array(np.asarray(codes, dtype=np.int64)))


def jq(text: Any) -> str:
    """A JSON string literal (ASCII only, so the file is the same in any encoding)."""
    return json.dumps(str(text))


@dataclass
class Tracks:
    """The processes and threads of the file: gapscope's own pid and tid numbers, their names
    and order, as Trace Event metadata."""

    processes: dict[Any, int] = field(default_factory=dict)
    threads: dict[Any, int] = field(default_factory=dict)
    meta: list[str] = field(default_factory=list)

    def process(self, key: Any, name: str, sort: int) -> int:
        """The pid of the process ``key``, named and ordered by its first call."""
        if key not in self.processes:
            pid = self.processes[key] = len(self.processes) + 1
            self.meta.append(f'{{"ph":"M","pid":{pid},"name":"process_name","args":{{"name":{jq(name)}}}}}')
            self.meta.append(f'{{"ph":"M","pid":{pid},"name":"process_sort_index","args":{{"sort_index":{sort}}}}}')
        return self.processes[key]

    def thread(self, key: Any, pid: int, name: str, sort: int) -> int:
        """The tid of the track ``key`` in process ``pid``, named and ordered by its first call."""
        if key not in self.threads:
            tid = self.threads[key] = len(self.threads) + 1
            self.meta.append(f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"thread_name","args":{{"name":{jq(name)}}}}}')
            self.meta.append(f'{{"ph":"M","pid":{pid},"tid":{tid},"name":"thread_sort_index",'
                             f'"args":{{"sort_index":{sort}}}}}')
        return self.threads[key]


def _slices(heads: list[str], code: np.ndarray, start: np.ndarray, end: np.ndarray,
            tail: list[Any] = ()) -> pa.Array:
    """One line per slice: ``heads[code]`` (``{"ph":"X"``, cat, pid, tid, name and what else is
    the same for many slices), its ts and dur, then the ``tail`` parts (constant strings and
    per-slice string arrays), ending ``},\n``."""
    if start.size == 0:
        return pa.array([], type=pa.string())
    parts = [taken(heads, code), ',"ts":', us_text(start), ',"dur":', us_text(end - start), *tail, "},\n"]
    return pc.binary_join_element_wise(*parts, "")


def _combined(*codes: np.ndarray) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """The distinct combinations of several code columns, and each row's combination: a slice's
    head is built once per combination (a track and a name), not once per slice."""
    key = np.zeros(codes[0].size, dtype=np.int64)
    for c in codes:  # each column as codes of its distinct values, so the key stays small
        dense, distinct = pd.factorize(c)
        key = key * max(distinct.size, 1) + dense
    inv, uniq = pd.factorize(key)
    first = np.zeros(uniq.size, dtype=np.int64)
    first[inv[::-1]] = np.arange(key.size - 1, -1, -1)  # a row of each combination
    return list(zip(*(c[first].tolist() for c in codes))), inv.astype(np.int64)


def _head(cat: str, pid: int, tid: int, name: str) -> str:
    return f'{{"ph":"X","cat":"{cat}","pid":{pid},"tid":{tid},"name":{name}'


def _names_of_activities(analysis: AnalysisArrays) -> tuple[list[str], list[str], np.ndarray]:
    """(JSON name literals, slice category per name, code per activity) of every activity."""
    codes, labels, kinds = analysis.frames.activity_labels()
    return [jq(n) for n in labels], [KIND_CATEGORIES[k] for k in kinds], codes


def _gpu_lines(analysis: AnalysisArrays, tracks: Tracks, call_names: list[str],
               code_of_call: np.ndarray) -> list[pa.Array]:
    """Per GPU a track of its device-level gaps, then one per stream (and lane) of its work."""
    from gapscope.analysis.attribution import CATEGORY_LABELS

    acts, keys, gpus = analysis.acts, analysis.stream_keys, analysis.frames.meta.gpu_names
    many_pids = keys["pid"].nunique() > 1
    dev_pid = {d: tracks.process(("gpu", d), f"GPU {d}" + (f" · {gpus[d]}" if d in gpus else ""), d)
               for d in acts.device_ids.tolist()}
    gap_tid = {d: tracks.thread(("gaps", d), pid, "gaps (device idle)", 0) for d, pid in dev_pid.items()}
    out = []

    names, name_cats, name_codes = _names_of_activities(analysis)
    lane = disjoint_lanes(acts.stream_code, acts.start, acts.end)
    combos, code = _combined(acts.stream_code, lane, name_codes)
    heads = []
    order = {k: j for j, k in enumerate(sorted({(sc, ln) for sc, ln, _ in combos}))}
    for sc, ln, nc in combos:
        pid, dev, stream = (int(keys[c].iloc[sc]) for c in ("pid", "device", "stream"))
        label = (f"pid {pid} · " if many_pids else "") + f"stream {stream}" + (f" (overlap {ln})" if ln else "")
        tid = tracks.thread(("stream", sc, ln), dev_pid[dev], label, 1 + order[(sc, ln)])
        heads.append(_head(name_cats[nc], dev_pid[dev], tid, names[nc]))
    corr = analysis.frames.activities["corr"].to_numpy()
    flow = _flow_text(analysis.launch, "flow_in")
    out.append(_slices(heads, code, acts.start, acts.end, [flow, ',"args":{"correlation":', int_text(corr), "}"]))

    gaps = analysis.device_gaps
    if gaps.length.size:
        attributed = gaps.category is not None
        cats = gaps.category.astype(np.int64) if attributed else np.zeros(gaps.length.size, dtype=np.int64)
        labels = CATEGORY_LABELS if attributed else ("gap",)
        call = analysis.launch[gaps.next_act]
        call_code = np.where(call >= 0, code_of_call[np.maximum(call, 0)], len(call_names) - 1)
        combos, code = _combined(gaps.device.astype(np.int64), cats)
        heads = [_head("gap", dev_pid[d], gap_tid[d], f'"{labels[c]} gap"') +
                 f',"cname":"{CATEGORY_CNAMES[labels[c]]}"' for d, c in combos]
        tail = [',"args":{"launched_by":', taken(call_names, call_code),
                *([_split_text(gaps)] if attributed else []), "}"]
        out.append(_slices(heads, code, gaps.start, gaps.start + gaps.length, tail))
    return out


def _flow_text(call: np.ndarray, end: str) -> pa.Array:
    """Per slice, its end of the flow arrow from a launch call to the work it launched
    (``,"bind_id":N,"flow_in":true``; Perfetto's flow events on complete slices), N being the
    call's place among the trace's calls plus one; empty where there is no call."""
    call = np.asarray(call, dtype=np.int64)
    text = pc.binary_join_element_wise(',"bind_id":', int_text(call + 1), f',"{end}":true', "")
    return pc.if_else(pa.array(call >= 0), text, "")


def _split_text(gaps: Any) -> pa.Array:
    """Per gap, its time in each category it has (``,"launch_ns":N,"host_ns":M``), the split
    the gap's categories of docs/metrics.md give it (a slice is named by its largest)."""
    from gapscope.analysis.attribution import CATEGORY_LABELS

    split = gaps.split.matrix(np.arange(gaps.length.size), gaps.length)
    parts = []
    for j, label in enumerate(CATEGORY_LABELS):
        col = split[:, j]
        text = pc.binary_join_element_wise(f',"{label}_ns":', int_text(col), "")
        parts.append(pc.if_else(pa.array(col > 0), text, ""))
    return pc.binary_join_element_wise(*parts, "")


def _cpu_lines(analysis: AnalysisArrays, tracks: Tracks, call_names: list[str], code_of_call: np.ndarray,
               call_table: np.ndarray) -> list[pa.Array]:
    """Per CPU thread its NVTX ranges, then the calls that launched GPU work or waited for it."""
    from gapscope.trace.cuda_api import SYNC_CALLS

    api, rf = analysis.frames.api, analysis.ranges.frame
    launched = np.zeros(len(api), dtype=np.bool_)
    launched[analysis.launch[analysis.launch >= 0]] = True
    waits = np.isin(call_table, sorted(SYNC_CALLS))
    shown = np.flatnonzero(launched | waits[code_of_call]) if len(api) else np.zeros(0, dtype=np.int64)
    for g in process_of(np.unique(np.concatenate([api["tid"].to_numpy()[shown], rf["tid"].to_numpy()]))).tolist():
        tracks.process(("cpu", g), f"process {thread_of(g)}", 1000 + thread_of(g))

    def lines(cat: str, gtid: np.ndarray, lanes: np.ndarray, name_code: np.ndarray, name_table: list[str],
              start: np.ndarray, end: np.ndarray, label: str, sort: int, tail: list[Any]) -> pa.Array:
        combos, code = _combined(gtid.astype(np.int64), lanes, name_code)
        heads = []
        for g, ln, nc in combos:
            pid = tracks.processes[("cpu", process_of(g))]
            name = f"thread {thread_of(g)}" + label + (f" ({ln + 1})" if ln else "")
            heads.append(_head(cat, pid, tracks.thread((cat, g, ln), pid, name, sort + ln), name_table[nc]))
        return _slices(heads, code, start, end, tail)

    out = []
    if len(rf):
        r_tid, r_s, r_e = rf["tid"].to_numpy(), rf["start_ns"].to_numpy(), rf["end_ns"].to_numpy()
        # Ranges nest on their thread's track; the few that cross another's end get lanes of their own.
        lanes = np.zeros(len(rf), dtype=np.int64)
        cross = np.flatnonzero(crossing(r_tid, r_s, r_e))
        lanes[cross] = 1 + disjoint_lanes(r_tid[cross], r_s[cross], r_e[cross])
        r_codes, r_uniq = pd.factorize(rf["name"].to_numpy())
        out.append(lines("nvtx", r_tid, lanes, r_codes.astype(np.int64), [jq(n) for n in r_uniq], r_s, r_e,
                         "", 0, []))
    if shown.size:
        c_tid = api["tid"].to_numpy()[shown]
        c_s = api["start"].to_numpy()[shown]
        c_e = np.maximum(api["end"].to_numpy()[shown], c_s)
        flow = _flow_text(np.where(launched[shown], shown, -1), "flow_out")  # to the work each launched
        out.append(lines("cuda_api", c_tid, disjoint_lanes(c_tid, c_s, c_e), code_of_call[shown], call_names,
                         c_s, c_e, " · CUDA API", 100,
                         [flow, ',"args":{"correlation":', int_text(api["corr"].to_numpy()[shown]), "}"]))
    return out


def timeline_lines(analysis: AnalysisArrays) -> tuple[list[pa.Array], list[str]]:
    """The file's slices (string arrays of lines, each ending ``,\n``) and its metadata events."""
    from gapscope.analysis.attribution import api_names

    tracks = Tracks()
    code_of_call, call_table = api_names(analysis.frames)
    call_names = [jq(n) for n in call_table.tolist()[:-1]] + ["null"]
    out = _gpu_lines(analysis, tracks, call_names, code_of_call)
    out += _cpu_lines(analysis, tracks, call_names, code_of_call, call_table)
    return out, tracks.meta


def _write_arrays(file: TextIO, arrays: list[pa.Array]) -> None:
    """Write the lines of each string array as they lie in its data buffer."""
    raw = getattr(file, "buffer", None)
    if raw is not None:
        file.flush()
    for arr in arrays:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if len(arr) == 0:
            continue
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset: arr.offset + len(arr) + 1]
        data = memoryview(arr.buffers()[2])[offsets[0]:offsets[-1]]
        if raw is not None:
            raw.write(data)
        else:
            file.write(bytes(data).decode("ascii"))


def render(analysis: AnalysisArrays, file: TextIO, **_: Any) -> None:
    """Write the analysis's timeline as Trace Event Format JSON (ui.perfetto.dev opens it): GPU
    streams and their device gaps by category, NVTX ranges and CUDA calls per thread."""
    arrays, meta = timeline_lines(analysis)
    trace = analysis.result.trace
    other = {"gapscope_version": __version__, "trace": trace.get("name"), "nsys_version": trace.get("nsys_version"),
             "graph_trace": trace.get("graph_trace"), "timestamps": "nsys nanoseconds / 1000"}
    file.write('{"displayTimeUnit":"ns","otherData":' + json.dumps(other) + ',\n"traceEvents":[\n')
    _write_arrays(file, arrays)
    file.write(",\n".join(meta) + "\n]}\n")
    file.flush()
