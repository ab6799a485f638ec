"""Figures of a gapscope analysis: the timeline, the gap-duration histogram, the sweep crossover.

Plotting never changes the analysis: ``source`` loads a trace, a result JSON or a `gapscope run`
output with the library's own analysis, ``binning`` prepares plain arrays, and ``timeline``,
``histogram`` and ``crossover`` each draw one figure from them. matplotlib (the optional extra
``plot``: ``pip install -e '.[plot]'`` in a checkout) is imported only when a figure is drawn, on
the Agg canvas.

    from gapscope.plots import write_plots
    write_plots("traces/torch_decode.sqlite", "plots/", ("png", "svg"))
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gapscope.errors import GapscopeError

if TYPE_CHECKING:
    from gapscope.analysis.pipeline import Progress
    from gapscope.plots.source import PlotSource

__all__ = ["write_plots", "draw_source", "figure_paths", "FIGURES", "FORMATS"]

FORMATS = ("png", "svg")
#: The figures, by the name of the file each is written to (``timeline.png``, ...).
FIGURES = ("timeline", "histogram", "crossover")


def figure_paths(out_dir: str | Path, formats: Sequence[str]) -> list[Path]:
    """Every file a drawing into ``out_dir`` may write (for the check that none is an input)."""
    return [Path(out_dir) / f"{figure}.{fmt}" for figure in FIGURES for fmt in formats]


def write_plots(source: str | Path, out_dir: str | Path, formats: Sequence[str] = ("png",), *,
                range_name: str | Sequence[str] | None = None, window: str | None = None,
                count_memops: bool = False, progress: Progress | None = None) -> list[Path]:
    """Draw every figure ``source`` allows into ``out_dir`` (created if missing) and return the
    files written (``progress``: told the steps of a trace's analysis, as
    gapscope.analysis.pipeline.opened_analysis tells them).

    ``source``: an nsys SQLite export (timeline.*, histogram.*, and crossover.* when its ranges
    are a `gapscope run` sweep), a `gapscope run` output folder or its run.json (crossover.*,
    plus the timeline and histogram of its gapscope_run.sqlite), or a result JSON of
    `gapscope analyze` (crossover.* of a sweep only: a saved result holds no gap list).
    ``range_name``: draw only the NVTX ranges with this name or glob (or any of several, as
    `analyze --range` takes them); ``window``: the timeline's ``START:END``
    (gapscope.plots.window); ``count_memops``: analyze as `analyze --count-memops` does.
    """
    from gapscope.plots.source import load_source
    from gapscope.plots.style import check_formats, require_matplotlib
    from gapscope.plots.window import parse_window

    fmts = check_formats(formats)
    spec = parse_window(window)
    require_matplotlib()
    src = load_source(source, range_name, count_memops=count_memops, progress=progress)
    return draw_source(src, out_dir, fmts, spec)


def draw_source(src: PlotSource, out_dir: str | Path, formats: Sequence[str],
                spec: tuple[int | None, int | None] = (None, None)) -> list[Path]:
    """Draw the figures of an already loaded PlotSource into ``out_dir``."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise GapscopeError(f"{out}: exists and is not a folder")
    if not src.has_trace and not src.sweep:
        raise GapscopeError(
            f"{src.label}: nothing to draw: a saved analysis result holds no gap list (give the "
            "trace .sqlite for the timeline and histogram) and its ranges are not a `gapscope run` sweep")
    if not src.has_trace and spec != (None, None):
        raise GapscopeError("--window applies to a trace's timeline; this source has no trace")
    from gapscope.files import folder, together

    written: list[Path] = []
    with together():  # every figure, or none (and no folder made for them) when one fails
        folder(out)
        if src.has_trace:
            from gapscope.plots.histogram import draw_histogram
            from gapscope.plots.timeline import draw_timeline

            written += draw_timeline(src, out / "timeline", formats, spec)
            if src.analysis.range_gaps.length.size:
                written += draw_histogram(src, out / "histogram", formats)
        if src.sweep:
            from gapscope.plots.crossover import draw_crossover

            written += draw_crossover(src, out / "crossover", formats)
    return written
