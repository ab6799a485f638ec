"""The answer first: for the few ranges that matter, what kept the GPU idle and what CUDA Graphs
would win, in a few lines (docs/metrics.md, "The answer"). A pure function of a result's rows,
numpy-free, so a saved result (of any schema) answers the same way; every report starts with it.

An entry per range name (the program's own ranges, not libraries'; at least MIN_KERNELS kernels)
among those with the most to win: the predicted time a replay saves (untraced eager time less
replay time), else, for rows without a prediction, their gap time; then replayed ranges with a
measured payoff. A trace without ranges answers for its devices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gapscope.analysis.domains import is_library_domain
from gapscope.catalog import MIN_KERNELS, READINGS, WONT

#: How many ranges the answer names, and its heading in every report.
ENTRIES = 3
TITLE = "The answer: would CUDA Graphs pay? (steady state, predicted untraced)"

#: The fields of an answer entry taken from its row, as they are.
_ROW_FIELDS = ("verdict", "reading", "gap_fraction", "graph_predicted_speedup", "graph_predicted_low",
               "graph_predicted_high", "graph_ceiling_speedup", "eager_untraced_ns", "graph_predicted_ns",
               "steady_span_ns", "one_off_ns", "one_off_stalls", "one_off_libraries", "eager_instances",
               "replayed_instances", "eager_instance_span_ns", "replayed_instance_span_ns", "first_eager_instance",
               "graph_recordings", "recording_ns", "recording_instances", "first_recording_instance",
               "last_recording_instance", "other_thread_work")


def _saved(row: Mapping[str, Any]) -> float:
    """What a replay would save of the row (ns): predicted untraced eager less replay time, else
    its gap time (a row without a prediction)."""
    eager, graph = row.get("eager_untraced_ns"), row.get("graph_predicted_ns")
    if isinstance(eager, (int, float)) and isinstance(graph, (int, float)):
        return float(eager) - float(graph)
    return float(row.get("gap_ns") or 0)


def _graph_launch(row: Mapping[str, Any], launch: Sequence[Mapping[str, Any]] | None, node_level: bool,
                  gpu: str | None) -> dict[str, Any]:
    """For a replayed row: its graph launch call's traced median duration and, at node level
    (where the tracer records every node of every replay), the untraced cost the calibration
    gives for its graph's size (catalog.GraphCosts)."""
    from gapscope.catalog import graph_costs

    calls = [r for r in launch or () if r.get("api") in ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")]
    replays = row.get("graph_replays") or 0
    if not calls or not replays:
        return {}
    traced = max(r["host_median_ns"] for r in calls)
    out = {"graph_launch_ns": traced}
    if node_level:
        costs = graph_costs(gpu)
        nodes = (row.get("graph_kernels") or 0) / replays
        out["graph_launch_untraced_ns"] = costs.launch_ns + costs.launch_per_node_ns * nodes
    return out


def build(by_name: Iterable[Mapping[str, Any]], devices: Iterable[Mapping[str, Any]],
          payoff: Sequence[Mapping[str, Any]] | None, launch: Sequence[Mapping[str, Any]] | None = None,
          trace: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The answer's entries (docs/schema.md, ``answer``) from a result's by-name rows, device
    rows, payoff pairs, launch statistics and trace facts."""
    measured = {(p.get("eager"), p.get("domain")): p for p in payoff or ()}
    measured_by_name = {p.get("eager"): p for p in payoff or ()}
    rows = [r for r in by_name if ((r.get("kernels") or 0) >= MIN_KERNELS or r.get("verdict") == "graph_replay")
            and not is_library_domain(r.get("domain")) and r.get("verdict") not in ("no_work", "too_small")]
    scope = "range"
    if not rows:
        rows = [r for r in devices if (r.get("kernels") or 0) >= MIN_KERNELS]
        scope = "device"
    ranked = sorted(range(len(rows)), key=lambda i: (-_saved(rows[i]), i))
    chosen = [rows[i] for i in ranked if _saved(rows[i]) > 0][:ENTRIES] or [rows[i] for i in ranked[:1]]
    out = []
    for r in chosen:
        entry: dict[str, Any] = {"scope": scope,
                                 "name": r.get("name") if scope == "range" else f"device {r.get('device')}",
                                 "domain": r.get("domain"), "count": r.get("count", 1)}
        entry.update({k: r[k] for k in _ROW_FIELDS if r.get(k) is not None})
        pair = measured.get((r.get("name"), r.get("domain"))) or measured_by_name.get(r.get("name"))
        if scope == "range" and pair is not None:
            entry["measured_speedup"] = pair.get("measured_speedup")
            entry["measured_against"] = pair.get("graph")
        if r.get("verdict") == "graph_replay":
            facts = trace or {}
            gpus = facts.get("gpus") or {}
            entry.update(_graph_launch(r, launch, facts.get("graph_trace") == "node", next(iter(gpus.values()), None)))
        out.append(entry)
    return out


def _x(value: float) -> str:
    return f"{value:.1f}x" if value < 10 else f"{value:.0f}x"


def _ns(value: float) -> str:
    from gapscope.render.units import fmt_ns

    return fmt_ns(value)


def _recording(entry: Mapping[str, Any]) -> str:
    """Graph recording beyond one capture, in words: the instances that recorded a graph and
    the time each took, or, in a single instance, the graphs it recorded ("" when none)."""
    instances, ns = entry.get("recording_instances") or 0, entry.get("recording_ns") or 0
    count, recordings = entry.get("count") or 1, entry.get("graph_recordings") or 0
    if instances >= 2:
        first, last = entry.get("first_recording_instance"), entry.get("last_recording_instance")
        ids = f" (ids {first:.0f}-{last:.0f})" if isinstance(first, (int, float)) and isinstance(last, (int, float)) \
            else ""
        return f"graph re-recorded in {instances} of {count}{ids}: {_ns(ns / instances)} each"
    if count == 1 and recordings >= 2:
        return f"{recordings} graph recordings inside (instantiate or update): {_ns(ns)}"
    return ""


def lines(entry: Mapping[str, Any]) -> list[str]:
    """An entry in two to four short lines: the range and its reading; the predicted speedup,
    its range, the ceiling and any measured replay; what was left out as one-off, and which
    instances ran eagerly beside replayed ones; the work other threads launched inside it that
    it does not count."""
    count = entry.get("count") or 1
    head = f"{entry['name']}" + (f" (x{count})" if entry.get("scope") == "range" else "")
    out = [f"{head}: {entry.get('reading') or READINGS.get(entry.get('verdict', ''), '')}"]
    facts = []
    p = entry.get("graph_predicted_speedup")
    if isinstance(p, (int, float)):
        lo, hi = entry.get("graph_predicted_low"), entry.get("graph_predicted_high")
        span = f" ({_x(lo)}-{_x(hi)})" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else ""
        facts.append(f"predicted {_x(p)}{span}" if p > WONT else f"predicted {_x(p)}: graphs won't pay")
    c = entry.get("graph_ceiling_speedup")
    if isinstance(c, (int, float)):
        facts.append(f"ceiling {_x(c)}")
    m = entry.get("measured_speedup")
    if isinstance(m, (int, float)):
        facts.append(f"measured replay {_x(m)} ({entry.get('measured_against')}, traced)")
    g = entry.get("graph_launch_ns")
    if isinstance(g, (int, float)):
        untraced = entry.get("graph_launch_untraced_ns")
        text = f"graph launch {_ns(g)}" + (f" (~{_ns(untraced)} untraced)" if isinstance(untraced, (int, float))
                                           else "")
        if g >= 1_000_000 and not (isinstance(untraced, (int, float)) and untraced < 1_000_000):
            text += ": upload it ahead (cudaGraphUpload) or split the graph"
        facts.append(text)
    if facts:
        out.append("  " + "; ".join(facts))
    notes = []
    eager, replayed = entry.get("eager_instances") or 0, entry.get("replayed_instances") or 0
    if eager and replayed:
        e_span, r_span = entry.get("eager_instance_span_ns"), entry.get("replayed_instance_span_ns")
        lost = f": +{_ns(e_span - r_span)} each" if isinstance(e_span, (int, float)) and \
            isinstance(r_span, (int, float)) and e_span > r_span else ""
        notes.append(f"{eager} of {eager + replayed} ran eager{lost}")
    recorded = _recording(entry)
    if recorded:
        notes.append(recorded)
    one_off = entry.get("one_off_ns") or 0
    if one_off > 0:
        stalls = entry.get("one_off_stalls") or 0
        libraries = entry.get("one_off_libraries")
        before = f", before {libraries} kernels" if stalls and isinstance(libraries, str) else ""
        notes.append(f"one-off gaps left out: {_ns(one_off)}" + (f" ({stalls} long stall{'s' if stalls != 1 else ''}"
                                                                f"{before})" if stalls else " (setup)"))
    if notes:
        out.append("  " + "; ".join(notes))
    elsewhere = entry.get("other_thread_work") or 0
    if elsewhere > 0:
        # the prediction is of the range's own work: say what it leaves out, and how to count it
        out.append(f"  other threads' {elsewhere:,} kernels/copies not counted (--threads process)")
    return out
