"""What `gapscope compare` can check: every figure of a result row it compares, its unit, which
way is worse, and the words a change is told in (docs/ci.md, "Metrics").

Five kinds of metric:

``row``
    a numeric field of a range, device or stream row (docs/schema.md, STATS and the replay and
    ceiling fields): ``gap_fraction``, ``kernels``, ``gpu_span_ns`` ...
``category``
    one gap category of the row's ``gap_by_category_ns`` (``sync_ns``, ``launch_ns``, ...);
``verdict``
    the row's verdict code (docs/metrics.md, "Verdicts"), compared by :data:`VERDICT_RANK`;
``coverage``
    how a range name's instances ran: ``eager_fallback``, the instances that ran eager beyond the
    baseline's share (docs/ci.md, "Modes: replayed and eager steps");
``launch``
    a launch statistic of one launch API (the result's ``launch`` rows): ``launch.host_median_ns``
    and friends, written ``launch.API.FIELD`` in a threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

from gapscope import catalog
from gapscope.errors import GapscopeError
from gapscope.render.units import fmt_count, fmt_ns

__all__ = [
    "CATEGORIES",
    "METRICS",
    "VERDICT_RANK",
    "Metric",
    "known_names",
    "launch_metric",
    "metric_for",
    "verdict_change",
]

#: Gap categories of a row, in the schema's order (gapscope.catalog's).
CATEGORIES = catalog.CATEGORY_NAMES
#: The categories a gapscope.analysis/1 row does not have: its ``launch`` held all host-side time.
CATEGORIES_NEW_IN_2 = ("host", "stall", "setup")


@dataclass(frozen=True)
class Metric:
    """One figure compare can check.

    ``unit`` is ``fraction``, ``ns``, ``count``, ``ratio`` or ``verdict``; ``worse`` is +1 when
    a higher value is worse, -1 when a lower one is; ``field`` is where a row holds it (the
    category name inside ``gap_by_category_ns``, the field of a launch row); ``summed`` marks
    fields a range summary (by_name) sums over its instances; ``label`` says what it is and
    ``worse_means`` what a change for the worse means, in words.
    """

    name: str
    unit: str
    meaning: str
    label: str
    worse_means: str
    kind: str = "row"
    field: str = ""
    worse: int = 1
    summed: bool = False
    short_name: str = ""

    @property
    def short(self) -> str:
        """The name as users usually type it (``gpu_span``, ``sync``, ``host_median``)."""
        if self.short_name:
            return self.short_name
        base = self.name.split(".", 1)[1] if self.kind == "launch" else self.name
        return base[:-3] if base.endswith("_ns") else base

    @property
    def key(self) -> str:
        """Where a row holds the value: the field, or ``gap_by_category_ns.<category>``."""
        return f"gap_by_category_ns.{self.field}" if self.kind == "category" else self.field

    def format(self, value: float | str | None) -> str:
        """A value in this metric's unit, for people (``31.2%``, ``4.56 ms``, ``1,024``, ``0``)."""
        if value is None:
            return "—"
        if self.unit == "verdict":
            return str(value)
        if self.unit == "fraction":
            return _pct(value) + "%"
        if self.unit == "ns":
            return "0" if value == 0 else fmt_ns(value)
        if self.unit == "ratio":
            return f"{value:.2f}x"
        return fmt_count(value)

    def format_delta(self, delta: float | None) -> str:
        """A signed change in this metric's unit (fractions in percentage points)."""
        if delta is None or self.unit == "verdict":
            return "—"
        if delta == 0:
            return "+0"
        sign = "+" if delta >= 0 else "-"
        if self.unit == "fraction":
            return f"{sign}{_pct(abs(delta))} pp"
        if self.unit == "ns":
            return sign + fmt_ns(abs(delta))
        if self.unit == "ratio":
            return f"{sign}{abs(delta):.2f}x"
        return sign + fmt_count(abs(delta))


def _pct(fraction: float) -> str:
    value = fraction * 100
    return f"{value:.2f}" if 0 < abs(value) < 0.1 else f"{value:.1f}"


def _row(name: str, unit: str, meaning: str, label: str, worse_means: str, *, summed: bool = False,
         worse: int = 1, short: str = "") -> Metric:
    return Metric(name, unit, meaning, label, worse_means, "row", name, worse, summed, short)


def _category(cat: str, label: str, worse_means: str) -> Metric:
    name = "memop_gap_ns" if cat == "memop" else f"{cat}_ns"
    return Metric(name, "ns", f"Gap time of category {cat} (docs/metrics.md, 'Gap attribution').", label,
                  worse_means, "category", cat, 1, True, cat)


