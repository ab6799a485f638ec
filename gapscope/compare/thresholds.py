"""Regression thresholds for `gapscope compare`, parsed from short strings.

A threshold says how much a metric may *rise* from baseline to current before compare calls it a
regression. Every metric compare checks is worse when higher, so a limit is always an allowed
increase. The syntax is ``[RANGE_GLOB:]METRIC:LIMIT``:

``gap_fraction:+0.02``
    absolute: the gap fraction may rise by 0.02 (two percentage points; ``+2pp`` says the same).
``gpu_span:+5%``
    relative: the GPU span may rise by 5 % of its baseline value.
``gap_p99:+50us``
    absolute with a time unit (``ns``, ``us``, ``ms``, ``s``; a bare number of a time metric is ns).
``decode*:gap_fraction:+0.01``
    only for NVTX ranges whose name matches the glob (case-sensitive ``fnmatch``). The range name
    may itself contain colons (``aten::mm:gap_fraction:+0.01``): the spec is split from the right.
``gpu_span:off``
    stop checking a metric (``off`` also works with a glob, for one family of ranges).

Thresholds come in three layers, later layers overriding earlier ones for the same
(glob, metric): the built-in defaults (:data:`DEFAULT_THRESHOLDS`), the ``fail`` list of
``[tool.gapscope.compare]`` in pyproject.toml, then ``--fail`` options. For a given range the
most specific threshold wins: one with a matching glob beats an unscoped one, and among matching
globs the one given last wins. Devices and streams are checked by unscoped thresholds only.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gapscope.errors import GapscopeError
from gapscope.render.units import fmt_count, fmt_ns

try:  # Python 3.11+
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None  # type: ignore[assignment]

__all__ = [
    "CONFIG_TABLE",
    "DEFAULT_THRESHOLDS",
    "METRICS",
    "Metric",
    "Threshold",
    "ThresholdSet",
    "load_config",
    "metric_for",
    "parse_threshold",
    "resolve_thresholds",
]

CONFIG_TABLE = "[tool.gapscope.compare]"

#: Checked when nothing else is configured: the share of the GPU span spent in gaps may rise by
#: two percentage points, on every range, device and stream. Spans (``gpu_span:+5%``) are opt-in:
#: on the H200 the span of a launch-bound eager loop varied 2x between runs of identical code,
#: so a span limit needs several runs per side (docs/ci.md, "Noise").
DEFAULT_THRESHOLDS: tuple[str, ...] = ("gap_fraction:+0.02",)


@dataclass(frozen=True)
class Metric:
    """One STATS field of a result (docs/schema.md) that compare can check; higher is worse.

    ``unit`` is ``fraction``, ``ns`` or ``count``; ``summed`` marks fields that a range summary
    (by_name) sums over its instances, which compare divides by the instance count.
    """

    name: str
    unit: str
    meaning: str
    summed: bool = False

    @property
    def short(self) -> str:
        """The name without its ``_ns`` suffix, as users usually type it."""
        return self.name[:-3] if self.name.endswith("_ns") else self.name

    def format(self, value: float | None) -> str:
        """A value in this metric's unit, for people (``31.2%``, ``4.56 ms``, ``1,024``)."""
        if value is None:
            return "—"
        if self.unit == "fraction":
            return _pct(value) + "%"
        if self.unit == "ns":
            return fmt_ns(value)
        return fmt_count(value)

    def format_delta(self, delta: float | None) -> str:
        """A signed change in this metric's unit (fractions in percentage points)."""
        if delta is None:
            return "—"
        sign = "+" if delta >= 0 else "-"
        if self.unit == "fraction":
            return f"{sign}{_pct(abs(delta))} pp"
        if self.unit == "ns":
            return sign + fmt_ns(abs(delta))
        return sign + fmt_count(abs(delta))


