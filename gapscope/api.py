"""The Python API: what ``import gapscope`` offers notebooks and scripts (docs/api.md).

    import gapscope
    a = gapscope.analyze("traces/torch_decode.sqlite")
    a.by_name            # one row per NVTX range name, as the JSON's by_name
    a.gaps               # every gap: its categories, the kernels either side, its range
    a.save("torch_decode.json")
    gapscope.compare("baseline.json", a)   # the regression verdicts, as a DataFrame

A thin layer over the library: :func:`analyze` runs the pipeline inside
``gapscope.analysis.pipeline.opened_analysis`` and makes the per-gap and per-activity tables
(gapscope.analysis.tables) before the trace is closed; :func:`load` reads a saved result;
:func:`compare` hands result dicts to ``gapscope.regression.comparison.compare``. The DataFrames of
the result's sections hold the JSON's numbers (docs/schema.md), with ``gap_by_category_ns``
spread into one column per category (``gap_launch_ns``, ``gap_host_ns``, ...).

Nothing here imports pandas, numpy or pyarrow at import time: they load when an analysis runs
or a DataFrame is asked for, so ``import gapscope`` stays cheap.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from gapscope.errors import GapscopeError

if TYPE_CHECKING:
    import pandas as pd

    from gapscope.analysis.pipeline import AnalysisArrays
    from gapscope.analysis.result import AnalysisResult
    from gapscope.analysis.tables import ActivityTables
    from gapscope.fleet.result import FleetResult

PathLike = Union[str, "os.PathLike[str]"]
#: What one side of :func:`compare` may be: a path (result JSON, trace, `gapscope run` folder),
#: an Analysis or Fleet, a result dict, or a list of those (several runs, compared by median).
Side = Union[PathLike, "Analysis", "Fleet", dict, Sequence[Any]]

#: The keys of each result section's rows, first in its DataFrame (the STATS of docs/schema.md
#: follow); an empty section still has these columns.
_KEYS = {
    "ranges": ("id", "name", "domain", "pid", "thread", "start_ns", "end_ns", "depth"),
    "by_name": ("name", "domain", "count"),
    "devices": ("device",),
    "streams": ("pid", "device", "stream"),
    "launch": ("api", "calls", "host_median_ns", "host_p90_ns", "host_mean_ns", "latency_median_ns",
               "latency_p90_ns", "per_second"),
    "payoff": ("eager", "graph", "eager_span_ns", "graph_span_ns", "measured_speedup", "ceiling_speedup"),
    "top_gaps": ("start_ns", "gap_ns", "category", "device", "stream", "before", "after", "launched_by"),
}
_STATS_SECTIONS = ("ranges", "by_name", "devices", "streams")
#: The SPREAD objects of a fleet's sections (docs/schema.md), spread into ``<field>_<key>`` columns.
_SPREADS = {"spread": ("gap_fraction", "gap_ns", "gpu_span_ns"), "steps": ("gap_ns", "gpu_span_ns")}
_SPREAD_KEYS = ("min", "median", "max", "min_rank", "max_rank")
#: The columns of the verdicts table (Analysis.verdicts).
VERDICT_COLUMNS = ("level", "name", "domain", "id", "device", "verdict", "reading", "gap_fraction", "gap_ns",
                   "graph_ceiling_speedup")


def _patterns(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """A name or glob, or several, as a tuple."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


