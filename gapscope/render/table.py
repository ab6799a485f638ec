"""Terminal tables for an AnalysisResult (rich): ranges first, then devices and streams."""

from __future__ import annotations

from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gapscope.metrics import AMORTIZED, LAUNCH_BOUND, reading
from gapscope.result import AnalysisResult



def fmt_ns(ns: float | int | None) -> str:
    """A duration in the unit that keeps 3-4 significant digits."""
    if ns is None:
        return "-"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if abs(ns) < 100 * scale else f"{ns / scale:.0f} {unit}"
    return f"{ns:.0f} ns"


def fmt_frac(f: float | None) -> Text:
    """A gap fraction as a percentage, coloured by the seed's criterion."""
    if f is None:
        return Text("-")
    style = "bold red" if f >= LAUNCH_BOUND else "yellow" if f >= AMORTIZED else "green"
    return Text(f"{100 * f:.1f}%", style=style)


def _stats_table(title: str, keys: list[str], rows: list[dict[str, Any]], with_verdict: bool) -> Table:
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")
    for k in keys:
        t.add_column(k, overflow="fold", max_width=48 if k == "name" else None)
    for col in ("kernels", "span", "busy", "gap", "gap %", "gaps", "p50", "p99", "max gap", "kernel p50"):
        t.add_column(col, justify="right")
    if with_verdict:
        t.add_column("reading", no_wrap=True)
    for r in rows:
        cells: list[Any] = [str(r.get(k, "")) for k in keys]
        cells += [
            str(r["kernels"]),
            fmt_ns(r["gpu_span_ns"]),
            fmt_ns(r["busy_ns"]),
            fmt_ns(r["gap_ns"]),
            fmt_frac(r["gap_fraction"]),
            str(r["gap_count"]),
            fmt_ns(r["gap_p50_ns"]),
            fmt_ns(r["gap_p99_ns"]),
            fmt_ns(r["gap_max_ns"]) if r["gap_count"] else "-",
            fmt_ns(r["kernel_median_ns"]),
        ]
        if with_verdict:
            cells.append(reading(r))
        t.add_row(*cells)
    return t


def render_table(result: AnalysisResult, file: TextIO, *, limit: int = 20, width: int | None = None) -> None:
    """Write the human report: header, warnings, range names, range instances (the first
    ``limit``), devices, streams."""
    if width is None and not (hasattr(file, "isatty") and file.isatty()):
        width = 160  # a file or a pipe: wide enough for every table
    console = Console(file=file, width=width, highlight=False, soft_wrap=False)
    tr = result.trace
    gpus = ", ".join(sorted(set(tr.get("gpus", {}).values()))) or "?"
    console.print(
        f"[bold]gapscope[/bold] {tr.get('name')}  nsys {tr.get('nsys_version') or '?'}  "
        f"export schema {tr.get('export_schema') or '?'}  graphs traced: {tr.get('graph_trace')}  GPU: {gpus}"
    )
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    with_work = [r for r in result.by_name if r["kernels"] > 0]
    if result.by_name:
        console.print(
            _stats_table(
                f"NVTX ranges by name ({len(with_work)} of {len(result.by_name)} launched GPU work)",
                ["name", "count"],
                with_work or result.by_name,
                with_verdict=True,
            )
        )
    if result.ranges and limit > 0:
        shown = [r for r in result.ranges if r["kernels"] > 0][:limit]
        total = sum(1 for r in result.ranges if r["kernels"] > 0)
        more = f", first {len(shown)}; --limit N or --format json for more" if total > len(shown) else ""
        if shown:
            console.print(_stats_table(f"Range instances ({total} with GPU work{more})",
                                       ["id", "name", "thread"], shown, with_verdict=False))
    console.print(_stats_table("Devices (whole trace)", ["device"], result.devices, with_verdict=True))
    console.print(_stats_table("Streams (whole trace)", ["pid", "device", "stream"], result.streams, with_verdict=False))
    if any("gap_by_category_ns" in r for r in result.devices):
        _attribution(console, result)


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _attribution(console: Console, result: AnalysisResult) -> None:
    """Why the GPU sat idle, the launch statistics, the graph payoff and the longest gaps."""
    from gapscope.attribution import CATEGORY_LABELS

    t = Table(title="Why the GPU sat idle (share of gap time)", box=box.SIMPLE_HEAD,
              title_justify="left", title_style="bold")
    t.add_column("timeline", overflow="fold", max_width=48)
    t.add_column("gap", justify="right")
    for label in CATEGORY_LABELS:
        t.add_column(label, justify="right")
    t.add_column("graph ceiling", justify="right")
    rows = [(f"range {r['name']} (x{r['count']})", r) for r in result.by_name if r["kernels"] > 0]
    rows += [(f"device {r['device']}", r) for r in result.devices]
    for label, r in rows:
        cats = r["gap_by_category_ns"]
        speedup = r.get("graph_ceiling_speedup")
        t.add_row(label, fmt_ns(r["gap_ns"]), *(_share(cats[c], r["gap_ns"]) for c in CATEGORY_LABELS),
                  f"{speedup:.2f}x" if speedup else "-")
    console.print(t)

    launch = result.extras.get("launch") or []
    if launch:
        t = Table(title="Launch calls", box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")
        for col in ("api", "calls", "host p50", "host p90", "launch->start p50", "p90", "calls/s"):
            t.add_column(col, justify="left" if col == "api" else "right")
        for r in launch:
            t.add_row(r["api"], str(r["calls"]), fmt_ns(r["host_median_ns"]), fmt_ns(r["host_p90_ns"]),
                      fmt_ns(r["latency_median_ns"]), fmt_ns(r["latency_p90_ns"]), f"{r['per_second']:,.0f}")
        console.print(t)

    pairs = result.extras.get("payoff") or []
    if pairs:
        t = Table(title="CUDA Graph payoff: measured against the ceiling", box=box.SIMPLE_HEAD,
                  title_justify="left", title_style="bold")
        for col in ("eager range", "graph range", "eager span", "graph span", "measured", "ceiling"):
            t.add_column(col, justify="left" if "range" in col else "right")
        for p in pairs:
            t.add_row(p["eager"], p["graph"], fmt_ns(p["eager_span_ns"]), fmt_ns(p["graph_span_ns"]),
                      f"{p['measured_speedup']:.2f}x",
                      f"{p['ceiling_speedup']:.2f}x" if p["ceiling_speedup"] else "-")
        console.print(t)

    top = result.extras.get("top_gaps") or []
    if top:
        t = Table(title=f"Longest gaps ({len(top)})", box=box.SIMPLE_HEAD, title_justify="left",
                  title_style="bold")
        for col in ("gap", "category", "device", "stream", "at", "before", "after", "launched by"):
            t.add_column(col, overflow="fold", max_width=36,
                         justify="right" if col in ("gap", "device", "stream", "at") else "left")
        for g in top:
            t.add_row(fmt_ns(g["gap_ns"]), g["category"], str(g["device"]), str(g["stream"]),
                      fmt_ns(g["start_ns"]), g["before"] or "-", g["after"], g["launched_by"] or "-")
        console.print(t)
