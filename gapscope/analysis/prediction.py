"""The predicted CUDA Graph speedup of a timeline row, for its steady state and untraced
(docs/metrics.md, "Predicted CUDA Graph speedup"), and the graph ceiling, a true upper bound.

The model, per row, on its steady state (span and gap time without the one-off gaps):

* untraced eager time E: the span less what the tracer added to the host's launches, which only
  shortens the span where the host was the bottleneck (launch and host gap time), and never below
  what the device itself needs (busy time and device-side gaps). Per eager launch the tracer adds
  (catalog.TRACERS) the traced launch call's excess over an untraced one (nsys), or a cost per
  launch, per recorded operator and per other recorded CUDA call (the trace's operators and other
  calls per kernel launch call) scaled by the host's speed, which the traced launch call gauges
  (torch.profiler);
* replay time P: the device runs the same kernels back to back, each boundary costing the
  replay turnaround (measured on the trace's own replays: the gaps inside them traced at node
  level, or, at graph level, a replay's length against the same range name's eager work; else
  the GPU's calibration), copies
  included with the hand-offs around them, the hand-offs between streams become graph edges;
  the host launches one graph per instance and keeps its stalls, setup and syncs. A row that
  synchronizes runs host and device one after the other (P = device + host + sync gap time); one
  that does not overlaps them (P = the longer of the two);
* predicted speedup E / P, with a range from the calibration's bounds (the tracer's cost, the
  turnaround) and from overlap against serial host work.

The ceiling is span / (the least a replay of the traced program could take): the device's own
time (the kernels' busy time, less what a replay can save on each eager kernel, plus the copies'
own time, at most the time it spent behind copies: the hand-offs around a copy may shrink in a replay) or the
host's stall time, whichever is longer.
Nothing a replay does goes below that, so it bounds every measured and predicted speedup of the
row from above.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gapscope import catalog
from gapscope.analysis.metrics import group_medians
from gapscope.catalog import CATEGORY_NAMES, GRAPH_SHARE, GraphCosts, Tracer
from gapscope.trace.cuda_api import GRAPH_LAUNCH_CALLS, KERNEL_LAUNCH_CALLS


@dataclass(frozen=True)
class TraceCosts:
    """What the model takes from the trace as a whole: who traced it, how long its eager launch
    calls took, the GPU's replay costs and the replay turnaround measured on its own replays."""

    tracer: Tracer
    #: a traced kernel launch call's mean duration: the kernel launch APIs' steady means (calls
    #: shorter than the stall threshold), weighted by their calls (nan: none)
    launch_call_ns: float
    gpu: GraphCosts
    #: gap time inside the trace's replays per boundary (nan: no replay traced at node level)
    turnaround_ns: float
    #: the framework operators the tracer recorded per kernel launch call (0: none recorded)
    operators_per_launch: float = 0.0
    #: the CUDA calls other than launches it recorded per kernel launch call (0: none counted)
    calls_per_launch: float = 0.0
    #: the turnaround per boundary that replays traced at graph level measure against the same
    #: range names' eager instances (:func:`opaque_replay_turnaround`; nan: none)
    graph_level_turnaround_ns: float = float("nan")
    #: the launches of torch.compile's Triton code (Inductor's kernels) per kernel launch call
    #: (0: none, or not counted)
    inductor_per_launch: float = 0.0

    def inputs(self) -> dict[str, Any]:
        """The model's trace-wide inputs as the result's ``trace.prediction`` holds them
        (docs/schema.md), so that a reader can recompute each row's prediction: the tracer, its
        traced launch call (ns, null: none), operators, other CUDA calls and launches of
        torch.compile's Triton code per launch call, the
        turnaround measured inside the trace's replays (null: none traced at node level), the one
        its replays traced at graph level measure against eager instances of the same range names
        (null: none) and the GPU's calibration (turnaround, graph launch and its cost per node)."""
        def ns(x: float) -> float | None:
            return round(float(x), 1) if x is not None and np.isfinite(x) else None

        return {"tracer": self.tracer.name, "launch_call_ns": ns(self.launch_call_ns),
                "operators_per_launch": round(self.operators_per_launch, 4),
                "calls_per_launch": round(self.calls_per_launch, 4),
                "inductor_per_launch": round(self.inductor_per_launch, 4),
                "replay_turnaround_ns": ns(self.turnaround_ns),
                "graph_level_turnaround_ns": ns(self.graph_level_turnaround_ns),
                "gpu_turnaround_ns": self.gpu.turnaround_ns,
                "graph_launch_ns": self.gpu.launch_ns, "graph_launch_per_node_ns": self.gpu.launch_per_node_ns}


