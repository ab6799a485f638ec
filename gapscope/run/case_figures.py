"""The figures that answer each seed case's question, read from an analyzed trace.

Input: an `AnalysisArrays` (gapscope.analysis.run_analysis) of a trace that `gapscope run --paths
<case>` recorded, whose ranges are `<case>/<variant>` (docs/cases.md), and for the cases whose
question the trace cannot fully answer (graph updates, instantiation) the host timers the run
took without the profiler. Output: one dict per case with `rows` (one per variant, device or
phase) and `summary` (the headline figures). Times from the trace are integer nanoseconds
(`*_ns`); host timers are microseconds and named `host_*`. docs/cases.md defines every figure.

Sources inside the trace: GPU work per range and its span, busy and gap (the analyzer's range
rows); NVTX range durations (host wall time, under the profiler); the CUDA API calls a range's
thread made inside it (names, durations); kernel launch shapes (Trace.kernel_shapes); stream
overlap (gapscope.analysis.overlap); gap categories (gapscope.analysis.attribution) per device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gapscope.analysis.attribution import IdleCategory, api_names
from gapscope.analysis.keys import TimeKeys
from gapscope.analysis.overlap import StreamOverlap, stream_overlap
from gapscope.analysis.pipeline import AnalysisArrays, run_analysis
from gapscope.errors import GapscopeError
from gapscope.run.workload import CASES, range_name
from gapscope.trace.cuda_api import KERNEL_LAUNCH_CALLS
from gapscope.trace.handle import Trace, open_trace

GRAPH_LAUNCH = "cudaGraphLaunch"
SYNC = "cudaStreamSynchronize"


def _median(values: Sequence[float] | np.ndarray) -> float | None:
    v = np.asarray(values, dtype=np.float64)
    return float(np.median(v)) if v.size else None


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def _split(name: str, suffix: str) -> str:
    """The range name of a case variant with the sweep suffix (`/k=<us>us`) if any."""
    return f"{name}{suffix}"


class CaseTrace:
    """Indexes over one analyzed trace that every case's figures use, built lazily. ``trace``
    is the open trace the analysis read (for the kernel launch shapes)."""

    def __init__(self, an: AnalysisArrays, trace: Trace) -> None:
        self.an = an
        self.trace = trace
        self.frames = an.frames
        rf = an.ranges.frame
        self.names = rf["name"].to_numpy(dtype=object)
        self.start = rf["start_ns"].to_numpy()
        self.end = rf["end_ns"].to_numpy()
        self.tid = rf["tid"].to_numpy()
        self.rows = an.result.ranges
        self.acts = an.acts
        self.n_dev = an.acts.device_ids.size
        api = self.frames.api
        self.api_start = api["start"].to_numpy()
        self.api_end = api["end"].to_numpy()
        codes, table = api_names(self.frames)
        self.api_name = table[codes]
        # API calls sorted by (thread, start): a range's calls are one slice.
        tids = api["tid"].to_numpy()
        self._tid_codes = pd.Index(pd.unique(np.concatenate([tids, self.tid])))
        t_api = self._tid_codes.get_indexer(tids).astype(np.int64)
        self._keys = TimeKeys([self.api_start, self.start, self.end, np.zeros(1, np.int64)],
                              len(self._tid_codes))
        keys = self._keys.key(t_api, self.api_start)
        self._api_order = np.argsort(keys, kind="stable")
        self._api_keys = keys[self._api_order]
        self._shapes: pd.DataFrame | None = None
        self._overlap: StreamOverlap | None = None
        self._kernel_names: np.ndarray | None = None

    # ---- ranges

    def instances(self, name: str) -> np.ndarray:
        """Indices of the range instances called `name`, in start order."""
        return np.flatnonzero(self.names == name)

    def duration(self, idx: np.ndarray) -> np.ndarray:
        """Host wall time of each range (NVTX push to pop), ns."""
        return self.end[idx] - self.start[idx]

    def sum_rows(self, idx: np.ndarray, field: str) -> int:
        return int(sum(self.rows[i][field] for i in idx))

    def members(self, idx: np.ndarray) -> np.ndarray:
        """Activity indices launched inside any of the ranges `idx`."""
        return self.an.member_act[np.isin(self.an.member_range, idx)]

    # ---- API calls

    def calls(self, r: int) -> np.ndarray:
        """Indices into the API frame of the calls range r's thread started inside it, in order."""
        t = int(self._tid_codes.get_loc(self.tid[r]))
        lo = np.searchsorted(self._api_keys, self._keys.key(t, self.start[r]), "left")
        hi = np.searchsorted(self._api_keys, self._keys.key(t, self.end[r]), "right")
        return self._api_order[lo:hi]

    def count_calls(self, idx: np.ndarray, pred: Callable[[np.ndarray], np.ndarray]) -> int:
        """Calls inside the ranges `idx` whose names satisfy `pred` (a vectorized test)."""
        return int(sum(int(pred(self.api_name[self.calls(r)]).sum()) for r in idx))

    # ---- kernels

    @property
    def shapes(self) -> pd.DataFrame:
        if self._shapes is None:
            self._shapes = self.trace.kernel_shapes(self.frames)
        return self._shapes

    def kernel_names(self) -> np.ndarray:
        """Each activity's kernel name ('' for copies and graph rows)."""
        if self._kernel_names is None:
            a = self.frames.activities
            name_id = a["name_id"].to_numpy()
            is_k = a["kind"].to_numpy() == 0
            ids = np.unique(name_id[is_k])
            table = self.frames.names.lookup(int(i) for i in ids)
            out = np.full(len(a), "", dtype=object)
            codes = pd.Index(ids).get_indexer(name_id[is_k])
            out[is_k] = np.array([table[int(i)] for i in ids], dtype=object)[codes]
            self._kernel_names = out
        return self._kernel_names

    # ---- per (range, device) figures

    @property
    def overlap(self) -> StreamOverlap:
        """Stream overlap of every (range, device) pair: group = range * n_dev + device code,
        kernels and copies alike."""
        if self._overlap is None:
            m = self.an.member_act
            a = self.acts
            self._overlap = stream_overlap(self.an.member_pair, a.stream_code[m],
                                           a.start[m], a.end[m], len(self.names) * self.n_dev)
        return self._overlap

    def pairs(self) -> tuple[pd.DataFrame, np.ndarray]:
        """(STATS per (range, device) pair, gap time per pair and IdleCategory), as the
        analysis computed them."""
        if self.an.pairs.categories is None:
            raise GapscopeError("the case figures need gap attribution; analyze with attribution on")
        return self.an.pairs.stats, self.an.pairs.categories


