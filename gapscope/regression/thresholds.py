"""Regression thresholds for `gapscope compare`, parsed from short strings.

A threshold says how far a metric may get *worse* from baseline to current before compare calls
it a regression. The syntax is ``[RANGE_GLOB:]METRIC:LIMIT``:

``gap_fraction:+0.10``
    absolute: the gap fraction may rise by 0.10 (ten percentage points; ``+10pp`` says the same).
``gpu_span:+5%``
    relative: the GPU span may rise by 5 % of its baseline value.
``sync:+10%+20us``
    relative plus absolute: 10 % of the baseline plus 20 us (so a rise from 0 must pass 20 us).
``gap_p99:+50us``
    absolute with a time unit (``ns``, ``us``, ``ms``, ``s``; a bare number of a time metric is ns).
``kernels:+0``
    not one more kernel per instance.
``verdict:same``
    the verdict may not get worse (metrics.VERDICT_RANK; losing a graph replay is worse).
``launch.cudaGraphLaunch.host_median_ns:+20%``
    a launch statistic of one launch API (the API may be a glob: ``launch.*.host_median_ns``).
``graph_kernels:-0``
    a metric that is worse when lower (graph kernels, graph replays, launches per second) takes
    an allowed fall; its sign may be left out.
``decode*:gap_fraction:+0.01``
    only for NVTX ranges whose name matches the glob (case-sensitive ``fnmatch``). The range name
    may itself contain colons (``aten::mm:gap_fraction:+0.01``): the spec is split from the right.
``gpu_span:off``
    stop checking a metric (``off`` also works with a glob, for one family of ranges).

Thresholds come in three layers, later layers overriding earlier ones for the same
(glob, metric): the built-in defaults (:data:`DEFAULT_THRESHOLDS`), the ``fail`` list of
``[tool.gapscope.compare]`` in pyproject.toml, then ``--fail`` options. For a given range the
most specific threshold wins: one with a matching glob beats an unscoped one, and among matching
globs the one given last wins. Devices and streams are checked by unscoped thresholds only;
launch APIs by launch thresholds only (an exact API name beats a glob). The same table may set
``scope`` and ``missing`` (:class:`CompareSettings`).
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gapscope.errors import GapscopeError
from gapscope.regression.metrics import METRICS, Metric, launch_metric, metric_for

try:  # Python 3.11+
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ModuleNotFoundError:
        _toml = None  # type: ignore[assignment]

__all__ = [
    "CONFIG_TABLE",
    "DEFAULT_MISSING",
    "DEFAULT_THRESHOLDS",
    "METRICS",
    "MISSING_POLICIES",
    "CompareSettings",
    "Metric",
    "Threshold",
    "ThresholdSet",
    "load_config",
    "metric_for",
    "parse_scope",
    "parse_threshold",
    "resolve_settings",
    "resolve_thresholds",
]

CONFIG_TABLE = "[tool.gapscope.compare]"

#: Checked when nothing else is configured, chosen against the spread of three recordings of
#: identical code on the H200 (traces/cmp_base_1..3, docs/ci.md "Defaults and noise"): the gap
#: fraction may rise by ten points (identical runs moved it by up to 3.9, and an older set of
#: four by 6.4: a launch-bound loop's gaps are CPU time); not one more kernel per instance
#: (identical every time); sync time may rise by 10 % plus 20 us per instance (none of the
#: identical runs' ranges had any; the whole device's moved by 15 %); the verdict may not get
#: worse (the same every time); not one more step may run eager where the baseline replayed it
#: (the eager fallback; 16 eager and 16 replayed decode steps every time). Spans, host and launch
#: time and launch costs are opt-in: they moved by 24 % to 76 % between identical runs.
DEFAULT_THRESHOLDS: tuple[str, ...] = ("gap_fraction:+0.10", "kernels:+0", "sync:+10%+20us", "eager_fallback:+0",
                                       "verdict:same")
#: What happens to a baseline entry with GPU work that current lacks (or has no work in).
MISSING_POLICIES = ("fail", "warn", "ignore")
DEFAULT_MISSING = "fail"
#: Scopes a user can ask for; launch APIs are checked whenever a launch threshold is in force.
SCOPE_NAMES = ("range", "device", "stream")


@dataclass(frozen=True)
class Threshold:
    """How far one metric may get worse before compare reports a regression.

    ``limit`` is in the metric's own unit (fractions as 0..1, times in ns) when ``relative`` is
    false, or a share of the baseline value (0.05 = 5 %) when it is true, plus ``floor`` in the
    metric's unit; ``None`` turns the metric off (for ``verdict``, 0 means ``same``).
    ``range_glob`` restricts it to NVTX ranges whose name matches, ``api`` (a name or glob) a
    launch statistic to those launch APIs. ``origin`` says where it came from (``default``,
    ``config``, ``option``): a default that a result cannot answer is skipped with a warning, a
    threshold someone wrote is refused.
    """

    metric: str
    limit: float | None
    relative: bool = False
    range_glob: str | None = None
    floor: float = 0.0
    api: str | None = None
    origin: str = field(default="option", compare=False)

    @property
    def off(self) -> bool:
        """True for ``METRIC:off``: the metric is not checked where this threshold applies."""
        return self.limit is None

    def allowed_increase(self, baseline: float) -> float:
        """The largest change for the worse from ``baseline`` that is not a regression, in the
        metric's unit (a rise, or for a lower-is-worse metric a fall)."""
        if self.limit is None:
            return math.inf
        return self.limit * abs(baseline) + self.floor if self.relative else self.limit

    def applies_to(self, scope: str, name: str | None) -> bool:
        """Whether this threshold covers an entry of ``scope`` (range, device, stream, launch)."""
        if (METRICS[self.metric].kind == "launch") != (scope == "launch"):
            return False
        if scope == "launch":
            return name is not None and fnmatch.fnmatchcase(name, self.api or "*")
        if METRICS[self.metric].kind == "coverage" and scope != "range":  # how a range's instances ran
            return False
        if self.range_glob is None:
            return True
        return scope == "range" and name is not None and fnmatch.fnmatchcase(name, self.range_glob)

    def describe_limit(self) -> str:
        """The limit for people: ``+5%``, ``+2.0 pp``, ``+50 us``, ``+10%+20 us``, ``same``, ``off``."""
        m = METRICS[self.metric]
        if self.limit is None:
            return "off"
        if m.unit == "verdict":
            return "same"
        sign = "+" if m.worse > 0 else "-"
        if self.relative:
            text = f"{sign}{self.limit * 100:g}%"
            return text + ("+" + m.format_delta(self.floor).lstrip("+") if self.floor else "")
        return sign + m.format_delta(self.limit)[1:]

    def __str__(self) -> str:
        m = METRICS[self.metric]
        sign = "+" if m.worse > 0 else "-"
        if self.limit is None:
            value = "off"
        elif m.unit == "verdict":
            value = "same"
        elif self.relative:
            value = f"{sign}{self.limit * 100:g}%" + (f"+{_amount(m, self.floor)}" if self.floor else "")
        else:
            value = f"{sign}{_amount(m, self.limit)}"
        metric = f"launch.{self.api}.{m.field}" if m.kind == "launch" else m.short
        return f"{self.range_glob}:{metric}:{value}" if self.range_glob else f"{metric}:{value}"


