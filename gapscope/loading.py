"""The result `gapscope analyze` reports on, loaded from what it was given (gapscope.inputs): a
trace analyzed (its per-gap and per-activity tables made while it is open, when asked), or the
result the result cache kept of it (gapscope.cache); a `gapscope run` output's trace; a saved
result as the options given ask for it, or refused in one line; several traces analyzed side
by side and merged (gapscope.fleet).

Progress is reported through the callbacks given (the command line's status line and bar);
nothing here writes to a terminal or a file but the result cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from gapscope.cache import ResultCache, kept_result, result_text
from gapscope.errors import GapscopeError
from gapscope.inputs import KIND_WORDS, Input, resolve

#: Options that change the analysis itself, which a saved result cannot redo.
ANALYSIS_OPTIONS = ("top", "count_memops", "attribution")
#: The options of :func:`gapscope.analysis.pipeline.run_analysis` that only a trace honours
#: (a saved result refuses them), with the flag that sets each.
TRACE_ONLY = {"ranges": "--range", "domains": "--domain", "threads": "--threads",
              "stall_threshold_ns": "--stall-threshold", "normalize": "--no-normalize", "window": "--window"}
DEFAULTS = {"threads": "same", "normalize": True}

#: A trace's status line while it is read and analyzed: made for the trace's path, called as
#: each step starts (gapscope.analysis.pipeline.Progress). The command line's shows on a terminal.
Status = Callable[[Path], AbstractContextManager[Any]]


def _no_status(path: Path) -> AbstractContextManager[None]:
    return nullcontext()


class Loaded:
    """One input's result as `gapscope analyze` reports it: analyzed now (with the
    AnalysisArrays behind it, and its ActivityTables when asked), loaded from a saved result,
    or read from the result cache (its compact JSON, made a result only when a format other
    than that JSON needs one). ``cache``: the entry an analysis made now is kept in."""

    def __init__(self, result: Any = None, analysis: Any = None, tables: Any = None, *,
                 cache: ResultCache | None = None, cached_text: str | None = None, label: str = "") -> None:
        self._result = result
        self.analysis = analysis
        self.tables = tables
        self.cache = cache
        self._text = cached_text
        self._label = label
        #: Whether the result came from the result cache (the report's header says so).
        self.cached = cached_text is not None

    @property
    def result(self) -> Any:
        """The result (AnalysisResult or FleetResult); a cached one read without the deep schema
        check: gapscope wrote it and its CRC matched."""
        if self._result is None:
            self._result = kept_result(self._text, self._label)
        return self._result

    @property
    def read_seconds(self) -> float | None:
        """How long the trace took to open and read (None for a saved or cached result)."""
        return self.analysis.read_seconds if self.analysis is not None else None

    def json_text(self) -> str | None:
        """The result's compact JSON, as its JSON renderer writes it: the cached one, or the one
        an analysis made now keeps in the cache; None when there is neither."""
        if self._text is None and self.cache is not None:
            self._text = result_text(self._result)
        return self._text

    def warnings(self) -> list[str]:
        """The result's warnings; for one read from the result cache, taken from its JSON text
        without making the result (the top-level ``warnings`` comes before any row)."""
        if self._result is None and self._text is not None:
            import json

            at = self._text.find('"warnings":')
            if at >= 0:
                try:
                    found = json.JSONDecoder().raw_decode(self._text, at + len('"warnings":'))[0]
                except ValueError:
                    found = None
                if isinstance(found, list):
                    return [str(w) for w in found]
        return list(self.result.warnings)

    @property
    def keeps(self) -> bool:
        """Whether :meth:`keep` keeps anything: an analysis made now, with the cache on."""
        return self.cache is not None and not self.cached

    def keep(self) -> None:
        """Keep the result made now in the result cache."""
        if self.keeps:
            self.cache.keep(self.json_text())


def load(found: Input, options: dict[str, Any], *, given: frozenset[str] = frozenset(), tables: bool = False,
         gaps: bool = False, status: Status = _no_status) -> Loaded:
    """The result of one input with :func:`gapscope.analysis.pipeline.run_analysis`'s
    ``options``: ``tables``, the trace's per-gap and per-activity tables too (:func:`load_tables`);
    ``gaps``, the gap lists kept in the arrays (the figures read them); otherwise
    :func:`load_input`'s, or for a trace the result the result cache keeps of it (what an
    analysis made now is kept there with :meth:`Loaded.keep`). ``given``: the ANALYSIS_OPTIONS
    set on the command line."""
    cache = None  # the result cache (gapscope.cache): for a report of one trace's result alone
    if not tables and not gaps and found.kind == "trace":
        cache = ResultCache.for_trace(found.path, found.format, options)
    text = cache.text() if cache is not None else None
    if text is not None:
        return Loaded(cached_text=text, label=str(found.path))
    if tables:
        return Loaded(*load_tables(found, status=status, **options))
    result, analysis = load_input(found, given, gaps=gaps, status=status, **options)
    return Loaded(result, analysis, cache=cache)


def load_input(found: Input, given: frozenset[str] = frozenset(), *, gaps: bool = True,
               status: Status = _no_status, **options: Any) -> tuple[Any, Any]:
    """(result, the AnalysisArrays behind it or None): a trace is analyzed with
    :func:`gapscope.analysis.pipeline.run_analysis`'s ``options``; a saved analysis or
    many-trace result is loaded; a `gapscope run` output gives its trace's analysis (or its
    saved analysis.json when the trace is not there). ``given``: the ANALYSIS_OPTIONS set on
    the command line, which a saved result must honour or refuse; ``gaps``: keep the gap
    lists in the arrays (run_analysis)."""
    found = run_input(found.require("trace", "analysis", "fleet", "run", command="analyze"))
    if found.kind == "trace":
        from gapscope.analysis.pipeline import analysis_of

        with status(found.path) as progress:
            analysis = analysis_of(found.path, gaps=gaps, progress=progress, **options)
        return analysis.result, analysis
    for key, flag in TRACE_ONLY.items():
        if options.get(key) not in (None, (), DEFAULTS.get(key)):
            raise GapscopeError(f"{flag} applies to traces, not to a saved result JSON")
    attribution = options.get("attribution", True)
    if found.kind == "fleet":
        from gapscope.fleet.result import FleetResult

        if given:
            raise GapscopeError(f"{_flag(sorted(given)[0], attribution)} changes the analysis; a saved "
                                "many-trace result cannot be analyzed again: give the traces")
        return FleetResult.from_dict(found.json(), found.given), None
    from gapscope.analysis.result import AnalysisResult

    saved = AnalysisResult.from_dict(found.json(), found.given)
    return _honoured(saved, given, count_memops=options.get("count_memops", False), attribution=attribution,
                     top=options.get("top", 10)), None


def run_input(found: Input) -> Input:
    """A `gapscope run` output as its trace, or its saved analysis.json when the trace is not
    there; any other input as it is."""
    if found.kind != "run":
        return found
    trace = found.run_file("gapscope_run.sqlite")
    return resolve(trace) if trace.is_file() else resolve(found.run_file("analysis.json"))


def load_tables(found: Input, *, status: Status = _no_status, **options: Any) -> tuple[Any, Any, Any]:
    """(result, the AnalysisArrays behind it, its ActivityTables): the per-gap and per-activity
    tables (gapscope.analysis.tables) need the trace, open while they are made; a saved result
    holds no gap list and is refused."""
    found = run_input(found.require("trace", "analysis", "fleet", "run", command="analyze"))
    if found.kind != "trace":
        raise GapscopeError(f"{found.given}: {KIND_WORDS[found.kind]}, which holds no gap list; --format "
                            "parquet and --gaps-csv need the trace")
    from gapscope.analysis.pipeline import opened_analysis
    from gapscope.analysis.tables import tables_of

    with status(found.path) as progress, \
            opened_analysis(found.path, all_calls=True, progress=progress, **options) as analysis:
        if progress is not None:
            progress("making the tables of", None)
        return analysis.result, analysis, tables_of(analysis)


def _flag(name: str, attribution: bool = True) -> str:
    if name == "attribution":
        return "--attribution" if attribution else "--no-attribution"
    return "--" + name.replace("_", "-")


def _honoured(saved: Any, given: frozenset[str], *, count_memops: bool, attribution: bool, top: int) -> Any:
    """A saved result as the options given ask for it, or one line saying which option it cannot
    honour: it holds the analysis as made, so only a shorter --top list can be cut from it."""
    again = "give the trace to analyze it again"
    if "count_memops" in given and count_memops != bool(saved.options.get("count_memops")):
        raise GapscopeError(f"--count-memops: this saved result was analyzed "
                            f"{'without' if count_memops else 'with'} it; {again}")
    if "attribution" in given and attribution != saved.attributed:
        raise GapscopeError(f"{_flag('attribution', attribution)}: this saved result was analyzed "
                            f"{'without' if attribution else 'with'} gap attribution; {again}")
    if "top" in given and attribution:
        held = saved.top_gaps
        if held is None:
            raise GapscopeError(f"--top: this saved result holds no longest gaps (analyzed without "
                                f"attribution); {again}")
        every = sum(int(d.get("gap_count") or 0) for d in saved.devices)
        if top > len(held) and len(held) < every:
            raise GapscopeError(f"--top {top}: this saved result holds the {len(held)} longest gaps; {again}")
        return dataclasses.replace(saved, top_gaps=held[:top])
    return saved


def executor_for(paths: list[str], jobs: int | None, scheduler: str | None) -> Any:
    """Where several traces are analyzed: a local pool of ``jobs`` processes, or the Dask
    cluster at ``scheduler`` (gapscope.fleet.executors); every input must be a trace (checked
    before any work starts: a saved result among them is a usage error, a bad trace one failed
    file)."""
    from gapscope.fleet.executors import choose_executor

    for p in paths:
        try:
            kind = resolve(p).kind
        except GapscopeError:
            kind = "analysis" if p.endswith(".json") else "trace"
        if kind != "trace":
            what = "several inputs must all be traces" if len(paths) > 1 else \
                "--ranks analyzes a trace (a saved result holds no per-kernel data to pair)"
            raise GapscopeError(f"{p}: {KIND_WORDS[kind]}; {what}")
    return choose_executor(len(paths), jobs, scheduler, preload=["gapscope.fleet.merge"])


def merged(paths: list[str], executor: Any, options: dict[str, Any], *,
           on_done: Callable[[Any], None] | None = None, on_note: Callable[[str], None] | None = None) -> Any:
    """Several traces (or one, each device a rank) analyzed on ``executor`` and merged into a
    FleetResult, with ``options``' range selection, memop counting, attribution and ``top``
    stragglers; GapscopeError (exit status 1) when every trace failed. ``on_done``: called with
    each file's outcome; ``on_note``: with a line about the run (how many files at once)."""
    from gapscope.fleet.merge import analyze_fleet

    fleet = analyze_fleet(paths, executor, ranges=options.get("ranges", ()), count_memops=options["count_memops"],
                          attribution=options["attribution"], stragglers=options["top"], on_done=on_done,
                          on_note=on_note)
    if not fleet.devices:
        raise GapscopeError(f"all {len(paths)} traces failed", 1)
    return fleet
