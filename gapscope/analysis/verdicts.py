"""Reading a timeline row the way the design text does: is the gap fraction a problem, what kind
of problem, and would CUDA Graphs fix it (docs/metrics.md, "Verdicts").

The verdict is a pure function of a result row, so a saved result reads the same as a fresh one
(a row of an older schema too: categories it lacks count as 0).
"""

from __future__ import annotations

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
#: The fields of a row that :func:`verdict` reads (the pipeline hands it only these).
READS = ("gap_fraction", "gap_ns", "gap_p50_ns", "kernels", "gap_by_category_ns", "graph_kernels", "graph_replays",
         "gap_between_replays_ns", "gap_inside_replays_ns")

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
