"""The launch paths timed without a profiler, with CUDA events on stream 0.

Untraced time per kernel = event time from before the path's first launch to after its last
kernel (the join, for multistream), divided by N. Beside the trace's gap fraction it shows how
much the profiler itself stretches the launches.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from gapscope.run.workload.paths import Workload


@dataclass
class PathTiming:
    """Untraced time per kernel of one path at one kernel duration, over `repeat` runs."""

    path: str
    kernel_us: float | None
    n_kernels: int
    per_kernel_us: list[float]

    @property
    def median_us(self) -> float:
        return statistics.median(self.per_kernel_us)

    @property
    def spread_us(self) -> float:
        """max - min over the repeats."""
        return max(self.per_kernel_us) - min(self.per_kernel_us)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["median_us"] = self.median_us
        d["spread_us"] = self.spread_us
        return d


def time_path(wl: Workload, path: str, repeat: int = 3) -> list[float]:
    """Per-kernel microseconds of `repeat` untraced runs of one path (already warmed up)."""
    cp = wl.cp
    out = []
    for _ in range(repeat):
        wl.synchronize()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(wl.stream)
        wl.run(path)
        stop.record(wl.stream)
        stop.synchronize()
        wl.synchronize()
        out.append(cp.cuda.get_elapsed_time(start, stop) * 1000.0 / wl.n_kernels)
    return out


def time_paths(workloads: Sequence[tuple[float | None, Workload]], paths: Sequence[str],
               repeat: int = 3, progress: Callable[[str], None] | None = None) -> list[PathTiming]:
    """Time every path of every workload untraced; warm-up first."""
    results = []
    for us, wl in workloads:
        wl.warm_up(paths)
        for path in paths:
            if progress:
                progress(f"{path} k={us}")
            results.append(PathTiming(path, us, wl.n_kernels, time_path(wl, path, repeat)))
    return results