def _launch(field: str, unit: str, meaning: str, label: str, worse_means: str, worse: int = 1) -> Metric:
    return Metric(f"launch.{field}", unit, meaning, label, worse_means, "launch", field, worse)


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        _row("gap_fraction", "fraction", "Share of the GPU span with no kernel running: gap_ns / gpu_span_ns.",
             "gap fraction", "the GPU sits idle for more of its span"),
        _row("gpu_span_ns", "ns", "Wall time of the GPU work: first kernel start to last kernel end.",
             "GPU span", "the work takes longer on the GPU", summed=True),
        _row("busy_ns", "ns", "Time at least one kernel ran (union of kernel intervals).",
             "busy time", "the kernels run longer", summed=True),
        _row("gap_ns", "ns", "Idle time inside the span: gpu_span_ns - busy_ns.",
             "gap time", "more idle time between kernels", summed=True),
        _row("gap_count", "count", "Number of idle gaps inside the span.",
             "gaps", "more idle stretches between kernels", summed=True),
        _row("gap_p50_ns", "ns", "Median gap length (no gaps counts as 0).", "median gap", "the gaps got longer"),
        _row("gap_p90_ns", "ns", "90th-percentile gap length (no gaps counts as 0).", "gap p90",
             "the long gaps got longer"),
        _row("gap_p99_ns", "ns", "99th-percentile gap length (no gaps counts as 0).", "gap p99",
             "the long gaps got longer"),
        _row("gap_max_ns", "ns", "Longest idle gap inside the span (0 without gaps).", "longest gap",
             "a longer idle stretch"),
        _row("kernels", "count", "Kernels in the work; a kernel split in two shows here.", "kernels",
             "a fusion lost or a kernel split", summed=True),
        _row("kernel_median_ns", "ns", "Median kernel duration (no kernels counts as 0).", "median kernel",
             "the kernels got slower"),
        _row("memops", "count", "memcpy/memset operations in the work.", "copies",
             "more memcpy/memset operations", summed=True),
        _row("memop_ns", "ns", "Summed duration of the memcpy/memset operations.", "copy time",
             "the copies take longer", summed=True, short="memop_ns"),
        _row("graph_kernels", "count", "Kernels issued by CUDA graph launches; lower is worse.",
             "graph kernels", "fewer kernels come from CUDA graph replays", summed=True, worse=-1),
        _row("graph_replays", "count", "Graph launch calls that issued the work; lower is worse.",
             "graph replays", "fewer CUDA graph replays", summed=True, worse=-1),
        _row("gap_between_replays_ns", "ns", "Gap time whose two sides came from different launch calls.",
             "gap time between launches", "more host time between launches or replays", summed=True),
        _row("gap_inside_replays_ns", "ns", "Gap time whose two sides came from one graph launch call.",
             "gap time inside replays", "more device turnaround inside graph replays", summed=True),
        _row("graph_ceiling_span_ns", "ns", "The span with the launch and host gaps removed (the graph ceiling).",
             "graph ceiling span", "a longer span even without launch and host gaps", summed=True),
        _row("graph_ceiling_speedup", "ratio", "gpu_span_ns / graph_ceiling_span_ns: what CUDA Graphs could win.",
             "graph ceiling", "more launch and host overhead for a CUDA graph to remove"),
        _row("wall_ns", "ns", "A range's own wall time on the host: its NVTX start to its end (ranges only).",
             "host wall time", "the host takes longer over the range", summed=True, short="wall"),
        _row("api_calls", "count", "CUDA calls the range's thread made inside it (ranges only).",
             "CUDA calls", "the host makes more CUDA calls", summed=True),
        _row("api_ns", "ns", "Summed duration of those CUDA calls (ranges only).", "time in CUDA calls",
             "the host spends longer in CUDA calls", summed=True, short="api_ns"),
        _row("graph_recordings", "count", "CUDA graphs the range's thread instantiated or updated inside it "
             "(ranges only; docs/metrics.md, 'Graph recording').", "graph recordings",
             "graphs are recorded more often (re-recording)", summed=True, short="recordings"),
        _row("recording_ns", "ns", "Time of that recording: capture, instantiate and update calls and the calls "
             "made while capturing (ranges only).", "graph recording time", "recording graphs takes longer",
             summed=True, short="recording_ns"),
        *(_category(c.name, c.label, c.worse_means) for c in catalog.CATEGORIES),
        Metric("eager_fallback", "count", "Instances of a range name that ran eager beyond the baseline's share "
               "(the rest replayed CUDA graphs); per range name, where some instance was replayed.",
               "eager fallback", "more steps ran eager instead of replaying their CUDA graph", "coverage",
               "eager_instances", short_name="eager_fallback"),
        Metric("verdict", "verdict", "The row's verdict (docs/metrics.md, 'Verdicts'); worse by VERDICT_RANK.",
               "verdict", "the verdict got worse", "verdict", "verdict"),
        _launch("calls", "count", "Calls of the API that launched work.", "calls", "more launch calls"),
        _launch("host_median_ns", "ns", "Median duration of one call on the CPU.", "host time per call",
                "launching got slower on the host"),
        _launch("host_p90_ns", "ns", "90th-percentile duration of one call on the CPU.", "host time per call (p90)",
                "launching got slower on the host"),
        _launch("latency_median_ns", "ns", "Median time from a call's end to its work's start.",
                "launch-to-start latency", "work waits longer between its launch and its start"),
        _launch("latency_p90_ns", "ns", "90th-percentile time from a call's end to its work's start.",
                "launch-to-start latency (p90)", "work waits longer between its launch and its start"),
        _launch("per_second", "count", "Calls per second over the calls' own time window; lower is worse.",
                "calls per second", "the host issues launches more slowly", worse=-1),
    )
}
#: What a sync rise from nothing means (the sync metric's words when its baseline is 0).
NEW_SYNC = "a new host synchronize"

