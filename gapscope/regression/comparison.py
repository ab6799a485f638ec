"""The regression verdict of `gapscope compare`, computed apart from any rendering.

:func:`compare` takes the result dicts (docs/schema.md) of one or more runs per side and matches
their entries (gapscope.regression.entries): range names by (domain, group name), devices by device,
streams by (device, stream), launch APIs by name. Range values are per instance: the median over
the instances with GPU work, so one slow step does not decide.

What is compared (the scope): the ranges when either side has ranges with GPU work, the devices
only when neither has (the whole-device timeline holds start-up, model loading and warm-up, which
a CI job rarely means to test), streams only when asked (their ids are assigned at run time);
launch APIs whenever a launch threshold is in force. Two sides that share no entry of the scope
are refused (exit 2): they are not runs of one program.

For each matched entry and each metric with a threshold in force it takes the median over the
runs of each side and decides a status:

``regression``
    the change for the worse exceeds the threshold *and* the spread (max - min) of the runs on
    either side;
``within-noise``
    the change exceeds the threshold but not the spread of the runs, so it proves nothing;
``improved``
    the value got better by more than the threshold and the spread;
``ok``
    the change is within the threshold;
``missing``
    a baseline entry with GPU work that current lacks, or that has no GPU work in current: one
    verdict per entry, failed under ``missing="fail"`` (the default), listed under ``warn``,
    left out under ``ignore``;
``new``
    an entry only current has: listed, never failed.

A regression fails, and so does a missing entry under ``missing="fail"``. Each verdict says what
changed in words (``sync time per step 0 -> 41 us: a new host synchronize``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gapscope import __version__
from gapscope.errors import GapscopeError
from gapscope.regression.metrics import CATEGORIES_NEW_IN_2, METRICS, NEW_SYNC, Metric, verdict_change
from gapscope.regression.thresholds import DEFAULT_MISSING, MISSING_POLICIES, Threshold, ThresholdSet
from gapscope.schema import check_result
from gapscope.text import name as display_name

if TYPE_CHECKING:  # pandas is imported on first use: refusing a bad path must stay quick
    import pandas as pd

    from gapscope.regression.entries import Entries

__all__ = [
    "COMPARISON_SCHEMA",
    "SCOPES",
    "STATUSES",
    "Comparison",
    "Verdict",
    "compare",
    "compare_paths",
    "default_scope",
    "load_input",
]

COMPARISON_SCHEMA = "gapscope.comparison/2"
#: A merged report of many traces (gapscope.fleet): its by_name, devices (one per rank) and
#: streams sections have the fields compare reads; ranks match in order (docs/schema.md).
FLEET_SCHEMA_PREFIX = "gapscope.fleet/"
#: Every scope, in report order (launch: checked when a launch threshold is in force).
SCOPES = ("range", "device", "stream", "launch")
#: Statuses in report order: what needs attention first.
STATUSES = ("regression", "missing", "within-noise", "improved", "new", "ok")
_SECTIONS = {"range": "by_name", "device": "devices", "stream": "streams"}
_EPS = 1e-9  # relative tolerance: a change equal to its limit is not over it
#: How each scope names its entries in sentences ("the range is no longer replayed ...").
_NOUNS = {"range": "range", "device": "device", "stream": "stream", "launch": "launch API"}


@dataclass(frozen=True)
class Verdict:
    """The outcome for one metric of one matched entry, or for an entry found on one side only
    (``metric`` None, status ``missing`` or ``new``).

    ``baseline``/``current`` are medians over each side's runs of the per-instance values (a
    verdict code for ``verdict``); ``delta`` = current - baseline; ``relative_delta`` = delta /
    baseline (None when the baseline is 0); ``limit`` is the allowed change for the worse in the
    metric's unit; ``noise`` is the larger of the two sides' spreads (max - min over runs).
    ``failed`` says whether it fails the build and ``words`` what changed, for people;
    ``per_instance`` is how a range's value was taken over its instances (``median``, or
    ``mean`` for pooled rows); ``limit_text`` is the threshold's limit as people read it.
    """

    scope: str
    key: str
    match: dict[str, Any]
    metric: str | None
    status: str
    baseline: float | str | None
    current: float | str | None
    delta: float | None
    relative_delta: float | None
    threshold: str | None
    limit: float | None
    noise: float
    baseline_spread: float | None
    current_spread: float | None
    baseline_runs: int
    current_runs: int
    baseline_count: float | None = None
    current_count: float | None = None
    failed: bool = False
    words: str = ""
    per_instance: str | None = None
    limit_text: str = ""

    def summary(self) -> str:
        """One line for people: ``range graph: sync time 0 -> 2.64 ms: a new host synchronize
        (+2.64 ms, limit +10%+20 us): regression``."""
        where = f"{self.scope} {self.key}"
        if self.metric is None:
            return f"{where}: {self.words}"
        m = METRICS[self.metric]
        text = f"{where}: {self.words} ("
        if m.unit != "verdict":
            text += f"{m.format_delta(self.delta)}, "
        text += f"limit {self.threshold_limit_text()}"
        if self.noise > 0:
            text += f", noise {m.format_delta(self.noise).lstrip('+')}"
        return text + f"): {self.status}"

    def threshold_limit_text(self) -> str:
        """The limit as people read it (``+5%``, ``+2.0 pp``, ``+10%+20 us``, ``same``)."""
        return self.limit_text or "—"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


@dataclass
class Comparison:
    """Every verdict of one compare, the thresholds used, the scopes compared, the missing
    policy and where the runs came from."""

    verdicts: list[Verdict]
    thresholds: list[str]
    baseline_sources: list[str]
    current_sources: list[str]
    warnings: list[str] = field(default_factory=list)
    scope: tuple[str, ...] = ("range",)
    missing: str = DEFAULT_MISSING

    @property
    def regressions(self) -> list[Verdict]:
        """The failing verdicts (regressions, and missing entries under ``missing="fail"``)."""
        return [v for v in self.verdicts if v.failed]

    @property
    def passed(self) -> bool:
        """True when nothing failed."""
        return not self.regressions

    @property
    def exit_code(self) -> int:
        """0 when nothing failed, 1 otherwise."""
        return 0 if self.passed else 1

    def counts(self) -> dict[str, int]:
        """How many verdicts have each status (every status present, in report order)."""
        out = {s: 0 for s in STATUSES}
        for v in self.verdicts:
            out[v.status] += 1
        return out

    def ordered(self) -> list[Verdict]:
        """Verdicts in report order: failures first, then by status (regression, missing, noise,
        improved, new, ok); stable within a status (scope order ranges, devices, streams, launch
        APIs; input order)."""
        rank = {s: i for i, s in enumerate(STATUSES)}
        return sorted(self.verdicts, key=lambda v: (not v.failed, rank[v.status]))

    def unmatched(self) -> list[tuple[str, str, str]]:
        """``(scope, key, "new"|"missing")`` for each entry found on one side only."""
        return [(v.scope, v.key, v.status) for v in self.verdicts if v.metric is None]

    def failures(self) -> list[str]:
        """Each failure in words, in report order: ``range graph: sync time 0 -> 2.64 ms: a new
        host synchronize``."""
        return [f"{v.scope} {v.key}: {v.words}" for v in self.ordered() if v.failed]

    def headline(self) -> str:
        """One line: ``FAIL: 2 regressions: range graph sync, ...`` or ``PASS: ...``."""
        c = self.counts()
        if self.passed:
            parts = [f"{c[s]} {s}" for s in STATUSES if c[s] and s != "regression"]
            checked = sum(c[s] for s in ("ok", "within-noise", "improved"))
            return f"PASS: no regression in {checked} checks" + (f" ({', '.join(parts)})" if parts else "")
        regs = self.regressions
        names = ", ".join(f"{v.scope} {display_name(v.key)} " + (METRICS[v.metric].short if v.metric else "missing")
                          for v in regs[:3])
        more = f", and {len(regs) - 3} more" if len(regs) > 3 else ""
        n_reg = sum(v.status == "regression" for v in regs)
        n_miss = len(regs) - n_reg
        counted = [f"{n_reg} regression{'s' if n_reg != 1 else ''}"] if n_reg else []
        counted += [f"{n_miss} missing"] if n_miss else []
        return f"FAIL: {', '.join(counted)}: {names}{more}"

    def to_dict(self) -> dict[str, Any]:
        """The comparison as JSON-ready data (schema ``gapscope.comparison/2``, docs/schema.md)."""
        return {
            "schema": COMPARISON_SCHEMA,
            "gapscope_version": __version__,
            "passed": self.passed,
            "exit_code": self.exit_code,
            "headline": self.headline(),
            "failures": self.failures(),
            "baseline": {"runs": len(self.baseline_sources), "sources": list(self.baseline_sources)},
            "current": {"runs": len(self.current_sources), "sources": list(self.current_sources)},
            "thresholds": list(self.thresholds),
            "scope": list(self.scope),
            "missing": self.missing,
            "counts": self.counts(),
            "unmatched": [
                {"scope": s, "key": k, "status": st} for s, k, st in self.unmatched()
            ],
            "warnings": list(self.warnings),
            "verdicts": [v.to_dict() for v in self.ordered()],
        }


# --------------------------------------------------------------------------------------------
# loading inputs


def load_input(path: str | Path, window: tuple[int | None, int | None] | None = None) -> dict[str, Any]:
    """A result dict from a result JSON (single or many-trace), a `gapscope run` folder (its
    analysis.json) or a trace (analyzed on the fly with `gapscope analyze`'s defaults, or taken
    from the result cache: gapscope.cache.analysis_result); GapscopeError for anything else.
    ``window``: a trace is analyzed over that time window (`--window`, gapscope.analysis.time_window);
    a saved result cannot be cut and is refused."""
    from gapscope.inputs import resolve

    found = resolve(path).require("analysis", "fleet", "run", "trace", command="compare")
    if window is not None and found.kind != "trace":
        raise GapscopeError(f"{found.given}: --window cuts traces, and this is a saved result; give its trace, "
                            "or analyze it with `gapscope analyze TRACE --window ... -o result.json`", 2)
    if found.kind == "trace":
        from gapscope.cache import analysis_result

        options = {} if window is None else {"window": window}
        data = analysis_result(found.path, found.format, options)[0].to_dict()
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
    baseline: Sequence[str | Path], current: Sequence[str | Path], thresholds: ThresholdSet, *,
    scope: Sequence[str] | None = None, missing: str = DEFAULT_MISSING,
    window: tuple[int | None, int | None] | None = None,
) -> Comparison:
    """Load every input (result JSON or trace; ``window``: traces analyzed over that time
    window) and :func:`compare` them."""
    if not baseline:
        raise GapscopeError("no baseline given", 2)
    if not current:
        raise GapscopeError("no current result given", 2)
    base = [load_input(p, window) for p in baseline]
    cur = [load_input(p, window) for p in current]
    return compare(
        base, cur, thresholds, baseline_sources=[str(p) for p in baseline],
        current_sources=[str(p) for p in current], scope=scope, missing=missing,
    )


# --------------------------------------------------------------------------------------------
# the comparison


@dataclass(frozen=True)
class _Side:
    """One side's entries of one scope over its runs: per entry (the frame's index) the median
    and spread of every metric over the runs where it has GPU work, how many such runs, the
    median instance count, each run's verdict and graph-replay flag, and how reports name it."""

    median: pd.DataFrame
    spread: pd.DataFrame
    runs: pd.Series
    count: pd.Series
    verdicts: pd.Series
    replays: pd.Series
    meta: pd.DataFrame
    order: list[str]


