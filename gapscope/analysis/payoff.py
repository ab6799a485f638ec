"""The CUDA Graph payoff: what a graph replay could remove (the ``launch`` and ``host`` gap
time), and, where a trace holds an eager and a graph version of the same work, what graphs did
give.

* ceiling span = GPU span - launch gaps - host gaps: the span if the CPU had issued the work
  with no launch or host overhead, as a replay does (a ceiling on what CUDA Graphs can win).
  Stalls, setup and synchronizes stay: a replay keeps the loop's synchronizes where they are;
* ceiling speedup = GPU span / ceiling span;
* measured speedup = mean span of the eager range / mean span of its graph twin, for range
  names that differ only by ``eager`` -> ``graph`` (``eager/k=2us`` and ``graph/k=2us``).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def ceilings(span_ns: np.ndarray, launch_ns: np.ndarray, host_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ceiling span, ceiling speedup) of timelines from their spans and their launch and host gap
    time; the speedup NaN (no figure) where the ceiling span is not positive."""
    span_ns = np.asarray(span_ns, dtype=np.int64)
    span = span_ns - np.asarray(launch_ns, dtype=np.int64) - np.asarray(host_ns, dtype=np.int64)
    speedup = np.full(span.size, np.nan)
    # Spans below 2**53 ns are exact as floats, so this is Python's int / int, correctly rounded.
    np.divide(span_ns, span, out=speedup, where=span > 0)
    return span, speedup


def measured_pairs(by_name: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Eager/graph twins among the range names, with the ceiling beside the measured speedup."""
    rows = {(r.get("domain"), r["name"]): r for r in by_name if r["kernels"] > 0}
    out = []
    for (domain, name), eager in rows.items():
        if "eager" not in name:
            continue
        twin = rows.get((domain, name.replace("eager", "graph")))
        if twin is None or twin["gpu_span_ns"] == 0:
            continue
        eager_mean = eager["gpu_span_ns"] / eager["count"]
        graph_mean = twin["gpu_span_ns"] / twin["count"]
        out.append({
            "eager": name,
            "graph": twin["name"],
            "eager_span_ns": eager_mean,
            "graph_span_ns": graph_mean,
            "measured_speedup": eager_mean / graph_mean,
            "ceiling_speedup": eager.get("graph_ceiling_speedup"),
        })
    return out
