"""The result JSONs gapscope reads back, checked once for every reader.

``gapscope analyze result.json`` (re-rendering) and ``gapscope compare`` read JSON that a user
may have edited, truncated or damaged. :func:`check_result` is the one check both call before
using a single value: the schema (exactly the versions this gapscope writes), the shape (each
section a list of objects), the type of every field it knows wherever it appears, and the
domain of every figure (a fraction in [0, 1], a time or count >= 0, a finite number). A value
outside its domain is bad input (exit 2), never a regression and never a traceback.
docs/schema.md lists the fields; docs/robustness.md the rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gapscope.catalog import CATEGORY_NAMES
from gapscope.errors import GapscopeError

ANALYSIS_SCHEMA = "gapscope.analysis/3"
FLEET_SCHEMA = "gapscope.fleet/2"
#: Schemas this gapscope writes, by the kind of result (gapscope.inputs names kinds the same) ...
SCHEMAS = {"analysis": ANALYSIS_SCHEMA, "fleet": FLEET_SCHEMA}
#: ... and the schemas it reads (the previous version's still load).
READABLE = {"analysis": ("gapscope.analysis/1", "gapscope.analysis/2", ANALYSIS_SCHEMA),
            "fleet": ("gapscope.fleet/1", FLEET_SCHEMA)}
_RUN_PREFIXES = ("gapscope-run/", "gapscope.run/")

#: Columns every timeline row carries, in report order (docs/schema.md, STATS).
STATS_FIELDS = (
    "kernels", "memops", "memop_ns", "gpu_span_ns", "busy_ns", "gap_ns", "gap_fraction", "gap_count",
    "gap_p50_ns", "gap_p90_ns", "gap_p99_ns", "gap_max_ns", "kernel_median_ns",
)
#: Gap categories of every schema (gapscope.catalog's; schema 1 had no host, stall and setup).
CATEGORIES = CATEGORY_NAMES
#: Fields that hold gap times per category (an object keyed by category).
NESTED = ("gap_by_category_ns", "one_off_by_category_ns")
#: Fields that hold kernels counted by name: a list of [name, count] pairs.
NAME_COUNTS = ("kernel_counts",)
#: The sections every result of a kind holds (lists of objects).
SECTIONS = {
    "analysis": ("ranges", "by_name", "devices", "streams"),
    "fleet": ("files", "devices", "rank_names", "by_name", "spread", "steps", "stragglers", "streams"),
}
#: Sections that may be absent or null.
OPTIONAL_SECTIONS = {"analysis": ("answer", "launch", "payoff", "top_gaps"), "fleet": ()}

_FRACTION = (0.0, 1.0, "a fraction in [0, 1]")
_NONNEG = (0.0, math.inf, "a number >= 0")
_ANY = (-math.inf, math.inf, "a finite number")
#: The domain of each figure, by field name, wherever it appears (null is always allowed:
#: "none", as for a fraction whose denominator is 0).
DOMAINS: dict[str, tuple[float, float, str]] = {
    "gap_fraction": _FRACTION,
    **{f: _NONNEG for f in (
        "kernels", "memops", "memop_ns", "gpu_span_ns", "busy_ns", "gap_ns", "gap_count", "gap_p50_ns",
        "gap_p90_ns", "gap_p99_ns", "gap_max_ns", "kernel_median_ns", "count", "calls", "host_median_ns",
        "host_p90_ns", "host_mean_ns", "per_second", "graph_ceiling_span_ns", "graph_ceiling_speedup", "eager_span_ns",
        "graph_span_ns", "measured_speedup", "ceiling_speedup", "start_ns", "end_ns", "depth",
        "graph_kernels", "graph_replays", "gap_between_replays_ns", "gap_inside_replays_ns",
        "stall_threshold_ns", "graph_predicted_speedup", "graph_predicted_low", "graph_predicted_high",
        "eager_untraced_ns", "graph_predicted_ns", "steady_span_ns", "one_off_ns", "one_off_stalls",
        "tracer_overhead_ns", "replayed_instances", "eager_instances", "first_eager_instance",
        "last_eager_instance", "eager_instance_span_ns", "replayed_instance_span_ns", "wall_ns", "api_calls",
        "api_ns", "other_thread_work", "graph_recordings", "recording_ns", "recording_instances",
        "first_recording_instance", "last_recording_instance")},
    **{f: _ANY for f in ("latency_median_ns", "latency_p90_ns", "excess_gap_ns", "worst_step_excess_ns")},
}
#: Fields that hold an integer (an id that results are matched on), and fields that hold text.
INTEGERS = ("device", "stream", "pid", "thread", "id", "rank")
TEXTS = ("name", "label", "api", "eager", "graph", "category", "before", "after", "launched_by", "domain",
         "path", "file", "nsys_version", "export_schema", "graph_trace", "format", "reading", "verdict",
         "threads", "gapscope_version", "scope", "measured_against", "one_off_libraries")
#: A field of another name ending so holds a number too (a figure of a newer gapscope's result).
NUMBER_SUFFIXES = ("_ns", "_count", "_kernels", "_replays", "_fraction", "_speedup")
#: Fields of a row that renderers of a saved analysis read, per section.
REQUIRED = {
    "ranges": ("id", "name", "thread", *STATS_FIELDS),
    "by_name": ("name", "count", *STATS_FIELDS),
    "devices": ("device", *STATS_FIELDS),
    "streams": ("pid", "device", "stream", *STATS_FIELDS),
    "launch": ("api", "calls", "host_median_ns", "host_p90_ns", "latency_median_ns", "latency_p90_ns",
               "per_second"),
    "payoff": ("eager", "graph", "eager_span_ns", "graph_span_ns", "measured_speedup", "ceiling_speedup"),
    "top_gaps": ("start_ns", "gap_ns", "category", "device", "stream", "before", "after", "launched_by"),
}
#: Fields that may not be null in those rows (the others may be: a figure with no value).
#: (Checked wherever they appear in those rows, required or not.)
NOT_NULL = ("kernels", "memops", "memop_ns", "gpu_span_ns", "busy_ns", "gap_ns", "gap_count", "gap_max_ns",
            "count", "calls", "per_second", "device", "stream", "pid", "thread", "id", "api", "after",
            "category", "start_ns", "graph_kernels", "graph_replays", "gap_between_replays_ns",
            "gap_inside_replays_ns")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _bad(source: str, where: str, value: Any, what: str) -> GapscopeError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return GapscopeError(f"{source}: {where} is {shown}, not {what}; not a result gapscope wrote")


def result_kind(data: Any, source: str) -> str:
    """``analysis`` or ``fleet``, from the schema field; GapscopeError for anything else
    (another program's JSON, a `gapscope run` record, or a schema version this gapscope does
    not read)."""
    if not isinstance(data, dict):
        raise GapscopeError(f"{source} is not a gapscope result (a JSON object was expected)")
    schema = data.get("schema")
    if isinstance(schema, str) and schema.startswith(_RUN_PREFIXES):
        raise GapscopeError(f"{source} is a `gapscope run` record; compare the analysis.json beside it "
                            "(or pass the run's folder)")
    for kind, known in SCHEMAS.items():
        prefix = known.rsplit("/", 1)[0] + "/"
        if isinstance(schema, str) and schema.startswith(prefix):
            if schema not in READABLE[kind]:
                raise GapscopeError(f"{source}: result schema {schema!r} is not supported (this gapscope "
                                    f"reads {', '.join(READABLE[kind])}; a newer gapscope wrote it)")
            return kind
    found = "no 'schema' field" if schema is None else f"schema {schema!r}"
    raise GapscopeError(f"{source} is not a gapscope result ({found}; expected {ANALYSIS_SCHEMA})")


class Verified(dict):  # type: ignore[type-arg]
    """A result JSON object that gapscope wrote itself and read back intact (a result cache
    entry, its CRC-32 checked: gapscope.cache): :func:`check_result` takes its kind without the
    deep check, which every JSON a user gives still gets."""


def check_result(data: Any, source: str) -> str:
    """Check a result JSON object before anything reads it; returns its kind (``analysis`` or
    ``fleet``). GapscopeError (exit 2), naming the field, for a wrong schema, shape, type or a
    value outside its domain; a :class:`Verified` object only has its kind read."""
    kind = result_kind(data, source)
    if isinstance(data, Verified):
        return kind
    for section in SECTIONS[kind]:
        if not isinstance(data.get(section), list):
            raise GapscopeError(f"{source}: result has no '{section}' list")
    for section in OPTIONAL_SECTIONS[kind]:
        if data.get(section) is not None and not isinstance(data[section], list):
            raise _bad(source, section, data[section], "a list or null")
    for section in (*SECTIONS[kind], *OPTIONAL_SECTIONS[kind]):
        for i, row in enumerate(data.get(section) or []):
            if not isinstance(row, dict):
                raise GapscopeError(f"{source}: {section}[{i}] is not an object")
    warnings = data.get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise _bad(source, "warnings", warnings, "a list of strings")
    for key in ("trace", "options"):
        if key in data and not isinstance(data[key], dict):
            raise _bad(source, key, data[key], "an object")
    gpus = (data.get("trace") or {}).get("gpus")
    if gpus is not None and not (isinstance(gpus, dict) and all(isinstance(v, str) for v in gpus.values())):
        raise _bad(source, "trace.gpus", gpus, "an object of GPU names")
    _check_values(data, source, spreads=kind == "fleet")
    return kind


def require_fields(data: Mapping[str, Any], source: str) -> None:
    """GapscopeError unless every row of a saved analysis has the fields its reports read
    (docs/schema.md), non-null where a figure always has a value."""
    for section, fields in REQUIRED.items():
        for i, row in enumerate(data.get(section) or []):
            for name in fields:
                if name not in row:
                    raise GapscopeError(f"{source}: {section}[{i}] has no '{name}' field")
            for name in NOT_NULL:
                if name in row and row[name] is None:
                    raise _bad(source, f"{section}[{i}].{name}", None, "a value")


def _check_values(data: Any, source: str, spreads: bool) -> None:
    """Every known field, at any depth, of the right type and inside its domain; every number
    finite (``spreads``: a figure may also be a spread over ranks, as a fleet result writes).
    Walks with a stack (the depth is bounded by gapscope.inputs.read_json)."""
    todo: list[tuple[Any, str]] = [(data, "")]
    while todo:
        value, where = todo.pop()
        if isinstance(value, dict):
            for key, v in value.items():
                if not _utf8(key):
                    raise _bad(source, f"a key in {where or 'the result'}", key, "UTF-8 text (it holds a lone surrogate)")
                path = f"{where}.{key}" if where else str(key)
                _check_field(str(key), v, path, source, spreads)
                if isinstance(v, (dict, list)):
                    todo.append((v, path))
        elif isinstance(value, list):
            todo.extend((v, f"{where}[{i}]") for i, v in enumerate(value) if isinstance(v, (dict, list)))
            for i, v in enumerate(value):
                if isinstance(v, float) and not math.isfinite(v):
                    raise _bad(source, f"{where}[{i}]", v, "a finite number")
                if isinstance(v, str) and not _utf8(v):
                    raise _bad(source, f"{where}[{i}]", v, "UTF-8 text (it holds a lone surrogate)")


_SPREAD = ("min", "median", "max")


def _utf8(text: str) -> bool:
    """False for text holding a lone surrogate (JSON's "\\ud800"), which no UTF-8 writer, and
    so neither gapscope nor Arrow, can write."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_field(key: str, v: Any, where: str, source: str, spreads: bool) -> None:
    if isinstance(v, float) and not math.isfinite(v):
        raise _bad(source, where, v, "a finite number")
    if isinstance(v, str) and not _utf8(v):
        raise _bad(source, where, v, "UTF-8 text (it holds a lone surrogate)")
    if key in DOMAINS and v is not None:
        lo, hi, what = DOMAINS[key]
        if spreads and isinstance(v, dict) and all(p in v for p in _SPREAD):  # {min, median, max, *_rank}
            for part in _SPREAD:
                if v[part] is not None:
                    _check_field(key, v[part], f"{where}.{part}", source, False)
            return
        if not _is_number(v) or not lo <= v <= hi:
            raise _bad(source, where, v, what)
    elif key.endswith(NUMBER_SUFFIXES) and v is not None and not _is_number(v) and key not in NESTED \
            and not (spreads and isinstance(v, dict)):
        raise _bad(source, where, v, "a number")
    elif key in INTEGERS and v is not None and (not isinstance(v, int) or isinstance(v, bool)):
        raise _bad(source, where, v, "an integer")
    elif key in TEXTS and v is not None and not isinstance(v, str):
        raise _bad(source, where, v, "text")
    elif key in NAME_COUNTS and not (
            isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                                        and isinstance(p[1], int) and not isinstance(p[1], bool) and p[1] >= 0
                                        for p in v)):
        raise _bad(source, where, v, "a list of [kernel name, count] pairs")
    elif key in NESTED and not (
            isinstance(v, dict) and all(k in CATEGORIES and _is_number(x) and 0 <= x < math.inf
                                        for k, x in v.items())):
        raise _bad(source, where, v, f"an object of gap times >= 0 per category ({', '.join(CATEGORIES)})")