def _amount(metric: Metric, value: float) -> str:
    """An absolute limit as a spec writes it: a time in the largest unit that keeps it exact."""
    if metric.unit == "ns" and value:
        for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
            text = f"{value / scale:g}"
            if value >= scale and float(text) * scale == value:
                return text + unit
        return f"{value:g}ns"
    return f"{value:g}"


_NUM = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_UNIT = r"pp|ns|us|µs|ms|s"
_LIMIT_RE = re.compile(
    rf"^(?P<sign>[+-]?)(?:(?P<rel>{_NUM})\s*%(?:\s*\+\s*(?P<floor>{_NUM})\s*(?P<funit>{_UNIT})?)?"
    rf"|(?P<num>{_NUM})\s*(?P<unit>{_UNIT})?)$"
)
_TIME_UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}


def _absolute(spec: str, metric: Metric, text: str, unit: str | None) -> float:
    """An absolute amount in the metric's unit, from a number and its unit (if any)."""
    value = float(text)
    if unit == "pp":
        if metric.unit != "fraction":
            raise GapscopeError(
                f"bad threshold {spec!r}: 'pp' (percentage points) applies only to gap_fraction", 2
            )
        return value / 100.0
    if unit is not None:
        if metric.unit != "ns":
            raise GapscopeError(
                f"bad threshold {spec!r}: {metric.short} is a {metric.unit}, not a time; "
                f"drop the {unit!r}",
                2,
            )
        return value * _TIME_UNITS[unit]
    if metric.unit == "fraction" and value > 1:
        raise GapscopeError(
            f"bad threshold {spec!r}: gap_fraction is between 0 and 1; write +0.02 or +2pp for two "
            "points, or +2% for a relative rise",
            2,
        )
    return value


