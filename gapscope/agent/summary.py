"""Compact views of a result, for an agent: what the MCP tools return as structured content.

A result can hold thousands of range names and hundreds of thousands of range instances; an
agent gets a page of the rows with the most gap time, each with the fields of ROW_FIELDS, and
the counts of what was left out. Every figure is the result's own (docs/metrics.md), copied,
never recomputed, except the why-idle shares: a category's gap time over the row's gap time
(rounded to 4 places), the share the report's "Why the GPU sat idle" table shows in percent.
Top-level blocks of PASSED_THROUGH are handed on whole when the result has them. Numpy-free:
a summary of a cached result imports no numpy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gapscope.analysis.domains import is_library_domain
from gapscope.analysis.result import AnalysisResult, clean_value
from gapscope.render.sections import label, shown_names, top_indices
from gapscope.render.json import dumps
from gapscope.render.units import fmt_ns, fmt_pct, fmt_speedup
from gapscope.schema import CATEGORIES
from gapscope.text import name as display_name

#: A timeline row's figures an agent reads first (docs/metrics.md), and the CUDA Graph
#: prediction's, kept where a result has them.
_TIMELINE = ("kernels", "gpu_span_ns", "busy_ns", "gap_ns", "gap_fraction", "gap_count", "gap_p50_ns",
             "gap_max_ns", "kernel_median_ns", "graph_kernels", "graph_replays", "graph_ceiling_speedup",
             "graph_predicted_speedup", "graph_predicted_low", "graph_predicted_high", "steady_span_ns",
             "one_off_ns", "one_off_stalls", "one_off_libraries", "verdict", "reading")
#: The fields of a row each summary keeps, by result section: a field a row lacks is left out,
#: so one added here shows wherever a result has it.
ROW_FIELDS: dict[str, tuple[str, ...]] = {
    "by_name": ("name", "domain", "count", *_TIMELINE, "eager_instances", "replayed_instances",
                "graph_recordings", "recording_instances"),
    "devices": ("device", *_TIMELINE),
    "ranges": ("id", "name", "domain", "thread", "start_ns", "end_ns", *_TIMELINE),
    "payoff": ("eager", "graph", "eager_span_ns", "graph_span_ns", "measured_speedup", "ceiling_speedup",
               "predicted_speedup"),
    "launch": ("api", "calls", "host_median_ns", "host_p90_ns", "host_mean_ns", "latency_median_ns",
               "latency_p90_ns", "per_second"),
    "top_gaps": ("start_ns", "gap_ns", "category", "gap_by_category_ns", "device", "stream", "before", "after",
                 "launched_by"),
}
#: Top-level blocks of a result handed on whole when present (the answer to "would CUDA Graphs
#: help": its cause, predicted and measured speedups).
PASSED_THROUGH = ("answer",)
#: Default and largest page of range names; the most devices, payoff rows, launch APIs and
#: warnings listed.
PAGE, MAX_PAGE = 20, 200
MAX_LISTED = 64
#: Where a summary's figures are defined, for an agent to cite.
DEFINITIONS = "gapscope://docs/metrics.md"


def compact_row(row: Mapping[str, Any], section: str) -> dict[str, Any]:
    """The fields of ROW_FIELDS[section] that ``row`` has, made JSON-safe."""
    return {f: clean_value(row[f]) for f in ROW_FIELDS[section] if f in row}


def why_idle(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """A row's gap time by category as shares of its gap time (the categories with any, largest
    first), its largest category and its graph ceiling; None without attribution or gap time."""
    cats = row.get("gap_by_category_ns")
    gap = row.get("gap_ns") or 0
    if not cats or gap <= 0:
        return None
    held = sorted((c for c in CATEGORIES if cats.get(c)), key=lambda c: -cats[c])
    return {"gap_ns": int(gap), "largest": held[0] if held else None,
            "shares": {c: round(cats[c] / gap, 4) for c in held},
            "graph_ceiling_speedup": clean_value(row.get("graph_ceiling_speedup"))}


def _listed(rows: Sequence[Mapping[str, Any]] | None, section: str, most: int = MAX_LISTED) -> dict[str, Any]:
    """Up to ``most`` rows of a short section (devices, payoff, launch APIs), as compact rows, and
    how many there are."""
    rows = list(rows or [])
    return {"total": len(rows), "rows": [compact_row(r, section) for r in rows[:most]]}


def _column(rows: Sequence[Mapping[str, Any]], field: str) -> list[Any]:
    """One field of every row: a RowTable's column (no row dict made), a list's ``row.get``."""
    values = getattr(rows, "values", None)
    return values(field) if values is not None else [r.get(field) for r in rows]


def _by_gap(rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """The rows' positions, most gap time first (the first on a tie)."""
    return sorted(range(len(rows)), key=lambda i: (-(rows[i].get("gap_ns") or 0), i))