def _pct(fraction: float) -> str:
    value = fraction * 100
    return f"{value:.2f}" if 0 < abs(value) < 0.1 else f"{value:.1f}"


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("gap_fraction", "fraction", "Share of the GPU span with no kernel running: gap_ns / gpu_span_ns."),
        Metric("gpu_span_ns", "ns", "Wall time of the GPU work: first kernel start to last kernel end.", True),
        Metric("busy_ns", "ns", "Time at least one kernel ran (union of kernel intervals).", True),
        Metric("gap_ns", "ns", "Idle time inside the span: gpu_span_ns - busy_ns.", True),
        Metric("gap_count", "count", "Number of idle gaps inside the span.", True),
        Metric("gap_p50_ns", "ns", "Median gap length (no gaps counts as 0)."),
        Metric("gap_p90_ns", "ns", "90th-percentile gap length (no gaps counts as 0)."),
        Metric("gap_p99_ns", "ns", "99th-percentile gap length (no gaps counts as 0)."),
        Metric("gap_max_ns", "ns", "Longest idle gap inside the span (0 without gaps)."),
        Metric("kernels", "count", "Kernels in the work; a kernel split in two shows here.", True),
        Metric("kernel_median_ns", "ns", "Median kernel duration (no kernels counts as 0)."),
        Metric("memops", "count", "memcpy/memset operations in the work.", True),
    )
}

_ALIASES: dict[str, str] = {}
for _m in METRICS.values():
    _ALIASES[_m.name] = _m.name
    _ALIASES[_m.short] = _m.name
_ALIASES.update({"span": "gpu_span_ns", "gaps": "gap_count", "kernel_count": "kernels"})


def metric_for(name: str) -> Metric:
    """The metric called ``name`` or one of its aliases (``gpu_span`` for ``gpu_span_ns``)."""
    try:
        return METRICS[_ALIASES[name.strip().lower()]]
    except KeyError:
        known = ", ".join(m.short for m in METRICS.values())
        raise GapscopeError(f"unknown metric {name.strip()!r} (known: {known})", 2) from None


@dataclass(frozen=True)
class Threshold:
    """How much one metric may rise before compare reports a regression.

    ``limit`` is in the metric's own unit (fractions as 0..1, times in ns) when ``relative`` is
    false, or a share of the baseline value (0.05 = 5 %) when it is true; ``None`` turns the
    metric off. ``range_glob`` restricts it to NVTX ranges whose name matches.
    """

    metric: str
    limit: float | None
    relative: bool = False
    range_glob: str | None = None

    @property
    def off(self) -> bool:
        """True for ``METRIC:off``: the metric is not checked where this threshold applies."""
        return self.limit is None

    def allowed_increase(self, baseline: float) -> float:
        """The largest rise from ``baseline`` that is not a regression, in the metric's unit."""
        if self.limit is None:
            return math.inf
        return self.limit * abs(baseline) if self.relative else self.limit

    def applies_to(self, scope: str, name: str | None) -> bool:
        """Whether this threshold covers an entry of ``scope`` (range, device or stream)."""
        if self.range_glob is None:
            return True
        return scope == "range" and name is not None and fnmatch.fnmatchcase(name, self.range_glob)

    def describe_limit(self) -> str:
        """The limit for people: ``+5%``, ``+2.0 pp``, ``+50.00 µs``, ``off``."""
        if self.limit is None:
            return "off"
        if self.relative:
            return f"+{self.limit * 100:g}%"
        return METRICS[self.metric].format_delta(self.limit)

    def __str__(self) -> str:
        if self.limit is None:
            value = "off"
        elif self.relative:
            value = f"+{self.limit * 100:g}%"
        else:
            value = f"+{self.limit:g}"
        metric = METRICS[self.metric].short
        return f"{self.range_glob}:{metric}:{value}" if self.range_glob else f"{metric}:{value}"


_LIMIT_RE = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<unit>%|pp|ns|us|µs|ms|s)?$"
)
_TIME_UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}


