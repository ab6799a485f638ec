"""The CuPy micro-kernel workload that `gapscope run` records under nsys.

`kernels` holds the RawKernels and their calibration, `paths` the eager, multi-stream and
graph-replay launch paths, `timing` the same paths timed without a profiler. CuPy is imported
lazily (inside functions), so this package imports on machines without CuPy or a GPU.
"""

from __future__ import annotations

PATHS: tuple[str, ...] = ("eager", "multistream", "graph")
KERNEL_KINDS: tuple[str, ...] = ("spin", "memory", "empty")


def range_name(path: str, kernel_us: float | None) -> str:
    """NVTX range name of one path: `<path>`, or `<path>/k=<us>us` inside a duration sweep."""
    if kernel_us is None:
        return path
    return f"{path}/k={kernel_us:g}us"
