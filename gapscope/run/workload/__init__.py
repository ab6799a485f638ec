"""The CuPy micro-kernel workload that `gapscope run` records under nsys.

`kernels` holds the RawKernels and their calibration, `paths` the eager, multi-stream and
graph-replay launch paths, `timing` the same paths timed without a profiler, `cases` the CUDA
Graph cases of docs/cases.md (default stream, graph pool, graph updates, piecewise graphs,
instantiation cost, two GPUs), `graphs` the CUDA graph calls CuPy lacks (through cuda-bindings)
and `ladder` the pure batch-size arithmetic of graph pools. CuPy is imported lazily (inside functions), so this
package imports on machines without CuPy or a GPU.
"""

from __future__ import annotations

from gapscope.analysis.sweep import range_name  # noqa: F401  (the one naming rule, re-exported)
from gapscope.errors import GapscopeError

PATHS: tuple[str, ...] = ("eager", "multistream", "graph")
CASES: tuple[str, ...] = ("default-stream", "graph-pool", "graph-update", "piecewise",
                          "instantiate", "multi-gpu")
KERNEL_KINDS: tuple[str, ...] = ("spin", "memory", "empty")


def case_range(case: str, variant: str, kernel_us: float | None) -> str:
    """NVTX range name of one variant of a case: `<case>/<variant>`, `/k=<us>us` in a sweep."""
    return range_name(f"{case}/{variant}", kernel_us)


def parse_us_list(text: str) -> list[float]:
    """'2,10,50' -> [2.0, 10.0, 50.0]; every value must be a positive number."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise GapscopeError(f"--kernel-us wants numbers separated by commas, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise GapscopeError(f"--kernel-us wants positive microseconds, got {text!r}")
    return values


def split_paths(paths: list[str]) -> tuple[list[str], list[str]]:
    """(launch paths, cases) of a --paths list, each in the given order."""
    return [p for p in paths if p in PATHS], [p for p in paths if p in CASES]
