"""A terminal report of a Comparison (rich): headline, then a table with regressions first.

Range names and sources come from files: printed as text (no markup), made printable and cut
by gapscope.text."""

from __future__ import annotations

from typing import Any, TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gapscope.compare.comparison import Comparison, Verdict
from gapscope.compare.thresholds import METRICS
from gapscope.text import name, printable

#: With more verdicts than this, ``ok`` rows are summarized in one line unless ``show_all``.
MAX_ROWS_BEFORE_FOLDING_OK = 24

STATUS_STYLE = {
    "regression": "bold red",
    "within-noise": "yellow",
    "improved": "green",
    "new": "cyan",
    "missing": "magenta",
    "ok": "dim",
}
STATUS_LABEL = {
    "regression": "REGRESSION",
    "within-noise": "within noise",
    "improved": "improved",
    "new": "new",
    "missing": "missing",
    "ok": "ok",
}


def _row(v: Verdict, with_noise: bool) -> list[Text | str]:
    m = METRICS[v.metric]
    style = STATUS_STYLE[v.status]
    rel = "—" if v.relative_delta is None else f"{v.relative_delta * 100:+.1f}%"
    row: list[Text | str] = [
        Text(STATUS_LABEL[v.status], style=style),
        v.scope,
        Text(name(v.key), style="bold" if v.failed else ""),
        m.short,
        m.format(v.baseline),
        m.format(v.current),
        Text(m.format_delta(v.delta), style=style if v.status in ("regression", "improved") else ""),
        rel,
        v.threshold_limit_text(),
    ]
    if with_noise:
        row.append("—" if v.noise == 0 else m.format_delta(v.noise).lstrip("+"))
    return row


def render(comparison: Comparison, file: TextIO, *, show_all: bool = False, **_: Any) -> None:
    """Write the verdict table to ``file``: one headline, then one row per range/device/stream and
    metric, regressions first; ``ok`` rows fold into a count on big reports unless ``show_all``."""
    console = Console(file=file, width=None if file.isatty() else 140, highlight=False, markup=False)
    headline = printable(comparison.headline())
    console.print(Text(headline, style="bold red" if not comparison.passed else "bold green"))
    nb, nc = len(comparison.baseline_sources), len(comparison.current_sources)
    console.print(
        Text(
            f"baseline: {_sources(comparison.baseline_sources)}  ·  current: "
            f"{_sources(comparison.current_sources)}  ·  thresholds: {', '.join(comparison.thresholds) or 'none'}",
            style="dim",
        )
    )

    ordered = [v for v in comparison.ordered() if v.status not in ("new", "missing")]
    fold_ok = not show_all and len(ordered) > MAX_ROWS_BEFORE_FOLDING_OK
    rows = [v for v in ordered if not (fold_ok and v.status == "ok")]
    with_noise = nb > 1 or nc > 1
    if rows:
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        table.add_column("status", no_wrap=True)
        table.add_column("scope", no_wrap=True)
        longest = max(len(name(v.key)) for v in rows)
        table.add_column("name", overflow="fold", min_width=min(longest, 28), max_width=48)
        table.add_column("metric", no_wrap=True)
        for header in ("baseline", "current", "Δ", "Δ%", "limit"):
            table.add_column(header, justify="right", no_wrap=True)
        if with_noise:
            table.add_column("noise", justify="right", no_wrap=True)
        for v in rows:
            table.add_row(*_row(v, with_noise))
        console.print(table)
    folded = len(ordered) - len(rows)
    if folded:
        console.print(Text(f"{folded} more checks ok (--all lists them)", style="dim"))
    if not ordered:
        console.print("no metric was compared: no range, device or stream matched a threshold")

    unmatched = comparison.unmatched()
    for status, label in (("new", "only in current"), ("missing", "only in baseline")):
        keys = [f"{scope} {name(key)}" for scope, key, st in unmatched if st == status]
        if keys:
            console.print(Text(f"{label} ({status}, not failed): ", style=STATUS_STYLE[status]), end="")
            console.print(Text(", ".join(keys)))
    if with_noise:
        console.print(
            Text(
                f"medians of {nb} baseline and {nc} current runs; a change fails only when it "
                "exceeds both its limit and the noise (largest max-min spread of either side)",
                style="dim",
            )
        )
    if any(v.scope == "range" for v in comparison.verdicts):
        console.print(Text("range spans, gaps and counts are per instance", style="dim"))
    for w in comparison.warnings:
        console.print(Text(f"warning: {printable(w)}", style="yellow"))


def _sources(sources: list[str]) -> str:
    if len(sources) <= 2:
        return ", ".join(name(s) for s in sources)
    return f"{name(sources[0])} … ({len(sources)} runs)"