def parse_threshold(spec: str) -> Threshold:
    """Parse ``[RANGE_GLOB:]METRIC:LIMIT``; a malformed spec raises GapscopeError (exit 2)."""
    if not isinstance(spec, str):
        raise GapscopeError(f"bad threshold {spec!r}: expected a string like 'gap_fraction:+0.02'", 2)
    text = spec.strip()
    parts = text.rsplit(":", 2)
    if len(parts) < 2:
        raise GapscopeError(
            f"bad threshold {spec!r}: expected [RANGE_GLOB:]METRIC:LIMIT, e.g. 'gap_fraction:+0.02' "
            "or 'gpu_span:+5%'",
            2,
        )
    glob: str | None = None
    if len(parts) == 3:
        glob = parts[0].strip()
        if not glob:
            raise GapscopeError(f"bad threshold {spec!r}: empty range pattern before the metric", 2)
    metric_text, limit_text = parts[-2], parts[-1].strip()
    if not metric_text.strip():
        raise GapscopeError(f"bad threshold {spec!r}: no metric name", 2)
    try:
        metric = metric_for(metric_text)
    except GapscopeError as exc:
        raise GapscopeError(f"bad threshold {spec!r}: {exc.message}", 2) from None
    if limit_text.lower() in ("off", "none"):
        return Threshold(metric.name, None, False, glob)
    match = _LIMIT_RE.match(limit_text)
    if not match:
        raise GapscopeError(
            f"bad threshold {spec!r}: limit {limit_text!r} is not a number like +0.02, +5% or +50us",
            2,
        )
    if match["sign"] == "-":
        raise GapscopeError(
            f"bad threshold {spec!r}: a limit is an allowed increase (every metric is worse when "
            "higher), so it cannot be negative",
            2,
        )
    value = float(match["num"])
    unit = match["unit"]
    if unit == "%":
        return Threshold(metric.name, value / 100.0, True, glob)
    if unit == "pp":
        if metric.unit != "fraction":
            raise GapscopeError(
                f"bad threshold {spec!r}: 'pp' (percentage points) applies only to gap_fraction", 2
            )
        return Threshold(metric.name, value / 100.0, False, glob)
    if unit is not None:
        if metric.unit != "ns":
            raise GapscopeError(
                f"bad threshold {spec!r}: {metric.short} is a {metric.unit}, not a time; "
                f"drop the {unit!r}",
                2,
            )
        value *= _TIME_UNITS[unit]
    elif metric.unit == "fraction" and value > 1:
        raise GapscopeError(
            f"bad threshold {spec!r}: gap_fraction is between 0 and 1; write +0.02 or +2pp for two "
            "points, or +2% for a relative rise",
            2,
        )
    return Threshold(metric.name, value, False, glob)


class ThresholdSet:
    """The thresholds in force, in order; a later one replaces an earlier one of the same
    (glob, metric)."""

    def __init__(self, thresholds: Iterable[Threshold] = ()) -> None:
        merged: dict[tuple[str | None, str], Threshold] = {}
        for t in thresholds:
            merged.pop((t.range_glob, t.metric), None)  # re-insert: the later one ranks later
            merged[(t.range_glob, t.metric)] = t
        self._items: tuple[Threshold, ...] = tuple(merged.values())

    @classmethod
    def parse(cls, specs: Iterable[str]) -> ThresholdSet:
        """A set from spec strings, e.g. ``ThresholdSet.parse(["gap_fraction:+0.02"])``."""
        return cls(parse_threshold(s) for s in specs)

    @classmethod
    def defaults(cls) -> ThresholdSet:
        """The built-in defaults, :data:`DEFAULT_THRESHOLDS`."""
        return cls.parse(DEFAULT_THRESHOLDS)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"ThresholdSet({[str(t) for t in self._items]!r})"

    def specs(self) -> list[str]:
        """Every threshold as its canonical spec string, in force order."""
        return [str(t) for t in self._items]

    def for_entry(self, scope: str, name: str | None = None) -> dict[str, Threshold]:
        """The threshold of each metric checked on one entry, in metric order (``off`` removed).

        A threshold with a matching range glob beats an unscoped one; among matching globs the
        one given last wins.
        """
        chosen: dict[str, Threshold] = {}
        for t in self._items:
            if not t.applies_to(scope, name):
                continue
            held = chosen.get(t.metric)
            if held is not None and held.range_glob is not None and t.range_glob is None:
                continue
            chosen[t.metric] = t
        return {m: chosen[m] for m in METRICS if m in chosen and not chosen[m].off}


