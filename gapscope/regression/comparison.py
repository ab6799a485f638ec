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
    an entry only current has: listed, never failed;
``info``
    a total of a device or stream whose two sides did not do one unit of work (their kernel
    mixes differ: two windows of a program, runs of different lengths): reported, never judged.

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
    from gapscope.regression.plan import Plan

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
STATUSES = ("regression", "missing", "within-noise", "improved", "new", "info", "ok")
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
    #: the words say something worth reading even when nothing failed (more of the same work, a
    #: changed kernel mix, graph coverage, a total not judged)
    note: bool = False

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

    def notes(self) -> list[str]:
        """What the verdicts that did not fail have to say, in words, in report order: ``range
        eager: kernels 2,496 -> 4,992: 2x the work (every kernel's count x2) ...``."""
        return [f"{v.scope} {v.key}: {v.words}" for v in self.ordered() if v.note and not v.failed]

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
        shown = len(regs) if len(regs) <= 4 else 3  # "and 1 more" would say less than the name
        names = ", ".join(f"{v.scope} {display_name(v.key)} " + (METRICS[v.metric].short if v.metric else "missing")
                          for v in regs[:shown])
        more = f", and {len(regs) - shown} more" if len(regs) > shown else ""
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
            "notes": self.notes(),
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

    def __init__(self, scope: str, base: _Side, cur: _Side, missing: str, plan: Plan | None = None) -> None:
        from gapscope.regression.plan import Plan

        self.scope, self.base, self.cur, self.missing = scope, base, cur, missing
        self.plan = plan if plan is not None else Plan([], [], {}, {}, {}, {})

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
        unjudged = self._unjudged(ident, m)
        if unjudged:
            words = f"{m.label} {m.format(b)} -> {m.format(c)}: not judged: {unjudged}"
            return self._make(ident, meta, metric, "info", b, c, delta, delta / b if b != 0 else None, th, limit,
                              noise, b_spread, c_spread, words, note=True)
        status = _decide(delta * m.worse, limit, noise, max(abs(b), abs(c)))
        words, note = self.words(ident, m, b, c, status)
        return self._make(ident, meta, metric, status, b, c, delta, delta / b if b != 0 else None, th, limit,
                          noise, b_spread, c_spread, words, note=note)

    def _unjudged(self, ident: str, m: Metric) -> str:
        """Why a device's or stream's total is reported and not judged (its two sides did not do
        one unit of work), or "" when it is judged."""
        if self.scope not in ("device", "stream") or not m.summed:
            return ""
        work = self.plan.work(ident)
        if work.comparable:
            return ""
        if work.kind == "changed":
            return (f"the two runs' {_NOUNS[self.scope]}s did different work (kernel mix: "
                    f"{work.mix_words() or 'counts changed by different factors'})")
        b, c = (float(s.median.at[ident, "kernels"]) for s in (self.base, self.cur))
        if b == c:
            return ""
        return (f"its kernels differ ({_num(b)} -> {_num(c)}) and the results hold no kernel names to tell "
                "whether that is more of the same work")

    def coverage(self, ident: str, th: Threshold) -> Verdict:
        """The eager fallback of one range name (docs/ci.md, "Modes"): current's eager instances
        against what the baseline's share of eager instances gives at current's instance count."""
        import statistics

        meta = self.meta(ident)
        b_runs, c_runs = self.plan.coverage.get(ident, ([], []))

        def side(runs: list[tuple[int, int]]) -> tuple[float, float, float, float]:
            shares = [e / (e + r) for e, r in runs if e + r]
            totals = [e + r for e, r in runs]
            eager = [e for e, _ in runs]
            spread = max(shares) - min(shares) if shares else 0.0
            return (statistics.median(shares) if shares else 0.0, float(statistics.median(totals or [0])),
                    float(statistics.median(eager or [0])), spread)

        b_share, b_total, b_eager, b_spread = side(b_runs)
        _, c_total, c_eager, c_spread = side(c_runs)
        expected = math.ceil(b_share * c_total - 1e-9)  # the baseline's share at current's count, rounded up
        delta = c_eager - expected
        noise = max(b_spread, c_spread) * c_total
        limit = th.allowed_increase(expected)
        status = _decide(delta, limit, noise, max(abs(expected), abs(c_eager)))
        name = display_name(str(meta["name"]))
        c_rep, b_rep = c_total - c_eager, b_total - b_eager
        if b_total == c_total:
            counts = f"eager {_num(b_eager)} -> {_num(c_eager)}, replayed {_num(b_rep)} -> {_num(c_rep)}"
        else:
            counts = f"{_num(b_eager)} of {_num(b_total)} eager -> {_num(c_eager)} of {_num(c_total)}"
        if delta > 0:
            more = "" if b_total == c_total else " than the baseline's share"
            words = f"eager fallback: {_num(delta)} more of {_num(c_total)} {name} ran eager{more} ({counts})"
        elif delta < 0:
            more = "" if b_total == c_total else " than the baseline's share"
            words = f"graph coverage: {_num(-delta)} more of {_num(c_total)} {name} replayed{more} ({counts})"
        else:
            words = f"{_num(c_eager)} of {_num(c_total)} {name} ran eager ({counts})"
        return self._make(ident, meta, "eager_fallback", status, float(expected), float(c_eager), float(delta),
                          delta / expected if expected else None, th, limit, noise, b_spread * c_total,
                          c_spread * c_total, words, note=delta != 0)

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
              words: str, *, failed: bool | None = None, note: bool = False) -> Verdict:
        b_count, c_count = self.counts(ident)
        return Verdict(
            scope=self.scope, key=str(meta["key"]), match=dict(meta["match"]), metric=metric, status=status,
            baseline=b, current=c, delta=delta, relative_delta=rel, threshold=None if th is None else str(th),
            limit=limit, noise=noise, baseline_spread=b_spread, current_spread=c_spread,
            baseline_runs=int(self.base.runs.get(ident, 0)), current_runs=int(self.cur.runs.get(ident, 0)),
            baseline_count=b_count, current_count=c_count,
            failed=status == "regression" if failed is None else failed, words=words,
            per_instance=meta["per_instance"] if isinstance(meta["per_instance"], str) else None,
            limit_text="" if th is None else th.describe_limit(), note=note,
        )

    def words(self, ident: str, m: Metric, b: float, c: float, status: str) -> tuple[str, bool]:
        """What changed, for people (``sync time per step 0 -> 41 us: a new host synchronize``),
        and whether the words are worth reading when nothing failed (a note)."""
        per = " per step" if self.per_step(ident) and m.kind != "launch" else ""
        work = self.plan.work(ident)
        if m.name == "kernels":
            return self._kernel_words(ident, b, c, status, per, work)
        text = f"{m.label}{per} {m.format(b)} -> {m.format(c)}"
        if work.scales and m.summed:
            text += f" per unit of work ({work.factor_words()})"
        if status not in ("regression", "within-noise") or (c - b) * m.worse <= 0:
            return text, False
        reason = NEW_SYNC if m.name == "sync_ns" and b == 0 else m.worse_means
        text += f": {reason}"
        if m.name in ("gap_fraction", "gap_ns", "gap_between_replays_ns"):
            text += self._largest_rise(ident)
        return text, False

    def _kernel_words(self, ident: str, b: float, c: float, status: str, per: str, work: Any) -> tuple[str, bool]:
        """The kernels check in words: more of the same work (every kernel's count scaled by one
        factor), a changed kernel mix (naming the kernels that appeared, split or went), or, for
        results without kernel names, just more or fewer kernels."""
        m = METRICS["kernels"]
        if work.scales:
            raw = c * work.factor
            return (f"kernels{per} {m.format(b)} -> {m.format(raw)}: {work.factor_words()}; compared per unit "
                    f"of work: {m.format(b)} -> {m.format(c)}", True)
        text = f"kernels{per} {m.format(b)} -> {m.format(c)}"
        parent = self.plan.parent.get(ident, ident)  # a mode's mix is its name's, per instance
        mix = work.mix_words(" per step" if self.per_step(parent) else "") if work.kind == "changed" else ""
        worse = status in ("regression", "within-noise") and c > b
        if worse:
            if work.kind == "changed":
                return text + f": {m.worse_means}" + (f": {mix}" if mix else ""), False
            return text + ": more kernels (the results hold no kernel names to tell a split from more work)", False
        if mix:
            return text + f": the kernel mix changed: {mix}", True
        return text, False

    def _largest_rise(self, ident: str) -> str:
        """``(largest rise: sync time 0 -> 2.64 ms)``: the gap category that rose the most; for
        host-side time (launch, host, stall) also whether the host's own work rose, which the
        range's wall time and CUDA calls tell, or the GPU ran dry earlier (docs/ci.md)."""
        rises = []
        for m in METRICS.values():
            if m.kind == "category" and m.name in self.base.median.columns:
                b, c = self.base.median.at[ident, m.name], self.cur.median.at[ident, m.name]
                if not (math.isnan(b) or math.isnan(c)) and c > b:
                    rises.append((c - b, m, b, c))
        if not rises:
            return ""
        rise, m, b, c = max(rises, key=lambda r: r[0])
        text = f"largest rise: {m.label} {m.format(b)} -> {m.format(c)}"
        if m.field not in ("launch", "host", "stall"):
            return f" ({text})"
        return f" ({text}{self._host_work(ident, rise)})"

    def _host_work(self, ident: str, rise: float) -> str:
        """Whether the host's own work in the entry rose with its host-side gap time: it did when
        its wall time or its time in CUDA calls per instance rose by at least half as much, or it
        made more CUDA calls; else the GPU ran dry earlier (it finished its queue sooner, and the
        same host work left it idle for longer)."""
        def value(side: _Side, name: str) -> float:
            v = side.median.at[ident, name] if name in side.median.columns else math.nan
            return float(v)

        wall_b, wall_c = value(self.base, "wall_ns"), value(self.cur, "wall_ns")
        calls_b, calls_c = value(self.base, "api_calls"), value(self.cur, "api_calls")
        api_b, api_c = value(self.base, "api_ns"), value(self.cur, "api_ns")
        if self.scope != "range" or any(math.isnan(x) for x in (wall_b, wall_c, calls_b, calls_c, api_b, api_c)):
            return "; the results hold no host work to tell a slower host from a GPU that ran dry earlier"
        wall, api = METRICS["wall_ns"], METRICS["api_ns"]
        per = " per step" if self.per_step(ident) else ""
        unit = " per unit of work" if self.plan.work(ident).scales else ""
        facts = (f"wall{per} {wall.format(wall_b)} -> {wall.format(wall_c)}, CUDA calls {_num(calls_b)} -> "
                 f"{_num(calls_c)} taking {api.format(api_b)} -> {api.format(api_c)}{unit}")
        if calls_c > calls_b or max(wall_c - wall_b, api_c - api_b) >= rise / 2:
            return f": the host's own work rose ({facts})"
        return f": the GPU ran dry earlier; the host's own work did not rise ({facts})"


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
    from gapscope.regression.plan import Plan

    def read(scope_name: str) -> tuple[list[Entries], list[Entries]]:
        return ([entries(r, scope_name, s) for r, s in zip(baseline, bsrc)],
                [entries(r, scope_name, s) for r, s in zip(current, csrc)])

    _refuse_unlike(baseline, current, bsrc, csrc)
    tables = {"range": read("range")}
    scopes = tuple(scope) if scope else default_scope(*tables["range"])
    scopes = tuple(s for s in SCOPES if s in scopes or (s == "launch" and thresholds.has_launch()))
    warnings = _option_warnings(baseline, current)
    windowed = [src for runs in tables["range"] for e in runs for src in [e.source] if e.windowed]
    verdicts: list[Verdict] = []
    count_changes: list[str] = []
    one_sided: dict[str, tuple[list[str], list[str]]] = {}
    matched = 0
    for sc in scopes:
        if sc not in tables:
            tables[sc] = read(sc)
        plan = Plan.of(sc, *tables[sc])
        b_runs, c_runs = plan.base, plan.cur
        checked = _answerable(sc, thresholds, b_runs + c_runs, warnings)
        base, cur = _side(b_runs), _side(c_runs)
        checker = _Checker(sc, base, cur, missing, plan)
        had_rows = set(cur.meta.index)
        for ident in dict.fromkeys([*base.order, *cur.order]):
            in_base, in_cur = ident in base.runs.index, ident in cur.runs.index
            role = plan.role(ident)
            if in_base and in_cur:
                if sc != "launch":
                    matched += 1
                counts = checker.counts(ident)
                if sc == "range" and role != "mode" and counts[0] != counts[1]:
                    count_changes.append(f"{checker.meta(ident)['key']} ({_num(counts[0])} -> {_num(counts[1])})")
                name = checker.meta(ident)["name"]
                for metric, th in thresholds.for_entry(sc, name).items():
                    if metric not in checked:
                        continue
                    if METRICS[metric].kind == "coverage":
                        if role != "mode" and plan.replayed_somewhere(ident):
                            verdicts.append(checker.coverage(ident, th))
                    elif role != "name":
                        verdicts.append(checker.check(ident, metric, th))
            elif windowed and (in_base or in_cur) and sc != "launch" and role != "mode":
                one_sided.setdefault(sc, ([], []))[0 if in_base else 1].append(str(checker.meta(ident)["key"]))
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
    for sc, (only_b, only_c) in one_sided.items():
        warnings.append(_window_words(sc, only_b, only_c))
    if count_changes:
        shown = ", ".join(count_changes[:5])
        more = f" and {len(count_changes) - 5} more" if len(count_changes) > 5 else ""
        warnings.append(
            f"instance counts differ for {shown}{more}; range values are compared per instance"
        )
    return Comparison(verdicts, thresholds.specs(), bsrc, csrc, warnings, scopes, missing)


