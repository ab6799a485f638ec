"""The CUDA Graph payoff a trace measured itself: where it holds an eager and a graph version of
the same work (range names that differ only by ``eager`` -> ``graph``: ``eager/k=2us`` and
``graph/k=2us``), the graph version's speedup, steady state against steady state (one-off gaps
left out: docs/metrics.md, "Steady state"), beside the eager version's graph ceiling
(gapscope.analysis.prediction) and its predicted speedup.
"""

from __future__ import annotations

from typing import Any


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
        eager_mean = eager.get("steady_span_ns", eager["gpu_span_ns"]) / eager["count"]
        graph_mean = twin.get("steady_span_ns", twin["gpu_span_ns"]) / twin["count"]
        out.append({
            "eager": name,
            "graph": twin["name"],
            "eager_span_ns": eager_mean,
            "graph_span_ns": graph_mean,
            "measured_speedup": eager_mean / graph_mean,
            "ceiling_speedup": eager.get("graph_ceiling_speedup"),
            "predicted_speedup": eager.get("graph_predicted_speedup"),
        })
    return out
