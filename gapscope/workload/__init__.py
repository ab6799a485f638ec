"""The CuPy micro-kernel workload that `gapscope run` records under nsys.

`kernels` holds the RawKernels and their calibration, `paths` the eager, multi-stream and
graph-replay launch paths, `timing` the same paths timed without a profiler. CuPy is imported
lazily (inside functions), so this package imports on machines without CuPy or a GPU.
"""

from __future__ import annotations

from gapscope.errors import GapscopeError

PATHS: tuple[str, ...] = ("eager", "multistream", "graph")
KERNEL_KINDS: tuple[str, ...] = ("spin", "memory", "empty")


def range_name(path: str, kernel_us: float | None) -> str:
    """NVTX range name of one path: `<path>`, or `<path>/k=<us>us` inside a duration sweep."""
    if kernel_us is None:
        return path
    return f"{path}/k={kernel_us:g}us"


def parse_us_list(text: str) -> list[float]:
    """'2,10,50' -> [2.0, 10.0, 50.0]; every value must be a positive number."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise GapscopeError(f"--kernel-us wants numbers separated by commas, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise GapscopeError(f"--kernel-us wants positive microseconds, got {text!r}")
    return values