_META = ["key", "name", "match", "per_instance"]


def _side(runs: list[Entries]) -> _Side:
    import pandas as pd

    frames = [r.frame.assign(_run=i) for i, r in enumerate(runs) if not r.frame.empty]
    order: list[str] = []
    if not frames:
        empty = pd.DataFrame()
        return _Side(empty, empty, pd.Series(dtype=int), pd.Series(dtype=float), pd.Series(dtype=object),
                     pd.Series(dtype=object), pd.DataFrame(columns=_META), order)
    all_rows = pd.concat(frames)
    order = list(dict.fromkeys(all_rows.index))
    rows = all_rows[all_rows["work"].astype(bool)]
    metrics = [m.name for m in METRICS.values() if m.name in rows.columns and m.unit != "verdict"]
    grouped = rows.groupby(level=0, sort=False)
    values = grouped[metrics]
    return _Side(
        median=values.median(), spread=values.max() - values.min(), runs=grouped.size(),
        count=grouped["count"].median(), verdicts=grouped["verdict"].agg(list),
        replays=grouped["replay"].agg(list), meta=all_rows[~all_rows.index.duplicated()][_META], order=order,
    )


def default_scope(baseline: Sequence[Entries], current: Sequence[Entries]) -> tuple[str, ...]:
    """The ranges when either side's runs have ranges with GPU work, else the devices."""
    has = [any(bool(e.frame["work"].any()) for e in side if not e.frame.empty) for side in (baseline, current)]
    return ("range",) if any(has) else ("device",)