_ALIASES: dict[str, str] = {}
for _m in METRICS.values():
    if _m.kind == "launch":
        continue
    _ALIASES[_m.name] = _m.name
    _ALIASES[_m.short] = _m.name
    if _m.kind == "category":
        _ALIASES.update({f"{_m.field}_gap": _m.name, f"{_m.field}_gap_ns": _m.name,
                         f"gap_by_category_ns.{_m.field}": _m.name})
_ALIASES.update({"span": "gpu_span_ns", "gaps": "gap_count", "kernel_count": "kernels",
                 "fallback": "eager_fallback", "eager_instances": "eager_fallback"})
_LAUNCH_ALIASES = {m.field: m.name for m in METRICS.values() if m.kind == "launch"}
_LAUNCH_ALIASES.update({m.short: m.name for m in METRICS.values() if m.kind == "launch"})


def known_names() -> str:
    """The metric names a threshold can use, for error messages."""
    rows = [m.short for m in METRICS.values() if m.kind in ("row", "category", "coverage", "verdict")]
    launch = "|".join(m.short for m in METRICS.values() if m.kind == "launch")
    return ", ".join(rows) + f", launch.API.{{{launch}}}"


def metric_for(name: str) -> Metric:
    """The row, category or verdict metric called ``name`` or one of its aliases (``gpu_span``
    for ``gpu_span_ns``, ``sync`` for ``sync_ns``); GapscopeError (exit 2) for anything else."""
    text = name.strip()
    try:
        return METRICS[_ALIASES[text.lower()]]
    except KeyError:
        if text.lower() in _LAUNCH_ALIASES:
            raise GapscopeError(f"{text!r} is a launch statistic: write launch.API.{text}, e.g. "
                                f"launch.cudaGraphLaunch.{text}", 2) from None
        raise GapscopeError(f"unknown metric {text!r} (known: {known_names()})", 2) from None


def launch_metric(field: str) -> Metric:
    """The launch statistic ``field`` (``host_median_ns`` or ``host_median``, ...)."""
    try:
        return METRICS[_LAUNCH_ALIASES[field.strip().lower()]]
    except KeyError:
        known = ", ".join(m.short for m in METRICS.values() if m.kind == "launch")
        raise GapscopeError(f"unknown launch statistic {field.strip()!r} (known: {known})", 2) from None


#: How bad a verdict is, for ``verdict:same`` (gapscope.catalog's ranks): a change to a higher
#: rank is worse, to a lower one better; a change within one rank (launch-bound to host-bound:
#: both say graphs pay) is neither. 0: nothing to fix; 1: what a graph leaves (device-side
#: gaps, or graphs already replayed); 2: some launch gaps; 3: gaps that matter.
VERDICT_RANK = catalog.VERDICT_RANK


def verdict_change(baseline: str, current: str, was_replay: bool, is_replay: bool) -> int:
    """+1 when the verdict got worse, -1 when it got better, 0 otherwise. Losing the graph
    replay (the row was replayed as a CUDA graph and is not now) is worse, unless the gaps are
    now amortized."""
    if was_replay and not is_replay and current != "amortized":
        return 1
    b, c = VERDICT_RANK.get(baseline), VERDICT_RANK.get(current)
    if b is None or c is None or b == c:
        return 0
    return 1 if c > b else -1