# --------------------------------------------------------------------------- the cases


def default_stream(ct: CaseTrace, suffix: str, host: dict | None = None) -> dict[str, Any]:
    """Possible against achieved kernel/copy overlap for each stream arrangement."""
    rows = []
    ov = ct.overlap
    for v in ("legacy", "user-streams", "nonblocking"):
        idx = ct.instances(_split(f"default-stream/{v}", suffix))
        if idx.size == 0:
            continue
        groups = (idx[:, None] * ct.n_dev + np.arange(ct.n_dev)[None, :]).ravel()
        m = ct.members(idx)
        a = ct.acts
        kernel_ns = int((a.end[m] - a.start[m])[a.is_kernel[m]].sum())
        copy_ns = int((a.end[m] - a.start[m])[a.is_memop[m]].sum())
        overlap = int(ov.overlap_ns[groups].sum())
        possible = int(ov.possible_ns[groups].sum())
        rows.append({
            "variant": v, "ranges": int(idx.size),
            "kernels": ct.sum_rows(idx, "kernels"), "copies": ct.sum_rows(idx, "memops"),
            "kernel_ns": kernel_ns, "copy_ns": copy_ns,
            "span_ns": int(ov.span_ns[groups].sum()), "busy_ns": int(ov.busy_ns[groups].sum()),
            "overlap_ns": overlap, "possible_ns": possible,
            "overlap_share": _ratio(overlap, possible),
        })
    by = {r["variant"]: r for r in rows}
    summary: dict[str, Any] = {}
    if "legacy" in by:
        summary["legacy_serialized_ns"] = by["legacy"]["possible_ns"] - by["legacy"]["overlap_ns"]
        summary["legacy_overlap_share"] = by["legacy"]["overlap_share"]
    if "legacy" in by and "nonblocking" in by:
        summary["legacy_span_over_nonblocking"] = _ratio(by["legacy"]["span_ns"],
                                                         by["nonblocking"]["span_ns"])
        summary["nonblocking_overlap_share"] = by["nonblocking"]["overlap_share"]
    return {"rows": rows, "summary": summary}


