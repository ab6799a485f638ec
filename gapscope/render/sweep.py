"""The `gapscope run` table: gap fraction per path and kernel time, beside untraced timing.

Columns: kernel time (calibrated back-to-back us), path, gap % of the traced GPU span (median
over repeats, with min-max when repeated), traced span per kernel, the trace's median kernel
duration, untraced time per kernel (CUDA events, no profiler), and the span speedup over eager.

The seed's cases (docs/cases.md) each get a table of their rows and a summary: trace times
(`*_ns`) are shown in microseconds, shares and fractions in percent, host timers as they are.
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


def _header(key: str) -> str:
    """Column title of a case figure: `span_ns` -> `span us`, `gap_fraction` -> `gap fraction %`."""
    for unit, shown in (("_ns", " us"), ("_us", " us")):
        if key.endswith(unit):
            return key[: -len(unit)].replace("_", " ") + shown
    if key.endswith(("_share", "_fraction")):
        return key.replace("_", " ") + " %"
    return key.replace("_", " ")


def _value(key: str, value: Any) -> str:
    """One case figure as text, in the unit _header names."""
    if value is None:
        return "-"
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if key.endswith("_ns"):
        return f"{value / 1000:.2f}"
    if key.endswith(("_share", "_fraction")):
        return f"{100 * value:.1f}%"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _flat(summary: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in summary.items():
        if isinstance(v, dict):
            out += _flat(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _summary_line(key: str, value: Any) -> str:
    """`one-way.hop_median_ns`, 1234 -> `one-way hop median us: 1.23`."""
    head, _, leaf = key.rpartition(".")
    return f"{head + ' ' if head else ''}{_header(leaf)}: {_value(leaf, value)}"


def case_tables(cases: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]], list[str]]]:
    """(title, column keys, cells, summary lines) of each case's figures."""
    out = []
    for key, fig in cases.items():
        rows = fig.get("rows", [])
        cols: list[str] = []
        for r in rows:
            cols += [c for c in r if c not in cols]
        cells = [[_value(c, r.get(c)) for c in cols] for r in rows]
        lines = [_summary_line(k, v) for k, v in _flat(fig.get("summary", {}))]
        out.append((key, cols, cells, lines))
    return out


def render_cases(cases: dict[str, Any], console: Console) -> None:
    """Each case's figures as a rich table and its summary lines."""
    for title, cols, cells, lines in case_tables(cases):
        if not cols:
            console.print(f"case {title}: no ranges of this case in the trace")
            continue
        table = Table(title=f"case {title}", title_justify="left")
        for i, c in enumerate(cols):
            table.add_column(_header(c), justify="left" if i == 0 else "right")
        for row in cells:
            table.add_row(*row)
        console.print(table)
        for line in lines:
            console.print(f"  {line}")


def render_sweep(result: RunResult, file: TextIO, width: int | None = None) -> None:
    """The sweep table as a rich table (when launch paths ran), the cases' tables, then floors,
    files and warnings."""
    console = Console(file=file, width=width or 120, highlight=False)
    if result.rows:
        table = Table(title="gapscope run: launch gaps per path and kernel time",
                      title_justify="left")
        for h in HEADERS:
            table.add_column(h, justify="left" if h == "path" else "right")
        last = None
        for row in result.rows:
            if last is not None and row.kernel_us != last:
                table.add_section()
            table.add_row(*row_cells(row))
            last = row.kernel_us
        console.print(table)
    render_cases(result.cases, console)
    line = floors_line(result.calibration)
    if line:
        console.print(line)
    if result.files:
        console.print(f"output folder {result.options.out_dir}: gapscope_run.sqlite, "
                      "gapscope_run.nsys-rep, run.json, analysis.json, command.txt, environment.json")
    for w in result.warnings:
        console.print(f"warning: {w}")


def render_sweep_markdown(result: RunResult) -> str:
    """The sweep table as GitHub markdown (what docs/run.md shows), then each case's figures."""
    lines: list[str] = []
    if result.rows:
        lines = ["| " + " | ".join(HEADERS) + " |",
                 "| " + " | ".join("---" if h == "path" else "---:" for h in HEADERS) + " |"]
        lines += ["| " + " | ".join(row_cells(r)) + " |" for r in result.rows]
    for title, cols, cells, summary in case_tables(result.cases):
        if not cols:
            lines += ["" if lines else None, f"**case {title}**: no ranges of this case in the trace"]
            continue
        lines += ["" if lines else None, f"**case {title}**", "",
                  "| " + " | ".join(_header(c) for c in cols) + " |",
                  "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(cols))) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in cells]
        lines += [""] + [f"- {s}" for s in summary]
    lines = [ln for ln in lines if ln is not None]
    line = floors_line(result.calibration)
    return "\n".join(lines) + ("\n\n" + line if line else "") + "\n"
