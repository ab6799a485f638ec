"""The regression verdict of `gapscope compare`, computed apart from any rendering.

:func:`compare` takes the result dicts (docs/schema.md) of one or more runs per side and matches
their entries: range summaries (``by_name``) by name, devices by device, streams by
(device, stream) — the pid changes from run to run, so it is not part of a stream's identity.
For each matched entry and each metric with a threshold in force it takes the median over the
runs of each side and decides a status:

``regression``
    the rise exceeds the threshold *and* the spread (max - min) of the runs on either side;
``within-noise``
    the change exceeds the threshold but not the spread of the runs, so it proves nothing;
``improved``
    the value fell by more than the threshold and the spread;
``ok``
    the change is within the threshold;
``new`` / ``missing``
    the entry exists only in current / only in baseline; listed, never failed.

Only ``regression`` fails. Range values that a summary sums over its instances (spans, busy
time, gaps, gap and kernel counts) are compared per instance, so a run with more decode steps
is not a regression by itself. Null fields (no gaps, no kernels) compare as 0.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gapscope import __version__
from gapscope.errors import GapscopeError
from gapscope.compare.thresholds import METRICS, Threshold, ThresholdSet
from gapscope.schema import check_result
from gapscope.text import name as display_name

__all__ = [
    "COMPARISON_SCHEMA",
    "SCOPES",
    "STATUSES",
    "Comparison",
    "Verdict",
    "compare",
    "compare_paths",
    "load_input",
]

COMPARISON_SCHEMA = "gapscope.comparison/1"
# A merged report of many traces (gapscope.fleet) is read like a result: its by_name, devices
# (one per rank) and streams sections have the fields compare reads; ranks match in order.
SCOPES = ("range", "device", "stream")
#: Statuses in report order: what needs attention first.
STATUSES = ("regression", "within-noise", "improved", "new", "missing", "ok")
_SECTIONS = {"range": "by_name", "device": "devices", "stream": "streams"}
_EPS = 1e-9  # relative tolerance: a change equal to its limit is not over it


@dataclass(frozen=True)
class Verdict:
    """The outcome for one metric of one matched (or unmatched) entry.

    ``baseline``/``current`` are medians over each side's runs (per instance for summed range
    metrics); ``delta`` = current - baseline; ``relative_delta`` = delta / baseline (None when
    the baseline is 0); ``limit`` is the allowed rise in the metric's unit; ``noise`` is the larger
    of the two sides' spreads (max - min over runs).
    """

    scope: str
    key: str
    match: dict[str, Any]
    metric: str
    status: str
    baseline: float | None
    current: float | None
    delta: float | None
    relative_delta: float | None
    threshold: str
    limit: float | None
    noise: float
    baseline_spread: float | None
    current_spread: float | None
    baseline_runs: int
    current_runs: int
    baseline_count: float | None = None
    current_count: float | None = None

    @property
    def failed(self) -> bool:
        """True for a regression, the only status that fails a build."""
        return self.status == "regression"

    def summary(self) -> str:
        """One line for people: ``range decode_step gap_fraction 12.0% -> 31.0% (+19.0 pp, limit +2.0 pp)``."""
        m = METRICS[self.metric]
        where = f"{self.scope} {self.key}"
        if self.status == "new":
            return f"{where} {m.short}: new in current ({m.format(self.current)})"
        if self.status == "missing":
            return f"{where} {m.short}: missing from current (baseline {m.format(self.baseline)})"
        text = (
            f"{where} {m.short} {m.format(self.baseline)} -> {m.format(self.current)} "
            f"({m.format_delta(self.delta)}, limit {self.threshold_limit_text()}"
        )
        if self.noise > 0:
            text += f", noise {m.format_delta(self.noise).lstrip('+')}"
        return text + f"): {self.status}"

    def threshold_limit_text(self) -> str:
        """The limit as written (``+5%``, ``+2.0 pp``)."""
        limit = self.threshold.rsplit(":", 1)[-1]
        if limit.endswith("%"):
            return limit
        return METRICS[self.metric].format_delta(self.limit)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


@dataclass
class Comparison:
    """Every verdict of one compare, the thresholds used and where the runs came from."""

    verdicts: list[Verdict]
    thresholds: list[str]
    baseline_sources: list[str]
    current_sources: list[str]
    warnings: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Verdict]:
        """The failing verdicts."""
        return [v for v in self.verdicts if v.failed]

    @property
    def passed(self) -> bool:
        """True when nothing regressed."""
        return not self.regressions

    @property
    def exit_code(self) -> int:
        """0 when nothing regressed, 1 otherwise."""
        return 0 if self.passed else 1

    def counts(self) -> dict[str, int]:
        """How many verdicts have each status (every status present, in report order)."""
        out = {s: 0 for s in STATUSES}
        for v in self.verdicts:
            out[v.status] += 1
        return out

    def ordered(self) -> list[Verdict]:
        """Verdicts in report order: regressions first, then noise, improvements, new, missing, ok;
        stable within a status (scope order ranges, devices, streams; input order)."""
        rank = {s: i for i, s in enumerate(STATUSES)}
        return sorted(self.verdicts, key=lambda v: rank[v.status])

    def unmatched(self) -> list[tuple[str, str, str]]:
        """``(scope, key, "new"|"missing")`` for each entry found on one side only."""
        seen: dict[tuple[str, str], str] = {}
        for v in self.verdicts:
            if v.status in ("new", "missing"):
                seen.setdefault((v.scope, v.key), v.status)
        return [(scope, key, status) for (scope, key), status in seen.items()]

    def headline(self) -> str:
        """One line: ``FAIL: 2 regressions (range decode_step gap_fraction, ...)`` or ``PASS: ...``."""
        c = self.counts()
        parts = [f"{c[s]} {s}" for s in STATUSES if c[s] and s != "regression"]
        if self.passed:
            checked = sum(c[s] for s in ("ok", "within-noise", "improved"))
            return f"PASS: no regression in {checked} checks" + (f" ({', '.join(parts)})" if parts else "")
        regs = self.regressions
        names = ", ".join(f"{v.scope} {display_name(v.key)} {METRICS[v.metric].short}" for v in regs[:3])
        more = f", and {len(regs) - 3} more" if len(regs) > 3 else ""
        noun = "regression" if len(regs) == 1 else "regressions"
        return f"FAIL: {len(regs)} {noun}: {names}{more}"

    def to_dict(self) -> dict[str, Any]:
        """The comparison as JSON-ready data (schema ``gapscope.comparison/1``)."""
        return {
            "schema": COMPARISON_SCHEMA,
            "gapscope_version": __version__,
            "passed": self.passed,
            "exit_code": self.exit_code,
            "headline": self.headline(),
            "baseline": {"runs": len(self.baseline_sources), "sources": list(self.baseline_sources)},
            "current": {"runs": len(self.current_sources), "sources": list(self.current_sources)},
            "thresholds": list(self.thresholds),
            "counts": self.counts(),
            "unmatched": [
                {"scope": s, "key": k, "status": st} for s, k, st in self.unmatched()
            ],
            "warnings": list(self.warnings),
            "verdicts": [v.to_dict() for v in self.ordered()],
        }


# --------------------------------------------------------------------------------------------
# loading inputs


def load_input(path: str | Path) -> dict[str, Any]:
    """A result dict from a result JSON (single or many-trace), a `gapscope run` folder (its
    analysis.json) or a trace (analyzed on the fly); GapscopeError for anything else."""
    from gapscope.inputs import resolve

    found = resolve(path).require("analysis", "fleet", "run", "trace", command="compare")
    if found.kind == "trace":
        from gapscope.analysis.pipeline import analyze

        data = analyze(found.path).to_dict()
    elif found.kind == "run":
        data = _run_analysis(found)
    else:
        data = found.json()
    _check_result(data, path)
    return data


def _run_analysis(found: Any) -> dict[str, Any]:
    """The analysis.json of a `gapscope run` output (given as its folder or its run.json)."""
    from gapscope.inputs import read_json

    analysis = found.run_file("analysis.json")
    if not analysis.is_file():
        raise GapscopeError(f"{found.given}: a `gapscope run` output without analysis.json; "
                            "compare its trace or a result JSON", 2)
    return read_json(analysis)


def _check_result(data: Any, source: str | Path) -> None:
    """The one check analyze's loader makes too (gapscope.schema): schema, shape, types and the
    domain of every figure, so a value outside its domain is bad input, never a regression."""
    check_result(data, str(source))


def compare_paths(
    baseline: Sequence[str | Path], current: Sequence[str | Path], thresholds: ThresholdSet
) -> Comparison:
    """Load every input (result JSON or trace) and :func:`compare` them."""
    if not baseline:
        raise GapscopeError("no baseline given", 2)
    if not current:
        raise GapscopeError("no current result given", 2)
    base = [load_input(p) for p in baseline]
    cur = [load_input(p) for p in current]
    return compare(
        base, cur, thresholds, baseline_sources=[str(p) for p in baseline],
        current_sources=[str(p) for p in current],
    )


# --------------------------------------------------------------------------------------------
# the comparison


@dataclass
class _Entry:
    key: str
    match: dict[str, Any]
    name: str | None  # range name for glob matching
    raw: dict[str, Any]
    count: float | None
    source: str


def _entries(result: dict[str, Any], scope: str, source: str) -> dict[tuple, _Entry]:
    out: dict[tuple, _Entry] = {}
    section = _SECTIONS[scope]
    items = result.get(section)
    if not isinstance(items, list):
        raise GapscopeError(f"{source}: result has no '{section}' list", 2)
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise GapscopeError(f"{source}: {section}[{i}] is not an object", 2)
        try:
            if scope == "range":
                name = item["name"]
                name = "" if name is None else str(name)
                ident: tuple = (name,)
                key = name or "(unnamed)"
                match: dict[str, Any] = {"name": name}
                count = item.get("count")
                if count is not None and (not _is_number(count) or count < 0):
                    raise GapscopeError(f"{source}: {section}[{i}] has a bad count {count!r}", 2)
            elif scope == "device":
                dev = item["device"]
                ident, key, match, name, count = (dev,), f"GPU {dev}", {"device": dev}, None, None
            else:
                dev, stream = item["device"], item["stream"]
                ident, key = (dev, stream), f"GPU {dev} stream {stream}"
                match, name, count = {"device": dev, "stream": stream}, None, None
        except KeyError as exc:
            raise GapscopeError(f"{source}: {section}[{i}] has no '{exc.args[0]}' field", 2) from None
        if ident in out:
            # Several processes on one (device, stream) in a run: matched in order of appearance.
            n = 2
            while ident + (n,) in out:
                n += 1
            ident = ident + (n,)
            key = f"{key} (#{n})"
            match = {**match, "occurrence": n}
        out[ident] = _Entry(key, match, name, item, count, source)
    return out


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _value(entry: _Entry, scope: str, metric: str) -> float:
    if metric not in entry.raw:
        raise GapscopeError(
            f"{entry.source}: {scope} {entry.key} has no '{metric}' field", 2
        )
    raw = entry.raw[metric]
    if raw is None:
        return 0.0
    if not _is_number(raw):
        raise GapscopeError(f"{entry.source}: {scope} {entry.key} has a bad {metric} {raw!r}", 2)
    value = float(raw)
    if scope == "range" and METRICS[metric].summed and entry.count:
        value /= entry.count
    return value


def _stats(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return float(statistics.median(values)), max(values) - min(values)


def _decide(delta: float, limit: float, noise: float, scale: float) -> str:
    eps = _EPS * max(1.0, scale)
    over = abs(delta) - limit > eps
    beyond_noise = abs(delta) - noise > eps
    if not over:
        return "ok"
    if not beyond_noise:
        return "within-noise"
    return "regression" if delta > 0 else "improved"


def _matched(scope: str, baseline: Sequence[dict[str, Any]], bsrc: list[str],
             current: Sequence[dict[str, Any]], csrc: list[str]) -> Iterator[tuple[_Entry, list[_Entry], list[_Entry]]]:
    """Every entry of ``scope`` found in any run: (its first occurrence, the baseline runs'
    entries, the current runs' entries), in order of first appearance."""
    b_runs = [_entries(r, scope, s) for r, s in zip(baseline, bsrc)]
    c_runs = [_entries(r, scope, s) for r, s in zip(current, csrc)]
    idents: dict[tuple, _Entry] = {}
    for run in (*b_runs, *c_runs):
        for ident, entry in run.items():
            idents.setdefault(ident, entry)
    for ident, first in idents.items():
        yield first, [run[ident] for run in b_runs if ident in run], [run[ident] for run in c_runs if ident in run]


def _verdict(scope: str, first: _Entry, metric: str, th: Threshold, b_entries: list[_Entry],
             c_entries: list[_Entry], counts: tuple[float | None, float | None]) -> Verdict:
    """The verdict on one metric of one matched entry: medians over each side's runs, the
    change against the threshold and the runs' spread."""
    b_med, b_spread = _stats([_value(e, scope, metric) for e in b_entries])
    c_med, c_spread = _stats([_value(e, scope, metric) for e in c_entries])
    noise = max(b_spread or 0.0, c_spread or 0.0)
    delta = rel = limit = None
    if b_med is not None:
        limit = th.allowed_increase(b_med)
    if b_med is None or c_med is None:
        status = "new" if b_med is None else "missing"
    else:
        delta = c_med - b_med
        rel = delta / b_med if b_med != 0 else None
        status = _decide(delta, limit, noise, max(abs(b_med), abs(c_med)))
    return Verdict(
        scope=scope, key=first.key, match=dict(first.match), metric=metric,
        status=status, baseline=b_med, current=c_med, delta=delta,
        relative_delta=rel, threshold=str(th), limit=limit, noise=noise,
        baseline_spread=b_spread, current_spread=c_spread,
        baseline_runs=len(b_entries), current_runs=len(c_entries),
        baseline_count=counts[0], current_count=counts[1],
    )


def compare(
    baseline: Sequence[dict[str, Any]],
    current: Sequence[dict[str, Any]],
    thresholds: ThresholdSet | Iterable[Threshold] | None = None,
    *,
    baseline_sources: Sequence[str] | None = None,
    current_sources: Sequence[str] | None = None,
) -> Comparison:
    """Compare result dicts of several runs per side; see the module docstring for the rules.

    ``thresholds`` defaults to :meth:`ThresholdSet.defaults`. ``*_sources`` label the runs in
    messages and reports (default ``baseline[0]``, ...).
    """
    if not baseline:
        raise GapscopeError("no baseline given", 2)
    if not current:
        raise GapscopeError("no current result given", 2)
    if thresholds is None:
        thresholds = ThresholdSet.defaults()
    elif not isinstance(thresholds, ThresholdSet):
        thresholds = ThresholdSet(thresholds)
    bsrc = list(baseline_sources) if baseline_sources else [f"baseline[{i}]" for i in range(len(baseline))]
    csrc = list(current_sources) if current_sources else [f"current[{i}]" for i in range(len(current))]
    if len(bsrc) != len(baseline) or len(csrc) != len(current):
        raise ValueError("one source label per result dict")
    for data, src in zip([*baseline, *current], [*bsrc, *csrc]):
        _check_result(data, src)

    verdicts: list[Verdict] = []
    count_changes: list[str] = []
    for scope in SCOPES:
        for first, b_entries, c_entries in _matched(scope, baseline, bsrc, current, csrc):
            b_count = _stats([float(e.count) for e in b_entries if e.count is not None])[0]
            c_count = _stats([float(e.count) for e in c_entries if e.count is not None])[0]
            if scope == "range" and b_entries and c_entries and b_count != c_count:
                count_changes.append(f"{first.key} ({_num(b_count)} -> {_num(c_count)})")
            counts = (b_count, c_count) if scope == "range" else (None, None)
            verdicts += [_verdict(scope, first, metric, th, b_entries, c_entries, counts)
                         for metric, th in thresholds.for_entry(scope, first.name).items()]

    warnings = _option_warnings(baseline, current)
    if count_changes:
        shown = ", ".join(count_changes[:5])
        more = f" and {len(count_changes) - 5} more" if len(count_changes) > 5 else ""
        warnings.append(
            f"instance counts differ for {shown}{more}; summed range metrics are compared per instance"
        )
    return Comparison(verdicts, thresholds.specs(), bsrc, csrc, warnings)


def _num(x: float | None) -> str:
    if x is None:
        return "?"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _option_warnings(baseline: Sequence[dict], current: Sequence[dict]) -> list[str]:
    out = []

    def values(results: Sequence[dict], getter) -> set[str]:  # type: ignore[no-untyped-def]
        found = set()
        for r in results:
            try:
                v = getter(r)
            except (AttributeError, KeyError, TypeError):
                v = None
            if v is not None:
                found.add(json.dumps(v, sort_keys=True))
        return found

    checks = {
        "count_memops option": lambda r: r["options"]["count_memops"],
        "range filter": lambda r: r["options"]["range_filter"],
        "graph tracing mode": lambda r: r["trace"]["graph_trace"],
    }
    for what, getter in checks.items():
        b, c = values(baseline, getter), values(current, getter)
        if b and c and b != c:
            out.append(
                f"baseline and current differ in {what} ({', '.join(sorted(b))} vs "
                f"{', '.join(sorted(c))}); the comparison may not be like for like"
            )
    for side, results in (("baseline", baseline), ("current", current)):
        for what, getter in checks.items():
            if len(values(results, getter)) > 1:
                out.append(f"the {side} runs differ among themselves in {what}")
    return out
