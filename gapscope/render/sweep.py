"""The `gapscope run` table: gap fraction per path and kernel time, beside untraced timing.

Columns: kernel time (calibrated back-to-back us), path, gap % of the traced GPU span (median
over repeats, with min-max when repeated), traced span per kernel, the trace's median kernel
duration, untraced time per kernel (CUDA events, no profiler), and the span speedup over eager.
"""

from __future__ import annotations

from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from gapscope.runner import RunResult, SweepRow


def _num(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _gap(row: SweepRow) -> str:
    if row.gap_fraction is None:
        return "-"
    text = f"{100 * row.gap_fraction:.1f}%"
    if row.ranges > 1 and row.gap_fraction_min is not None and row.gap_fraction_max is not None:
        text += f" ({100 * row.gap_fraction_min:.1f}-{100 * row.gap_fraction_max:.1f})"
    return text


def _speedup(row: SweepRow) -> str:
    return "-" if row.speedup_vs_eager is None else f"{row.speedup_vs_eager:.2f}x"


HEADERS = ("k (us)", "path", "gap %", "traced us/kernel", "kernel dur (us)",
           "untraced us/kernel", "speedup vs eager")


def row_cells(row: SweepRow) -> list[str]:
    """One row's cells, in HEADERS order."""
    untraced = _num(row.untraced_per_kernel_us)
    if row.untraced_spread_us:
        untraced += f" ±{row.untraced_spread_us / 2:.2f}"
    return [f"{row.kernel_us:g}", row.path, _gap(row), _num(row.traced_per_kernel_us),
            _num(row.kernel_median_us), untraced, _speedup(row)]


def floors_line(calibration: dict[str, Any] | None) -> str:
    """One line on the device's launch floors from the calibration."""
    if not calibration:
        return ""
    return (f"{calibration['gpu']}: empty kernel back to back {calibration['floor_us']:.2f} us "
            f"(GPU launch floor); one eager launch from Python {calibration['launch_us']:.2f} us (CPU)")


def render_sweep(result: RunResult, file: TextIO, width: int | None = None) -> None:
    """The sweep table as a rich table, then floors, files and warnings."""
    console = Console(file=file, width=width or 120, highlight=False)
    table = Table(title="gapscope run: launch gaps per path and kernel time", title_justify="left")
    for h in HEADERS:
        table.add_column(h, justify="left" if h == "path" else "right")
    last = None
    for row in result.rows:
        if last is not None and row.kernel_us != last:
            table.add_section()
        table.add_row(*row_cells(row))
        last = row.kernel_us
    console.print(table)
    line = floors_line(result.calibration)
    if line:
        console.print(line)
    if result.files:
        console.print(f"output folder {result.options.out_dir}: gapscope_run.sqlite, "
                      "gapscope_run.nsys-rep, run.json, analysis.json, command.txt, environment.json")
    for w in result.warnings:
        console.print(f"warning: {w}")


def render_sweep_markdown(result: RunResult) -> str:
    """The sweep table as GitHub markdown (what docs/run.md shows)."""
    lines = ["| " + " | ".join(HEADERS) + " |",
             "| " + " | ".join("---" if h == "path" else "---:" for h in HEADERS) + " |"]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in result.rows]
    line = floors_line(result.calibration)
    return "\n".join(lines) + ("\n\n" + line if line else "") + "\n"
