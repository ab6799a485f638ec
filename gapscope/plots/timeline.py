"""The timeline figure: what the Nsight Systems GUI shows, drawn from the analysis arrays.

One row per device and stream with the kernels as dark bars; behind each device's rows, its
device-level gaps (docs/metrics.md: no busy work on any stream) shaded in the colour of their
gap category; above them, the NVTX ranges drawn (two nesting levels, a row each per process).
Without --range or --window the view is the work of the range name the answer names first, so
that a long warm-up or compile does not fill it; the row labels get the margin they need. Kernels narrower than a
pixel are not drawn one by one: ``binning.timeline_bins`` sums every row's busy time per pixel
column, and a column's shade is its busy (or idle) fraction, with a floor so that one short
kernel in a column still shows. A million kernels therefore cost a few bincounts, not a million
rectangles.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gapscope.analysis.keys import unpack_stream_key
from gapscope.plots import style
from gapscope.plots.binning import TimelineBins, dominant, timeline_bins
from gapscope.plots.source import PlotSource
from gapscope.plots.window import Window, place_window
from gapscope.render.units import fmt_ns

WIDTH_IN = 14.0
LEFT_IN, RIGHT_IN = 1.7, 0.3
TOP_IN, BOTTOM_IN = 1.05, 0.6
ROW_IN, NVTX_IN = 0.34, 0.3
NVTX_LEVELS = 2
FOCUS_CHARS = 80  # a focused range's name in the title, at 12 pt on the figure's 14 in
BAR_ROWS = (1, 2, 3)  # a stream row is 5 image rows; the bar fills the middle three


def axes_columns(left_in: float = LEFT_IN) -> int:
    """Pixel columns of the timeline's axes (``left_in``: the row labels' margin): one bin per
    pixel."""
    return int(round((WIDTH_IN - left_in - RIGHT_IN) * style.DPI))


def focus(src: PlotSource, spec: tuple[int | None, int | None]) -> tuple[np.ndarray, str | None]:
    """(the activities whose extent is the default view, the range name they are the work of):
    without --range and --window, the work of the range name the answer names first (the most
    to win by graphs, else the most gap time; gapscope.analysis.answer), so that a long warm-up
    or compile does not fill the view; else every range's work (None)."""
    a = src.analysis
    entries = src.result.answers() if src.result is not None and spec == (None, None) and not src.range_filter \
        else []
    first = next((e for e in entries if e.get("scope") == "range"), None)
    if first is None or a.member_act.size == 0:
        return a.member_act, None
    rf = a.ranges.frame
    domain = rf["domain"]
    same_domain = domain.isna() if first.get("domain") is None else domain == first["domain"]
    mine = (rf["group"].to_numpy(dtype=object) == first["name"]) & same_domain.to_numpy(dtype=bool)
    work = a.member_act[mine[a.member_range]]
    return (work, str(first["name"])) if work.size else (a.member_act, None)


def row_labels_width(labels: Sequence[str]) -> float:
    """The left margin (inches) that fits the longest of the rows' labels at the tick labels'
    size, and never less than LEFT_IN."""
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    size = rcParams["ytick.labelsize"]
    font = FontProperties(size=size if isinstance(size, (int, float)) else rcParams["font.size"])
    measure = TextToPath()
    widest = max((measure.get_text_width_height_descent(t, font, ismath=False)[0] for t in labels), default=0.0)
    return max(LEFT_IN, widest / 72 + 0.3)  # points to inches, and the ticks' padding


