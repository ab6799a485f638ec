"""The `gapscope run` tables as cells, shared by its terminal and Markdown renderers: gap fraction per path and kernel time, beside untraced timing.

Columns: kernel time (calibrated back-to-back us), path, gap % of the traced GPU span (median
over repeats, with min-max when repeated), traced span per kernel, the trace's median kernel
duration, untraced time per kernel (CUDA events, no profiler), and the speedup over eager: of the
traced spans, and of the untraced times (what the program gets without the profiler).

The CUDA Graph cases of docs/cases.md each get a table of their rows and a summary: trace times
(`*_ns`) are shown in microseconds, shares and fractions in percent, host timers as they are.
"""

from __future__ import annotations

from typing import Any

from gapscope.analysis.sweep import SweepRow


def _num(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _gap(row: SweepRow) -> str:
    if row.gap_fraction is None:
        return "-"
    text = f"{100 * row.gap_fraction:.1f}%"
    if row.ranges > 1 and row.gap_fraction_min is not None and row.gap_fraction_max is not None:
        text += f" ({100 * row.gap_fraction_min:.1f}-{100 * row.gap_fraction_max:.1f})"
    return text


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


HEADERS = ("k (us)", "path", "gap %", "traced us/kernel", "kernel dur (us)",
           "untraced us/kernel", "speedup vs eager", "untraced speedup")


def row_cells(row: SweepRow) -> list[str]:
    """One row's cells, in HEADERS order."""
    untraced = _num(row.untraced_per_kernel_us)
    if row.untraced_spread_us:
        untraced += f" ±{row.untraced_spread_us / 2:.2f}"
    return [f"{row.kernel_us:g}", row.path, _gap(row), _num(row.traced_per_kernel_us),
            _num(row.kernel_median_us), untraced, _speedup(row.speedup_vs_eager),
            _speedup(row.untraced_speedup_vs_eager)]


def floors_line(calibration: dict[str, Any] | None) -> str:
    """One line on the device's launch floors from the calibration."""
    if not calibration:
        return ""
    return (f"{calibration['gpu']}: empty kernel back to back {calibration['floor_us']:.2f} us "
            f"(GPU launch floor); one eager launch from Python {calibration['launch_us']:.2f} us (CPU)")


def column_header(key: str) -> str:
    """Column title of a case figure: `span_ns` -> `span us`, `gap_fraction` -> `gap fraction %`."""
    for unit, shown in (("_ns", " us"), ("_us", " us")):
        if key.endswith(unit):
            return key[: -len(unit)].replace("_", " ") + shown
    if key.endswith(("_share", "_fraction")):
        return key.replace("_", " ") + " %"
    return key.replace("_", " ")


def _value(key: str, value: Any) -> str:
    """One case figure as text, in the unit column_header names."""
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
    return f"{head + ' ' if head else ''}{column_header(leaf)}: {_value(leaf, value)}"


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