def header(result: AnalysisResult, cached: bool) -> dict[str, Any]:
    """What every tool's answer about one result starts with: its schema (the JSON's, whose
    fields the rows copy), gapscope's version, the trace, the options and the warnings."""
    warnings = list(result.warnings)
    out: dict[str, Any] = {
        "schema": result.schema, "gapscope_version": result.gapscope_version, "cached": cached,
        "trace": dict(result.trace), "options": dict(result.options),
        "warnings": warnings[:MAX_LISTED], "definitions": DEFINITIONS,
    }
    if len(warnings) > MAX_LISTED:
        out["warnings_left_out"] = len(warnings) - MAX_LISTED
    data = result.to_dict(clean=False)
    # As the JSON renderer writes them (NaN as null), so the block reads the same in the JSON.
    out.update({key: json.loads(dumps(data[key])) for key in PASSED_THROUGH if key in data})
    return out


def analysis_summary(result: AnalysisResult, cached: bool = False, limit: int = PAGE,
                     offset: int = 0) -> dict[str, Any]:
    """A result as an agent reads it: the header, a page of the range names with the most gap
    time (``limit`` from ``offset``; the report's choice of names: with GPU work, libraries'
    domains folded), every device, the why-idle split of both, the graph payoff, the launch
    APIs, and how many range instances, streams and longest gaps the result holds besides."""
    result = result.listed(("by_name", "devices"))
    names = shown_names(result, len(result.by_name))[0]
    order = _by_gap(names)
    page = [names[i] for i in order[offset:offset + limit]]
    after = offset + len(page)
    devices = list(result.devices)
    idle = [{"timeline": f"{label(r)} (x{r['count']})", "name": r["name"], "domain": r.get("domain"),
             **parts} for r in page if r.get("kernels") and (parts := why_idle(r))]
    idle += [{"timeline": f"device {r['device']}", "device": r["device"], **parts}
             for r in devices[:MAX_LISTED] if (parts := why_idle(r))]
    return {
        **header(result, cached),
        "by_name": {"total": len(names), "offset": offset, "limit": limit,
                    "next_offset": after if after < len(names) else None,
                    "left_out": _left_out(result, len(names)),
                    "rows": [compact_row(r, "by_name") for r in page]},
        "devices": _listed(devices, "devices"),
        "why_idle": idle,
        "payoff": _listed(result.payoff, "payoff"),
        "launch": _listed(result.launch, "launch"),
        "held": {"ranges": len(result.ranges), "streams": len(result.streams),
                 "top_gaps": len(result.top_gaps or [])},
    }


def _left_out(result: AnalysisResult, listed: int) -> dict[str, int]:
    """The range names the pages leave out, as the report does: those of libraries' NVTX domains
    (folded into one line each unless domains were selected) and those without GPU work."""
    folded = 0 if result.options.get("domain_filter") else \
        sum(1 for d in _column(result.by_name, "domain") if is_library_domain(d))
    return {"library_domains": folded, "no_gpu_work": len(result.by_name) - folded - listed}


def analysis_text(summary: Mapping[str, Any]) -> str:
    """A few lines saying what :func:`analysis_summary` holds: the trace, its busiest names and
    devices with their gap share and reading, the graph payoff."""
    trace = summary["trace"]
    lines = [f"{display_name(trace.get('name'))} ({trace.get('format')}, {summary['schema']}"
             f"{', cached result' if summary['cached'] else ''}): "
             f"{summary['by_name']['total']:,} range names with GPU work"]
    for r in summary["by_name"]["rows"][:5]:
        lines.append(f"{display_name(label(r))} (x{r['count']}): {_timeline(r)}")
    for r in summary["devices"]["rows"][:4]:
        lines.append(f"device {r['device']}: {_timeline(r)}")
    for p in summary["payoff"]["rows"][:2]:
        lines.append(f"graph payoff {display_name(p['eager'])} -> {display_name(p['graph'])}: measured "
                     f"{fmt_speedup(p['measured_speedup'])} of a {fmt_speedup(p['ceiling_speedup'])} ceiling")
    if summary["by_name"]["next_offset"] is not None:
        lines.append(f"more range names from offset {summary['by_name']['next_offset']}")
    return "\n".join(lines)


