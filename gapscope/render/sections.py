"""The sections of an analysis report, defined once as data: a title, columns and rows of cells.

The terminal table (gapscope.render.table) and the Markdown report (gapscope.render.markdown)
draw the same sections; each decides only how a cell looks (colour, code spans, escaping).
Cells are plain strings, :class:`Share` (a gap fraction, which the table colours by the design
text's criterion) or :class:`Name` (text from the trace, never markup).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union

from gapscope.analysis.domains import is_library_domain
from gapscope.analysis.range_names import instance_name
from gapscope.analysis.result import AnalysisResult
from gapscope.analysis.verdicts import reading
from gapscope.render.layout import Column
from gapscope.catalog import CATEGORIES, CATEGORY_NAMES as CATEGORY_LABELS, FORMATS
from gapscope.render.units import fmt_count, fmt_ns, fmt_pct, fmt_share, fmt_speedup
from gapscope.text import name as display_name

#: The order of a report document (Markdown, HTML): ("figure", key), ("section", builder key),
#: ("sweep",) for a `gapscope run` sweep, ("folded", builder keys) for the whole-trace tables.
DOCUMENT = (("figure", "timeline"), ("section", "by_name"), ("section", "domains"), ("section", "idle"),
            ("section", "communication"), ("section", "payoff"),
            ("figure", "histogram"), ("sweep",), ("section", "top_gaps"), ("section", "launch"),
            ("folded", ("devices", "streams", "ranges")))
FOLDED_TITLE = "Devices, streams and range instances"


@dataclass(frozen=True)
class Share:
    """A gap fraction cell."""

    value: float | None

    def __str__(self) -> str:
        return fmt_pct(self.value)


@dataclass(frozen=True)
class Name:
    """A name from the trace (range, kernel, API): shown as text, never interpreted."""

    text: str

    def __str__(self) -> str:
        """The name as shown: printable, cut at gapscope.text.NAME_MAX characters."""
        return display_name(self.text)


Cell = Union[str, Share, Name]


@dataclass(frozen=True)
class Section:
    """One table of the report. ``key`` names it (``by_name``, ``ranges``, ``devices``, ...)."""

    key: str
    title: str
    columns: tuple[Column, ...]
    rows: list[list[Cell]] = field(default_factory=list)
    note: str | None = None


#: The timeline figures; on a narrow terminal the gap share, its time and span, the typical gap
#: and the typical kernel (the design text's criterion) stay longest.
STATS_COLUMNS = (
    Column("kernels", priority=2, short="kern"), Column("span", priority=1), Column("busy", priority=3),
    Column("gap", priority=1), Column("gap %"), Column("gaps", priority=3), Column("p50", priority=1),
    Column("p90", priority=4), Column("p99", priority=3), Column("max gap", priority=2, short="max"),
    Column("kernel p50", priority=1, short="k p50"),
)
READING = Column("reading", False, wrap=True)


def stats_cells(r: dict[str, Any]) -> list[Cell]:
    """The timeline figures of a result row, in STATS_COLUMNS order."""
    return [fmt_count(r["kernels"]), fmt_ns(r["gpu_span_ns"]), fmt_ns(r["busy_ns"]), fmt_ns(r["gap_ns"]),
            Share(r["gap_fraction"]), fmt_count(r["gap_count"]), fmt_ns(r["gap_p50_ns"]),
            fmt_ns(r["gap_p90_ns"]), fmt_ns(r["gap_p99_ns"]),
            fmt_ns(r["gap_max_ns"]) if r["gap_count"] else "-", fmt_ns(r["kernel_median_ns"])]


#: Each trace format (the JSON's ``trace.format``) as a report header names it, and what its
#: ranges are called.
FORMAT_WORDS = {f.name: f.words for f in FORMATS}
FORMAT_RANGES = {f.name: f.ranges for f in FORMATS}


def _with_work(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["kernels"] > 0]


def _folded(result: AnalysisResult, row: dict[str, Any]) -> bool:
    """True for a row of a library's NVTX domain, folded into the domains section (unless the
    analysis was asked for some domains, which are then shown as they are)."""
    return not result.options.get("domain_filter") and is_library_domain(row.get("domain"))


#: The row sections the builders read more than once, made into lists of dicts once per report
#: (AnalysisResult.listed); the range instances are picked by their fields instead (:func:`ranges`).
READ_AGAIN = ("by_name", "devices", "streams")


def _values(rows: Any, name: str) -> list[Any]:
    """One field of every row: a RowTable's column as Python values (no row made), a list's
    ``row.get(name)``."""
    values = getattr(rows, "values", None)
    return values(name) if values is not None else [r.get(name) for r in rows]


def top_indices(gap_ns: list[Any], candidates: list[int], limit: int) -> list[int]:
    """The ``limit`` candidates with the most gap time, most first (the earlier on a tie): the
    order every "top N" of a report is listed in."""
    if limit <= 0:
        return []
    return heapq.nsmallest(limit, candidates, key=lambda c: (-(gap_ns[c] or 0), c))


def top_rows(rows: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The ``limit`` rows with the most gap time, most first (the earlier on a tie)."""
    return [rows[i] for i in top_indices([r["gap_ns"] for r in rows], list(range(len(rows))), limit)]