def _timeline(ct: CaseTrace, idx: np.ndarray) -> dict[str, Any]:
    span = ct.sum_rows(idx, "gpu_span_ns")
    gap = ct.sum_rows(idx, "gap_ns")
    return {"kernels": ct.sum_rows(idx, "kernels"), "span_ns": span,
            "busy_ns": ct.sum_rows(idx, "busy_ns"), "gap_ns": gap,
            "gap_fraction": _ratio(gap, span)}


def _launch_counts(ct: CaseTrace, idx: np.ndarray) -> dict[str, int]:
    return {"graph_launches": ct.count_calls(idx, lambda n: n == GRAPH_LAUNCH),
            "kernel_launches": ct.count_calls(idx, lambda n: np.isin(n, list(KERNEL_LAUNCH_CALLS)))}


def graph_pool(ct: CaseTrace, suffix: str, host: dict | None = None) -> dict[str, Any]:
    """Padding waste (extra tokens and GPU time) against the launch gaps a graph pool saves."""
    tokens_of = ct.shapes["shared_bytes"].to_numpy() // 4
    is_tok = ct.kernel_names() == "gapscope_tokens"
    rows = []
    for v in ("eager", "exact", "padded"):
        idx = ct.instances(_split(f"graph-pool/{v}", suffix))
        if idx.size == 0:
            continue
        m = ct.members(idx)
        m = m[is_tok[m]]
        rows.append({"variant": v, "ranges": int(idx.size), **_timeline(ct, idx),
                     "work_tokens": int(tokens_of[m].sum()),
                     "token_sizes": int(np.unique(tokens_of[m]).size),
                     **_launch_counts(ct, idx),
                     "host_wall_ns": int(ct.duration(idx).sum())})
    by = {r["variant"]: r for r in rows}
    summary: dict[str, Any] = {}
    cap = ct.instances(_split("graph-pool/capture", suffix))
    if cap.size:
        summary["graphs_captured"] = ct.count_calls(cap, lambda n: n == "cudaStreamEndCapture")
        summary["capture_wall_ns"] = int(ct.duration(cap).sum())
    if {"exact", "padded"} <= by.keys():
        ex, pd_ = by["exact"], by["padded"]
        summary["padding_tokens"] = pd_["work_tokens"] - ex["work_tokens"]
        summary["padding_share"] = _ratio(summary["padding_tokens"], ex["work_tokens"])
        summary["padding_busy_ns"] = pd_["busy_ns"] - ex["busy_ns"]
        summary["padded_minus_exact_span_ns"] = pd_["span_ns"] - ex["span_ns"]
    if {"eager", "padded"} <= by.keys():
        eg, pd_ = by["eager"], by["padded"]
        summary["gaps_saved_ns"] = eg["gap_ns"] - pd_["gap_ns"]
        summary["span_saved_ns"] = eg["span_ns"] - pd_["span_ns"]
        summary["padded_speedup_vs_eager"] = _ratio(eg["span_ns"], pd_["span_ns"])
        if "padding_busy_ns" in summary:
            summary["waste_per_gap_saved"] = _ratio(summary["padding_busy_ns"], summary["gaps_saved_ns"])
    if "exact" in by and "eager" in by:
        summary["exact_speedup_vs_eager"] = _ratio(by["eager"]["span_ns"], by["exact"]["span_ns"])
    if host:
        summary["host_capture_us"] = host.get("capture", {}).get("median_us")
    return {"rows": rows, "summary": summary}