def timeline_data(src: PlotSource, spec: tuple[int | None, int | None],
                  left_in: float = LEFT_IN) -> tuple[Window, TimelineBins]:
    """The window and its per-pixel-column bins, from a loaded trace (``left_in``: the row
    labels' margin, which sets the axes' pixel columns)."""
    from gapscope.analysis.attribution import IdleCategory

    a = src.analysis
    acts = a.acts
    window = place_window(acts.start, acts.end, focus(src, spec)[0], spec)
    stream_device = unpack_stream_key(acts.stream_keys)[1]
    gaps = a.device_gaps
    if src.device_gap_cats is not None:
        cats, n_cats = src.device_gap_cats, len(IdleCategory)
    else:
        cats, n_cats = np.zeros(gaps.length.size, dtype=np.int64), 1
    drawn = acts.busy | acts.is_memop
    bins = timeline_bins(
        acts.start[drawn], acts.end[drawn], acts.stream_code[drawn], acts.is_memop[drawn],
        stream_device, gaps.start, gaps.length, np.searchsorted(acts.device_ids, gaps.device),
        cats, n_cats, window.start, window.end, axes_columns(left_in),
    )
    return window, bins


def _rgba(color: str, alpha: np.ndarray) -> np.ndarray:
    from matplotlib.colors import to_rgba

    out = np.zeros(alpha.shape + (4,), dtype=np.float32)
    out[..., :3] = to_rgba(color)[:3]
    out[..., 3] = alpha
    return out


def _shade(frac: np.ndarray, floor: float, top: float) -> np.ndarray:
    """Alpha for a coverage fraction: 0 where nothing, else from ``floor`` up to ``top``."""
    return np.where(frac > 0, floor + (top - floor) * frac, 0.0)


def _range_rows(src: PlotSource, window: Window) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """Per NVTX row drawn, one for each process and nesting level (NVTX_LEVELS): (its label,
    start, end, name) of the ranges overlapping the window."""
    rf = src.analysis.ranges.frame
    pid = rf["pid"].to_numpy()
    inside = (rf["start_ns"].to_numpy() < window.end) & (rf["end_ns"].to_numpy() > window.start)
    pids = pd.unique(pid[inside]).tolist()
    out = []
    for p in pids:  # a few processes
        for depth in range(NVTX_LEVELS):
            sel = inside & (pid == p) & (rf["depth"].to_numpy() == depth)
            if sel.any():
                label = ("NVTX" if depth == 0 else "NVTX (nested)") + (f" · pid {p}" if len(pids) > 1 else "")
                out.append((label, rf["start_ns"].to_numpy()[sel], rf["end_ns"].to_numpy()[sel],
                            rf["name"].to_numpy()[sel]))
    return out


def _row_labels(src: PlotSource, rows: np.ndarray) -> list[str]:
    """The label of each stream row: ``GPU 0 · stream 7``, with ``pid P · `` first when several
    processes used the GPUs."""
    keys = src.analysis.stream_keys
    pid = keys["pid"].to_numpy()[rows]
    dev = keys["device"].to_numpy()[rows]
    stream = keys["stream"].to_numpy()[rows]
    many_pids = np.unique(keys["pid"].to_numpy()).size > 1
    return [(f"pid {p} · " if many_pids else "") + f"GPU {d} · stream {s}"
            for p, d, s in zip(pid.tolist(), dev.tolist(), stream.tolist())]


def _subtitle(src: PlotSource, bins: TimelineBins, n_kernels: int) -> str:
    parts = []
    rows = [r for r in (src.result.by_name if src.result else []) if r["kernels"] > 0]
    if src.range_filter and len(rows) == 1:
        r = rows[0]
        parts.append(f"range {r['name']} (x{r['count']}): gap {100 * r['gap_fraction']:.1f}% of its GPU span "
                     f"({fmt_ns(r['gap_ns'])} of {fmt_ns(r['gpu_span_ns'])})")
        if r.get("graph_ceiling_speedup"):
            parts.append(f"graph ceiling {r['graph_ceiling_speedup']:.2f}x")
    parts.append(f"{n_kernels:,} kernels in view")
    parts.append(f"1 pixel column = {fmt_ns(bins.column_ns)}")
    return " · ".join(parts)


def draw_timeline(src: PlotSource, out_base: Path, formats: Sequence[str],
                  spec: tuple[int | None, int | None] = (None, None)) -> list[Path]:
    """Draw the timeline of ``src`` (a loaded trace) to ``out_base.<fmt>``."""
    with style.context():
        return style.save(timeline_figure(src, spec), out_base, formats)