def _decide(worse_by: float, limit: float, noise: float, scale: float) -> str:
    """The status of a change that made the metric worse by ``worse_by`` (negative: better)."""
    eps = _EPS * max(1.0, scale)
    over = abs(worse_by) - limit > eps
    beyond_noise = abs(worse_by) - noise > eps
    if not over:
        return "ok"
    if not beyond_noise:
        return "within-noise"
    return "regression" if worse_by > 0 else "improved"


def _mode(codes: list[str]) -> str:
    """The most common verdict of a side's runs (the first one seen on a tie)."""
    counts: dict[str, int] = {}
    for c in codes:
        counts[c] = counts.get(c, 0) + 1
    return max(counts, key=counts.get)  # type: ignore[arg-type]


def _most(flags: list[bool]) -> bool:
    """Whether most of a side's runs say so (a graph replay row in most runs)."""
    return 2 * sum(bool(f) for f in flags) > len(flags)


class _Checker:
    """Builds the verdicts of one scope from the two sides."""

    def __init__(self, scope: str, base: _Side, cur: _Side, missing: str) -> None:
        self.scope, self.base, self.cur, self.missing = scope, base, cur, missing

    def per_step(self, ident: str) -> bool:
        """Whether the entry repeats (a range with more than one instance on either side)."""
        counts = [s.count.get(ident) for s in (self.base, self.cur)]
        return self.scope == "range" and any(c is not None and c > 1 for c in counts)

    def meta(self, ident: str) -> pd.Series:
        return (self.base.meta if ident in self.base.meta.index else self.cur.meta).loc[ident]

    def counts(self, ident: str) -> tuple[float | None, float | None]:
        if self.scope != "range":
            return None, None
        return tuple(_float(s.count.get(ident)) for s in (self.base, self.cur))  # type: ignore[return-value]

    def presence(self, ident: str, status: str, had_rows: bool) -> Verdict:
        """The verdict of an entry with GPU work on one side only (``had_rows``: current has
        the entry, without GPU work)."""
        meta = self.meta(ident)
        side = self.base if status == "missing" else self.cur
        metric = "launch.calls" if self.scope == "launch" else "kernels"
        amount = _float(side.median.at[ident, metric]) if metric in side.median.columns else None
        per = " per step" if self.per_step(ident) else ""
        what = "" if amount is None else f"{_num(amount)} {'calls' if self.scope == 'launch' else 'kernels'}{per}"
        if status == "new":
            words = "new in current" + (f" ({what})" if what else "")
        else:
            words = ("no GPU work in current" if had_rows else "missing from current") + \
                (f" (baseline: {what})" if what else "")
        return self._make(ident, meta, None, status, None, None, None, None, None, None, 0.0, None, None,
                          words, failed=status == "missing" and self.missing == "fail")

    def check(self, ident: str, metric: str, th: Threshold) -> Verdict:
        """The verdict on one metric of an entry both sides have: medians over each side's runs,
        the change against the threshold and the runs' spread."""
        m = METRICS[metric]
        meta = self.meta(ident)
        if m.unit == "verdict":
            return self._verdict_check(ident, th, meta)
        b, c = float(self.base.median.at[ident, metric]), float(self.cur.median.at[ident, metric])
        b_spread, c_spread = float(self.base.spread.at[ident, metric]), float(self.cur.spread.at[ident, metric])
        noise = max(b_spread, c_spread)
        delta = c - b
        limit = th.allowed_increase(b)
        status = _decide(delta * m.worse, limit, noise, max(abs(b), abs(c)))
        words = self.words(ident, m, b, c, status)
        return self._make(ident, meta, metric, status, b, c, delta, delta / b if b != 0 else None, th, limit,
                          noise, b_spread, c_spread, words)

    def _verdict_check(self, ident: str, th: Threshold, meta: pd.Series) -> Verdict:
        b_codes, c_codes = list(self.base.verdicts[ident]), list(self.cur.verdicts[ident])
        b, c = _mode(b_codes), _mode(c_codes)
        was, now = (_most(side.replays[ident]) for side in (self.base, self.cur))
        change = verdict_change(b, c, was, now)
        status = "ok"
        if change:
            overlap = bool(set(b_codes) & set(c_codes))  # a verdict some runs of both sides had
            status = "within-noise" if overlap else ("regression" if change > 0 else "improved")
        noun = _NOUNS[self.scope]
        if change > 0 and was and not now:
            words = f"graph_replay verdict lost: the {noun} is no longer replayed as a CUDA graph (now {c})"
        elif change > 0:
            from gapscope.analysis.verdicts import READINGS

            words = f"verdict {b} -> {c}: {READINGS.get(c, c)}"
        else:
            words = f"verdict {b} -> {c}" if b != c else f"verdict {b}"
        return self._make(ident, meta, "verdict", status, b, c, None, None, th, 0.0, 0.0, None, None, words)

    def _make(self, ident: str, meta: pd.Series, metric: str | None, status: str, b: Any, c: Any, delta: Any,
              rel: Any, th: Threshold | None, limit: float | None, noise: float, b_spread: Any, c_spread: Any,
              words: str, *, failed: bool | None = None) -> Verdict:
        b_count, c_count = self.counts(ident)
        return Verdict(
            scope=self.scope, key=str(meta["key"]), match=dict(meta["match"]), metric=metric, status=status,
            baseline=b, current=c, delta=delta, relative_delta=rel, threshold=None if th is None else str(th),
            limit=limit, noise=noise, baseline_spread=b_spread, current_spread=c_spread,
            baseline_runs=int(self.base.runs.get(ident, 0)), current_runs=int(self.cur.runs.get(ident, 0)),
            baseline_count=b_count, current_count=c_count,
            failed=status == "regression" if failed is None else failed, words=words,
            per_instance=meta["per_instance"] if isinstance(meta["per_instance"], str) else None,
            limit_text="" if th is None else th.describe_limit(),
        )

    def words(self, ident: str, m: Metric, b: float, c: float, status: str) -> str:
        """What changed, for people: ``sync time per step 0 -> 41 us: a new host synchronize``."""
        per = " per step" if self.per_step(ident) and m.kind != "launch" else ""
        text = f"{m.label}{per} {m.format(b)} -> {m.format(c)}"
        if status not in ("regression", "within-noise") or (c - b) * m.worse <= 0:
            return text
        reason = NEW_SYNC if m.name == "sync_ns" and b == 0 else m.worse_means
        text += f": {reason}"
        if m.name in ("gap_fraction", "gap_ns", "gap_between_replays_ns"):
            text += self._largest_rise(ident)
        return text

    def _largest_rise(self, ident: str) -> str:
        """``; most of it host time 15.4 ms -> 25.1 ms``: the gap category that rose the most."""
        rises = []
        for m in METRICS.values():
            if m.kind == "category" and m.name in self.base.median.columns:
                b, c = self.base.median.at[ident, m.name], self.cur.median.at[ident, m.name]
                if not (math.isnan(b) or math.isnan(c)) and c > b:
                    rises.append((c - b, m, b, c))
        if not rises:
            return ""
        _, m, b, c = max(rises, key=lambda r: r[0])
        return f" (largest rise: {m.label} {m.format(b)} -> {m.format(c)})"