def _read_toml(path: Path) -> dict:
    if _toml is None:  # pragma: no cover - Python 3.10 without tomli
        raise GapscopeError(
            f"cannot read {path}: reading TOML needs Python 3.11+ or `pip install tomli`", 2
        )
    from gapscope.inputs import regular_file

    if Path(path).exists() and not Path(path).is_dir():
        regular_file(path, f"config {path}")  # a pipe or device would block the read
    try:
        with open(path, "rb") as fh:
            return _toml.load(fh)
    except RecursionError:
        raise GapscopeError(f"config {path} nests too deeply to be a pyproject.toml", 2) from None
    except FileNotFoundError:
        raise GapscopeError(f"config file not found: {path}", 2) from None
    except IsADirectoryError:
        raise GapscopeError(f"config path is a directory, not a file: {path}", 2) from None
    except OSError as exc:
        raise GapscopeError(f"cannot read config {path}: {exc.strerror or exc}", 2) from None
    except UnicodeDecodeError:
        raise GapscopeError(f"config {path} is not UTF-8 text", 2) from None
    except _toml.TOMLDecodeError as exc:
        raise GapscopeError(f"config {path} is not valid TOML: {exc}", 2) from None


def _config_table(path: Path) -> dict | None:
    data = _read_toml(path)
    table = data.get("tool", {})
    table = table.get("gapscope", {}) if isinstance(table, dict) else None
    table = table.get("compare") if isinstance(table, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise GapscopeError(f"{path}: {CONFIG_TABLE} must be a table", 2)
    return table


def load_config(path: str | Path, *, required: bool = True) -> list[Threshold]:
    """The thresholds listed under ``fail`` in the ``[tool.gapscope.compare]`` table of ``path``.

    With ``required`` a file without that table is an error; otherwise it gives ``[]``.
    Unknown keys are errors (a typo must not silently drop a threshold).
    """
    path = Path(path)
    table = _config_table(path)
    if table is None:
        if required:
            raise GapscopeError(f"{path} has no {CONFIG_TABLE} table", 2)
        return []
    unknown = sorted(set(table) - {"fail"})
    if unknown:
        raise GapscopeError(
            f"{path}: unknown key {unknown[0]!r} in {CONFIG_TABLE} (known: fail)", 2
        )
    specs = table.get("fail", [])
    if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
        raise GapscopeError(
            f"{path}: {CONFIG_TABLE} fail must be a list of strings like \"gap_fraction:+0.02\"", 2
        )
    out = []
    for spec in specs:
        try:
            out.append(parse_threshold(spec))
        except GapscopeError as exc:
            raise GapscopeError(f"{path} {CONFIG_TABLE}: {exc.message}", 2) from None
    return out


def default_config(directory: str | Path = ".") -> Path | None:
    """``pyproject.toml`` in ``directory`` if it holds a ``[tool.gapscope.compare]`` table."""
    path = Path(directory) / "pyproject.toml"
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if "gapscope" not in text:  # cheap pre-check; the real test parses the file
        return None
    if _toml is None and "[tool.gapscope.compare]" not in text:  # pragma: no cover
        return None
    return path if _config_table(path) is not None else None


def resolve_thresholds(
    fail: Sequence[str] = (),
    config: str | Path | None = None,
    *,
    search_dir: str | Path | None = ".",
) -> ThresholdSet:
    """The thresholds in force: defaults, then the config file's ``fail``, then ``fail`` specs.

    ``config`` names a pyproject.toml that must hold the table; without it, ``search_dir``'s
    pyproject.toml is used when it has one (pass ``search_dir=None`` to skip that).
    """
    layers = list(ThresholdSet.defaults())
    if config is not None:
        layers += load_config(config, required=True)
    elif search_dir is not None:
        found = default_config(search_dir)
        if found is not None:
            layers += load_config(found, required=True)
    layers += [parse_threshold(s) for s in fail]
    return ThresholdSet(layers)
