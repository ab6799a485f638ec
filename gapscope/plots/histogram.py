"""The gap-duration histogram: one panel per NVTX range name, log-spaced bins shared by all
panels, bars stacked by gap category, and the p50/p90/p99 the result reports marked.

Launch-bound code shows a mode at the CPU's launch interval (several us); a graph replay's gaps
sit at the device's turnaround (a few hundred ns); host syncs and stalls form a tail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gapscope.plots import style
from gapscope.plots.binning import log_edges, log_histogram, percentile_marks
from gapscope.plots.source import PlotSource
from gapscope.render.units import fmt_ns

MAX_PANELS = 12
COLS = 3
PANEL_W_IN, PANEL_H_IN = 4.5, 2.8
MARK_STYLES = {"p50": "-", "p90": "--", "p99": ":"}
NAME_CHARS = 44  # a panel title's width at 10 pt


def _count(v: float, _pos: object = None) -> str:
    """A y tick: 950, 12k, 1.2M."""
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= 10 * div or (div == 1e6 and abs(v) >= div):
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


@dataclass(frozen=True)
class HistogramData:
    """Counts per (range name, category, bin) over shared log edges, for the names drawn."""

    names: list[str]
    rows: list[dict]  # the result's by_name rows, in the same order (most gap time first)
    edges: np.ndarray
    counts: np.ndarray  # (len(names), n_cats, len(edges) - 1)
    labels: tuple[str, ...]  # category labels (("gap",) without attribution)
    left_out: int  # names with gaps not drawn (beyond MAX_PANELS)


def histogram_data(src: PlotSource, per_decade: int = 10, max_panels: int = MAX_PANELS) -> HistogramData:
    """Bin every range-level gap by its range's name and category: the ``max_panels`` names
    with the most gap time, most first."""
    from gapscope.analysis.attribution import CATEGORY_LABELS

    a = src.analysis
    codes = a.name_of_range
    by_name = src.result.by_name
    gaps = a.range_gaps
    group = codes[gaps.row].astype(np.int64) if gaps.row.size else np.zeros(0, np.int64)
    if src.range_gap_cats is not None:
        cats, labels = src.range_gap_cats, CATEGORY_LABELS
    else:
        cats, labels = np.zeros(gaps.length.size, dtype=np.int64), ("gap",)
    with_gaps = [i for i, r in enumerate(by_name) if r["gap_count"] > 0]
    keep = sorted(with_gaps, key=lambda i: (-by_name[i]["gap_ns"], i))[:max_panels]  # most gap time first
    sel = np.isin(group, keep)
    edges = log_edges(gaps.length[sel], per_decade)
    counts = log_histogram(gaps.length, group, cats, edges, len(by_name), len(labels))[keep]
    return HistogramData(
        names=[str(by_name[i]["name"]) for i in keep], rows=[by_name[i] for i in keep], edges=edges,
        counts=counts, labels=tuple(labels), left_out=len(with_gaps) - len(keep),
    )


def draw_histogram(src: PlotSource, out_base: Path, formats: Sequence[str]) -> list[Path]:
    """Draw the histogram of ``src`` (a loaded trace) to ``out_base.<fmt>``."""
    with style.context():
        return style.save(histogram_figure(src), out_base, formats)


def histogram_figure(src: PlotSource) -> Any:
    """The gap-duration histogram of ``src`` (a loaded trace with range-level gaps) as a
    matplotlib Figure (on an Agg canvas)."""
    data = histogram_data(src)
    n = len(data.names)
    cols = min(COLS, n)
    nrows = -(-n // cols)
    top_in, bottom_in = 1.45, 0.55
    width = max(cols * PANEL_W_IN + 0.6, 9.0)
    height = nrows * PANEL_H_IN + top_in + bottom_in
    with style.context():
        from matplotlib.patches import Patch
        from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

        fig = style.new_figure(width, height)
        grid = fig.add_gridspec(nrows, cols, left=0.75 / width, right=1 - 0.45 / width,
                                top=1 - top_in / height, bottom=bottom_in / height,
                                hspace=0.75, wspace=0.22)
        first = None
        present = data.counts.sum(axis=(0, 2)) > 0
        for k, (name, row) in enumerate(zip(data.names, data.rows)):
            ax = fig.add_subplot(grid[k // cols, k % cols], sharex=first)
            first = first or ax
            bottom = np.zeros(data.edges.size - 1)
            for c, label in enumerate(data.labels):  # one bar series per category
                h = data.counts[k, c]
                if h.any():  # one StepPatch per category, stacked: not one rectangle per bin
                    ax.stairs(bottom + h, data.edges, baseline=bottom.copy(), fill=True, linewidth=0,
                              color=style.CATEGORY_COLORS.get(label, style.GAP_COLOR))
                    bottom = bottom + h
            marks = []
            for label, value in percentile_marks(row):
                marks.append(ax.axvline(value, color="#222222", linestyle=MARK_STYLES[label],
                                        linewidth=1.1, label=f"{label} {fmt_ns(value)}"))
            ax.set_xscale("log")
            ax.set_ylim(0, max(bottom.max(), 1) * 1.6)  # headroom: the marks legend sits above the bars
            leg = ax.legend(handles=marks, loc="upper right", fontsize=8, handlelength=1.8,
                            borderaxespad=0.2, framealpha=0.9, edgecolor="none")
            leg.set_zorder(5)
            frac = row.get("gap_fraction")
            shown = name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"
            ax.set_title(f"{shown} (x{row['count']})\n{row['gap_count']:,} gaps, "
                         + (f"{100 * frac:.1f}% of the GPU span" if frac is not None else ""),
                         fontsize=10, loc="left", linespacing=1.3)
            ax.yaxis.set_major_formatter(FuncFormatter(_count))
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            if k % cols == 0:
                ax.set_ylabel("gaps")
            if k // cols == nrows - 1 or k + cols >= n:
                ax.set_xlabel("gap duration")
        first.set_xlim(data.edges[0], data.edges[-1])
        first.xaxis.set_major_locator(LogLocator(base=10))
        first.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_ns(v)))
        first.xaxis.set_minor_locator(NullLocator())  # minor log ticks on a dozen panels cost seconds

        title = f"{src.label}: gap durations per {src.ranges_word[:-1]} name"
        if data.left_out:
            title += f" (the {n} with most gap time; {data.left_out} more not shown)"
        fig.text(0.1 / width, 1 - 0.12 / height, title, ha="left", va="top", fontsize=12, fontweight="bold")
        fig.text(0.1 / width, 1 - 0.42 / height,
                 "range-level gaps (docs/metrics.md) in log-spaced bins, stacked by gap category; "
                 "lines: p50, p90 and p99 from the result", ha="left", va="top", fontsize=9.5, color="#333333")
        handles = [Patch(facecolor=style.CATEGORY_COLORS.get(lb, style.GAP_COLOR), label=lb)
                   for i, lb in enumerate(data.labels) if present[i]]
        fig.legend(handles=handles, loc="upper left", ncol=len(handles) or 1, frameon=False,
                   bbox_to_anchor=(0.75 / width - 0.01, 1 - 0.6 / height), fontsize=9)
        return fig