def _window_words(scope: str, only_base: list[str], only_cur: list[str]) -> str:
    """The one line that says a time window's entries on one side only were not compared."""
    noun = {"range": "range", "device": "device", "stream": "stream"}[scope]

    def listed(keys: list[str]) -> str:
        shown = ", ".join(display_name(k) for k in keys[:3])
        return shown + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")

    parts = []
    if only_base:
        parts.append(f"{len(only_base)} {noun}{'s' if len(only_base) != 1 else ''} only in baseline ({listed(only_base)})")
    if only_cur:
        parts.append(f"{len(only_cur)} only in current ({listed(only_cur)})")
    return (f"the time windows cover different parts of the program: {' and '.join(parts)}; "
            "not compared, and not failed")


def _tracer(result: dict[str, Any]) -> str | None:
    """The tracer that recorded a result's trace (gapscope.catalog), None when it does not say."""
    from gapscope import catalog

    fmt = (result.get("trace") or {}).get("format")
    return catalog.trace_format(fmt).tracer if fmt in catalog.FORMAT_NAMES else None


def _refuse_unlike(baseline: Sequence[dict], current: Sequence[dict], bsrc: list[str], csrc: list[str]) -> None:
    """GapscopeError (exit 2) when the two sides were recorded by different tracers, or traced
    CUDA graphs at different levels (node against graph): their gap figures differ by the
    tracer, not by the program (docs/ci.md, "Like with like")."""
    from gapscope import catalog

    def found(results: Sequence[dict], sources: list[str], get: Any) -> dict[str, str]:
        out: dict[str, str] = {}
        for r, src in zip(results, sources):
            value = get(r)
            if value is not None:
                out.setdefault(value, src)
        return out

    b, c = found(baseline, bsrc, _tracer), found(current, csrc, _tracer)
    if b and c and set(b) != set(c):
        bt, ct = sorted(set(b) - set(c)) or sorted(b), sorted(set(c) - set(b)) or sorted(c)
        words = catalog.TRACERS
        raise GapscopeError(
            f"baseline {b[bt[0]]} was recorded by {words[bt[0]].words}, current {c[ct[0]]} by "
            f"{words[ct[0]].words}: a tracer's own cost per launch is part of every gap it records, so "
            "their gap figures differ by the tracer, not the program; compare runs recorded with one tracer", 2)

    def level(r: dict) -> str | None:
        mode = (r.get("trace") or {}).get("graph_trace")
        return mode if mode in ("node", "graph") else None

    b, c = found(baseline, bsrc, level), found(current, csrc, level)
    if b and c and len(b) == 1 and len(c) == 1 and set(b) != set(c):
        (bl, bs), (cl, cs) = next(iter(b.items())), next(iter(c.items()))
        raise GapscopeError(
            f"baseline {bs} traced CUDA graphs at {bl} level, current {cs} at {cl} level: at graph level a "
            "replay is one opaque interval whose gaps are not traced, so their graph figures differ by the "
            "tracing; record both with one --cuda-graph-trace (node shows the gaps)", 2)


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
        if m.kind == "coverage":  # checked wherever a run holds instances that replayed
            if scope == "range":
                wanted.setdefault(t.metric, t)
            continue
        if scope in ("device", "stream") and t.range_glob is not None:
            continue
        wanted.setdefault(t.metric, t)
    schemas = {r.schema for r in runs}
    out = set()
    for metric, t in wanted.items():
        m = METRICS[metric]
        if m.kind == "coverage":
            out.add(metric)
            continue
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