#: The range names a report shows with ``--limit 0`` (which hides the range instances and keeps
#: the summary by name).
NAMES_AT_LIMIT_0 = 20


def names_limit(limit: int) -> int:
    """How many range names a report shows for ``--limit limit``: as many, but with 0 (no range
    instances) the summary's NAMES_AT_LIMIT_0."""
    return limit if limit > 0 else NAMES_AT_LIMIT_0


def label(row: dict[str, Any]) -> str:
    """A range name as the tables show it: ``[domain] name`` outside the default domain."""
    return f"[{row['domain']}] {row['name']}" if row.get("domain") else str(row["name"])


def shown_names(result: AnalysisResult, limit: int) -> tuple[list[dict[str, Any]], int]:
    """(the by-name rows a report shows, how many it leaves out): rows with GPU work (all rows
    when none has any) outside library domains, the ``limit`` with the most gap time."""
    rows = [r for r in result.by_name if not _folded(result, r)]
    rows = _with_work(rows) or rows
    shown = top_rows(rows, names_limit(limit))
    return shown, len(rows) - len(shown)


def left_out(left: int, what: str) -> str:
    """A title's tail saying that ``left`` rows were left out, the ``what`` shown being those with the
    most gap time (empty when none was)."""
    return f"; the {what} with the most gap time, {left:,} left out: --limit N or --format json for more" \
        if left else ""


def ranges_word(result: AnalysisResult) -> str:
    """What the trace's ranges are: ``NVTX ranges``, or for a PyTorch profiler trace ``ranges``
    (its record_function and ProfilerStep annotations; gapscope.catalog's formats)."""
    fmt = result.trace.get("format")
    return FORMAT_RANGES.get(fmt, "NVTX ranges") if isinstance(fmt, str) else "NVTX ranges"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def by_name(result: AnalysisResult, limit: int = 20) -> Section | None:
    """The range names with the most gap time (``limit``, most first), with their readings."""
    if not result.by_name:
        return None
    shown, left = shown_names(result, limit)
    if not shown:
        return None
    own = [r for r in result.by_name if not _folded(result, r)]  # libraries' names are counted in their section
    return Section(
        "by_name", f"{_capital(ranges_word(result))} by name ({len(_with_work(own)):,} of {len(own):,} "
        f"launched GPU work{left_out(left, f'{len(shown):,}')})",
        (Column("name", False), Column("count", priority=2, short="n"), *STATS_COLUMNS, READING),
        [[Name(label(r)), fmt_count(r["count"]), *stats_cells(r), reading(r)] for r in shown],
    )


