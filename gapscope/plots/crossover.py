"""The crossover chart of a `gapscope run` sweep: whether graphs pay at each kernel time in one figure
(short kernels, as in decode, leave the timeline in gaps; long ones, as in prefill, amortize them).

Top: each path's gap fraction against kernel time (log scale), with the thresholds of
docs/metrics.md ("launch-bound" at 20 %, "amortized" below 5 %) and the kernel times at which the
eager path crosses them. Bottom: the graph path's GPU-span speedup over eager at the same kernel time
(`speedup_vs_eager` of the sweep rows): the graph's win shrinking to 1x as kernels grow.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gapscope.analysis.verdicts import AMORTIZED, LAUNCH_BOUND
from gapscope.plots import style
from gapscope.plots.binning import SweepSeries, crossing, sweep_series
from gapscope.plots.source import PlotSource

PATH_COLORS = {"eager": "#CC3311", "multistream": "#0077BB", "graph": "#009988"}
OTHER_COLORS = ("#EE7733", "#33BBEE", "#EE3377", "#555555")
PATH_MARKERS = {"eager": "o", "multistream": "s", "graph": "^"}


def path_color(path: str, i: int) -> str:
    return PATH_COLORS.get(path, OTHER_COLORS[i % len(OTHER_COLORS)])


def crossover_points(series: Sequence[SweepSeries]) -> list[tuple[str, float, float]]:
    """(label, level, kernel us) where the eager path's gap fraction falls to each threshold."""
    eager = next((s for s in series if s.path == "eager"), None)
    out = []
    if eager is None:
        return out
    for label, level in (("launch-bound", LAUNCH_BOUND), ("amortized", AMORTIZED)):
        x = crossing(eager.kernel_us, eager.gap_fraction, level)
        if x is not None:
            out.append((label, level, x))
    return out


def _us(v: float, fmt: str = "g") -> str:
    return f"{v:{fmt}} us" if v < 1000 else f"{v / 1000:{fmt}} ms"


def draw_crossover(src: PlotSource, out_base: Path, formats: Sequence[str]) -> list[Path]:
    """Draw the sweep of ``src`` to ``out_base.<fmt>``."""
    series = sweep_series(src.sweep)
    ks = np.unique(np.concatenate([s.kernel_us for s in series]))
    lo, hi = ks.min() / 1.5, ks.max() * 1.5
    width, height = 10.0, 7.4
    with style.context():
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

        fig = style.new_figure(width, height)
        grid = fig.add_gridspec(2, 1, height_ratios=(3, 2), left=0.09, right=0.8, top=1 - 0.95 / height,
                                bottom=0.6 / height, hspace=0.12)
        top = fig.add_subplot(grid[0])
        bot = fig.add_subplot(grid[1], sharex=top)

        top.axhspan(100 * LAUNCH_BOUND, 100, color="#D55E00", alpha=0.07, linewidth=0)
        top.axhspan(0, 100 * AMORTIZED, color="#009E73", alpha=0.10, linewidth=0)
        top.axhline(100 * LAUNCH_BOUND, color="#D55E00", linewidth=0.9, linestyle="--")
        top.axhline(100 * AMORTIZED, color="#009E73", linewidth=0.9, linestyle="--")
        top.text(hi, 100 * LAUNCH_BOUND + 1.5, f" launch-bound: gap >= {100 * LAUNCH_BOUND:.0f}%",
                 ha="left", va="bottom", fontsize=9, color="#A04000", clip_on=False)
        top.text(hi, 100 * AMORTIZED - 1.5, f" amortized: gap < {100 * AMORTIZED:.0f}%", ha="left",
                 va="top", fontsize=9, color="#00704F", clip_on=False)
        for i, s in enumerate(series):
            ok = ~np.isnan(s.gap_fraction)
            top.plot(s.kernel_us[ok], 100 * s.gap_fraction[ok], marker=PATH_MARKERS.get(s.path, "D"),
                     color=path_color(s.path, i), linewidth=2, markersize=6, label=s.path)
        for label, level, x in crossover_points(series):
            top.axvline(x, color="#555555", linewidth=0.9, linestyle=":")
            top.annotate(f"eager below {100 * level:.0f}%\nat k ~ {_us(x, '.3g')}", (x, 97),
                         xytext=(4, 0), textcoords="offset points", va="top", fontsize=8.5,
                         color="#333333", bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
        top.set_ylim(0, 100)
        top.set_ylabel("gap % of the GPU span")
        top.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, title="path")

        bot.axhline(1.0, color="#888888", linewidth=1.0)
        best = 1.0
        for i, s in enumerate(series):
            ok = ~np.isnan(s.speedup)
            if not s.path.startswith("graph") or not ok.any():
                continue
            bot.plot(s.kernel_us[ok], s.speedup[ok], marker=PATH_MARKERS.get(s.path, "D"),
                     color=path_color(s.path, i), linewidth=2, markersize=6, label=s.path)
            best = max(best, float(np.nanmax(s.speedup)))
            for x, y in zip(s.kernel_us[ok].tolist(), s.speedup[ok].tolist()):  # one per sweep point
                bot.annotate(f"{y:.2f}x", (x, y), xytext=(0, 7), textcoords="offset points",
                             ha="center", fontsize=8.5, color=path_color(s.path, i))
        bot.set_ylim(0, best * 1.25)
        bot.set_ylabel("graph speedup over eager\n(GPU span)")
        bot.text(hi, 1.0, " eager = 1x", ha="left", va="center", fontsize=9, color="#555555", clip_on=False)
        bot.set_xscale("log")
        bot.set_xlim(lo, hi)
        bot.xaxis.set_major_locator(FixedLocator(ks))
        bot.xaxis.set_minor_locator(NullLocator())
        bot.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _us(v)))
        bot.set_xlabel("kernel time k (back-to-back, calibrated by gapscope run)")
        for ax in (top, bot):
            ax.grid(color="#E2E2E2", linewidth=0.6)
            ax.set_axisbelow(True)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
        top.tick_params(labelbottom=False)

        fig.text(0.1 / width, 1 - 0.12 / height, f"{src.label}: the decode-vs-prefill crossover",
                 ha="left", va="top", fontsize=12, fontweight="bold")
        fig.text(0.1 / width, 1 - 0.42 / height,
                 "gap fraction of each launch path against kernel time (median over repeats); below, the "
                 "graph path's speedup\nover eager: eager GPU span / graph GPU span at the same kernel time",
                 ha="left", va="top", fontsize=9.5, color="#333333")
        return style.save(fig, out_base, formats)