def trace_costs(tracer: str, launch_rows: list[Mapping], gpu: str | None, inside_ns: float,
                inside_boundaries: float, operators: int | None = None, launch_calls: int | None = None,
                other_calls: int | None = None, graph_level_ns: float = float("nan"),
                inductor_launches: int | None = None) -> TraceCosts:
    """The trace-wide inputs of the model from the trace's tracer (a key of catalog.TRACERS), its
    launch statistics (the result's ``launch`` rows), the GPU's name, the gap time and
    boundaries inside its replays, the framework operators the tracer recorded, its kernel
    launch calls, captured ones included, its other CUDA calls and its launches of torch.compile's
    Triton code (None: the format records no operators, or its calls are not counted), and the
    turnaround its graph-level replays measure (:func:`opaque_replay_turnaround`)."""
    # Every eager kernel launch's tracer cost adds to the span, so the mean call is what counts.
    # Calls longer than the stall threshold are stalls (a module load inside a first call), left
    # out of each API's mean; copy calls are left out (a copy from pageable memory returns when
    # the copy is done: its duration is a wait, not the tracer's), unless nothing else launched.
    rows = [r for r in launch_rows if r["api"] not in GRAPH_LAUNCH_CALLS and r.get("host_mean_ns") is not None
            and r["calls"] > 0]
    calls = [(r["host_mean_ns"], r["calls"]) for r in rows if r["api"] in KERNEL_LAUNCH_CALLS] or \
        [(r["host_mean_ns"], r["calls"]) for r in rows]
    total = sum(c for _, c in calls)
    launch = sum(m * c for m, c in calls) / total if total else float("nan")
    turnaround = inside_ns / inside_boundaries if inside_boundaries > 0 else float("nan")
    # Operators per kernel launch call: a launch inside a graph capture had its operators
    # recorded too, so every launch call counts, not only those that launched work.
    per_launch = operators / launch_calls if operators and launch_calls else 0.0
    calls_per_launch = other_calls / launch_calls if other_calls and launch_calls else 0.0
    inductor = inductor_launches / launch_calls if inductor_launches and launch_calls else 0.0
    return TraceCosts(catalog.TRACERS[tracer], launch, catalog.graph_costs(gpu), turnaround, per_launch,
                      calls_per_launch, graph_level_ns, inductor_per_launch=inductor)