def domains(result: AnalysisResult) -> Section | None:
    """Libraries' NVTX domains (CCCL, TSL, NCCL, ...), one line each, with their counts."""
    folded = [r for r in result.by_name if _folded(result, r)]
    if not folded:
        return None
    per: dict[str, list[int]] = {}
    for r in folded:
        c = per.setdefault(r["domain"], [0, 0, 0])
        c[0] += 1
        c[1] += r["count"]
    for kernels, domain in zip(_values(result.ranges, "kernels"), _values(result.ranges, "domain")):
        if kernels > 0 and domain in per:  # per holds folded domains only
            per[domain][2] += 1
    return Section(
        "domains", "Library NVTX domains (not in the tables above; --domain NAME shows one)",
        (Column("domain", False), Column("names"), Column("ranges"), Column("with GPU work", short="w/ work")),
        [[Name(d), fmt_count(n), fmt_count(k), fmt_count(w)] for d, (n, k, w) in per.items()],
    )


def ranges(result: AnalysisResult, limit: int) -> Section | None:
    """The ``limit`` range instances with GPU work and the most gap time, most first."""
    # Chosen from three fields, so that only the rows shown are made (a RowTable of 380,000
    # ranges makes a dict a row when read).
    rows = result.ranges
    kernels, domain = _values(rows, "kernels"), _values(rows, "domain")
    folded = {d: _folded(result, {"domain": d}) for d in set(domain)}  # a few domains, many rows
    work = [i for i, (k, d) in enumerate(zip(kernels, domain)) if k > 0 and not folded[d]]
    shown = [rows[i] for i in top_indices(_values(rows, "gap_ns"), work, limit)]
    if not shown:
        return None
    # Without emit_nvtx's tail (unless --no-normalize): the id tells instances apart, not its
    # op_id, which would take the place of what the name says; a step marker keeps its number.
    normalize = result.options.get("normalize_names", True)
    names = [label({**r, "name": instance_name(r["name"])}) if normalize else label(r) for r in shown]
    return Section(
        "ranges", f"Range instances ({len(work):,} with GPU work{left_out(len(work) - len(shown), f'{len(shown):,}')})",
        (Column("id"), Column("name", False), Column("thread", priority=4, short="tid"), *STATS_COLUMNS),
        [[str(r["id"]), Name(n), str(r["thread"]), *stats_cells(r)] for r, n in zip(shown, names)],
    )


def scope_words(result: AnalysisResult) -> str:
    """What the device and stream rows cover: ``whole trace``, or the time window analyzed."""
    return "window" if isinstance(result.options.get("window"), dict) else "whole trace"


def window_words(window: Any) -> str:
    """A result's ``options.window`` for people: ``2 s to 2.3 s, counted from the first GPU
    activity``."""
    start, end = window.get("start_ns"), window.get("end_ns")
    if start is None and end is None:
        text = "all of it"
    elif start is None:
        text = f"the first {fmt_ns(end)}"
    elif end is None:
        text = f"from {fmt_ns(start)} to the end"
    else:
        text = f"{fmt_ns(start)} to {fmt_ns(end)}"
    return f"{text}, counted from the first GPU activity"


def devices(result: AnalysisResult) -> Section | None:
    """The whole trace's timeline per device (or the window's), with its reading."""
    if not result.devices:
        return None
    return Section("devices", f"Devices ({scope_words(result)})", (Column("device", short="dev"), *STATS_COLUMNS, READING),
                   [[str(r["device"]), *stats_cells(r), reading(r)] for r in result.devices])


def streams(result: AnalysisResult) -> Section | None:
    """The whole trace's timeline per (process, device, stream)."""
    if not result.streams:
        return None
    # Streams with no busy time (copies only, while copies are not counted as busy) would be rows
    # of zeros: the title counts them instead (the JSON has their rows).
    working, quiet = [], []
    for r in result.streams:
        (working if r["gpu_span_ns"] > 0 or r["kernels"] > 0 else quiet).append(r)
    title = f"Streams ({scope_words(result)})"
    if working and quiet:
        copies = "copies only" if all(r.get("memops", 0) > 0 for r in quiet) else "no busy time"
        title = (f"Streams ({scope_words(result)}; {len(quiet):,} more with {copies}, not listed"
                 f"{': --count-memops counts copies as busy' if copies == 'copies only' else ''})")
    return Section("streams", title,
                   (Column("pid", priority=3), Column("device", priority=2, short="dev"), Column("stream"),
                    *STATS_COLUMNS),
                   [[str(r["pid"]), str(r["device"]), str(r["stream"]), *stats_cells(r)] for r in working or result.streams])


