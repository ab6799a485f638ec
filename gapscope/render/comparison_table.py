"""A terminal report of a Comparison (rich): headline, each failure in words, then a table with
failures first, fitted to the terminal like every report table (gapscope.render.layout). Range
names and sources come from files: printed as text, made printable and cut by gapscope.text."""

from __future__ import annotations

from typing import Any, TextIO

from rich.text import Text

from gapscope.regression.comparison import Comparison, Verdict
from gapscope.regression.thresholds import METRICS
from gapscope.render.layout import Column
from gapscope.render.sections import Name
from gapscope.render.console import console_for
from gapscope.render.table import fitted_table
from gapscope.text import name, printable

#: With more verdicts than this, ``ok`` rows are summarized in one line unless ``show_all``.
MAX_ROWS_BEFORE_FOLDING_OK = 24

STATUS_STYLE = {
    "regression": "bold red",
    "missing": "magenta",
    "within-noise": "yellow",
    "improved": "green",
    "new": "cyan",
    "info": "blue",
    "ok": "dim",
}
STATUS_LABEL = {
    "regression": "REGRESSION",
    "missing": "MISSING",
    "within-noise": "within noise",
    "improved": "improved",
    "new": "new",
    "info": "info",
    "ok": "ok",
}


COLUMNS = (Column("status", False), Column("scope", False, priority=2), Column("name", False),
           Column("metric", False), Column("baseline", short="base"), Column("current", short="cur"),
           Column("Δ"), Column("Δ%", priority=2), Column("limit", priority=1))
NOISE = Column("noise", priority=2)


def _row(v: Verdict, with_noise: bool) -> list[Text | str | Name]:
    m = METRICS[v.metric]  # type: ignore[index]
    style = STATUS_STYLE[v.status]
    rel = "—" if v.relative_delta is None else f"{v.relative_delta * 100:+.1f}%"
    row: list[Text | str | Name] = [
        Text(STATUS_LABEL[v.status], style=style),
        v.scope,
        Name(v.key),
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


def render(comparison: Comparison, file: TextIO, *, show_all: bool = False, width: int | None = None,
           wide: bool = False, **_: Any) -> None:
    """Write the verdict report to ``file``: one headline, each failure in words (then what the
    verdicts that passed say: more of the same work, graph coverage, totals not judged), then one row per
    range/device/stream/launch API and metric, failures first; ``ok`` rows fold into a count on
    big reports unless ``show_all``. The table fits ``width`` (default: the terminal's; every
    column with ``wide`` or in a file)."""
    console, fit = console_for(file, width, wide)
    headline = printable(comparison.headline())
    console.print(Text(headline, style="bold red" if not comparison.passed else "bold green"))
    nb, nc = len(comparison.baseline_sources), len(comparison.current_sources)
    console.print(
        Text(
            f"baseline: {_sources(comparison.baseline_sources)}  ·  current: "
            f"{_sources(comparison.current_sources)}  ·  compared: {', '.join(comparison.scope)}  ·  "
            f"thresholds: {', '.join(comparison.thresholds) or 'none'}",
            style="dim",
        )
    )
    for line in comparison.failures():
        console.print(Text.assemble(("  ✗ ", "bold red"), line))
    for line in comparison.notes():
        console.print(Text.assemble(("  · ", "blue"), line))

    ordered = [v for v in comparison.ordered() if v.metric is not None]
    fold_ok = not show_all and len(ordered) > MAX_ROWS_BEFORE_FOLDING_OK
    rows = [v for v in ordered if not (fold_ok and v.status == "ok")]
    with_noise = nb > 1 or nc > 1
    if rows:
        console.print(fitted_table("", (*COLUMNS, NOISE) if with_noise else COLUMNS,
                                   [_row(v, with_noise) for v in rows], fit))
    folded = len(ordered) - len(rows)
    if folded:
        console.print(Text(f"{folded} more checks ok (--all lists them)", style="dim"))
    if not ordered:
        console.print("no metric was compared: no matched entry has a threshold in force")

    unmatched = [v for v in comparison.ordered() if v.metric is None and not v.failed]
    for status, label in (("new", "only in current"), ("missing", "only in baseline")):
        keys = [f"{v.scope} {name(v.key)}" for v in unmatched if v.status == status]
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
        console.print(Text("range values are per instance: the median over each range's instances "
                           "with GPU work", style="dim"))
    for w in comparison.warnings:
        console.print(Text(f"warning: {printable(w)}", style="yellow"))


def _sources(sources: list[str]) -> str:
    if len(sources) <= 2:
        return ", ".join(name(s) for s in sources)
    return f"{name(sources[0])} … ({len(sources)} runs)"