def _nanoseconds(value: int | str | None, what: str) -> int | None:
    """A time given as nanoseconds or as text with a unit (``"1ms"``)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        from gapscope.plots.window import parse_time

        return parse_time(value, what)
    raise GapscopeError(f"{what}: {value!r} is not a time (nanoseconds, or text such as '1ms')")


def _section_frame(rows: list[dict[str, Any]] | None, section: str) -> pd.DataFrame:
    """A result section's rows as a DataFrame: the JSON's fields as columns, the category split
    spread into ``gap_<category>_ns`` columns (docs/schema.md names every field)."""
    import pandas as pd

    from gapscope.analysis.metrics import STATS_FIELDS
    from gapscope.analysis.tables import CATEGORY_COLUMNS

    keys = [*_KEYS.get(section, ()), *(STATS_FIELDS if section in _STATS_SECTIONS else ())]
    if not rows:
        return pd.DataFrame(columns=keys)
    frame = pd.DataFrame(rows)
    if "gap_by_category_ns" in frame:
        split = pd.DataFrame(frame.pop("gap_by_category_ns").tolist(), index=frame.index)
        split.columns = [f"gap_{c}_ns" for c in split.columns]
        split = split[[c for c in CATEGORY_COLUMNS if c in split.columns]].fillna(0).astype("int64")
        frame = pd.concat([frame, split], axis=1)
    return frame


def _refuse_overwriting(out: PathLike, inputs: Sequence[str]) -> None:
    """GapscopeError when ``out`` is one of the inputs (or inside an input folder)."""
    from gapscope.outputs import refuse_overwriting

    refuse_overwriting([i for i in inputs if i], [out])


def _write_json(result: Any, path: PathLike, inputs: Sequence[str]) -> Path:
    """Write a result's JSON (what `gapscope analyze --format json` writes) to ``path``, with the
    command line's checks and errors (gapscope.outputs)."""
    from gapscope.outputs import output_file
    from gapscope.render.json import render

    _refuse_overwriting(path, inputs)
    with output_file(path) as fh:
        render(result, fh)
    return Path(path)


def _plain(text: str) -> str:
    """A terminal report as a repr: no trailing blanks on its lines, no trailing newline."""
    return "\n".join(line.rstrip() for line in text.rstrip("\n").splitlines())


def _section_property(section: str, doc: str) -> Any:
    """A read-only property giving the result section ``section`` as a DataFrame."""

    def frame(self: Any) -> pd.DataFrame:
        return self._section(section)

    frame.__doc__ = doc
    return property(frame)


class _Result:
    """What an Analysis and a Fleet share: the result object behind them, its JSON, its report."""

    _result: Any

    def to_dict(self) -> dict[str, Any]:
        """The result's JSON object (docs/schema.md)."""
        return self._result.to_dict()

    def to_json(self) -> str:
        """The result as JSON text: what `gapscope analyze --format json` prints."""
        from gapscope.render.json import dumps

        return dumps(self._result.to_dict()) + "\n"

    def _text(self, **options: Any) -> str:
        """The terminal report (the table renderer's ``options``) fitted to the terminal's width."""
        import io
        import shutil

        from gapscope.render import render

        out = io.StringIO()
        render(self._result, "table", out, width=shutil.get_terminal_size((100, 24)).columns, **options)
        return _plain(out.getvalue())


