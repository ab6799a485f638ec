"""Reading a timeline row the way the design text does: is the gap fraction a problem, what kind
of problem, and would CUDA Graphs fix it (docs/metrics.md, "Verdicts").

The verdict is a pure function of a result row, so a saved result reads the same as a fresh one
(a row of an older schema too: categories it lacks count as 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The seed's criterion as numbers (docs/metrics.md, "Verdicts"): above LAUNCH_BOUND the gaps
#: matter, below AMORTIZED they are amortized; without attribution, gaps whose median is longer
#: than LAUNCH_SCALE_NS are host-side stalls, not launch overhead.
LAUNCH_BOUND = 0.20
AMORTIZED = 0.05
LAUNCH_SCALE_NS = 100_000
#: A row is a graph replay when more than this share of its kernels came from graph launches.
GRAPH_SHARE = 0.5

#: Every verdict code, with the text the tables show.
READINGS = {
    "no_work": "no GPU work",
    "amortized": "gaps amortized",
    "launch_bound": "launch-bound: graphs pay",
    "host_bound": "host-bound: graphs pay",
    "some_launch_gaps": "some launch gaps",
    "stall": "host stalls: graphs won't",
    "setup": "setup (loading, allocs)",
    "sync": "host syncs idle the GPU",
    "dependency": "waits on other streams",
    "memop": "idle behind copies",
    "pipeline": "device turnaround",
    "unknown": "gaps not attributable",
    "graph_replay_between": "graphs: host between",
    "graph_replay_inside": "graphs: device turnaround",
}
VERDICTS = ("no_work", "amortized", "launch_bound", "host_bound", "some_launch_gaps", "stall", "setup",
            "sync", "dependency", "memop", "pipeline", "unknown", "graph_replay")

#: What a CUDA Graph replay removes: the categories of the graph ceiling (gapscope.analysis.payoff).
REMOVABLE = ("launch", "host")
#: The host-side categories a replay keeps: they name a graph replay's verdict when they dominate.
HOST_WAITS = ("stall", "setup", "sync")


def is_graph_replay(row: dict[str, Any]) -> bool:
    """True when more than half of the row's kernels came from graph launches."""
    kernels = row.get("kernels") or 0
    return bool(row.get("graph_replays")) and kernels > 0 and row.get("graph_kernels", 0) > GRAPH_SHARE * kernels


def _replay(row: dict[str, Any]) -> tuple[str, str]:
    """A graph replay's verdict: what is left is host time between replays or device
    turnaround inside them, whichever holds more gap time."""
    between = row.get("gap_between_replays_ns", 0)
    inside = row.get("gap_inside_replays_ns", 0)
    return "graph_replay", READINGS["graph_replay_between" if between >= inside else "graph_replay_inside"]


def verdict(row: dict[str, Any]) -> tuple[str, str]:
    """(code, reading) of a timeline row: one of VERDICTS and the phrase the tables show."""
    f = row.get("gap_fraction")
    if f is None:
        return "no_work", READINGS["no_work"]
    if f < AMORTIZED:
        return "amortized", READINGS["amortized"]
    cats = row.get("gap_by_category_ns")
    if cats and row.get("gap_ns"):
        # One pass over the categories (this runs once per row of every result): the removable
        # time, and the largest other category (the first in the row's order on a tie).
        removable = 0
        top, top_ns = None, 0
        for c, v in cats.items():
            if c in REMOVABLE:
                removable += v
            elif top is None or v > top_ns:
                top, top_ns = c, v
        if is_graph_replay(row):
            # What a replay leaves: a host that stalls, sets up or syncs, or else its own gaps.
            if top in HOST_WAITS and top_ns >= removable:
                return top, READINGS[top]
            return _replay(row)
        if top is not None and top_ns > removable:
            return top, READINGS[top]
        code = "launch_bound" if cats.get("launch", 0) >= cats.get("host", 0) else "host_bound"
        return (code, READINGS[code]) if f >= LAUNCH_BOUND else ("some_launch_gaps", READINGS["some_launch_gaps"])
    if is_graph_replay(row):
        return _replay(row)
    if row.get("gap_p50_ns") is not None and row["gap_p50_ns"] > LAUNCH_SCALE_NS:
        return "stall", READINGS["stall"]
    return ("launch_bound", READINGS["launch_bound"]) if f >= LAUNCH_BOUND else \
        ("some_launch_gaps", READINGS["some_launch_gaps"])