def _steps_of(ct: CaseTrace, r: int, acts: np.ndarray) -> tuple[np.ndarray, int]:
    """(step of each activity, steps) inside range r, steps being separated by the range's
    cudaStreamSynchronize calls: an activity belongs to the step its launching call is in."""
    calls = ct.calls(r)
    syncs = np.sort(ct.api_start[calls[ct.api_name[calls] == SYNC]])
    launch_start = ct.api_start[ct.an.launch[acts]]
    return np.searchsorted(syncs, launch_start, "right"), int(syncs.size)


def graph_update(ct: CaseTrace, suffix: str, host: dict | None = None) -> dict[str, Any]:
    """Host cost per update of each way to change a kernel argument between replays."""
    rows = []
    a = ct.acts
    for method in ("eager", "recapture", "exec-update", "set-params"):
        idx = ct.instances(_split(f"graph-update/{method}", suffix))
        if idx.size == 0:
            continue
        upd = ct.instances(_split(f"graph-update/{method}/update", suffix))
        step_span, step_kernel, parity = [], [], []
        steps = 0
        for r in idx:
            m = ct.members(np.array([r]))
            m = m[a.is_kernel[m]]
            step, n = _steps_of(ct, int(r), m)
            steps += n
            if m.size == 0:
                continue
            df = pd.DataFrame({"step": step, "start": a.start[m], "end": a.end[m],
                               "dur": a.end[m] - a.start[m]}).groupby("step")
            agg = df.agg(first=("start", "min"), last=("end", "max"), dur=("dur", "median"))
            step_span += (agg["last"] - agg["first"]).tolist()
            step_kernel += agg["dur"].tolist()
            parity += (agg.index.to_numpy() % 2).tolist()
        parity_a = np.asarray(parity)
        kern = np.asarray(step_kernel, dtype=np.float64)
        even, odd = _median(kern[parity_a == 0]), _median(kern[parity_a == 1])
        mid = (even + odd) / 2 if even is not None and odd is not None else None
        expected = int(((kern > mid) == (parity_a == 0)).sum()) if mid is not None else 0
        api_ns = [int((ct.api_end[c] - ct.api_start[c]).sum()) for c in map(ct.calls, upd)]
        api_calls = [int(ct.calls(r).size) for r in upd]
        wall = int(ct.duration(idx).sum())
        row = {"method": method, "steps": steps, "updates": int(upd.size),
               "kernels": ct.sum_rows(idx, "kernels"), **_launch_counts(ct, idx),
               "update_wall_ns": _median(ct.duration(upd)), "update_api_ns": _median(api_ns),
               "update_calls": _median(api_calls),
               "step_wall_ns": wall / steps if steps else None,
               "step_span_ns": _median(step_span),
               "kernel_ns_even_steps": even, "kernel_ns_odd_steps": odd,
               "steps_as_expected": expected}
        if host:
            row["host_update_us"] = host.get(f"{method}/update", {}).get("median_us")
            row["host_step_us"] = host.get(f"{method}/step", {}).get("median_us")
        rows.append(row)
    by = {r["method"]: r for r in rows}
    summary: dict[str, Any] = {}
    for key, field in (("update_wall_ns", "traced"), ("host_update_us", "host")):
        vals = {m: r.get(key) for m, r in by.items() if m != "eager" and r.get(key) is not None}
        if vals:
            summary[f"cheapest_update_{field}"] = min(vals, key=vals.get)
            if "set-params" in vals and "recapture" in vals:
                summary[f"recapture_over_set_params_{field}"] = _ratio(vals["recapture"], vals["set-params"])
            if "exec-update" in vals and "recapture" in vals:
                summary[f"recapture_over_exec_update_{field}"] = _ratio(vals["recapture"], vals["exec-update"])
    return {"rows": rows, "summary": summary}