#: Gap categories on a narrow terminal (gapscope.catalog): launch and host always, unknown first
#: out; short headers.
IDLE_PRIORITY = {c.name: c.priority for c in CATEGORIES if c.priority}
IDLE_SHORT = {c.name: c.short for c in CATEGORIES if c.short}


def idle(result: AnalysisResult, limit: int = 20) -> Section | None:
    """Why the GPU sat idle: the shown range names' and each device's gap time split by
    category, and its CUDA Graph ceiling."""
    shown, left = shown_names(result, limit)
    # A timeline without gap time has nothing to explain: its row would be dashes.
    labelled: list[tuple[Cell, dict[str, Any]]] = [
        (Name(f"{label(r)} (x{r['count']})"), r) for r in shown
        if "gap_by_category_ns" in r and r["kernels"] > 0 and r["gap_ns"] > 0]
    labelled += [(f"device {r['device']}", r) for r in result.devices if "gap_by_category_ns" in r and r["gap_ns"] > 0]
    if not labelled:
        return None
    rows: list[list[Cell]] = []
    for timeline, r in labelled:
        cats = r["gap_by_category_ns"]
        rows.append([timeline, fmt_ns(r["gap_ns"]), *(fmt_share(cats.get(c, 0), r["gap_ns"]) for c in CATEGORY_LABELS),
                     fmt_speedup(r.get("graph_ceiling_speedup"))])
    more = f" {left:,} more range names in --format json." if left else ""
    return Section(
        "idle", "Why the GPU sat idle (share of gap time)",
        (Column("timeline", False), Column("gap"), *(Column(c, priority=IDLE_PRIORITY.get(c, 0), short=IDLE_SHORT.get(c))
                                                  for c in CATEGORY_LABELS),
         Column("graph ceiling", short="ceiling")),
        rows, note="Categories and the ceiling are defined in docs/metrics.md (\"Gap attribution\", "
                   f"\"CUDA Graph payoff\").{more}",
    )


#: The figures of a range name's communication row that say what work it covers: names nested
#: around the same work (``c10d::alltoall_base_`` > ``record_param_comms`` > ``nccl:all_to_all``)
#: have the same ones and are shown once.
SAME_WORK = ("count", "kernels", "comm_kernels", "comm_ns", "compute_ns", "exposed_comm_ns", "gpu_span_ns")


def communication(result: AnalysisResult, limit: int = 20) -> Section | None:
    """Communication against compute, per device and for the ``limit`` range names with the most
    communication time (most first; names nested around the same work shown once, SAME_WORK):
    time in collective libraries' kernels, in everything else, and the communication nothing
    else overlapped (exposed), as a share of the span."""
    devices = [r for r in result.devices if "comm_ns" in r]
    if not devices:
        return None
    names = [r for r in result.by_name if r.get("comm_kernels") and not _folded(result, r)]
    same: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in names:  # one entry per range name with communication: a few
        same.setdefault(tuple(r.get(k) for k in SAME_WORK), []).append(r)
    work = list(same.values())
    keep = sorted(range(len(work)), key=lambda i: (-work[i][0]["comm_ns"], i))[:names_limit(limit)]
    labelled: list[tuple[Cell, dict[str, Any]]] = [(f"device {r['device']}", r) for r in devices]
    labelled += [(Name(f"{label(work[i][0])} (x{work[i][0]['count']})"
                       + (f" +{len(work[i]) - 1} nested" if len(work[i]) > 1 else "")), work[i][0]) for i in keep]
    rows: list[list[Cell]] = [
        [timeline, fmt_count(r["comm_kernels"]), fmt_ns(r["comm_ns"]), fmt_ns(r["compute_ns"]),
         fmt_ns(r["comm_ns"] - r["exposed_comm_ns"]), fmt_ns(r["exposed_comm_ns"]),
         fmt_share(r["exposed_comm_ns"], r["gpu_span_ns"])] for timeline, r in labelled]
    nested = [f"{label(work[i][0])} also stands for {', '.join(label(r) for r in work[i][1:])}"
              for i in keep if len(work[i]) > 1]
    once = f" The same work under nested names is shown once (+N nested): {'; '.join(nested)}." if nested else ""
    more = f" {len(work) - len(keep):,} more range names in --format json." if len(work) > len(keep) else ""
    ranks = f"; {len(devices)} devices: --ranks pairs their collectives" if len(devices) > 1 else ""
    return Section(
        "communication", f"Communication and compute (collective libraries' kernels{ranks})",
        (Column("timeline", False), Column("comm kernels", priority=2, short="kern"), Column("comm"),
         Column("compute", priority=1), Column("overlapped", priority=2, short="hidden"), Column("exposed"),
         Column("exposed % of span", short="exp %")),
        rows, note="Exposed: communication that nothing else on the device overlapped; docs/metrics.md, "
                   f"\"Communication and compute\".{once}{more}",
    )


