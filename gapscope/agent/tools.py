"""The MCP server's tools as plain functions (docs/agents.md): each reads its paths through the
one resolver, calls the library as the command of the same name does and returns (structured
content, a short text). Bad input raises the library's GapscopeError, whose message is the line
the command prints after ``gapscope: error:``.

A trace is analyzed through the result cache (gapscope.cache.analysis_result), so an analysis
`gapscope analyze` made is read back, not made again, and one made here serves the command; a
saved result JSON is read as it is. Nothing is written but the cache's entries.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from gapscope import __version__
from gapscope.errors import GapscopeError

#: The most longest gaps one call lists (top_gaps's ``n``).
MAX_GAPS = 100
#: The most failing checks a comparison lists (its ``failures`` in words list them all).
MAX_FAILING = 50

Answer = tuple[dict[str, Any], str]


def _names(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A name or glob, or several, as a tuple (none: empty)."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def _bounded(value: int, name: str, least: int, most: int) -> int:
    """``value`` when it lies in [least, most]; else one line naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise GapscopeError(f"{name}: give a whole number from {least:,} to {most:,}, not {value!r}")
    return value


def _result(path: str, ranges: tuple[str, ...] = (), domains: tuple[str, ...] = (),
            top: int | None = None, window: str | None = None) -> tuple[Any, bool]:
    """(the AnalysisResult of ``path``, whether the result cache held it): a trace analyzed with
    `gapscope analyze`'s options (``ranges`` as --range, ``domains`` as --domain, ``top`` as
    --top; the others their defaults), or a saved result JSON read back (which holds its
    analysis as made: ranges and domains need the trace)."""
    from gapscope.inputs import expand, resolve

    paths = expand([os.path.expanduser(path)])  # a folder or a glob stands for its traces, as on the command line
    if len(paths) > 1:
        raise GapscopeError(f"{path}: {len(paths):,} traces; this tool reads one (gapscope analyze merges "
                            "several into one report across ranks)")
    found = resolve(paths[0]).require("trace", "analysis", command="this tool")
    if found.kind == "trace":
        from gapscope.cache import analysis_result

        options: dict[str, Any] = {"ranges": ranges, "domains": domains}
        if top is not None:
            options["top"] = top
        if window:
            from gapscope.analysis.time_window import parse

            options["window"] = parse(window)
        return analysis_result(found.path, found.format, options)
    for flag, given in (("ranges", ranges), ("domains", domains), ("window", window)):
        if given:
            raise GapscopeError(f"{flag} applies to traces, not to a saved result JSON")
    from gapscope.analysis.result import AnalysisResult

    return AnalysisResult.from_dict(found.json(), found.given), False


def analyze(path: str, ranges: str | Sequence[str] | None = None, domains: str | Sequence[str] | None = None,
            window: str | None = None, limit: int = 20, offset: int = 0) -> Answer:
    """`gapscope analyze PATH [--range R]... [--domain D]... [--window START:END]` as a compact
    summary (gapscope.agent.summary.analysis_summary): ``limit`` range names from ``offset``,
    most gap time first."""
    from gapscope.agent import summary

    limit = _bounded(limit, "limit", 1, summary.MAX_PAGE)
    offset = _bounded(offset, "offset", 0, 2**62)
    result, cached = _result(path, _names(ranges), _names(domains), window=window)
    made = summary.analysis_summary(result, cached, limit, offset)
    return made, summary.analysis_text(made)


def top_gaps(path: str, range: str | None = None, n: int = 10) -> Answer:
    """The ``n`` longest device-level gaps (`gapscope analyze PATH --top N`), of the work of the
    ranges ``range`` names (a name or glob, as --range) or of the whole trace."""
    from gapscope.agent import summary

    n = _bounded(n, "n", 1, MAX_GAPS)
    pattern = _names(range)
    result, cached = _result(path, pattern, top=n)
    if not pattern and result.top_gaps is not None and len(result.top_gaps) > n:  # a saved result holds its own --top
        import dataclasses

        result = dataclasses.replace(result, top_gaps=result.top_gaps[:n])
    made = summary.gaps_summary(result, cached, range)
    return made, summary.gaps_text(made)