def piecewise(ct: CaseTrace, suffix: str, host: dict | None = None) -> dict[str, Any]:
    """Piecewise graphs (attention eager between graph pieces) against full graph and eager."""
    grid = ct.shapes["grid_x"].to_numpy()
    is_att = ct.kernel_names() == "gapscope_attend"
    rows = []
    for v in ("eager", "pieces", "full"):
        idx = ct.instances(_split(f"piecewise/{v}", suffix))
        if idx.size == 0:
            continue
        steps = ct.instances(_split(f"piecewise/{v}/step", suffix))
        m = ct.members(idx)
        m = m[is_att[m]]
        tl = _timeline(ct, idx)
        rows.append({"variant": v, "ranges": int(idx.size), "steps": int(steps.size), **tl,
                     **_launch_counts(ct, idx),
                     "attention_kernels": int(m.size), "attention_grids": int(np.unique(grid[m]).size),
                     "span_per_step_ns": tl["span_ns"] / steps.size if steps.size else None,
                     "host_step_ns": _median(ct.duration(steps))})
    by = {r["variant"]: r for r in rows}
    summary: dict[str, Any] = {}
    if "eager" in by:
        for v in ("pieces", "full"):
            if v in by:
                summary[f"{v}_speedup_vs_eager"] = _ratio(by["eager"]["span_ns"], by[v]["span_ns"])
        if {"pieces", "full"} <= by.keys():
            summary["pieces_share_of_full_saving"] = _ratio(
                by["eager"]["span_ns"] - by["pieces"]["span_ns"],
                by["eager"]["span_ns"] - by["full"]["span_ns"])
    return {"rows": rows, "summary": summary}


INSTANTIATE_PHASES = ("capture", "instantiate", "first-launch", "replay", "eager")


def break_even(capture: float, instantiate: float, first: float, replay: float,
               eager: float) -> int | None:
    """Runs after which a graph has paid for itself: ceil(one-time cost / saving per run),
    one-time cost = capture + instantiate + (first launch - replay), saving = eager - replay;
    None when replaying saves nothing."""
    saving = eager - replay
    if saving <= 0:
        return None
    return max(1, math.ceil((capture + instantiate + first - replay) / saving))


def instantiate(ct: CaseTrace, suffix: str, host: dict | None = None) -> dict[str, Any]:
    """Capture, instantiation, first launch and replay costs, and the break-even run count."""
    rows = []
    med: dict[str, float | None] = {}
    for phase in INSTANTIATE_PHASES:
        idx = ct.instances(_split(f"instantiate/{phase}", suffix))
        if idx.size == 0:
            continue
        spans = [ct.rows[i]["gpu_span_ns"] for i in idx if ct.rows[i]["kernels"]]
        wall = ct.duration(idx)
        med[phase] = _median(wall)
        api = {"capture": "cudaStreamEndCapture", "instantiate": "cudaGraphInstantiate"}.get(phase)
        api_ns = None
        if api:
            durs = [int((ct.api_end[c] - ct.api_start[c])[ct.api_name[c] == api].sum())
                    for c in map(ct.calls, idx)]
            api_ns = _median(durs)
        row = {"phase": phase, "ranges": int(idx.size), "wall_ns": med[phase],
               "wall_min_ns": int(wall.min()), "gpu_span_ns": _median(spans),
               "kernels_per_run": _median([ct.rows[i]["kernels"] for i in idx]), "api_ns": api_ns}
        if host and phase in host:
            row["host_us"] = host[phase].get("median_us")
        rows.append(row)
    summary: dict[str, Any] = {}
    if all(med.get(p) is not None for p in INSTANTIATE_PHASES):
        c, i, f, r, e = (med[p] for p in INSTANTIATE_PHASES)
        summary["one_time_ns"] = c + i + f - r
        summary["saving_per_run_ns"] = e - r
        summary["break_even_runs"] = break_even(c, i, f, r, e)
    if host and all(p in host for p in INSTANTIATE_PHASES):
        c, i, f, r, e = (host[p]["median_us"] for p in INSTANTIATE_PHASES)
        summary["host_one_time_us"] = c + i + f - r
        summary["host_saving_per_run_us"] = e - r
        summary["host_break_even_runs"] = break_even(c, i, f, r, e)
    return {"rows": rows, "summary": summary}