def _metric_of(spec: str, text: str) -> tuple[Metric, str | None]:
    """The metric a spec names, and the launch API (or glob) of a ``launch.API.FIELD`` metric."""
    name = text.strip()
    if not name:
        raise GapscopeError(f"bad threshold {spec!r}: no metric name", 2)
    if name.lower().startswith("launch.") and name.count(".") >= 2:
        api, stat = name[len("launch."):].rsplit(".", 1)
        if not api.strip():
            raise GapscopeError(f"bad threshold {spec!r}: no launch API between 'launch.' and "
                                f"'.{stat}' (a name like cudaGraphLaunch, or * for every API)", 2)
        try:
            return launch_metric(stat), api.strip()
        except GapscopeError as exc:
            raise GapscopeError(f"bad threshold {spec!r}: {exc.message}", 2) from None
    try:
        return metric_for(name), None
    except GapscopeError as exc:
        raise GapscopeError(f"bad threshold {spec!r}: {exc.message}", 2) from None


def parse_threshold(spec: str, origin: str = "option") -> Threshold:
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
    metric, api = _metric_of(spec, parts[-2])
    limit_text = parts[-1].strip()
    if metric.kind == "launch" and glob is not None:
        raise GapscopeError(f"bad threshold {spec!r}: a launch statistic is one of the whole result's "
                            "launch calls, not a range's; drop the range pattern", 2)
    if limit_text.lower() in ("off", "none"):
        return Threshold(metric.name, None, False, glob, api=api, origin=origin)
    if metric.unit == "verdict":
        if limit_text.lower() != "same":
            raise GapscopeError(f"bad threshold {spec!r}: verdict takes 'same' (fail when the verdict "
                                "gets worse) or 'off'", 2)
        return Threshold(metric.name, 0.0, False, glob, api=api, origin=origin)
    match = _LIMIT_RE.match(limit_text)
    if not match:
        raise GapscopeError(
            f"bad threshold {spec!r}: limit {limit_text!r} is not a number like +0.02, +5%, +50us "
            "or +10%+20us",
            2,
        )
    wrong = "-" if metric.worse > 0 else "+"
    if match["sign"] == wrong:
        if metric.worse > 0:
            raise GapscopeError(
                f"bad threshold {spec!r}: {metric.short} is worse when higher, so its limit is an "
                "allowed rise (+N) and cannot be negative",
                2,
            )
        raise GapscopeError(
            f"bad threshold {spec!r}: {metric.short} is worse when lower, so its limit is an "
            f"allowed fall: write -{limit_text.lstrip('+')}",
            2,
        )
    if match["rel"] is not None:
        floor = 0.0 if match["floor"] is None else _absolute(spec, metric, match["floor"], match["funit"])
        return Threshold(metric.name, float(match["rel"]) / 100.0, True, glob, floor, api, origin)
    return Threshold(metric.name, _absolute(spec, metric, match["num"], match["unit"]), False, glob,
                     api=api, origin=origin)