def opaque_replay_turnaround(name: np.ndarray, eager: np.ndarray, opaque: np.ndarray, span: np.ndarray,
                             busy: np.ndarray, copies: np.ndarray, kernels: np.ndarray) -> float:
    """The replay turnaround per kernel boundary that replays traced at graph level measure (a
    replay there is one opaque interval, so no gap inside it is seen): for each range name
    (``name``, per range instance) that ran both eagerly (``eager``: no graph launched) and as such replays
    (``opaque``), its median replayed instance's span less its median eager instance's busy and
    copy time (``copies``: the device's time behind copies, as the replay time counts it), over
    that eager instance's kernel boundaries; the names' sums divided, at least 0 (a kernel can
    run shorter inside a replay). nan where no name ran both ways."""
    n = int(name.max()) + 1 if name.size else 0

    def medians(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
        return group_medians(np.asarray(values, dtype=np.float64), mask, name, n)

    boundaries = medians(eager, kernels) - 1.0
    # nan for a name that did not run both ways
    saved = medians(opaque, span) - medians(eager, busy) - medians(eager, copies)
    counted = ~np.isnan(saved) & (boundaries > 0)
    if not counted.any():
        return float("nan")
    return max(float(saved[counted].sum() / boundaries[counted].sum()), 0.0)


def behind_copies(memop_ns: np.ndarray, memop_gap_ns: np.ndarray) -> np.ndarray:
    """The device's time behind copies in a replay: a copy node keeps the hand-offs around it that
    it had eager (the memop gap time: the copy and the idle time beside it), at least the copies'
    own time (``memop_ns``)."""
    return np.maximum(memop_ns, memop_gap_ns)


def launch_cost_ns(tracer: Tracer, traced_call_ns: float, operators_per_launch: float,
                   untraced_call_ns: float | None, factor: float = 1.0, calls_per_launch: float = 0.0,
                   inductor_per_launch: float = 0.0) -> float:
    """What ``tracer`` added to the host per eager launch of a trace whose kernel launch calls
    lasted ``traced_call_ns`` (mean) and which recorded ``operators_per_launch``,
    ``calls_per_launch`` other CUDA calls and ``inductor_per_launch`` launches of torch.compile's
    Triton code a launch: the traced call's excess over ``untraced_call_ns`` (None: not counted),
    plus the tracer's cost per launch, per operator, per other call and per Inductor launch times
    ``factor`` (its calibration's bound), scaled by the host's speed."""
    inside = max(traced_call_ns - untraced_call_ns, 0.0) if untraced_call_ns is not None else 0.0
    # The tracer's own work per launch and per operator runs at the host's speed: where its
    # traced launch call lasts longer than the calibration host's, so does that work.
    scale = traced_call_ns / tracer.reference_call_ns if tracer.reference_call_ns and traced_call_ns > 0 else 1.0
    own = (tracer.per_launch_ns + operators_per_launch * tracer.per_op_ns + calls_per_launch * tracer.per_call_ns
           + inductor_per_launch * tracer.per_inductor_launch_ns)
    return inside + own * scale * factor


#: The model's output columns, in the JSON's order ...
FIELDS = ("steady_span_ns", "one_off_ns", "tracer_overhead_ns", "eager_untraced_ns", "graph_predicted_ns",
          "graph_predicted_speedup", "graph_predicted_low", "graph_predicted_high",
          "graph_ceiling_span_ns", "graph_ceiling_speedup")
#: ... and those every row has, whole nanoseconds (the others are null where not predicted).
WHOLE_NS = ("steady_span_ns", "one_off_ns", "tracer_overhead_ns", "graph_ceiling_span_ns")


def predict(cols: Mapping[str, np.ndarray], cats: np.ndarray, one_off: np.ndarray, instances: np.ndarray,
            costs: TraceCosts) -> dict[str, np.ndarray]:
    """Every figure of :data:`FIELDS` for the rows of ``cols`` (``gpu_span_ns``, ``busy_ns``,
    ``kernels``, ``graph_kernels``, ``graph_replays``, ``memops``, ``memop_ns`` and
    ``gap_inside_replays_ns``: a row's own replays measure its turnaround), given their gap
    time per category ``cats`` (n, categories), the part of it in one-off gaps ``one_off``
    (same shape) and how many instances each row sums (one graph launch each). Speedups are nan
    where the row has no eager work to predict (no span, or a graph replay row)."""
    needed = ("gpu_span_ns", "busy_ns", "kernels", "graph_kernels", "graph_replays", "memops", "memop_ns",
              "gap_inside_replays_ns")
    col = {k: np.asarray(cols[k], dtype=np.float64) for k in needed if k in cols}
    cats = np.asarray(cats, dtype=np.float64)
    one_off = np.asarray(one_off, dtype=np.float64)
    steady = cats - one_off
    c = {name: steady[:, i] for i, name in enumerate(CATEGORY_NAMES)}
    one_off_ns = one_off.sum(axis=1)
    span = col["gpu_span_ns"] - one_off_ns
    busy, kernels, memops = col["busy_ns"], col["kernels"], col["memops"]
    graph_kernels, replays = col["graph_kernels"], col["graph_replays"]
    instances = np.maximum(np.asarray(instances, dtype=np.float64), 1.0)
    eager_launches = np.maximum(kernels - graph_kernels, 0.0) + memops

    tr = costs.tracer
    d = 0.0 if np.isnan(costs.launch_call_ns) else costs.launch_call_ns

    def overhead(call_ns: float | None, factor: float) -> np.ndarray:
        return eager_launches * launch_cost_ns(tr, d, costs.operators_per_launch, call_ns, factor,
                                               costs.calls_per_launch, costs.inductor_per_launch)

    host_side = c["launch"] + c["host"]
    device_floor = busy + c["pipeline"] + c["dependency"] + c["memop"]

    def eager(over: np.ndarray) -> np.ndarray:
        return np.maximum(span - np.minimum(host_side, over), device_floor)

    over = overhead(tr.launch_call_ns, 1.0)
    e_mid = eager(over)
    e_low = eager(overhead(tr.launch_call_low_ns, tr.cost_high))
    e_high = eager(overhead(tr.launch_call_high_ns, tr.cost_low))

    # The replay turnaround: the row's own replays, else the trace's (the gaps inside its replays
    # traced at node level, else what its graph-level replays measure), else the GPU's calibration.
    g = costs.gpu
    own_bounds = np.maximum(graph_kernels - replays, 0.0)
    own = np.full(span.size, np.nan)
    if "gap_inside_replays_ns" in col:
        np.divide(col["gap_inside_replays_ns"], own_bounds, out=own, where=own_bounds > 0)
    # Inside gaps of at most what the tracer reads inside any chain's replay
    # (catalog.TRACED_REPLAY_GAP_NS) tell little of the GPU: its calibration is taken where lower,
    # and the range spans the calibration's and the reading; a lower reading stands (those
    # replays did turn around that fast), and so does a longer one (the step's own structure).
    # A graph-level replay's length is not what the tracer reads inside it: that measure stands.
    inside_traced = not np.isnan(costs.turnaround_ns)
    graph_level = not inside_traced and not np.isnan(costs.graph_level_turnaround_ns)
    trace_t = costs.turnaround_ns if inside_traced else \
        costs.graph_level_turnaround_ns if graph_level else g.turnaround_ns
    t_traced = np.where(np.isnan(own), trace_t, own)
    measured = ~np.isnan(own) | inside_traced | graph_level
    t_mid = np.where(measured, t_traced, g.turnaround_ns)
    t_low = np.where(measured, t_traced, g.turnaround_low_ns)
    t_high = np.where(measured, t_traced, g.turnaround_high_ns)
    reading = measured & (t_traced <= catalog.TRACED_REPLAY_GAP_NS) & (~np.isnan(own) | inside_traced)
    t_mid[reading] = np.minimum(t_traced, g.turnaround_ns)[reading]
    t_low[reading] = np.minimum(t_traced, g.turnaround_low_ns)[reading]
    t_high[reading] = np.maximum(t_traced, g.turnaround_high_ns)[reading]

    nodes = (kernels + memops) / instances
    launch = instances * (g.launch_ns + g.launch_per_node_ns * nodes)
    boundaries = np.maximum(kernels - instances, 0.0)
    host = launch + c["stall"] + c["setup"]
    syncs = c["sync"] > 0

    copies = behind_copies(col["memop_ns"], c["memop"])

    def replay(t: np.ndarray, serial: np.ndarray) -> np.ndarray:
        device = busy + copies + boundaries * t
        return np.where(serial, device + host + c["sync"], np.maximum(device, host))

    p_mid = replay(t_mid, syncs)
    p_low = replay(t_low, syncs)
    p_high = replay(t_high, syncs | (c["stall"] > 0))

    # The least a replay keeps of the copies: their own time, at most the gap time behind them (a
    # memset between two kernels of one stream leaves hand-offs on both sides that a replay shortens);
    # of the kernels, their busy time less what a replay can save on each eager one
    # (catalog.REPLAY_KERNEL_SAVING_NS), at least half of it.
    kernel_floor = np.maximum(busy - catalog.REPLAY_KERNEL_SAVING_NS * (eager_launches - memops), 0.5 * busy)
    ceiling_span = np.maximum(kernel_floor + np.minimum(col["memop_ns"], c["memop"]), c["stall"])
    eager_rows = (span > 0) & ~((graph_kernels > GRAPH_SHARE * kernels) & (replays > 0))

    def ratio(a: np.ndarray, b: np.ndarray, rows: np.ndarray) -> np.ndarray:
        out = np.full(a.size, np.nan)
        np.divide(a, b, out=out, where=rows & (b > 0))
        return out

    return {
        "steady_span_ns": span,
        "one_off_ns": one_off_ns,
        "tracer_overhead_ns": np.where(eager_rows, span - e_mid, 0.0),
        "eager_untraced_ns": np.where(eager_rows, e_mid, np.nan),
        "graph_predicted_ns": np.where(eager_rows, p_mid, np.nan),
        "graph_predicted_speedup": ratio(e_mid, p_mid, eager_rows),
        "graph_predicted_low": ratio(e_low, p_high, eager_rows),
        "graph_predicted_high": ratio(e_high, p_low, eager_rows),
        "graph_ceiling_span_ns": ceiling_span,
        "graph_ceiling_speedup": ratio(span, ceiling_span, span > 0),
    }