def explain(path: str, range: str) -> Answer:
    """One range name (or glob) looked at closely (`gapscope analyze PATH --range RANGE`): its
    rows with the rules of their verdicts, its instances with the most gap time, its payoff, the
    launch APIs of its work and its longest gaps."""
    from gapscope.agent import docs, summary

    if not str(range).strip():
        raise GapscopeError("range: give an NVTX range name or glob (analyze lists them)")
    result, cached = _result(path, (range,))
    made = summary.explanation(result, cached, range, docs.verdict_rules())
    return made, summary.explanation_text(made)


def compare(baseline: str | Sequence[str], current: str | Sequence[str],
            thresholds: str | Sequence[str] | None = None, scope: str | None = None,
            missing: str | None = None) -> Answer:
    """`gapscope compare BASELINE CURRENT [--fail SPEC]... [--scope S] [--missing M]`: the verdict
    in words, the failures, the failing checks. Several paths per side compare medians; like the
    command, ./pyproject.toml's [tool.gapscope.compare] applies when it has that table."""
    from gapscope.regression.comparison import compare_paths
    from gapscope.regression.thresholds import resolve_settings

    base, cur = _names(baseline), _names(current)
    settings = resolve_settings(_names(thresholds), scope=scope, missing=missing)
    comparison = compare_paths([os.path.expanduser(p) for p in base], [os.path.expanduser(p) for p in cur],
                               settings.thresholds, scope=settings.scope, missing=settings.missing)
    data = comparison.to_dict()
    failing = [{**v.to_dict(), "summary": v.summary()} for v in comparison.ordered() if v.failed]
    made = {key: data[key] for key in ("schema", "gapscope_version", "passed", "headline", "failures", "counts",
                                       "baseline", "current", "thresholds", "scope", "missing", "warnings")}
    made.update(failing=failing[:MAX_FAILING], unmatched=data["unmatched"][:MAX_FAILING],
                checks=len(comparison.verdicts), definitions="gapscope://docs/ci.md")
    text = "\n".join([comparison.headline(), *comparison.failures()[:10]])
    return made, text


def formats() -> Answer:
    """What gapscope reads (formats.md's table) and how to record it: the nsys options its
    analysis needs, the export, `gapscope profile`, and torch.profiler's settings."""
    from gapscope.agent import docs
    from gapscope.capture.nsys import export_command, shell_line, trace_options
    from gapscope.inputs import READS

    flags = trace_options()
    profile = ["nsys", "profile", *(w for _, words in flags for w in words), "--export", "sqlite", "-o", "REPORT",
               "python", "PROGRAM.py"]
    made = {
        "gapscope_version": __version__,
        "reads": READS,
        "formats": docs.trace_formats(),
        "record": {
            "gapscope_profile": {
                "nsys": "gapscope profile -o DIR -- python PROGRAM.py ARGS",
                "torch": "gapscope profile --tracer torch -o DIR -- python PROGRAM.py ARGS",
                "skip_warmup": "gapscope profile --capture-range nvtx:NAME -o DIR -- python PROGRAM.py ARGS",
                "what": "records with the options below, exports, analyzes; the trace and result.json land "
                        "in DIR (docs/profile.md)",
            },
            "nsys": {
                "profile": shell_line(profile),
                "export": shell_line(export_command("nsys", "sqlite", "REPORT.sqlite", "REPORT.nsys-rep")),
                "options": [{"option": option, "words": words} for option, words in flags],
                "why": "CUDA calls and NVTX ranges are what the analysis reads; --cuda-graph-trace=node "
                       "records a graph's kernels one by one (the default, graph, hides the gaps inside "
                       "graphs); no CPU sampling or context-switch tracing, whose overhead would lengthen "
                       "the launch gaps measured",
            },
            "torch_profiler": {
                "python": (
                    "from torch.profiler import ProfilerActivity, profile\n"
                    "with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],\n"
                    "             experimental_config=torch._C._profiler._ExperimentalConfig("
                    "enable_cuda_sync_events=True)) as prof:\n"
                    "    run_steps()  # record_function('decode_step') ranges stand for NVTX ranges\n"
                    "prof.export_chrome_trace('trace.pt.trace.json.gz')"),
                "why": "CPU and CUDA activities; record_function ranges (and ProfilerStep#N) are the ranges; "
                       "the stream-wait events (enable_cuda_sync_events) give the dependency category",
            },
        },
        "definitions": docs.uri("formats.md"),
    }
    text = "gapscope reads " + READS + ".\nRecord with: " + made["record"]["nsys"]["profile"] + \
        "\nor: " + made["record"]["gapscope_profile"]["nsys"]
    return made, text