def _timeline(r: Mapping[str, Any]) -> str:
    """``gap 93.4% of 107 ms, host-bound: graphs pay, ceiling 14.83x``."""
    text = f"gap {fmt_pct(r.get('gap_fraction'))} of {fmt_ns(r.get('gpu_span_ns'))}, {r.get('reading')}"
    if r.get("graph_ceiling_speedup"):
        text += f", graph ceiling {fmt_speedup(r['graph_ceiling_speedup'])}"
    return text


def gaps_summary(result: AnalysisResult, cached: bool, pattern: str | None) -> dict[str, Any]:
    """The longest gaps a result holds (of the ranges ``pattern`` selected, or of the whole
    trace), longest first, with their categories, the kernels either side and the launching call."""
    gaps = list(result.top_gaps or [])
    return {**header(result, cached), "range": pattern,
            "gaps": [compact_row(g, "top_gaps") for g in gaps]}


def gaps_text(summary: Mapping[str, Any]) -> str:
    """One line per gap (the first ten): its length, category, device and stream, the call that
    launched the kernel after it."""
    where = f"range {display_name(summary['range'])}" if summary["range"] else "the whole trace"
    lines = [f"{len(summary['gaps'])} longest gaps of {where} in {display_name(summary['trace'].get('name'))}"]
    for g in summary["gaps"][:10]:
        lines.append(f"{fmt_ns(g['gap_ns'])} {g['category']} on device {g['device']} stream {g['stream']}: "
                     f"{display_name(g['before'])} -> {display_name(g['after'])}, launched by "
                     f"{display_name(g['launched_by'])}")
    return "\n".join(lines)


def explanation(result: AnalysisResult, cached: bool, pattern: str, rules: Mapping[str, list[str]],
                instances: int = 5) -> dict[str, Any]:
    """One range name (or the names ``pattern`` matches) looked at closely: each name's row with
    its why-idle split and the rules of metrics.md that give its verdict, the ``instances`` with
    the most gap time, the payoff rows it is part of, the launch APIs that launched its work and
    its longest gaps."""
    result = result.listed(("by_name",))
    names = [result.by_name[i] for i in _by_gap(result.by_name)][:MAX_PAGE]
    rows = []
    for r in names:
        row = compact_row(r, "by_name")
        if (parts := why_idle(r)) is not None:
            row["why_idle"] = parts
        row["verdict_rules"] = rules.get(str(r.get("verdict")), [])
        rows.append(row)
    ranges = result.ranges  # the instances with the most gap time, most first, as the report picks them
    top = top_indices(_column(ranges, "gap_ns"), list(range(len(ranges))), instances)
    picked = {str(r["name"]) for r in names}
    payoff = [p for p in result.payoff or [] if p.get("eager") in picked or p.get("graph") in picked]
    return {
        **header(result, cached), "range": pattern,
        "names": {"total": len(result.by_name), "rows": rows},
        "instances": {"total": len(result.ranges),
                      "most_gap": [compact_row(ranges[i], "ranges") for i in top]},
        "payoff": _listed(payoff, "payoff"),
        "launch": _listed(result.launch, "launch"),
        "top_gaps": [compact_row(g, "top_gaps") for g in result.top_gaps or []],
        "verdicts": DEFINITIONS + "#verdicts",
    }


def explanation_text(summary: Mapping[str, Any]) -> str:
    """The names explained, each with its gap share, reading and largest idle category; the
    longest gap."""
    lines = []
    for r in summary["names"]["rows"][:5]:
        idle = r.get("why_idle")
        largest = f"; largest idle category {idle['largest']} ({fmt_pct(idle['shares'][idle['largest']], 0)} of "\
            f"its gap time)" if idle and idle["largest"] else ""
        lines.append(f"{display_name(label(r))} (x{r['count']}): {_timeline(r)}{largest}")
    for p in summary["payoff"]["rows"][:2]:
        lines.append(f"graph payoff {display_name(p['eager'])} -> {display_name(p['graph'])}: measured "
                     f"{fmt_speedup(p['measured_speedup'])} of a {fmt_speedup(p['ceiling_speedup'])} ceiling")
    if summary["top_gaps"]:
        g = summary["top_gaps"][0]
        lines.append(f"longest gap {fmt_ns(g['gap_ns'])} ({g['category']}) before {display_name(g['after'])}, "
                     f"launched by {display_name(g['launched_by'])}")
    return "\n".join(lines)
