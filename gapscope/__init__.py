"""gapscope: measure CUDA launch gaps in Nsight Systems and PyTorch profiler traces.

The public API (docs/api.md) is what this package exports; everything else may change:

    import gapscope
    a = gapscope.analyze("traces/torch_decode.sqlite")   # an Analysis: DataFrames of the result
    a.by_name, a.gaps, a.kernels, a.verdicts
    gapscope.load("result.json")                         # a saved result
    gapscope.compare("baseline.json", a)                 # regression verdicts, a DataFrame

The names are imported on first use (gapscope.api), so ``import gapscope`` loads neither
pandas, numpy nor pyarrow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Analysis", "Fleet", "GapscopeError", "__version__", "analyze", "compare", "load"]

if TYPE_CHECKING:
    from gapscope.api import Analysis, Fleet, analyze, compare, load
    from gapscope.errors import GapscopeError

_API = ("Analysis", "Fleet", "analyze", "compare", "load")


def __getattr__(name: str) -> Any:
    if name in _API:
        from gapscope import api

        return getattr(api, name)
    if name == "GapscopeError":
        from gapscope.errors import GapscopeError

        return GapscopeError
    raise AttributeError(f"module 'gapscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
