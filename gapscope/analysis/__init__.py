"""The analysis core: intervals and keys, NVTX ranges and their work, timeline metrics, gap
attribution, launch statistics, the graph payoff and verdicts, joined by ``pipeline`` into
one immutable ``result``.

``analyze``, ``analysis_of``, ``run_analysis`` and ``AnalysisArrays`` are imported from
``gapscope.analysis.pipeline`` on first use, so importing a submodule stays cheap.
"""

from __future__ import annotations

from typing import Any

_PIPELINE = ("AnalysisArrays", "analysis_of", "analyze", "run_analysis")

__all__ = list(_PIPELINE)


def __getattr__(name: str) -> Any:
    if name in _PIPELINE:
        from gapscope.analysis import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'gapscope.analysis' has no attribute {name!r}")