class Analysis(_Result):
    """One trace's analysis, as DataFrames (docs/api.md). Made by :func:`analyze` (every
    table) or :func:`load` (a saved result: the result's tables, not ``gaps`` or ``kernels``).

    Each property returns a new DataFrame object over the analysis's data: add columns to it
    freely; call ``.copy()`` before changing values in place (pandas before 3.0 would share
    them). The figures are defined once, in docs/metrics.md.
    """

    def __init__(self, result: AnalysisResult, tables: ActivityTables | None = None,
                 arrays: AnalysisArrays | None = None, source: str | None = None) -> None:
        self._result = result
        self._tables = tables
        self._arrays = arrays
        self._source = source
        self._frames: dict[str, pd.DataFrame] = {}

    # -- what the result says ------------------------------------------------------------
    @property
    def trace(self) -> dict[str, Any]:
        """The trace's facts: path, name, format, nsys_version, export_schema, graph_trace, gpus."""
        return dict(self._result.trace)

    @property
    def options(self) -> dict[str, Any]:
        """The options the trace was analyzed with (docs/schema.md, ``options``)."""
        return dict(self._result.options)

    @property
    def warnings(self) -> list[str]:
        """What the analysis has to say about the trace (graph-level tracing, no NVTX, ...)."""
        return list(self._result.warnings)

    def _section(self, section: str) -> pd.DataFrame:
        if section not in self._frames:
            self._frames[section] = _section_frame(getattr(self._result, section), section)
        return self._frames[section].copy(deep=False)

    ranges = _section_property("ranges", "One row per NVTX range instance, in start order (the JSON's ``ranges``).")
    by_name = _section_property("by_name", "One row per (domain, range name): spans and gaps summed over its "
                                "instances.")
    devices = _section_property("devices", "One row per GPU: the whole trace's timeline on it.")
    streams = _section_property("streams", "One row per (process, device, stream): the whole trace's timeline on it.")
    launches = _section_property("launch", "One row per launch API: calls, CPU time per call, launch-to-start "
                                 "latency (the JSON's ``launch``).")
    payoff = _section_property("payoff", "Eager/graph range twins: the measured graph speedup beside the eager "
                               "range's ceiling.")
    top_gaps = _section_property("top_gaps", "The longest device-level gaps (``top`` of :func:`analyze`), "
                                 "longest first.")

    @property
    def answer(self) -> pd.DataFrame:
        """The answer the reports start with (docs/metrics.md, "The answer"): one row per range
        that matters (or device, without ranges): its verdict and reading, the predicted CUDA
        Graph speedup with its range and the ceiling, any measured replay, the one-off gap time
        left out and how many of its instances ran eagerly beside replayed ones."""
        if "answer" not in self._frames:
            import pandas as pd

            self._frames["answer"] = pd.DataFrame(self._result.answers())
        return self._frames["answer"].copy(deep=False)

    def answer_text(self) -> str:
        """The answer as the terminal report prints it: a few lines per range."""
        from gapscope.analysis import answer

        return "\n".join(line for entry in self._result.answers() for line in answer.lines(entry))

    @property
    def verdicts(self) -> pd.DataFrame:
        """The verdict of every range name, device and range instance (``level``: ``name``,
        ``device``, ``range``), with its reading, gap fraction, gap time and graph ceiling."""
        if "verdicts" not in self._frames:
            import pandas as pd

            parts = []
            for level, section in (("name", "by_name"), ("device", "devices"), ("range", "ranges")):
                frame = self._section(section)
                if len(frame):
                    parts.append(frame.assign(level=level).reindex(columns=list(VERDICT_COLUMNS)))
            table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(VERDICT_COLUMNS))
            self._frames["verdicts"] = table.astype({"id": "Int64", "device": "Int64"})
        return self._frames["verdicts"].copy(deep=False)

    # -- every gap and every activity ------------------------------------------------------
    def _table(self, name: str) -> pd.DataFrame:
        if self._tables is None:
            if self._arrays is not None:
                raise GapscopeError(f"Analysis.{name}: analyzed with tables=False; gapscope.analyze(TRACE) "
                                    "makes them")
            where = f" ({self._source})" if self._source else ""
            raise GapscopeError(f"Analysis.{name}: this analysis was loaded from a saved result{where}, which "
                                f"holds the result's tables but not every gap and kernel: "
                                f"gapscope.analyze(TRACE) gives them")
        return getattr(self._tables, name).copy(deep=False)

    @property
    def gaps(self) -> pd.DataFrame:
        """Every device-level gap: device, stream, start, length, largest category and the time
        per category, the activities before and after, the call that launched the one after and
        the range it falls in (docs/schema.md, "Tables"). Not in a loaded result."""
        return self._table("gaps")

    @property
    def kernels(self) -> pd.DataFrame:
        """Every activity (kernels, graph executions, copies, memsets) with its launching call
        and its range (docs/schema.md, "Tables"). Not in a loaded result."""
        return self._table("kernels")

    def write_tables(self, folder: PathLike) -> list[Path]:
        """Write ``gaps.parquet`` and ``kernels.parquet`` into ``folder`` (created if missing),
        as `gapscope analyze --format parquet -o DIR` does; returns the files written."""
        from gapscope.render import render
        from gapscope.render.parquet import FILES

        self._table("gaps")
        _refuse_overwriting(folder, [str(self._result.trace.get("path", ""))])
        render(self._tables, "parquet", Path(folder))
        return [Path(folder) / name for name in FILES.values()]

    # -- the result as JSON (to_dict, to_json) ---------------------------------------------------
    def save(self, path: PathLike) -> Path:
        """Write :meth:`to_json` to ``path`` (never over the trace it came from); returns it.
        :func:`load`, `gapscope analyze`, `gapscope compare` read it back."""
        return _write_json(self._result, path, [str(self._result.trace.get("path", ""))])

    # -- figures -------------------------------------------------------------------------------
    def _plot_source(self) -> Any:
        from gapscope.plots.source import source_from_analysis
        from gapscope.plots.style import require_matplotlib

        if self._arrays is None:
            raise GapscopeError("a loaded result holds no gap list to draw: gapscope.analyze(TRACE) "
                                "keeps what the figures need")
        require_matplotlib()
        return source_from_analysis(self._arrays, str(self._result.trace.get("name")),
                                    self._result.options.get("range_filter") or None)

    def plot_timeline(self, window: str | None = None) -> Any:
        """The timeline figure of `gapscope plot` (a matplotlib Figure): the ranges analyzed, or
        ``window`` (``"10ms:10.4ms"``, from their first GPU work; docs/plots.md). Needs
        matplotlib."""
        from gapscope.plots.timeline import timeline_figure
        from gapscope.plots.window import parse_window

        spec = parse_window(window)
        return timeline_figure(self._plot_source(), spec)

    def plot_histogram(self) -> Any:
        """The gap-duration histogram per range name of `gapscope plot` (a matplotlib Figure).
        Needs matplotlib and range-level gaps."""
        from gapscope.plots.histogram import histogram_figure

        src = self._plot_source()
        if not src.analysis.range_gaps.length.size:
            raise GapscopeError("no NVTX range has a gap between its kernels: there is no histogram to draw")
        return histogram_figure(src)

    # -- display -----------------------------------------------------------------------------
    def __repr__(self) -> str:
        return self._text(keys=("answer", "by_name"))

    def _repr_html_(self) -> str:
        import io

        from gapscope.render import render

        out = io.StringIO()
        render(self._result, "notebook", out)
        return out.getvalue()