def _float(x: Any) -> float | None:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return float(x)


def compare(
    baseline: Sequence[dict[str, Any]],
    current: Sequence[dict[str, Any]],
    thresholds: ThresholdSet | Iterable[Threshold] | None = None,
    *,
    baseline_sources: Sequence[str] | None = None,
    current_sources: Sequence[str] | None = None,
    scope: Sequence[str] | None = None,
    missing: str = DEFAULT_MISSING,
) -> Comparison:
    """Compare result dicts of several runs per side; see the module docstring for the rules.

    ``thresholds`` defaults to :meth:`ThresholdSet.defaults`; ``scope`` (some of range, device,
    stream) to :func:`default_scope`; ``missing`` is ``fail``, ``warn`` or ``ignore``.
    ``*_sources`` label the runs in messages and reports (default ``baseline[0]``, ...).
    """
    if not baseline:
        raise GapscopeError("no baseline given", 2)
    if not current:
        raise GapscopeError("no current result given", 2)
    if missing not in MISSING_POLICIES:
        raise GapscopeError(f"missing must be one of {', '.join(MISSING_POLICIES)}, not {missing!r}", 2)
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

    from gapscope.regression.entries import entries

    def read(scope_name: str) -> tuple[list[Entries], list[Entries]]:
        return ([entries(r, scope_name, s) for r, s in zip(baseline, bsrc)],
                [entries(r, scope_name, s) for r, s in zip(current, csrc)])

    tables = {"range": read("range")}
    scopes = tuple(scope) if scope else default_scope(*tables["range"])
    scopes = tuple(s for s in SCOPES if s in scopes or (s == "launch" and thresholds.has_launch()))
    warnings = _option_warnings(baseline, current)
    verdicts: list[Verdict] = []
    count_changes: list[str] = []
    matched = 0
    for sc in scopes:
        if sc not in tables:
            tables[sc] = read(sc)
        b_runs, c_runs = tables[sc]
        checked = _answerable(sc, thresholds, b_runs + c_runs, warnings)
        base, cur = _side(b_runs), _side(c_runs)
        checker = _Checker(sc, base, cur, missing)
        had_rows = set(cur.meta.index)
        for ident in dict.fromkeys([*base.order, *cur.order]):
            in_base, in_cur = ident in base.runs.index, ident in cur.runs.index
            if in_base and in_cur:
                if sc != "launch":
                    matched += 1
                counts = checker.counts(ident)
                if sc == "range" and counts[0] != counts[1]:
                    count_changes.append(f"{checker.meta(ident)['key']} ({_num(counts[0])} -> {_num(counts[1])})")
                name = checker.meta(ident)["name"]
                verdicts += [checker.check(ident, metric, th)
                             for metric, th in thresholds.for_entry(sc, name).items() if metric in checked]
            elif in_base and missing != "ignore":
                verdict = checker.presence(ident, "missing", ident in had_rows)
                if sc == "launch":  # only a launch API a threshold names exactly fails when it is gone
                    named = any(t.api == verdict.key for t in thresholds if METRICS[t.metric].kind == "launch")
                    verdict = _with(verdict, failed=verdict.failed and named)
                verdicts.append(verdict)
            elif in_cur:
                verdicts.append(checker.presence(ident, "new", False))
    if not matched:
        raise GapscopeError(_nothing_shared(scopes, tables), 2)
    if count_changes:
        shown = ", ".join(count_changes[:5])
        more = f" and {len(count_changes) - 5} more" if len(count_changes) > 5 else ""
        warnings.append(
            f"instance counts differ for {shown}{more}; range values are compared per instance"
        )
    return Comparison(verdicts, thresholds.specs(), bsrc, csrc, warnings, scopes, missing)