def cross_device_hops(ct: CaseTrace, r: int) -> pd.DataFrame:
    """Every cross-device hop in range r, from the range thread's API calls in order: for each
    cudaStreamWaitEvent, `before` is the last kernel launched before the cudaEventRecord it
    waits on (the signalling device's last work) and `after` the first kernel launched after
    it (the waiting device's next work). Per hop (ns): `ready` = when `after` could have
    started but for the event (its stream's previous work done and its launch call returned),
    `wait` = start(after) - ready, clipped at 0 (the waiting GPU idle, ready, for the other
    one), and `latency` = start(after) - max(ready, end(before)) (the event's own delay once
    both sides were done)."""
    a, launch = ct.acts, ct.an.launch
    cols = ["device", "wait", "latency"]
    calls = ct.calls(r)
    names = ct.api_name[calls]
    m = ct.members(np.array([r]))
    m = m[a.is_kernel[m]]
    waits = np.flatnonzero(names == "cudaStreamWaitEvent")
    records = np.flatnonzero(names == "cudaEventRecord")
    if m.size == 0 or waits.size == 0 or records.size == 0:
        return pd.DataFrame({c: np.zeros(0, dtype=np.int64) for c in cols})
    # Each launch call's position among the range's calls, and its first kernel.
    pos = pd.Series(np.arange(calls.size), index=calls).reindex(launch[m]).to_numpy()
    ok = ~np.isnan(pos)
    k_pos, m = pos[ok].astype(np.int64), m[ok]
    order = np.lexsort((a.start[m], k_pos))
    k_pos, m = k_pos[order], m[order]
    first = np.r_[True, k_pos[1:] != k_pos[:-1]]
    k_pos, m = k_pos[first], m[first]
    n_rec = np.searchsorted(records, waits)  # records issued before each wait
    rec = records[np.maximum(n_rec - 1, 0)]
    after = np.searchsorted(k_pos, waits, "right")
    before = np.searchsorted(k_pos, rec, "left") - 1
    ok = (n_rec > 0) & (after < k_pos.size) & (before >= 0)
    k_after, k_before = m[after[ok]], m[before[ok]]
    # The previous activity on k_after's stream, by GPU start.
    sc = a.stream_code
    s_order = np.lexsort((a.start, sc))
    prev = np.full(a.start.size, -1, dtype=np.int64)
    prev[s_order[1:]] = np.where(sc[s_order[1:]] == sc[s_order[:-1]], s_order[:-1], -1)
    p = prev[k_after]
    stream_free = np.where(p >= 0, a.end[np.maximum(p, 0)], np.iinfo(np.int64).min)
    ready = np.maximum(stream_free, ct.api_end[launch[k_after]])
    start = a.start[k_after]
    return pd.DataFrame({
        "device": a.device_of(k_after),
        "wait": np.maximum(start - ready, 0),
        "latency": np.maximum(start - np.maximum(ready, a.end[k_before]), 0),
    })


