"""Terminal tables for a FleetResult (rich): range names across ranks, stragglers, the steps
that differ most, the ranks, and the traces that failed. Names, labels and paths are printed as
text (no markup), made printable and cut by gapscope.text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gapscope.analysis.verdicts import reading
from gapscope.fleet.result import FleetResult
from gapscope.render.table import share_text as fmt_frac
from gapscope.render.units import fmt_ns
from gapscope.text import name, printable

#: Range names shown as columns of the per-rank matrix (those with the most gap time).
MATRIX_NAMES = 6


def _table(title: str, columns: list[str], left: tuple[str, ...] = ()) -> Table:
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", title_style="bold")
    for c in columns:
        t.add_column(c, justify="left" if c in left else "right", overflow="fold",
                     max_width=40 if c in left else None)
    return t


def render(fleet: FleetResult, file: TextIO, *, limit: int = 20, width: int | None = None, **_: Any) -> None:
    """Write the human report of a fleet: header and warnings, range names across ranks, the
    stragglers, the ``limit`` steps with the largest excess, a gap-% matrix and the ranks (first
    ``limit``), and the failed traces."""
    console = Console(file=file, width=width or 160, highlight=False, soft_wrap=False, markup=False)
    ok = [f for f in fleet.files if not f.get("error")]
    versions = ", ".join(sorted({str(f.get("nsys_version")) for f in ok})) or "?"
    modes = ", ".join(sorted({str(f.get("graph_trace")) for f in ok})) or "?"
    console.print(Text.assemble(
        ("gapscope", "bold"),
        printable(f" {len(fleet.files)} traces ({len(fleet.failed)} failed), "
                  f"{len(fleet.devices)} ranks  nsys {versions}  graphs traced: {modes}"),
    ))
    for w in fleet.warnings:
        console.print(Text.assemble(("warning:", "yellow"), f" {printable(w)}"))
    labels = [r["label"] for r in fleet.devices]
    if fleet.by_name:
        _names(console, fleet, labels)
        _stragglers(console, fleet)
        _steps(console, fleet, limit)
        _matrix(console, fleet, limit)
    _ranks(console, fleet, limit)
    if fleet.failed:
        t = _table(f"Failed traces ({len(fleet.failed)})", ["trace", "error"], left=("trace", "error"))
        for f in fleet.failed:
            t.add_row(name(f["path"]), printable(f["error"]))
        console.print(t)


def _spread_cells(s: dict[str, Any] | None, labels: list[str], fmt: Callable[[Any], Any]) -> list[Any]:
    """min, median, and max with the label of the rank that has it."""
    if not s:
        return ["-", "-", "-"]
    top = fmt(s["max"])
    top = top if isinstance(top, Text) else Text(str(top))
    return [fmt(s["min"]), fmt(s["median"]), top + Text(f" {name(labels[s['max_rank']])}", style="dim")]


def _names(console: Console, fleet: FleetResult, labels: list[str]) -> None:
    spread = {s["name"]: s for s in fleet.spread if s["scope"] == "range"}
    t = _table("Range names across ranks (min, median, max over ranks; the rank with the max)",
               ["name", "ranks", "instances", "gap % (all)", "gap % min", "median", "max",
                "gap/rank min", "median", "max"], left=("name",))
    for n in fleet.by_name:
        s = spread.get(n["name"], {})
        t.add_row(name(n["name"]), str(n["ranks"]), str(n["count"]), fmt_frac(n["gap_fraction"]),
                  *_spread_cells(s.get("gap_fraction"), labels, fmt_frac),
                  *_spread_cells(s.get("gap_ns"), labels, fmt_ns))
    console.print(t)


def _stragglers(console: Console, fleet: FleetResult) -> None:
    if not fleet.stragglers:
        return
    cats = {(r["rank"], r["name"]): r.get("gap_by_category_ns") for r in fleet.rank_names}
    t = _table("Stragglers: gap time above the step medians (the ranks that keep the others waiting)",
               ["name", "rank", "excess gap", "slowest steps", "worst step", "its excess", "rank gap %",
                "its gaps are mostly"], left=("name", "rank", "its gaps are mostly"))
    for s in fleet.stragglers:
        t.add_row(name(s["name"]), name(s["label"]), fmt_ns(s["excess_gap_ns"]), f"{s['slowest_steps']} of {s['steps']}",
                  f"#{s['worst_step']}", fmt_ns(s["worst_step_excess_ns"]), fmt_frac(s["gap_fraction"]),
                  _dominant(cats.get((s["rank"], s["name"])), s["gap_ns"]))
    console.print(t)


def _dominant(by_cat: dict[str, int] | None, gap_ns: int) -> str:
    """The largest gap category and its share: ``launch 97%``."""
    if not by_cat or not gap_ns:
        return "-"
    top = max(by_cat, key=by_cat.get)
    return f"{top} {100 * by_cat[top] / gap_ns:.0f}%"


def _steps(console: Console, fleet: FleetResult, limit: int) -> None:
    multi = [s for s in fleet.steps if s["ranks"] > 1]
    if not multi or limit <= 0:
        return
    shown = sorted(multi, key=lambda s: -(s["excess_gap_ns"] or 0))[:limit]
    more = f", {len(shown)} of {len(multi)}; --limit N or --format json for more" if len(multi) > len(shown) else ""
    t = _table(f"Steps aligned across ranks, largest excess first (name #occurrence{more})",
               ["step", "ranks", "gap min", "median", "max", "slowest rank", "excess", "span median"],
               left=("step", "slowest rank"))
    for s in shown:
        g = s["gap_ns"]
        t.add_row(f"{name(s['name'])} #{s['occurrence']}", str(s["ranks"]), fmt_ns(g["min"]), fmt_ns(g["median"]),
                  fmt_ns(g["max"]), name(s["slowest_label"]), fmt_ns(s["excess_gap_ns"]),
                  fmt_ns(s["gpu_span_ns"]["median"]))
    console.print(t)


def _matrix(console: Console, fleet: FleetResult, limit: int) -> None:
    if limit <= 0:
        return
    top = [n["name"] for n in sorted(fleet.by_name, key=lambda n: -n["gap_ns"])[:MATRIX_NAMES]]
    cell = {(r["rank"], r["name"]): r for r in fleet.rank_names}
    ranks = fleet.devices[:limit]
    more = f", first {len(ranks)} of {len(fleet.devices)}" if len(fleet.devices) > len(ranks) else ""
    t = _table(f"Gap % per rank and range name (the {len(top)} names with the most gap time{more})",
               ["rank", *(name(n) for n in top)], left=("rank",))
    for r in ranks:
        t.add_row(name(r["label"]), *(fmt_frac(cell[(r["rank"], n)]["gap_fraction"]) if (r["rank"], n) in cell
                                else "-" for n in top))
    console.print(t)


def _ranks(console: Console, fleet: FleetResult, limit: int) -> None:
    ranks = fleet.devices[:max(limit, 0)]
    if not ranks:
        return
    more = f", first {len(ranks)} of {len(fleet.devices)}" if len(fleet.devices) > len(ranks) else ""
    t = _table(f"Ranks: whole-device timelines{more}",
               ["rank", "device", "kernels", "span", "busy", "gap", "gap %", "gaps", "max gap", "reading"],
               left=("rank", "reading"))
    for r in ranks:
        t.add_row(name(r["label"]), str(r["device"]), str(r["kernels"]), fmt_ns(r["gpu_span_ns"]), fmt_ns(r["busy_ns"]),
                  fmt_ns(r["gap_ns"]), fmt_frac(r["gap_fraction"]), str(r["gap_count"]),
                  fmt_ns(r["gap_max_ns"]) if r["gap_count"] else "-", reading(r))
    console.print(t)