def _with(v: Verdict, **changes: Any) -> Verdict:
    return Verdict(**{**asdict(v), **changes})


def _answerable(scope: str, thresholds: ThresholdSet, runs: list[Entries], warnings: list[str]) -> set[str]:
    """The metrics of ``scope``'s thresholds that every run can answer. A default that some run
    cannot answer (no gap categories without attribution; a many-trace result's pooled range rows)
    is left out with a warning; a threshold someone wrote is refused in one line. Streams have no
    verdict: ``verdict`` is not a stream metric."""
    wanted: dict[str, Threshold] = {}
    for t in thresholds:
        m = METRICS[t.metric]
        if t.off or (m.kind == "launch") != (scope == "launch") or (scope == "stream" and m.kind == "verdict"):
            continue
        if scope in ("device", "stream") and t.range_glob is not None:
            continue
        wanted.setdefault(t.metric, t)
    schemas = {r.schema for r in runs}
    out = set()
    for metric, t in wanted.items():
        m = METRICS[metric]
        if m.kind == "category" and m.field in CATEGORIES_NEW_IN_2:
            old = next((r for r in runs if r.schema.endswith("/1")), None)
            if old is not None:
                raise GapscopeError(
                    f"{old.source} is a {old.schema} result, whose gap categories have no {m.field} "
                    f"(its launch time holds all the host-side time): {t} needs /2 results on both "
                    "sides (analyze the traces again)", 2)
        if m.name == "launch_ns" and len({s.rsplit("/", 1)[-1] for s in schemas}) > 1:
            raise GapscopeError(
                f"{t} compares results of different schemas ({', '.join(sorted(schemas))}): launch time "
                "held all the host-side time in version 1 and holds only the launch calls in version 2; "
                "analyze the traces again with one gapscope", 2)
        lacking = next((r for r in runs if (not r.frame.empty or not r.present) and metric not in r.held), None)
        if lacking is None:
            out.add(metric)
            continue
        what = _unheld(m, scope, lacking)
        if t.origin == "default":
            warnings.append(f"the default {t} is not checked on {_NOUNS[scope]}s: {what}")
        else:
            raise GapscopeError(f"{what}; cannot check {t}", 2)
    return out


