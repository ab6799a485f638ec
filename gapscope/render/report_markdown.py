"""A GitHub-flavoured Markdown report of an analysis: the readings, the tables of
`gapscope analyze` and the figures of `gapscope plot` (linked relative to the report), for a
repository page, a pull request or a CI artifact.

Order: header and warnings, one reading per range name, the timeline, range names, why the GPU
sat idle, the CUDA Graph payoff, the gap histogram, a `gapscope run` sweep with its crossover
chart, the longest gaps, launch calls, then devices, streams and range instances folded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from gapscope.metrics import reading
from gapscope.render.table import fmt_ns
from gapscope.result import AnalysisResult

FIGURE_CAPTIONS = {
    "timeline": "GPU timeline: one row per device and stream, kernels dark, device-level gaps "
                "shaded by category, NVTX ranges on top.",
    "histogram": "Gap durations per NVTX range name (log bins, stacked by category; lines at "
                 "p50, p90, p99).",
    "crossover": "Gap fraction per launch path against kernel time, and the graph's speedup "
                 "over eager.",
}


def _cell(value: Any) -> str:
    """Text safe inside a table cell: pipes and HTML brackets escaped, one line."""
    text = str(value)
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\r", " ").replace("\n", " "))


def _code(value: Any) -> str:
    return f"`{_cell(value).replace('`', chr(39))}`"


def _pct(f: float | None) -> str:
    return "-" if f is None else f"{100 * f:.1f}%"


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[bool]) -> str:
    """A table; cells are written as given (text from the trace goes through _cell or _code)."""
    lines = ["| " + " | ".join(headers) + " |",
             "| " + " | ".join("---:" if r else "---" for r in right) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n\n"


STATS_HEADERS = ("kernels", "span", "busy", "gap", "gap %", "gaps", "p50", "p90", "p99", "max gap",
                 "kernel p50")


def _stats(r: dict[str, Any]) -> list[str]:
    return [f"{r['kernels']:,}", fmt_ns(r["gpu_span_ns"]), fmt_ns(r["busy_ns"]), fmt_ns(r["gap_ns"]),
            _pct(r["gap_fraction"]), f"{r['gap_count']:,}", fmt_ns(r["gap_p50_ns"]),
            fmt_ns(r["gap_p90_ns"]), fmt_ns(r["gap_p99_ns"]),
            fmt_ns(r["gap_max_ns"]) if r["gap_count"] else "-", fmt_ns(r["kernel_median_ns"])]


def _figure(file: TextIO, figures: Mapping[str, str], key: str) -> None:
    if key in figures:
        file.write(f"![{key}]({figures[key]})\n\n*{FIGURE_CAPTIONS[key]}*\n\n")


def render_report_markdown(
    file: TextIO, *, title: str, result: AnalysisResult | None, sweep: Sequence[Any] = (),
    calibration: dict[str, Any] | None = None, figures: Mapping[str, str] | None = None,
    limit: int = 20,
) -> None:
    """Write the report. ``figures`` maps 'timeline', 'histogram', 'crossover' to image paths
    relative to the report; ``sweep`` holds gapscope.runner.SweepRow rows of a `gapscope run`."""
    figures = figures or {}
    file.write(f"# gapscope report: {_cell(title)}\n\n")
    if result is not None:
        _header(file, result)
    _figure(file, figures, "timeline")
    if result is not None:
        _ranges(file, result)
        _idle(file, result)
        _payoff(file, result)
    _figure(file, figures, "histogram")
    if sweep:
        _sweep(file, sweep, calibration, figures)
    if result is not None:
        _top_gaps(file, result)
        _launches(file, result)
        _whole_trace(file, result, limit)


def _header(file: TextIO, result: AnalysisResult) -> None:
    tr = result.trace
    gpus = ", ".join(sorted(set((tr.get("gpus") or {}).values()))) or "?"
    file.write(f"nsys {_cell(tr.get('nsys_version') or '?')} · export schema "
               f"{_cell(tr.get('export_schema') or '?')} · CUDA graphs traced: "
               f"{_cell(tr.get('graph_trace') or '?')} · GPU: {_cell(gpus)} · gapscope "
               f"{_cell(result.gapscope_version)}\n\n")
    for w in result.warnings:
        file.write(f"> ⚠️ {_cell(w)}\n\n")
    rows = [r for r in result.by_name if r["kernels"] > 0]
    if rows:
        file.write("## Readings\n\n")
        for r in rows:
            file.write(f"- {_code(r['name'])} (x{r['count']}): **{_pct(r['gap_fraction'])}** of the GPU "
                       f"span in gaps ({fmt_ns(r['gap_ns'])} of {fmt_ns(r['gpu_span_ns'])}): "
                       f"{reading(r)}\n")
        file.write("\n")
    elif result.devices:
        file.write("## Readings\n\n")
        for r in result.devices:
            file.write(f"- device {r['device']}: **{_pct(r['gap_fraction'])}** of the GPU span in gaps: "
                       f"{reading(r)}\n")
        file.write("\n")


def _ranges(file: TextIO, result: AnalysisResult) -> None:
    rows = [r for r in result.by_name if r["kernels"] > 0]
    if not rows:
        return
    file.write(f"## NVTX ranges by name ({len(rows)} of {len(result.by_name)} launched GPU work)\n\n")
    file.write(_table(("name", "count", *STATS_HEADERS, "reading"),
                      [[_code(r["name"]), r["count"], *_stats(r), reading(r)] for r in rows],
                      (False, True, *([True] * len(STATS_HEADERS)), False)))


def _idle(file: TextIO, result: AnalysisResult) -> None:
    from gapscope.attribution import CATEGORY_LABELS

    rows = [(f"range {_code(r['name'])} (x{r['count']})", r) for r in result.by_name
            if r["kernels"] > 0 and "gap_by_category_ns" in r]
    rows += [(f"device {r['device']}", r) for r in result.devices if "gap_by_category_ns" in r]
    if not rows:
        return
    file.write("## Why the GPU sat idle (share of gap time)\n\n")

    def share(part: int, whole: int) -> str:
        return f"{100 * part / whole:.0f}%" if whole else "-"

    out = []
    for label, r in rows:
        cats = r["gap_by_category_ns"]
        sp = r.get("graph_ceiling_speedup")
        out.append([label, fmt_ns(r["gap_ns"]), *(share(cats.get(c, 0), r["gap_ns"]) for c in CATEGORY_LABELS),
                    f"{sp:.2f}x" if sp else "-"])
    file.write(_table(("timeline", "gap", *CATEGORY_LABELS, "graph ceiling"), out,
                      (False, *([True] * (len(CATEGORY_LABELS) + 2)))))
    file.write("Categories and the ceiling are defined in docs/metrics.md (\"Gap attribution\", "
               "\"CUDA Graph payoff\").\n\n")


def _payoff(file: TextIO, result: AnalysisResult) -> None:
    pairs = result.extras.get("payoff") or []
    if not pairs:
        return
    file.write("## CUDA Graph payoff: measured against the ceiling\n\n")
    file.write(_table(
        ("eager range", "graph range", "eager span", "graph span", "measured", "ceiling"),
        [[_code(p["eager"]), _code(p["graph"]), fmt_ns(p["eager_span_ns"]), fmt_ns(p["graph_span_ns"]),
          f"{p['measured_speedup']:.2f}x", f"{p['ceiling_speedup']:.2f}x" if p["ceiling_speedup"] else "-"]
         for p in pairs],
        (False, False, True, True, True, True)))


def _sweep(file: TextIO, sweep: Sequence[Any], calibration: dict[str, Any] | None,
           figures: Mapping[str, str]) -> None:
    from gapscope.render.sweep import HEADERS, floors_line, row_cells

    file.write("## Launch paths against kernel time (`gapscope run` sweep)\n\n")
    _figure(file, figures, "crossover")
    file.write(_table(HEADERS, [[_cell(c) for c in row_cells(r)] for r in sweep], [h != "path" for h in HEADERS]))
    line = floors_line(calibration)
    if line:
        file.write(f"{_cell(line)}\n\n")


def _top_gaps(file: TextIO, result: AnalysisResult) -> None:
    top = result.extras.get("top_gaps") or []
    if not top:
        return
    file.write(f"## Longest gaps ({len(top)})\n\n")
    file.write(_table(
        ("gap", "category", "device", "stream", "at", "before", "after", "launched by"),
        [[fmt_ns(g["gap_ns"]), g["category"], g["device"], g["stream"], fmt_ns(g["start_ns"]),
          _code(g["before"]) if g["before"] else "-", _code(g["after"]),
          _code(g["launched_by"]) if g["launched_by"] else "-"] for g in top],
        (True, False, True, True, True, False, False, False)))


def _launches(file: TextIO, result: AnalysisResult) -> None:
    launch = result.extras.get("launch") or []
    if not launch:
        return
    file.write("## Launch calls\n\n")
    file.write(_table(
        ("api", "calls", "host p50", "host p90", "launch->start p50", "p90", "calls/s"),
        [[_code(r["api"]), f"{r['calls']:,}", fmt_ns(r["host_median_ns"]), fmt_ns(r["host_p90_ns"]),
          fmt_ns(r["latency_median_ns"]), fmt_ns(r["latency_p90_ns"]), f"{r['per_second']:,.0f}"]
         for r in launch],
        (False, True, True, True, True, True, True)))


def _whole_trace(file: TextIO, result: AnalysisResult, limit: int) -> None:
    file.write("<details><summary>Devices, streams and range instances</summary>\n\n")
    if result.devices:
        file.write("### Devices (whole trace)\n\n")
        file.write(_table(("device", *STATS_HEADERS, "reading"),
                          [[r["device"], *_stats(r), reading(r)] for r in result.devices],
                          (True, *([True] * len(STATS_HEADERS)), False)))
    if result.streams:
        file.write("### Streams (whole trace)\n\n")
        file.write(_table(("pid", "device", "stream", *STATS_HEADERS),
                          [[r["pid"], r["device"], r["stream"], *_stats(r)] for r in result.streams],
                          (True, True, True, *([True] * len(STATS_HEADERS)))))
    shown = [r for r in result.ranges if r["kernels"] > 0][:max(limit, 0)]
    total = sum(1 for r in result.ranges if r["kernels"] > 0)
    if shown:
        more = f", the first {len(shown)}" if total > len(shown) else ""
        file.write(f"### Range instances ({total} with GPU work{more})\n\n")
        file.write(_table(("id", "name", "thread", *STATS_HEADERS),
                          [[r["id"], _code(r["name"]), r["thread"], *_stats(r)] for r in shown],
                          (True, False, True, *([True] * len(STATS_HEADERS)))))
    file.write("</details>\n")