class ThresholdSet:
    """The thresholds in force, in order; a later one replaces an earlier one of the same
    (glob, API, metric)."""

    def __init__(self, thresholds: Iterable[Threshold] = ()) -> None:
        merged: dict[tuple[str | None, str | None, str], Threshold] = {}
        for t in thresholds:
            key = (t.range_glob, t.api, t.metric)
            merged.pop(key, None)  # re-insert: the later one ranks later
            merged[key] = t
        self._items: tuple[Threshold, ...] = tuple(merged.values())

    @classmethod
    def parse(cls, specs: Iterable[str], origin: str = "option") -> ThresholdSet:
        """A set from spec strings, e.g. ``ThresholdSet.parse(["gap_fraction:+0.02"])``."""
        return cls(parse_threshold(s, origin) for s in specs)

    @classmethod
    def defaults(cls) -> ThresholdSet:
        """The built-in defaults, :data:`DEFAULT_THRESHOLDS`."""
        return cls.parse(DEFAULT_THRESHOLDS, "default")

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"ThresholdSet({[str(t) for t in self._items]!r})"

    def specs(self) -> list[str]:
        """Every threshold as its canonical spec string, in force order."""
        return [str(t) for t in self._items]

    def has_launch(self) -> bool:
        """Whether a launch statistic is checked (then every launch API is an entry)."""
        return any(METRICS[t.metric].kind == "launch" and not t.off for t in self._items)

    def for_entry(self, scope: str, name: str | None = None) -> dict[str, Threshold]:
        """The threshold of each metric checked on one entry, in metric order (``off`` removed).

        A threshold with a matching range glob beats an unscoped one (for a launch API: an exact
        API name beats a glob); among equals the one given last wins.
        """
        chosen: dict[str, Threshold] = {}
        for t in self._items:
            if not t.applies_to(scope, name):
                continue
            held = chosen.get(t.metric)
            if held is not None and _specific(held) and not _specific(t):
                continue
            chosen[t.metric] = t
        return {m: chosen[m] for m in METRICS if m in chosen and not chosen[m].off}


def _specific(t: Threshold) -> bool:
    """A range threshold with a glob, or a launch threshold naming one API exactly."""
    if t.api is not None:
        return not any(c in t.api for c in "*?[")
    return t.range_glob is not None


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


@dataclass(frozen=True)
class CompareSettings:
    """Everything that decides a compare besides its inputs: the thresholds in force, the scopes
    asked for (None: chosen from the results, see gapscope.regression.comparison) and what a missing
    entry does (``fail``, ``warn`` or ``ignore``)."""

    thresholds: ThresholdSet
    scope: tuple[str, ...] | None = None
    missing: str = DEFAULT_MISSING


@dataclass(frozen=True)
class _Config:
    thresholds: list[Threshold]
    scope: tuple[str, ...] | None
    missing: str | None


