"""Terminal tables for a FleetResult (rich): range names across ranks, the waits inside
collectives, stragglers, the steps that differ most, the ranks, and the traces that failed.
Each table fits the terminal the way the single-trace report's do (gapscope.render.layout);
``wide`` or a file gets every column."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

from rich.text import Text

from gapscope.analysis.verdicts import reading
from gapscope.fleet.collectives import reading as wait_reading
from gapscope.fleet.result import STRAGGLER_FLOOR_NS, FleetResult
from gapscope.render.console import Console, console_for
from gapscope.render.layout import Column
from gapscope.render.sections import READING, Name, left_out, top_rows
from gapscope.render.table import fitted_table
from gapscope.render.table import share_text as fmt_frac
from gapscope.render.units import fmt_ns
from gapscope.text import printable

#: Range names shown as columns of the per-rank matrix (those with the most gap time).
MATRIX_NAMES = 6


class _Printer:
    """Prints fitted tables on one console, a blank line before each."""

    def __init__(self, console: Console, width: int | None) -> None:
        self.console, self.width = console, width

    def table(self, title: str, columns: tuple[Column, ...], rows: list[list[Any]]) -> None:
        self.console.print()
        self.console.print(fitted_table(title, columns, rows, self.width))


def render(fleet: FleetResult, file: TextIO, *, limit: int = 20, width: int | None = None, wide: bool = False,
           warnings: bool = True, **_: Any) -> None:
    """Write the human report of a fleet: header and warnings, range names across ranks, who
    waited for whom inside collectives (and the ``limit`` collectives with the longest waits), the
    stragglers, the ``limit`` steps with the largest excess, a gap-% matrix and the ranks (first
    ``limit``), and the failed traces; tables fit ``width`` (default: the terminal's);
    ``warnings=False``: the warnings are left out (the command line writes them on stderr)."""
    console, fit = console_for(file, width, wide)
    out = _Printer(console, fit)
    ok = [f for f in fleet.files if not f.get("error")]
    modes = ", ".join(sorted({str(f.get("graph_trace")) for f in ok if f.get("graph_trace")})) or "?"
    console.print(Text.assemble(
        ("gapscope", "bold"),
        printable(f" {len(fleet.files)} traces ({len(fleet.failed)} failed), "
                  f"{len(fleet.devices)} ranks  {tracers(ok)}  graphs traced: {modes}"),
    ))
    for w in fleet.warnings if warnings else ():
        console.print(Text.assemble(("warning:", "yellow"), f" {printable(w)}"))
    labels = [r["label"] for r in fleet.devices]
    if fleet.by_name:
        _names(out, fleet, labels, limit)
    _waits(out, fleet, limit)
    if fleet.by_name:
        _stragglers(out, fleet, limit)
        _steps(out, fleet, limit)
        _matrix(out, fleet, limit)
    _ranks(out, fleet, limit)
    if fleet.failed:
        out.table(f"Failed traces ({len(fleet.failed)})", (Column("trace", False), Column("error", False, wrap=True)),
                  [[Name(f["path"]), f["error"]] for f in fleet.failed])


def _spread_cells(s: dict[str, Any] | None, labels: list[str], fmt: Callable[[Any], Any]) -> list[Any]:
    """min, median, and max with the label of the rank that has it."""
    if not s:
        return ["-", "-", "-"]
    top = fmt(s["max"])
    top = top if isinstance(top, Text) else Text(str(top))
    return [fmt(s["min"]), fmt(s["median"]), top + Text(f" {labels[s['max_rank']]}", style="dim")]


def _names(out: _Printer, fleet: FleetResult, labels: list[str], limit: int) -> None:
    """The ``limit`` range names with the most gap time over all ranks, the most first."""
    shown = top_rows(fleet.by_name, limit)
    if not shown:
        return
    spread = {s["name"]: s for s in fleet.spread if s["scope"] == "range"}
    columns = (Column("name", False), Column("ranks", priority=2), Column("instances", priority=3, short="inst"),
               Column("gap % (all)", short="gap %"), Column("gap % min", priority=2, short="min"),
               Column("gap % median", priority=1, short="med"), Column("gap % max", short="max"),
               Column("gap/rank min", priority=3, short="g/r min"),
               Column("gap/rank median", priority=2, short="g/r med"),
               Column("gap/rank max", priority=1, short="g/r max"))
    rows = []
    for n in shown:
        s = spread.get(n["name"], {})
        rows.append([Name(str(n["name"])), str(n["ranks"]), str(n["count"]), fmt_frac(n["gap_fraction"]),
                     *_spread_cells(s.get("gap_fraction"), labels, fmt_frac),
                     *_spread_cells(s.get("gap_ns"), labels, fmt_ns)])
    out.table("Range names across ranks (min, median, max over ranks; the rank with the max"
              f"{left_out(len(fleet.by_name) - len(shown), f'{len(shown):,}')})", columns, rows)


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _waits(out: _Printer, fleet: FleetResult, limit: int) -> None:
    """Per rank: its waits inside collectives and for whom; then the collectives that cost the
    most waiting, with the late rank's gap time before each."""
    if not fleet.waits:
        return
    columns = (Column("rank", False), Column("collectives", priority=3, short="coll"),
               Column("comm", priority=2), Column("waited"), Column("wait %", priority=1),
               Column("waited for", False, priority=1, short="for"),
               Column("late ranks' gaps", priority=2, short="their gaps"),
               Column("late", priority=3), Column("kept waiting", priority=2, short="caused"),
               Column("its own gaps", priority=3, short="own gaps"), READING)
    rows = [[Name(str(w["label"])), str(w["collectives"]), fmt_ns(w["comm_ns"]), fmt_ns(w["wait_ns"]),
             _share(w["wait_ns"], w["comm_ns"]), Name(str(w["waited_for_label"])) if w["waited_for_label"] else "-",
             _share(w["wait_from_gaps_ns"], w["wait_ns"]), str(w["late_count"]), fmt_ns(w["caused_wait_ns"]),
             _share(w["caused_from_gaps_ns"], w["caused_wait_ns"]), wait_reading(w)] for w in fleet.waits]
    out.table("Communication across ranks: time waited inside collectives for the last rank to arrive, "
              "and how much of it the late ranks' own gaps before the collectives explain", columns, rows)
    if limit <= 0:
        return
    worst = sorted(fleet.collectives, key=lambda c: (-c["wait_ns"], c["sequence"], c["occurrence"]))[:limit]
    more = f", {len(worst)} of {len(fleet.collectives)}" if len(fleet.collectives) > len(worst) else ""
    columns = (Column("collective", False), Column("ranks", priority=3), Column("late rank", False, short="late"),
               Column("lateness"), Column("waited", priority=1), Column("transfer", priority=2),
               Column("late rank's gaps before", priority=1, short="its gaps"),
               Column("explained by its gaps", short="by gaps"))
    rows = [[Name(f"{c['name']} {c['sequence']}#{c['occurrence']}"), str(c["ranks"]), Name(str(c["late_label"])),
             fmt_ns(c["lateness_ns"]), fmt_ns(c["wait_ns"]), fmt_ns(c["transfer_ns"]), fmt_ns(c["late_gap_ns"]),
             _share(c["wait_from_gaps_ns"], c["wait_ns"])] for c in worst]
    out.table(f"Collectives with the longest waits (kernel sequence#occurrence{more})", columns, rows)


def tracers(files: list[dict[str, Any]]) -> str:
    """What recorded the files, for the header: ``nsys 2025.3.2.0, 2026.2.1.210``, with ``PyTorch
    profiler`` for its traces (which have no nsys version); ``nsys ?`` when nothing says."""
    versions = sorted({str(f["nsys_version"]) for f in files if f.get("nsys_version")})
    torch = any(f.get("format") == "kineto" for f in files)
    parts = ([f"nsys {', '.join(versions)}"] if versions else []) + (["PyTorch profiler"] if torch else [])
    return ", ".join(parts) or "nsys ?"


def _stragglers(out: _Printer, fleet: FleetResult, limit: int) -> None:
    """The ``limit`` stragglers with the most excess gap time, largest first."""
    if not fleet.stragglers or limit <= 0:
        return
    shown = sorted(fleet.stragglers, key=lambda s: -(s["excess_gap_ns"] or 0))[:limit]
    cats = {(r["rank"], r["name"]): r.get("gap_by_category_ns") for r in fleet.rank_names}
    columns = (Column("name", False), Column("rank", False), Column("excess gap", short="excess"),
               Column("slowest steps", priority=2, short="slowest"), Column("worst step", priority=3, short="worst"),
               Column("its excess", priority=3), Column("rank gap %", priority=1, short="gap %"),
               Column("its gaps are mostly", False, priority=1, short="mostly"))
    rows = [[Name(str(s["name"])), Name(str(s["label"])), fmt_ns(s["excess_gap_ns"]),
             f"{s['slowest_steps']} of {s['steps']}", f"#{s['worst_step']}", fmt_ns(s["worst_step_excess_ns"]),
             fmt_frac(s["gap_fraction"]), _dominant(cats.get((s["rank"], s["name"])), s["gap_ns"])]
            for s in shown]
    more = f"; largest first, {len(shown)} of {len(fleet.stragglers)}: --limit N or --format json for more" \
        if len(shown) < len(fleet.stragglers) else ""
    out.table(f"Stragglers: gap time above the step medians (the ranks that keep the others waiting{more})",
              columns, rows)


def _dominant(by_cat: dict[str, int] | None, gap_ns: int) -> str:
    """The largest gap category and its share: ``launch 97%``."""
    if not by_cat or not gap_ns:
        return "-"
    top = max(by_cat, key=by_cat.get)
    return f"{top} {100 * by_cat[top] / gap_ns:.0f}%"


def _steps(out: _Printer, fleet: FleetResult, limit: int) -> None:
    multi = [s for s in fleet.steps if s["ranks"] > 1]
    if not multi or limit <= 0:
        return
    # A step whose excess is within the noise of identical work is no difference (STRAGGLER_FLOOR_NS).
    above = [s for s in multi if (s["excess_gap_ns"] or 0) >= STRAGGLER_FLOOR_NS]
    shown = sorted(above, key=lambda s: -(s["excess_gap_ns"] or 0))[:limit]
    if not shown:
        return
    more = f", {len(shown)} of {len(above)}; --limit N or --format json for more" if len(above) > len(shown) else ""
    floor = f"; {len(multi) - len(above):,} within {fmt_ns(STRAGGLER_FLOOR_NS)} of the median not listed" \
        if len(above) < len(multi) else ""
    columns = (Column("step", False), Column("ranks", priority=3), Column("gap min", priority=2, short="min"),
               Column("gap median", priority=1, short="med"), Column("gap max", short="max"),
               Column("slowest rank", False, short="slowest"), Column("excess"),
               Column("span median", priority=2, short="span med"))
    rows = [[Name(f"{s['name']} #{s['occurrence']}"), str(s["ranks"]), fmt_ns(s["gap_ns"]["min"]),
             fmt_ns(s["gap_ns"]["median"]), fmt_ns(s["gap_ns"]["max"]), Name(str(s["slowest_label"])),
             fmt_ns(s["excess_gap_ns"]), fmt_ns(s["gpu_span_ns"]["median"])] for s in shown]
    out.table(f"Steps aligned across ranks, largest excess first (name #occurrence{more}{floor})", columns, rows)


def _matrix(out: _Printer, fleet: FleetResult, limit: int) -> None:
    if limit <= 0:
        return
    top = [n["name"] for n in sorted(fleet.by_name, key=lambda n: -n["gap_ns"])[:MATRIX_NAMES]]
    cell = {(r["rank"], r["name"]): r for r in fleet.rank_names}
    ranks = fleet.devices[:limit]
    more = f", first {len(ranks)} of {len(fleet.devices)}" if len(fleet.devices) > len(ranks) else ""
    columns = (Column("rank", False), *(Column(str(n), priority=j) for j, n in enumerate(top)))
    rows = [[Name(str(r["label"])), *(fmt_frac(cell[(r["rank"], n)]["gap_fraction"]) if (r["rank"], n) in cell
                                      else "-" for n in top)] for r in ranks]
    out.table(f"Gap % per rank and range name (the {len(top)} names with the most gap time{more})", columns, rows)


def _ranks(out: _Printer, fleet: FleetResult, limit: int) -> None:
    ranks = fleet.devices[:max(limit, 0)]
    if not ranks:
        return
    more = f", first {len(ranks)} of {len(fleet.devices)}" if len(fleet.devices) > len(ranks) else ""
    columns = (Column("rank", False), Column("device", priority=3, short="dev"),
               Column("kernels", priority=2, short="kern"), Column("span", priority=1), Column("busy", priority=3),
               Column("gap", priority=1), Column("gap %"), Column("gaps", priority=3),
               Column("max gap", priority=2, short="max"), READING)
    rows = [[Name(str(r["label"])), str(r["device"]), str(r["kernels"]), fmt_ns(r["gpu_span_ns"]),
             fmt_ns(r["busy_ns"]), fmt_ns(r["gap_ns"]), fmt_frac(r["gap_fraction"]), str(r["gap_count"]),
             fmt_ns(r["gap_max_ns"]) if r["gap_count"] else "-", reading(r)] for r in ranks]
    out.table(f"Ranks: whole-device timelines{more}", columns, rows)