def launch(result: AnalysisResult) -> Section | None:
    """Launch overhead per launch API."""
    if not result.launch:
        return None
    return Section(
        "launch", "Launch calls",
        (Column("api", False), Column("calls", priority=1), Column("host p50"),
         Column("host p90", priority=2), Column("launch->start p50", priority=1, short="->start p50"),
         Column("p90", priority=3), Column("calls/s", priority=2)),
        [[Name(r["api"]), fmt_count(r["calls"]), fmt_ns(r["host_median_ns"]), fmt_ns(r["host_p90_ns"]),
          fmt_ns(r["latency_median_ns"]), fmt_ns(r["latency_p90_ns"]), f"{r['per_second']:,.0f}"]
         for r in result.launch],
    )


def payoff(result: AnalysisResult) -> Section | None:
    """Measured graph speedups of eager/graph range twins (steady state, traced) beside the eager
    range's predicted untraced speedup and its ceiling."""
    if not result.payoff:
        return None
    return Section(
        "payoff", "CUDA Graph payoff: measured (traced) beside predicted (untraced) and the ceiling",
        (Column("eager range", False, short="eager"), Column("graph range", False, short="graph"),
         Column("eager span", priority=1), Column("graph span", priority=1), Column("measured"),
         Column("predicted", priority=1), Column("ceiling")),
        [[Name(p["eager"]), Name(p["graph"]), fmt_ns(p["eager_span_ns"]), fmt_ns(p["graph_span_ns"]),
          fmt_speedup(p["measured_speedup"]), fmt_speedup(p.get("predicted_speedup")),
          fmt_speedup(p["ceiling_speedup"])] for p in result.payoff],
        note="Spans are steady state (one-off gaps left out); measured is under the tracer, predicted "
             "without it (docs/metrics.md, \"Predicted CUDA Graph speedup\").",
    )


def since_start(result: AnalysisResult, t: int) -> int:
    """A time of the trace as reports show it: from the trace's start (``trace.start_ns``; a
    result saved before it was recorded shows the trace's own clock)."""
    start = result.trace.get("start_ns")
    return t - start if isinstance(start, int) else t


def top_gaps(result: AnalysisResult) -> Section | None:
    """The longest device-level gaps with what surrounds them; ``at``: when, from the trace's
    start."""
    if not result.top_gaps:
        return None
    return Section(
        "top_gaps", f"Longest gaps ({len(result.top_gaps)})",
        (Column("gap"), Column("category", False), Column("device", priority=3, short="dev"),
         Column("stream", priority=2, short="str"), Column("at", priority=2), Column("before", False, priority=3),
         Column("after", False, priority=1), Column("launched by", False, priority=1, short="by")),
        [[fmt_ns(g["gap_ns"]), g["category"], str(g["device"]), str(g["stream"]),
          fmt_ns(since_start(result, g["start_ns"])),
          Name(g["before"]) if g["before"] else "-", Name(g["after"]),
          Name(g["launched_by"]) if g["launched_by"] else "-"] for g in result.top_gaps],
    )