def reading(row: dict[str, Any]) -> str:
    """The phrase a table shows for a row."""
    return verdict(row)[1]


def column_verdicts(columns: Mapping[str, Any], n: int) -> tuple[Any, Any]:
    """(codes, readings), two object arrays, of the ``n`` rows of a section held as columns (the pipeline's,
    gapscope.analysis.rows: every STATS and replay field, ``gap_by_category_ns`` a Nested when
    attribution ran), decided for all rows at once: each row's :func:`verdict`, rule by rule."""
    import numpy as np

    def col(name: str) -> np.ndarray:
        return np.asarray(columns[name])

    f = col("gap_fraction").astype(np.float64)
    kernels, gap_ns = col("kernels"), col("gap_ns")
    replay = (col("graph_replays") != 0) & (kernels > 0) & (col("graph_kernels") > GRAPH_SHARE * kernels)
    replay_reading = np.where(col("gap_between_replays_ns") >= col("gap_inside_replays_ns"),
                              READINGS["graph_replay_between"], READINGS["graph_replay_inside"]).astype(object)
    code = np.empty(n, dtype=object)
    text = np.empty(n, dtype=object)
    open_ = np.ones(n, dtype=bool)  # rows no rule has decided yet

    def decide(mask: np.ndarray, verdict_code: Any, reading_text: Any) -> None:
        hit = open_ & mask
        code[hit] = verdict_code if isinstance(verdict_code, str) else verdict_code[hit]
        text[hit] = reading_text if isinstance(reading_text, str) else reading_text[hit]
        open_[hit] = False

    decide(np.isnan(f), "no_work", READINGS["no_work"])
    decide(f < AMORTIZED, "amortized", READINGS["amortized"])
    nested = columns.get("gap_by_category_ns")
    with_cats = np.zeros(n, dtype=bool)
    if nested is not None:
        keys = list(nested.keys)
        values = np.asarray(nested.values, dtype=np.int64).reshape(n, len(keys))
        with_cats = gap_ns != 0
        removable = sum(values[:, keys.index(c)] for c in REMOVABLE if c in keys)
        others = [i for i, c in enumerate(keys) if c not in REMOVABLE]
        top_at = np.argmax(values[:, others], axis=1)  # the first of the largest, as verdict() takes it
        top_ns = values[:, others].max(axis=1)
        top = np.array([keys[i] for i in others], dtype=object)[top_at]
        top_reading = np.array([READINGS[keys[i]] for i in others], dtype=object)[top_at]
        waits = np.isin(top, HOST_WAITS)
        decide(with_cats & replay & waits & (top_ns >= removable), top, top_reading)
        decide(with_cats & replay, "graph_replay", replay_reading)
        decide(with_cats & (top_ns > removable), top, top_reading)
        launch = values[:, keys.index("launch")] if "launch" in keys else 0
        host = values[:, keys.index("host")] if "host" in keys else 0
        bound = np.where(launch >= host, "launch_bound", "host_bound").astype(object)
        bound_reading = np.where(launch >= host, READINGS["launch_bound"], READINGS["host_bound"]).astype(object)
        decide(with_cats & (f >= LAUNCH_BOUND), bound, bound_reading)
        decide(with_cats, "some_launch_gaps", READINGS["some_launch_gaps"])
    decide(replay, "graph_replay", replay_reading)
    p50 = col("gap_p50_ns").astype(np.float64)
    decide(~np.isnan(p50) & (p50 > LAUNCH_SCALE_NS), "stall", READINGS["stall"])
    decide(f >= LAUNCH_BOUND, "launch_bound", READINGS["launch_bound"])
    decide(open_, "some_launch_gaps", READINGS["some_launch_gaps"])
    return code, text