def timeline_figure(src: PlotSource, spec: tuple[int | None, int | None] = (None, None)) -> Any:
    """The timeline of ``src`` (a loaded trace) as a matplotlib Figure (on an Agg canvas)."""
    from gapscope.analysis.attribution import CATEGORY_LABELS

    with style.context():  # the labels are measured at the figure's font sizes
        every = np.arange(len(src.analysis.stream_keys))
        pids = pd.unique(src.analysis.ranges.frame["pid"].to_numpy()).tolist()
        nvtx = [f"NVTX (nested) · pid {p}" for p in pids] if len(pids) > 1 else ["NVTX (nested)"]
        left_in = row_labels_width([*_row_labels(src, every), *nvtx])
    window, bins = timeline_data(src, spec, left_in)
    focused = focus(src, spec)[1]
    acts = src.analysis.acts
    n_kernels = int((acts.is_kernel & (acts.start < window.end) & (acts.end > window.start)).sum())
    levels = _range_rows(src, window)
    n_rows, n_lev = bins.rows.size, len(levels)
    height = TOP_IN + BOTTOM_IN + n_rows * ROW_IN + n_lev * NVTX_IN + 0.1
    unit, scale = style.time_unit(window.length)
    x0, x1 = (window.start - window.origin) / scale, (window.end - window.origin) / scale
    labels = CATEGORY_LABELS if src.device_gap_cats is not None else ("gap",)

    with style.context():
        fig = style.new_figure(WIDTH_IN, height)
        ax = fig.add_axes((left_in / WIDTH_IN, BOTTOM_IN / height,
                           (WIDTH_IN - left_in - RIGHT_IN) / WIDTH_IN,
                           (height - TOP_IN - BOTTOM_IN) / height))
        # y: NVTX levels first (each NVTX_IN / ROW_IN of a row), then one unit per stream row.
        lev_h = NVTX_IN / ROW_IN
        y_rows = n_lev * lev_h + 0.1
        total = y_rows + n_rows
        ax.set_xlim(x0, x1)
        ax.set_ylim(total, 0)

        # Gap bands, one per device, behind its rows.
        from matplotlib.colors import to_rgba

        rgb = np.array([to_rgba(style.CATEGORY_COLORS.get(lb, style.GAP_COLOR))[:3] for lb in labels],
                       dtype=np.float32)
        for d in range(bins.devices.size):
            mine = np.flatnonzero(bins.row_device == bins.devices[d])
            top, bottom = y_rows + mine.min(), y_rows + mine.max() + 1
            cat, idle = dominant(bins.gaps[d])
            img = np.zeros((1, bins.n_cols, 4), dtype=np.float32)
            img[0, :, :3] = rgb[cat]
            img[0, :, 3] = _shade(idle, 0.08, 0.75)
            ax.imshow(img, extent=(x0, x1, bottom, top), aspect="auto", interpolation="nearest",
                      origin="upper", zorder=1)

        # Kernels (and copies) as bars: one image, five image rows per stream row.
        if n_rows:
            img = np.zeros((n_rows * 5, bins.n_cols, 4), dtype=np.float32)
            memop = _rgba(style.MEMOP_COLOR, _shade(bins.memop, 0.2, 1.0))
            kern = _rgba(style.KERNEL_COLOR, _shade(bins.busy, 0.2, 1.0))
            layer = np.where((bins.busy > 0)[..., None], kern, memop)
            for sub in BAR_ROWS:  # three image rows, not a loop over kernels
                img[sub::5] = layer
            ax.imshow(img, extent=(x0, x1, total, y_rows), aspect="auto", interpolation="nearest",
                      origin="upper", zorder=2)

        # NVTX ranges.
        axes_px = bins.n_cols
        for lev, (_, s, e, names) in enumerate(levels):
            xs = (np.maximum(s, window.start) - window.origin) / scale
            xe = (np.minimum(e, window.end) - window.origin) / scale
            y = lev * lev_h
            px = (xe - xs) / (x1 - x0) * axes_px
            ax.broken_barh(list(zip(xs.tolist(), (xe - xs).tolist())), (y + 0.12 * lev_h, 0.76 * lev_h),
                           facecolors=style.RANGE_COLOR, edgecolors="white", zorder=2,
                           linewidth=0.6 if np.median(px) > 4 else 0)  # white edges part wide ranges
            for i in np.flatnonzero(px > 6.5 * np.char.str_len(names.astype(str)) + 10)[:40]:
                ax.text((xs[i] + xe[i]) / 2, y + 0.5 * lev_h, str(names[i]), ha="center", va="center",
                        fontsize=8.5, color="white", clip_on=True, zorder=3)

        ticks = [lev * lev_h + 0.5 * lev_h for lev in range(n_lev)] + [y_rows + r + 0.5 for r in range(n_rows)]
        tick_labels = [label for label, *_ in levels] + _row_labels(src, bins.rows)
        ax.set_yticks(ticks, tick_labels)
        ax.tick_params(axis="y", length=0)
        ax.hlines(y_rows + np.arange(1, n_rows), x0, x1, color="#E4E4E4", linewidth=0.5, zorder=0)
        if n_lev:
            ax.axhline(y_rows - 0.05, color="#9A9A9A", linewidth=0.8, zorder=3)
        for d in range(1, bins.devices.size):
            first = np.flatnonzero(bins.row_device == bins.devices[d]).min()
            ax.axhline(y_rows + first, color="#555555", linewidth=1.0, zorder=3)
        ax.grid(axis="x", color="#DDDDDD", linewidth=0.5)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        what = f"range {src.range_filter}" if src.range_filter else f"{focused}" if focused \
            else f"the {src.ranges_word}" if src.analysis.member_act.size else "the trace"
        ax.set_xlabel(f"time since the first GPU work of {what} ({unit})")

        title = f"{src.label}: GPU timeline" + (f" of {src.range_filter}" if src.range_filter else "")
        if focused:
            title += f" of {focused if len(focused) <= FOCUS_CHARS else focused[:FOCUS_CHARS - 1] + '…'}"
        if spec != (None, None):
            a, b = window.start - window.origin, window.end - window.origin
            title += f", window {fmt_ns(a) if a else 0} to {fmt_ns(b)}"
        fig.text(0.1 / WIDTH_IN, 1 - 0.12 / height, title, ha="left", va="top", fontsize=12,
                 fontweight="bold")
        subtitle = _subtitle(src, bins, n_kernels)
        if focused:
            subtitle = "the range name with the most to win (--range or --window for another view) · " + subtitle
        fig.text(0.1 / WIDTH_IN, 1 - 0.42 / height, subtitle, ha="left",
                 va="top", fontsize=9.5, color="#333333")
        fig.legend(handles=_legend(bins, labels), loc="upper left", ncol=9, frameon=False,
                   bbox_to_anchor=(left_in / WIDTH_IN - 0.01, 1 - 0.62 / height),
                   handlelength=1.4, columnspacing=1.4, fontsize=9)
        return fig


def _legend(bins: TimelineBins, labels: Sequence[str]) -> list[Any]:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=style.KERNEL_COLOR, label="kernel")]
    if (bins.memop > 0).any():
        handles.append(Patch(facecolor=style.MEMOP_COLOR, label="memcpy/memset"))
    present = bins.gaps.sum(axis=(0, 2)) > 0 if bins.devices.size else np.zeros(len(labels), bool)
    for i, lb in enumerate(labels):
        if present[i]:
            name = "gap" if lb == "gap" else f"{lb} gap"
            handles.append(Patch(facecolor=style.CATEGORY_COLORS.get(lb, style.GAP_COLOR), alpha=0.8,
                                 label=name))
    return handles