@dataclass(frozen=True)
class Reading:
    """One timeline's verdict: ``label`` (a range name or ``device N``), ``count`` (its
    instances, None for a device), its gap fraction, what it is a share of, and the reading."""

    label: Cell
    count: int | None
    share: Share
    detail: str | None
    reading: str

    def after_label(self) -> str:
        """What follows the label: `` (x64)`` for a range name's instances."""
        return f" (x{self.count})" if self.count is not None else ""

    def after_share(self) -> str:
        """What follows the share: `` of the GPU span in gaps (100 ms of 107 ms)``."""
        return " of the GPU span in gaps" + (f" ({self.detail})" if self.detail else "")


def readings(result: AnalysisResult, limit: int = 20) -> list[Reading]:
    """The verdict of each range name a report shows (:func:`shown_names`) that launched GPU
    work, or of each device without ranges."""
    rows = _with_work(shown_names(result, limit)[0])
    if rows:
        return [Reading(Name(label(r)), r["count"], Share(r["gap_fraction"]),
                        f"{fmt_ns(r['gap_ns'])} of {fmt_ns(r['gpu_span_ns'])}", reading(r)) for r in rows]
    return [Reading(f"device {r['device']}", None, Share(r["gap_fraction"]), None, reading(r)) for r in result.devices]


def facts(result: AnalysisResult, read_seconds: float | None = None, cached: bool = False) -> list[tuple[str, str]]:
    """The report's header facts: (what, value) for the trace's format (and how long reading it
    took, ``read_seconds``, when it was read just now rather than a saved result loaded; "cached
    result" with ``cached``: the result cache's, the trace neither read nor analyzed), the
    nsys version and export schema (a PyTorch profiler trace: its Kineto schema), graph
    tracing, GPUs and gapscope version."""
    tr = result.trace
    out = []
    fmt = tr.get("format")
    if fmt:
        took = ", cached result" if cached else f", read in {fmt_ns(read_seconds * 1e9)}" if read_seconds is not None else ""
        out.append(("format", f"{FORMAT_WORDS.get(fmt, fmt)}{took}"))
    window = result.options.get("window")
    if isinstance(window, dict):
        out.append(("window", window_words(window)))
    if fmt == "kineto":
        out.append(("Kineto schema", str(tr.get("export_schema") or "?")))
    else:
        out += [("nsys", str(tr.get("nsys_version") or "?")), ("export schema", str(tr.get("export_schema") or "?"))]
    gpus = ", ".join(sorted(set((tr.get("gpus") or {}).values())))
    if not gpus:  # the export names none: say how many it used
        n = len(result.devices)
        gpus = f"not recorded ({n} device{'s' if n != 1 else ''})" if n else "?"
    return [*out, ("CUDA graphs traced", str(tr.get("graph_trace") or "?")), ("GPU", gpus),
            ("gapscope", str(result.gapscope_version))]


#: Header facts written "what value" rather than "what: value".
SPACED_FACTS = frozenset({"nsys", "export schema", "Kineto schema", "gapscope"})


def fact_text(what: str, value: str) -> str:
    """One header fact as text: ``nsys 2025.3.2.0``, ``GPU: NVIDIA H200``."""
    return f"{what}{' ' if what in SPACED_FACTS else ': '}{value}"


#: Every section builder by key; those taking ``limit`` say so in their signature.
BUILDERS: dict[str, Callable[..., Section | None]] = {
    "by_name": by_name, "domains": domains, "ranges": ranges, "devices": devices, "streams": streams,
    "idle": idle, "communication": communication, "launch": launch, "payoff": payoff, "top_gaps": top_gaps,
}
#: The builders that take the ``limit`` of rows shown.
LIMITED = frozenset({"by_name", "ranges", "idle", "communication"})


def build(key: str, result: AnalysisResult, limit: int) -> Section | None:
    """The section ``key`` of ``result``, showing at most ``limit`` rows where it has many."""
    return BUILDERS[key](result, limit) if key in LIMITED else BUILDERS[key](result)