def multi_gpu(ct: CaseTrace, suffix: str, host: dict | None = None) -> dict[str, Any]:
    """Per-device gap figures and the cross-device waits of GPUs chained by events."""
    stats, cats = ct.pairs()
    rows = []
    summary: dict[str, Any] = {}
    for v in ("one-way", "ping-pong"):
        idx = ct.instances(_split(f"multi-gpu/{v}", suffix))
        if idx.size == 0:
            continue
        hops = pd.concat([cross_device_hops(ct, int(r)) for r in idx], ignore_index=True)
        for d, dev in enumerate(ct.acts.device_ids.tolist()):
            pairs = idx * ct.n_dev + d
            span = int(stats["gpu_span_ns"].to_numpy()[pairs].sum())
            if span == 0:
                continue
            gap = int(stats["gap_ns"].to_numpy()[pairs].sum())
            mine = hops[hops["device"] == dev]
            rows.append({"variant": v, "device": int(dev),
                         "kernels": int(stats["kernels"].to_numpy()[pairs].sum()),
                         "span_ns": span, "busy_ns": span - gap, "gap_ns": gap,
                         "gap_fraction": _ratio(gap, span),
                         "waits": int(mine.shape[0]), "cross_wait_ns": int(mine["wait"].sum()),
                         "cross_wait_share": _ratio(int(mine["wait"].sum()), gap),
                         # the host-side gap time a replay removes: launch calls and host time
                         "launch_gap_ns": int(cats[pairs][:, [IdleCategory.LAUNCH, IdleCategory.HOST]].sum()),
                         "dependency_gap_ns": int(cats[pairs, IdleCategory.DEPENDENCY].sum())})
        lat = hops["latency"].to_numpy()
        summary[v] = {"hops": int(lat.size), "cross_wait_ns": int(hops["wait"].sum()),
                      "hop_latency_median_ns": _median(lat),
                      "hop_latency_p90_ns": float(np.percentile(lat, 90)) if lat.size else None,
                      "hop_latency_max_ns": int(lat.max()) if lat.size else None}
    return {"rows": rows, "summary": summary}


FIGURES: dict[str, Callable[[CaseTrace, str, dict | None], dict[str, Any]]] = {
    "default-stream": default_stream, "graph-pool": graph_pool, "graph-update": graph_update,
    "piecewise": piecewise, "instantiate": instantiate, "multi-gpu": multi_gpu,
}
assert tuple(FIGURES) == CASES


def cases_in(an: AnalysisArrays) -> list[str]:
    """The cases whose ranges the trace holds, in CASES order."""
    names = set(an.ranges.frame["name"].tolist())
    return [c for c in CASES if any(n.startswith(c + "/") for n in names)]


def case_figures(an: AnalysisArrays, trace: Trace, cases: Sequence[str] | None = None,
                 kernel_us: Sequence[float | None] = (None,),
                 host: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Figures of every case at every kernel time, keyed `<case>` or `<case>/k=<us>us` (the
    keys of the run's host timers, `host`, whose `host` section each case receives).
    ``trace`` is the open trace ``an`` was computed from."""
    ct = CaseTrace(an, trace)
    out = {}
    for us in kernel_us:
        suffix = "" if us is None else range_name("", us)
        for case in cases if cases is not None else cases_in(an):
            key = range_name(case, us)
            h = (host or {}).get(key, {}).get("host")
            out[key] = FIGURES[case](ct, suffix, h)
    return out


def figures_from_trace(path: str | Path, cases: Sequence[str] | None = None,
                       host: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Open and analyze one export, then `case_figures` (cases found in it by default)."""
    with open_trace(path) as trace:
        an = run_analysis(trace.frames(syncs=True, all_calls=True))
        found = cases if cases is not None else cases_in(an)
        if not found:
            raise GapscopeError(f"{path}: no case ranges (<case>/<variant>) in this trace")
        return case_figures(an, trace, found, host=host)
