"""A GitHub-flavoured Markdown report of a Comparison, for pull requests and job summaries: the
headline, each failure in words, then the verdict table."""

from __future__ import annotations

from typing import Any, TextIO

from gapscope.regression.comparison import Comparison, Verdict
from gapscope.regression.thresholds import METRICS
from gapscope.render.markdown_text import code, prose

ICON = {
    "regression": "❌",
    "missing": "➖",
    "within-noise": "〰️",
    "improved": "✅",
    "new": "🆕",
    "info": "ℹ️",
    "ok": "✔️",
}


_code = code


_HEADER = (
    "| | scope | name | metric | baseline | current | Δ | Δ% | limit |\n"
    "|---|---|---|---|---:|---:|---:|---:|---:|\n"
)


def _row(v: Verdict) -> str:
    m = METRICS[v.metric]  # type: ignore[index]
    rel = "—" if v.relative_delta is None else f"{v.relative_delta * 100:+.1f}%"
    delta = m.format_delta(v.delta)
    if v.failed:
        delta = f"**{delta}**"
    cells = [
        f"{ICON[v.status]} {v.status}",
        v.scope,
        _code(v.key),
        f"`{m.short}`",
        m.format(v.baseline),
        m.format(v.current),
        delta,
        rel,
        v.threshold_limit_text(),
    ]
    return "| " + " | ".join(cells) + " |\n"


def render(comparison: Comparison, file: TextIO, **_: Any) -> None:
    """Write the report as Markdown: a headline, each failure in words, the non-ok verdicts
    (failures first), the ok ones folded in a ``<details>`` block, then unmatched entries and
    warnings."""
    ordered = [v for v in comparison.ordered() if v.metric is not None]
    icon = "✅" if comparison.passed else "❌"
    file.write(f"### {icon} gapscope compare — {prose(comparison.headline())}\n\n")
    file.write(
        f"Baseline: {', '.join(_code(s) for s in comparison.baseline_sources)} · "
        f"current: {', '.join(_code(s) for s in comparison.current_sources)} · "
        f"compared: {', '.join(comparison.scope)} · "
        f"thresholds: {', '.join(_code(t) for t in comparison.thresholds) or 'none'}\n\n"
    )
    failures = comparison.failures()
    if failures:
        file.write("".join(f"- ❌ {prose(line)}\n" for line in failures) + "\n")
    notes = comparison.notes()
    if notes:
        file.write("".join(f"- ℹ️ {prose(line)}\n" for line in notes) + "\n")
    attention = [v for v in ordered if v.status in ("regression", "within-noise", "improved", "info")]
    ok = [v for v in ordered if v.status == "ok"]
    if attention:
        file.write(_HEADER)
        for v in attention:
            file.write(_row(v))
        file.write("\n")
    if ok:
        file.write(f"<details><summary>{len(ok)} checks ok</summary>\n\n")
        file.write(_HEADER)
        for v in ok:
            file.write(_row(v))
        file.write("\n</details>\n\n")
    if not attention and not ok:
        file.write("No metric was compared: no matched entry has a threshold in force.\n\n")
    listed = [v for v in comparison.ordered() if v.metric is None and not v.failed]
    for status, label in (("new", "Only in current"), ("missing", "Only in baseline")):
        keys = [f"{v.scope} {_code(v.key)}" for v in listed if v.status == status]
        if keys:
            file.write(f"{ICON[status]} {label} (not failed): {', '.join(keys)}\n\n")
    nb, nc = len(comparison.baseline_sources), len(comparison.current_sources)
    if nb > 1 or nc > 1:
        file.write(
            f"Medians of {nb} baseline and {nc} current runs; a change fails only when it exceeds "
            "both its limit and the spread (max − min) of the runs on either side.\n\n"
        )
    for w in comparison.warnings:
        file.write(f"> ⚠️ {prose(w)}\n\n")
