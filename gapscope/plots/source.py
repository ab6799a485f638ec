"""What a path given to `gapscope plot` / `gapscope report` holds, loaded once.

* a trace (any format gapscope.inputs resolves): analyzed here (`gapscope.analysis.run_analysis`), keeping the raw
  arrays the timeline and the histogram draw, and the gap categories of the device-level and
  range-level gaps (`gapscope.analysis.attribution.Attributor`);
* a result JSON of `gapscope analyze` (schema ``gapscope.analysis/N``): tables only, it holds no
  gap list;
* a `gapscope run` result (``run.json``, schema ``gapscope-run/1``) or its output folder: the
  sweep rows, and the folder's ``gapscope_run.sqlite`` when it is there.

A trace whose NVTX ranges are named ``<path>/k=<us>us`` (what `gapscope run` pushes) with two or
more kernel times is a sweep too: its rows come from `gapscope.analysis.sweep.sweep_rows` over the
analysis's range instances (without the untraced timing, which only run.json holds).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gapscope.analysis.result import AnalysisResult
from gapscope.errors import GapscopeError
from gapscope.inputs import resolve

if TYPE_CHECKING:
    from gapscope.analysis.pipeline import AnalysisArrays, Progress
    from gapscope.analysis.sweep import SweepRow

_SWEEP_NAME = re.compile(r"^(?P<path>[^/]+)/k=(?P<us>[0-9.eE+-]+)us$")


@dataclass
class PlotSource:
    """Everything the figures and the report read; nothing here is computed for drawing."""

    label: str
    result: AnalysisResult | None = None
    analysis: AnalysisArrays | None = None  # the trace's raw arrays
    device_gap_cats: np.ndarray | None = None  # IdleCategory per analysis.device_gaps gap
    range_gap_cats: np.ndarray | None = None  # IdleCategory per analysis.range_gaps gap
    sweep: list[SweepRow] = field(default_factory=list)
    calibration: dict[str, Any] | None = None
    range_filter: str | None = None  # the --range patterns, as shown in titles

    @property
    def has_trace(self) -> bool:
        return self.analysis is not None

    @property
    def ranges_word(self) -> str:
        """What the trace's ranges are called (gapscope.catalog's formats): ``NVTX ranges``, or
        ``ranges`` for a PyTorch profiler trace's annotations."""
        from gapscope.catalog import FORMATS

        fmt = self.result.trace.get("format") if self.result is not None else None
        return next((f.ranges for f in FORMATS if f.name == fmt), "NVTX ranges")


Patterns = str | Sequence[str] | None


def _patterns(ranges: Patterns) -> tuple[str, ...]:
    if ranges is None:
        return ()
    return (ranges,) if isinstance(ranges, str) else tuple(ranges)


def analyze_trace(path: Path, ranges: Patterns, label: str | None = None, count_memops: bool = False,
                  progress: Progress | None = None) -> PlotSource:
    """Load and analyze a trace, keeping the arrays and the gap categories (``progress``: as
    gapscope.analysis.pipeline.opened_analysis calls it)."""
    from gapscope.analysis.pipeline import analysis_of

    analysis = analysis_of(path, ranges=_patterns(ranges), count_memops=count_memops, progress=progress)
    return source_from_analysis(analysis, label or path.name, ranges)


def source_from_analysis(analysis: AnalysisArrays, label: str, ranges: Patterns = None) -> PlotSource:
    """A PlotSource over an analysis already made (by `gapscope analyze --plot`, say)."""
    src = PlotSource(label=label, result=analysis.result, analysis=analysis,
                     device_gap_cats=analysis.device_gaps.category,
                     range_gap_cats=analysis.range_gaps.category,
                     range_filter=", ".join(_patterns(ranges)) or None)
    src.sweep = sweep_from_ranges(analysis.result.ranges)
    return src


def sweep_from_ranges(ranges: list[dict[str, Any]]) -> list[SweepRow]:
    """Sweep rows from range instances named ``<path>/k=<us>us``; empty unless the names hold
    at least two kernel times and an ``eager`` path."""
    from gapscope.analysis.sweep import sweep_rows

    found: dict[str, set[float]] = {}
    for r in ranges:
        m = _SWEEP_NAME.match(str(r["name"]))
        if m:
            try:
                found.setdefault(m["path"], set()).add(float(m["us"]))
            except ValueError:
                continue
    kernel_us = sorted(set().union(*found.values())) if found else []
    if len(kernel_us) < 2 or "eager" not in found:
        return []
    counts = [r["kernels"] for r in ranges if _SWEEP_NAME.match(str(r["name"])) and r.get("kernels")]
    n_kernels = int(statistics.median(counts)) if counts else 1
    return sweep_rows(ranges, [], list(found), kernel_us, n_kernels)


def _run_source(data: dict[str, Any], where: Path, ranges: Patterns, count_memops: bool) -> PlotSource:
    from gapscope.analysis.sweep import SweepRow, with_untraced_speedups

    try:
        rows = with_untraced_speedups([SweepRow(**r) for r in data.get("rows", [])])
    except TypeError as exc:
        raise GapscopeError(f"{where}: run.json rows do not match this gapscope ({exc})") from None
    folder = where.parent if where.is_file() else where
    trace = folder / "gapscope_run.sqlite"
    if trace.exists():
        src = analyze_trace(trace, ranges, f"{folder.name}/{trace.name}", count_memops)
    else:
        if _patterns(ranges):
            raise GapscopeError(f"--range needs the trace; {trace} is not there")
        src = PlotSource(label=folder.name)
        analysis = folder / "analysis.json"
        if analysis.exists():
            from gapscope.analysis.result import load_result

            src.result = load_result(analysis)
    src.sweep = rows
    src.calibration = data.get("calibration")
    return src


def load_source(path: str | Path, ranges: Patterns = None, *, count_memops: bool = False,
                progress: Progress | None = None) -> PlotSource:
    """Read a trace, an analysis result JSON, a run.json or a `gapscope run` output folder;
    ``ranges``: only the NVTX ranges matching this name or glob (or these); ``progress``: told
    the steps of a trace's analysis."""
    found = resolve(path).require("trace", "analysis", "run", command="plot and report")
    if found.kind == "run":
        return _run_source(found.json(), found.path, ranges, count_memops)
    if found.kind == "analysis":
        if _patterns(ranges):
            raise GapscopeError("--range applies to traces, not to a saved result JSON")
        result = AnalysisResult.from_dict(found.json(), found.given)
        return PlotSource(label=found.label, result=result, sweep=sweep_from_ranges(result.ranges))
    return analyze_trace(found.path, ranges, count_memops=count_memops, progress=progress)