class Fleet(_Result):
    """The merged analysis of several traces (docs/fleet.md), as DataFrames of the JSON's
    sections (schema ``gapscope.fleet/2``): ``files``, ``devices`` (one per rank), ``rank_names``,
    ``by_name`` (pooled over ranks), ``spread``, ``steps``, ``stragglers``, ``streams``, and
    ``collectives`` and ``waits`` (empty when no communication kernel ran). A
    SPREAD object (min, median, max, min_rank, max_rank) is spread into ``<field>_<key>``
    columns."""

    SECTIONS = ("files", "devices", "rank_names", "by_name", "spread", "steps", "stragglers", "streams",
                "collectives", "waits")

    def __init__(self, result: FleetResult, inputs: Sequence[str] = ()) -> None:
        self._result = result
        self._inputs = list(inputs)
        self._frames: dict[str, pd.DataFrame] = {}

    @property
    def warnings(self) -> list[str]:
        """What the merge has to say (failed files, ranks with different step counts, ...)."""
        return list(self._result.warnings)

    @property
    def options(self) -> dict[str, Any]:
        """The options the traces were analyzed with."""
        return dict(self._result.options)

    def _section(self, section: str) -> pd.DataFrame:
        if section not in self._frames:
            import pandas as pd

            frame = _section_frame(getattr(self._result, section), section)
            for col in _SPREADS.get(section, ()):
                if col in frame:  # a SPREAD object per row (None where no rank has the figure)
                    spread = pd.DataFrame([v or {} for v in frame.pop(col)], index=frame.index,
                                          columns=list(_SPREAD_KEYS)).add_prefix(f"{col}_")
                    frame = pd.concat([frame, spread], axis=1)
            self._frames[section] = frame
        return self._frames[section].copy(deep=False)

    def __getattr__(self, name: str) -> pd.DataFrame:
        if name in Fleet.SECTIONS:
            return self._section(name)
        raise AttributeError(f"'Fleet' object has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *Fleet.SECTIONS})

    def save(self, path: PathLike) -> Path:
        """Write :meth:`to_json` to ``path`` (never over one of the traces); returns it."""
        return _write_json(self._result, path, [*self._inputs, *(f["path"] for f in self._result.files)])

    def __repr__(self) -> str:
        return self._text()

    def _repr_html_(self) -> str:
        import html

        parts = [f"<h3>gapscope: {len(self._result.files)} traces, {len(self._result.devices)} ranks</h3>"]
        parts += [f"<p>{html.escape(w)}</p>" for w in self._result.warnings]
        for title, section, columns in (
                ("Ranks", "devices", ["rank", "label", "kernels", "gpu_span_ns", "gap_ns", "gap_fraction", "reading"]),
                ("Range names, pooled over ranks", "by_name",
                 ["name", "count", "ranks", "gpu_span_ns", "gap_ns", "gap_fraction"])):
            frame = self._section(section)
            shown = frame[[c for c in columns if c in frame.columns]]
            parts.append(f"<h4>{title}</h4>" + shown.to_html(index=False, escape=True))
        return "\n".join(parts)


def _single(path: str, tables: bool, options: dict[str, Any]) -> Analysis:
    """Analyze one trace (or a `gapscope run` output's), the tables made while it is open."""
    from gapscope.analysis.pipeline import opened_analysis
    from gapscope.inputs import resolve

    found = resolve(path).require("trace", "run", command="gapscope.analyze")
    if found.kind == "run":
        trace = found.run_file("gapscope_run.sqlite")
        if not trace.is_file():
            raise GapscopeError(f"{found.given}: a `gapscope run` output without its trace "
                                "(gapscope_run.sqlite); gapscope.load reads its analysis.json")
        found = resolve(trace)
    with opened_analysis(found.path, all_calls=tables, **options) as arrays:
        made = None
        if tables:
            from gapscope.analysis.tables import tables_of

            made = tables_of(arrays)
    return Analysis(arrays.result, made, arrays, source=found.given)


def _several(paths: list[str], options: dict[str, Any], jobs: int | None, scheduler: str | None) -> Fleet:
    """Analyze several traces on a process pool or a Dask cluster and merge them."""
    from gapscope.fleet.executors import choose_executor
    from gapscope.fleet.merge import analyze_fleet

    fleet = analyze_fleet(paths, choose_executor(len(paths), jobs, scheduler, preload=["gapscope.fleet.merge"]),
                          ranges=options["ranges"], count_memops=options["count_memops"],
                          attribution=options["attribution"], stragglers=options["top"])
    if not fleet.devices:
        raise GapscopeError(f"all {len(paths)} traces failed: " + "; ".join(f["error"] for f in fleet.failed[:3]))
    return Fleet(fleet, paths)


def analyze(path_or_paths: PathLike | Sequence[PathLike], *, ranges: str | Sequence[str] | None = None,
            domains: str | Sequence[str] | None = None, count_memops: bool = False, attribution: bool = True,
            top: int = 10, stall_threshold: int | str | None = None, threads: str = "same",
            normalize: bool = True, tables: bool = True, ranks: bool = False, jobs: int | None = None,
            scheduler: str | None = None) -> Analysis | Fleet:
    """Analyze a trace (any format of docs/formats.md, or a `gapscope run` output) as `gapscope
    analyze` does, and return an :class:`Analysis`; several traces (a list, a folder of exports
    or a glob) return their merged :class:`Fleet`.

    ``ranges``: only NVTX ranges with this name or glob (or any of several); ``domains``: only
    these NVTX domains (``"default"`` for the default one); ``count_memops``: copies count as
    busy; ``attribution``: split every gap into categories; ``top``: longest gaps kept (several
    traces: stragglers per name); ``stall_threshold``: ns, or text such as ``"1ms"``;
    ``threads``: ``"same"`` or ``"process"`` (whose launches a range owns); ``normalize``:
    group PyTorch emit_nvtx op names; ``tables``: make ``gaps`` and ``kernels`` (False saves
    their time on a large trace); ``ranks``: one trace of several GPUs or processes as a Fleet,
    each device a rank (`--ranks`). Several traces take ``jobs`` (worker processes) or
    ``scheduler`` (a Dask address) and the defaults of the single-trace options.
    Errors are a :class:`GapscopeError` whose message is one line.
    """
    from gapscope.inputs import expand

    given = [path_or_paths] if isinstance(path_or_paths, (str, os.PathLike)) else list(path_or_paths)
    if not given:
        raise GapscopeError("gapscope.analyze: no trace given")
    paths = expand([os.fspath(p) for p in given])
    threshold = _nanoseconds(stall_threshold, "stall_threshold")
    if threshold is not None and threshold < 0:
        raise GapscopeError(f"stall_threshold: {stall_threshold!r} is negative")
    options: dict[str, Any] = {"ranges": _patterns(ranges), "domains": _patterns(domains),
                               "count_memops": bool(count_memops), "attribution": bool(attribution),
                               "top": int(top), "threads": threads, "normalize": bool(normalize)}
    if threshold is not None:
        options["stall_threshold_ns"] = threshold
    if len(paths) > 1 or ranks:
        if options["domains"] or threads != "same" or not normalize or threshold is not None:
            raise GapscopeError("domains, threads, stall_threshold and normalize apply to one trace; "
                                "several traces (or ranks=True) take the defaults")
        return _several(paths, options, jobs, scheduler)
    if jobs is not None or scheduler is not None:
        raise GapscopeError("jobs and scheduler spread several traces; one trace is analyzed here")
    return _single(paths[0], tables, options)


def load(path: PathLike) -> Analysis | Fleet:
    """A result saved by :meth:`Analysis.save` or `gapscope analyze --format json` (or a `gapscope
    run` output's analysis.json) as an :class:`Analysis` (without ``gaps`` and ``kernels``: the
    JSON does not hold them), or a saved many-trace result as a :class:`Fleet`."""
    from gapscope.inputs import resolve

    found = resolve(path).require("analysis", "fleet", "run", command="gapscope.load")
    if found.kind == "run":
        saved = found.run_file("analysis.json")
        if not saved.is_file():
            raise GapscopeError(f"{found.given}: a `gapscope run` output without analysis.json")
        found = resolve(saved)
    if found.kind == "fleet":
        from gapscope.fleet.result import FleetResult

        return Fleet(FleetResult.from_dict(found.json()))
    from gapscope.analysis.result import AnalysisResult

    return Analysis(AnalysisResult.from_dict(found.json()), source=found.given)


def _result_dicts(side: Side, what: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(result dicts, their labels) of one side of a comparison."""
    from gapscope.regression.comparison import load_input

    items = list(side) if isinstance(side, (list, tuple)) else [side]
    if not items:
        raise GapscopeError(f"gapscope.compare: no {what} given")
    dicts, labels = [], []
    for item in items:
        if isinstance(item, (Analysis, Fleet)):
            data = item.to_dict()
            label = str(data.get("trace", {}).get("name") or f"{what}[{len(dicts)}]")
        elif isinstance(item, dict):
            data, label = item, f"{what}[{len(dicts)}]"
        elif isinstance(item, (str, os.PathLike)):
            data, label = load_input(item), os.fspath(item)
        else:
            raise GapscopeError(f"gapscope.compare: a {what} is a path, an Analysis, a Fleet or a result dict, "
                                f"not {type(item).__name__}")
        dicts.append(data)
        labels.append(label)
    return dicts, labels


def compare(baseline: Side, current: Side, thresholds: str | Sequence[str] | None = None, *,
            scope: str | None = None, missing: str | None = None, config: PathLike | None = None) -> pd.DataFrame:
    """The regression verdicts of `gapscope compare` (docs/ci.md) as a DataFrame, one row per
    checked (entry, metric): the fields of each verdict (``scope``, ``key``, ``metric``,
    ``status``, ``failed``, ``words``, ``baseline``, ``current``, ``delta``, ``limit``, ...), in
    the comparison's order.

    Each side is a path (result JSON, trace, `gapscope run` folder), an :class:`Analysis` or
    :class:`Fleet`, a result dict, or a list of them (several runs: medians are compared).
    ``thresholds``: specs such as ``"gap_fraction:+0.02"`` over the defaults; ``scope``
    (``"range,device"``) and ``missing`` (``fail``, ``warn``, ``ignore``) as `--scope` and
    `--missing` take them; ``config``: a pyproject.toml whose ``[tool.gapscope.compare]`` table
    applies first (unlike the command, no pyproject.toml is read unless named). The DataFrame's
    ``attrs`` hold the ``headline``, ``passed``, the ``failures`` and ``notes`` in words, the
    ``thresholds`` in force and the ``warnings``.
    """
    import dataclasses

    import pandas as pd

    from gapscope.regression.comparison import Verdict
    from gapscope.regression.comparison import compare as compare_results
    from gapscope.regression.thresholds import resolve_settings

    base, base_labels = _result_dicts(baseline, "baseline")
    cur, cur_labels = _result_dicts(current, "current")
    settings = resolve_settings(_patterns(thresholds), config, scope=scope, missing=missing, search_dir=None)
    comparison = compare_results(base, cur, settings.thresholds, baseline_sources=base_labels,
                                 current_sources=cur_labels, scope=settings.scope, missing=settings.missing)
    columns = [f.name for f in dataclasses.fields(Verdict)]
    frame = pd.DataFrame([v.to_dict() for v in comparison.verdicts], columns=columns)
    frame.attrs.update(headline=comparison.headline(), passed=comparison.passed, failures=comparison.failures(),
                       notes=comparison.notes(), thresholds=list(comparison.thresholds),
                       warnings=list(comparison.warnings))
    return frame
