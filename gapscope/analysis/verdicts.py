"""Reading a timeline row the way the design text does: is the gap fraction a problem, and what
kind of problem (docs/metrics.md, "Reading the gap fraction").

The reading is a pure function of a result row, so a saved result reads the same as a fresh one.
"""

from __future__ import annotations

#: The seed's criterion as numbers (docs/metrics.md, "Reading the gap fraction"): above
#: LAUNCH_BOUND the gaps matter, below AMORTIZED they are amortized; gaps whose median is longer
#: than LAUNCH_SCALE_NS are host-side stalls, not launch overhead.
LAUNCH_BOUND = 0.20
AMORTIZED = 0.05
LAUNCH_SCALE_NS = 100_000


#: What the dominant gap category says about a timeline that is not amortized.
CATEGORY_READINGS = {
    "sync": "host syncs idle the GPU",
    "dependency": "waits on other streams",
    "memop": "idle behind copies",
    "pipeline": "device turnaround",
    "unknown": "gaps not attributable",
}


def reading(row: dict) -> str:
    """One phrase that reads a timeline row's gap fraction the way the seed does, using its gap
    categories when the row has them."""
    f = row.get("gap_fraction")
    if f is None:
        return "no GPU work"
    if f < AMORTIZED:
        return "gaps amortized"
    cats = row.get("gap_by_category_ns")
    if cats and row.get("gap_ns"):
        top = max(cats, key=cats.get)
        if top != "launch":
            return CATEGORY_READINGS[top]
    elif row.get("gap_p50_ns") is not None and row["gap_p50_ns"] > LAUNCH_SCALE_NS:
        return "idle on long host stalls"
    return "launch-bound: graphs pay" if f >= LAUNCH_BOUND else "some launch gaps"