def parse_scope(value: str | Sequence[str], where: str = "--scope") -> tuple[str, ...] | None:
    """``range,device,stream`` (a comma list, or a list) as a tuple in report order; ``auto``
    gives None (the default scope)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    if not all(isinstance(i, str) for i in items):
        raise GapscopeError(f"{where} must be scope names like \"range,device\"", 2)
    names = [i.strip().lower() for i in items if i.strip()]
    if names == ["auto"]:
        return None
    unknown = [n for n in names if n not in SCOPE_NAMES]
    if unknown or not names:
        shown = repr(unknown[0]) if unknown else "nothing"
        raise GapscopeError(f"{where}: {shown} is not a scope (give some of {', '.join(SCOPE_NAMES)}, "
                            "comma-separated, or auto)", 2)
    return tuple(n for n in SCOPE_NAMES if n in names)


def _parse_missing(value: object, where: str) -> str:
    if not isinstance(value, str) or value.strip().lower() not in MISSING_POLICIES:
        raise GapscopeError(f"{where}: {value!r} is not one of {', '.join(MISSING_POLICIES)}", 2)
    return value.strip().lower()


def _load(path: Path, required: bool) -> _Config:
    table = _config_table(path)
    if table is None:
        if required:
            raise GapscopeError(f"{path} has no {CONFIG_TABLE} table", 2)
        return _Config([], None, None)
    known = ("fail", "scope", "missing")
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise GapscopeError(
            f"{path}: unknown key {unknown[0]!r} in {CONFIG_TABLE} (known: {', '.join(known)})", 2
        )
    specs = table.get("fail", [])
    if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
        raise GapscopeError(
            f"{path}: {CONFIG_TABLE} fail must be a list of strings like \"gap_fraction:+0.02\"", 2
        )
    out = []
    for spec in specs:
        try:
            out.append(parse_threshold(spec, "config"))
        except GapscopeError as exc:
            raise GapscopeError(f"{path} {CONFIG_TABLE}: {exc.message}", 2) from None
    scope = parse_scope(table["scope"], f"{path} {CONFIG_TABLE} scope") if "scope" in table else None
    missing = _parse_missing(table["missing"], f"{path} {CONFIG_TABLE} missing") if "missing" in table else None
    return _Config(out, scope, missing)


def load_config(path: str | Path, *, required: bool = True) -> list[Threshold]:
    """The thresholds listed under ``fail`` in the ``[tool.gapscope.compare]`` table of ``path``.

    With ``required`` a file without that table is an error; otherwise it gives ``[]``.
    Unknown keys are errors (a typo must not silently drop a threshold); ``scope`` and
    ``missing`` are checked too (:func:`resolve_settings` reads them).
    """
    return _load(Path(path), required).thresholds


def default_config(directory: str | Path = ".") -> Path | None:
    """``pyproject.toml`` in ``directory`` if it holds a ``[tool.gapscope.compare]`` table. One
    that cannot be read, or is not UTF-8 text (whether it holds the table cannot be told), is
    refused in one line, as ``--config`` refuses it."""
    path = Path(directory) / "pyproject.toml"
    if not path.is_file():
        return None
    from gapscope.inputs import regular_file

    regular_file(path, f"config {path}")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise GapscopeError(f"cannot read config {path}: {exc.strerror or exc} (gapscope compare reads "
                            f"the {CONFIG_TABLE} table of the pyproject.toml it finds here)", 2) from None
    except UnicodeDecodeError:
        raise GapscopeError(f"config {path} is not UTF-8 text (gapscope compare reads the {CONFIG_TABLE} "
                            "table of the pyproject.toml it finds here)", 2) from None
    if "gapscope" not in text:  # cheap pre-check; the real test parses the file
        return None
    if _toml is None and "[tool.gapscope.compare]" not in text:  # pragma: no cover
        return None
    return path if _config_table(path) is not None else None


def resolve_settings(
    fail: Sequence[str] = (),
    config: str | Path | None = None,
    *,
    scope: str | None = None,
    missing: str | None = None,
    search_dir: str | Path | None = ".",
) -> CompareSettings:
    """The settings in force: defaults, then the config file's table, then the options given
    (``fail`` specs, ``scope`` as ``range,device``, ``missing``).

    ``config`` names a pyproject.toml that must hold the table; without it, ``search_dir``'s
    pyproject.toml is used when it has one (pass ``search_dir=None`` to skip that).
    """
    found: Path | None = Path(config) if config is not None else None
    if found is None and search_dir is not None:
        found = default_config(search_dir)
    cfg = _load(found, True) if found is not None else _Config([], None, None)
    thresholds = ThresholdSet([*ThresholdSet.defaults(), *cfg.thresholds,
                               *(parse_threshold(s) for s in fail)])
    chosen_scope = parse_scope(scope) if scope is not None else cfg.scope
    policy = _parse_missing(missing, "--missing") if missing is not None else cfg.missing
    return CompareSettings(thresholds, chosen_scope, policy or DEFAULT_MISSING)


def resolve_thresholds(
    fail: Sequence[str] = (),
    config: str | Path | None = None,
    *,
    search_dir: str | Path | None = ".",
) -> ThresholdSet:
    """The thresholds in force: defaults, then the config file's ``fail``, then ``fail`` specs
    (:func:`resolve_settings` without the scope and missing policy)."""
    return resolve_settings(fail, config, search_dir=search_dir).thresholds
