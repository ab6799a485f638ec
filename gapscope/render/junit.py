"""JUnit XML for a Comparison: one test case per range/device/stream/launch API and metric, and
one per entry found on one side only.

A regression is a ``<failure>`` whose message says what changed in words, and so is a missing
entry under ``--missing fail``; other entries found on one side only are ``<skipped>``; ok,
improved, within-noise and info verdicts pass (within-noise and info ones, and notes, say so in ``<system-out>``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, TextIO

from gapscope.regression.comparison import Comparison, Verdict
from gapscope.regression.thresholds import METRICS

# Characters XML 1.0 forbids; NVTX names are arbitrary text.
_INVALID_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _x(text: str) -> str:
    return _INVALID_XML.sub("\ufffd", text)


def _runs(n: int) -> str:
    return "1 run" if n == 1 else f"median of {n} runs"


def _details(v: Verdict) -> str:
    if v.metric is None:
        return "\n".join([f"scope: {v.scope}", f"entry: {v.key}", f"what changed: {v.words}",
                          f"runs with it: baseline {v.baseline_runs}, current {v.current_runs}"])
    m = METRICS[v.metric]
    lines = [
        f"scope: {v.scope}",
        f"entry: {v.key}",
        f"what changed: {v.words}",
        f"metric: {v.metric} ({m.meaning})",
        f"baseline: {m.format(v.baseline)} ({_runs(v.baseline_runs)})",
        f"current: {m.format(v.current)} ({_runs(v.current_runs)})",
        f"delta: {m.format_delta(v.delta)}"
        + ("" if v.relative_delta is None else f" ({v.relative_delta * 100:+.1f}%)"),
        f"threshold: {v.threshold} (allowed {'rise' if m.worse > 0 else 'fall'} {_allowed(v)})",
        f"noise (largest max-min spread of either side): {m.format_delta(v.noise).lstrip('+')}",
    ]
    return "\n".join(lines)


def _allowed(v: Verdict) -> str:
    m = METRICS[v.metric]  # type: ignore[index]
    if m.unit == "verdict":
        return "none: the verdict may not get worse"
    return m.format_delta(v.limit).lstrip("+")


def _name(v: Verdict) -> str:
    return f"{v.key}: {METRICS[v.metric].short if v.metric else 'presence'}"


def render(comparison: Comparison, file: TextIO, **_: Any) -> None:
    """Write JUnit XML: a ``<testsuite name="gapscope compare">`` with one ``<testcase>`` per
    verdict (classname ``gapscope.compare.<scope>``, name ``<entry>: <metric>``, the metric
    as users type it: ``gap_fraction``, ``gpu_span``; ``<entry>: presence`` for an entry found on
    one side only)."""
    tests = len(comparison.verdicts)
    failures = len(comparison.regressions)
    skipped = sum(v.metric is None and not v.failed for v in comparison.verdicts)
    root = ET.Element(
        "testsuites",
        name="gapscope compare", tests=str(tests), failures=str(failures), errors="0",
        skipped=str(skipped), time="0",
    )
    suite = ET.SubElement(
        root, "testsuite",
        name="gapscope compare", tests=str(tests), failures=str(failures), errors="0",
        skipped=str(skipped), time="0",
    )
    props = ET.SubElement(suite, "properties")
    for side, sources in (("baseline", comparison.baseline_sources), ("current", comparison.current_sources)):
        for src in sources:
            ET.SubElement(props, "property", name=side, value=_x(src))
    for t in comparison.thresholds:
        ET.SubElement(props, "property", name="threshold", value=_x(t))
    for v in comparison.ordered():
        case = ET.SubElement(
            suite, "testcase",
            classname=f"gapscope.compare.{v.scope}", name=_x(_name(v)), time="0",
        )
        if v.failed:
            failure = ET.SubElement(case, "failure", message=_x(v.summary()), type=v.status)
            failure.text = _x(_details(v))
        elif v.status in ("new", "missing"):
            side = "current" if v.status == "new" else "baseline"
            ET.SubElement(case, "skipped", message=_x(f"{v.scope} {v.key} only in {side} ({v.status}): {v.words}"))
        elif v.status in ("within-noise", "info") or v.note:
            out = ET.SubElement(case, "system-out")
            out.text = _x(v.summary() + "\n" + _details(v))
    if comparison.warnings:
        err = ET.SubElement(suite, "system-err")
        err.text = _x("\n".join(f"warning: {w}" for w in comparison.warnings))
    ET.indent(root)
    file.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    file.write(ET.tostring(root, encoding="unicode"))
    file.write("\n")