def _unheld(m: Metric, scope: str, run: Entries) -> str:
    """Why a run cannot answer a metric, in words that start with the run."""
    section = _SECTIONS.get(scope, "launch")
    thing = {"category": "gap categories", "verdict": "verdict"}.get(m.kind, f"'{m.field}' field")
    if run.schema.startswith(FLEET_SCHEMA_PREFIX) and scope == "range":
        return f"{run.source} is a many-trace result, whose pooled range rows have no {thing}"
    if m.kind == "launch":
        return f"{run.source} has no launch statistics (analyzed with --no-attribution)"
    if m.kind == "category":
        return f"{run.source} has no gap categories in its {section} rows (analyzed with --no-attribution)"
    return f"{run.source} has no {thing} in its {section} rows"


def _nothing_shared(scopes: Sequence[str], tables: dict[str, tuple[list[Entries], list[Entries]]]) -> str:
    """The one line that refuses two sides without a common entry."""
    def names(runs: list[Entries]) -> list[str]:
        keys = [k for r in runs if not r.frame.empty for k in r.frame.loc[r.frame["work"].astype(bool), "key"]]
        return list(dict.fromkeys(keys))

    compared = [s for s in scopes if s != "launch"]
    what = " or ".join("range with GPU work" if s == "range" else s for s in compared)
    b = [n for s in compared for n in names(tables[s][0])]
    c = [n for s in compared for n in names(tables[s][1])]
    if not b and not c:
        return f"nothing to compare: neither side has a {what}"

    def listed(keys: list[str]) -> str:
        if not keys:
            return "none"
        return ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")

    if not b or not c:  # one side has none at all: recorded differently, not another program
        empty, full, keys = ("baseline", "current", c) if not b else ("current", "baseline", b)
        hint = " (recorded without NVTX: nsys -t cuda,nvtx?)" if compared == ["range"] else ""
        return (f"{empty} has no {what}{hint}, {full} has {listed(keys)}: nothing to match; record both "
                "the same way, or choose what to compare with --scope")
    return (f"baseline and current share no {what.replace(' or ', ' nor ')} (baseline: {listed(b)}; "
            f"current: {listed(c)}): not two runs of one program? Compare runs of one program, or choose "
            "what to compare with --scope")


def _num(x: float | None) -> str:
    if x is None:
        return "?"
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,.1f}"


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
        "domain filter": lambda r: r["options"]["domain_filter"],
        "threads option": lambda r: r["options"]["threads"],
        "name grouping (--no-normalize)": lambda r: r["options"]["normalize_names"],
        "stall threshold": lambda r: r["options"]["stall_threshold_ns"],
        # "none" (no graph launched) says nothing about how graphs were traced: a graph that
        # stopped being captured leaves its trace without graph launches
        "graph tracing mode": lambda r: r["trace"]["graph_trace"] if r["trace"]["graph_trace"] != "none" else None,
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
