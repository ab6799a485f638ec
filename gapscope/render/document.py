"""What a report document holds (`gapscope report`, Markdown or HTML): one part per trace, each
with its result, label, `gapscope run` sweep and figures, under one title.

    doc = Document((Part("torch_decode.sqlite", result, figures={"timeline": "r_files/timeline.png"}),))
    render(doc, "markdown", file)

A single AnalysisResult renders as a document of one part (``document_of``), so
`gapscope analyze -f markdown|html` and `gapscope report` write the same report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gapscope.analysis.result import AnalysisResult


@dataclass(frozen=True)
class Part:
    """One trace's part of a report. ``result`` is None for a `gapscope run` sweep saved without
    its analysis; ``sweep`` holds gapscope.analysis.sweep.SweepRow rows; ``figures`` maps
    'timeline', 'histogram', 'crossover' to what the format embeds (Markdown: a path relative to
    the report; HTML: the figure's SVG markup); ``read_seconds``: how long reading the trace
    took, for the header (None for a saved result); ``cached``: the result came from the result
    cache (gapscope.cache), which the header says instead."""

    label: str
    result: AnalysisResult | None = None
    sweep: Sequence[Any] = ()
    calibration: dict[str, Any] | None = None
    figures: Mapping[str, str] = field(default_factory=dict)
    read_seconds: float | None = None
    cached: bool = False


@dataclass(frozen=True)
class Document:
    """A report on one trace or several."""

    parts: tuple[Part, ...]

    @property
    def title(self) -> str:
        """The trace's label, or how many traces the report covers."""
        return self.parts[0].label if len(self.parts) == 1 else f"{len(self.parts)} traces"


def document_of(result: AnalysisResult | Document | None, *, title: str | None = None, sweep: Sequence[Any] = (),
                calibration: dict[str, Any] | None = None, figures: Mapping[str, str] | None = None,
                read_seconds: float | None = None, cached: bool = False) -> Document:
    """``result`` as a Document: itself, or one part with these options (``title`` defaults to
    the trace's name)."""
    if isinstance(result, Document):
        return result
    if title is None:
        title = str(result.trace.get("name")) if result is not None else "gapscope"
    return Document((Part(title, result, sweep, calibration, figures or {}, read_seconds, cached),))


def write_part(part: Part, limit: int, **writers: Callable[[Any], None]) -> None:
    """Hand each step of a part (:func:`steps`) to the writer of its kind: ``header``,
    ``figure``, ``sweep``, ``section``, ``folded``."""
    for kind, value in steps(part, limit):
        writers[kind](value)


def steps(part: Part, limit: int) -> Iterator[tuple[str, Any]]:
    """What one part of a report shows, in the order of gapscope.render.sections.DOCUMENT:
    ("header", result), ("figure", key) for the figures it has, ("sweep", rows), ("section",
    Section) and ("folded", [Section, ...]) for the whole-trace tables."""
    from gapscope.render import sections

    result = part.result
    if result is not None:
        result = result.listed(sections.READ_AGAIN)  # a report of several traces is not rendered through render()
        yield "header", result
    for step in sections.DOCUMENT:
        if step[0] == "figure":
            if step[1] in part.figures:
                yield "figure", step[1]
        elif step[0] == "sweep":
            if part.sweep:
                yield "sweep", part.sweep
        elif result is None:
            continue
        elif step[0] == "section":
            section = sections.build(step[1], result, limit)
            if section is not None:
                yield "section", section
        else:
            yield "folded", [s for s in (sections.build(k, result, limit) for k in step[1]) if s is not None]
