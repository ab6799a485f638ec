"""The sweep table of `gapscope run`: gap fraction and graph speedup per launch path and kernel time,
from the range rows of an analysis (ranges named ``<path>`` or ``<path>/k=<us>us``, as
`gapscope run` pushes them) and, when `gapscope run` made them, the untraced timings."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def range_name(path: str, kernel_us: float | None) -> str:
    """NVTX range name of one path: `<path>`, or `<path>/k=<us>us` inside a duration sweep."""
    return path if kernel_us is None else f"{path}/k={kernel_us:g}us"


@dataclass
class SweepRow:
    """One path at one kernel time: the trace's gaps beside the untraced timing.

    gap_fraction = gap / GPU span of the path's range (median over its repeats);
    speedup_vs_eager = eager's median span / this path's median span at the same kernel time,
    under the tracer; untraced_speedup_vs_eager = eager's untraced time per kernel / this path's,
    timed without the profiler (the speedup the program gets).
    """

    kernel_us: float
    path: str
    ranges: int
    kernels: int | None
    gap_fraction: float | None
    gap_fraction_min: float | None
    gap_fraction_max: float | None
    span_us: float | None
    traced_per_kernel_us: float | None
    kernel_median_us: float | None
    untraced_per_kernel_us: float | None
    untraced_spread_us: float | None
    speedup_vs_eager: float | None
    untraced_speedup_vs_eager: float | None = None


def _median(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def sweep_rows(ranges: Sequence[dict[str, Any]], timings: Sequence[dict[str, Any]],
               paths: Sequence[str], kernel_us: Sequence[float], n_kernels: int) -> list[SweepRow]:
    """The sweep table's rows from analysis range instances and untraced timings.

    Per-kernel traced time is span / n_kernels (the N launched), not over the trace's kernel
    count, which under graph-level tracing counts a whole graph execution as one.

    Range names are `<path>` for one kernel time and `<path>/k=<us>us` in a sweep; each name's
    instances (one per repeat) are reduced by the median, with min/max of the gap fraction.
    """
    sweep = len(kernel_us) > 1
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in ranges:
        by_name[r["name"]].append(r)
    timed = {(t["path"], t["kernel_us"]): t for t in timings}
    rows: list[SweepRow] = []
    for us in kernel_us:
        key = float(us) if sweep else None
        spans: dict[str, float | None] = {}
        for path in paths:
            inst = by_name.get(range_name(path, key), [])
            gf = [r["gap_fraction"] for r in inst if r.get("gap_fraction") is not None]
            span_ns = _median([r["gpu_span_ns"] for r in inst if r.get("kernels")])
            kernels = _median([r["kernels"] for r in inst])
            kmed = _median([r.get("kernel_median_ns") for r in inst])
            t = timed.get((path, key))
            spans[path] = span_ns
            rows.append(SweepRow(
                kernel_us=float(us), path=path, ranges=len(inst),
                kernels=int(kernels) if kernels is not None else None,
                gap_fraction=_median(gf), gap_fraction_min=min(gf) if gf else None,
                gap_fraction_max=max(gf) if gf else None,
                span_us=span_ns / 1000.0 if span_ns is not None else None,
                traced_per_kernel_us=span_ns / 1000.0 / n_kernels if span_ns else None,
                kernel_median_us=kmed / 1000.0 if kmed is not None else None,
                untraced_per_kernel_us=t["median_us"] if t else None,
                untraced_spread_us=t["spread_us"] if t else None,
                speedup_vs_eager=None,
            ))
        eager = spans.get("eager")
        for row in rows[-len(paths):]:
            span = spans.get(row.path)
            if eager and span:
                row.speedup_vs_eager = eager / span
    return with_untraced_speedups(rows)


def with_untraced_speedups(rows: list[SweepRow]) -> list[SweepRow]:
    """The rows, each with ``untraced_speedup_vs_eager`` filled from the eager row of its kernel
    time (rows saved before the field existed gain it as they are read)."""
    eager = {r.kernel_us: r.untraced_per_kernel_us for r in rows if r.path == "eager"}
    for row in rows:
        base = eager.get(row.kernel_us)
        if base and row.untraced_per_kernel_us:
            row.untraced_speedup_vs_eager = base / row.untraced_per_kernel_us
    return rows
