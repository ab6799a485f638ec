"""The entries of one result that compare matches across runs, with their values.

An entry is what compare matches between baseline and current: a range name (a ``by_name`` row,
keyed by its domain and group name, the normalized name the analysis grouped it by), a device, a
stream (device and stream: the pid changes from run to run) or a launch API. Its values are one
float per row and category metric of :data:`gapscope.regression.metrics.METRICS`, and the verdict.

A range name's values are **per instance**: the median over its instances with GPU work (the
``ranges`` rows, grouped the way ``by_name`` groups them), so one slow decode step does not
decide and a run with more steps is not slower by itself. A result that holds no instance rows
for a name (a many-trace result's pooled rows) gives the mean instead: summed fields divided by
the instance count. Its verdict is the ``by_name`` row's. Null fields (no gaps, no kernels) read
as 0; a field the result does not hold at all reads as NaN, which compare cannot check.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from gapscope import catalog
from gapscope.regression.metrics import METRICS
from gapscope.errors import GapscopeError

__all__ = ["MODES", "SECTIONS", "Entries", "entries", "label"]

#: The result section each scope reads.
SECTIONS = {"range": "by_name", "device": "devices", "stream": "streams", "launch": "launch"}
#: The row and category metrics, in catalog order (columns of every Entries frame).
VALUE_METRICS = tuple(m for m in METRICS.values() if m.kind in ("row", "category"))
LAUNCH_METRICS = tuple(m for m in METRICS.values() if m.kind == "launch")
_DEFAULT_DOMAIN = ""  # the grouping key of the default domain (null in the JSON)


@dataclass(frozen=True)
class Entries:
    """One run's entries of one scope.

    ``frame`` has one row per entry, indexed by its identity (a JSON text of ``match``), with the
    columns ``key`` (how reports name it), ``name`` (the group name range globs match; None
    outside ranges), ``match`` (the identifying fields), ``count`` (range instances, else NaN),
    ``work`` (whether it launched GPU work), ``per_instance`` (``median``, ``mean`` or None),
    ``verdict``, ``replay`` (a graph replay row) and one float column per metric.
    ``held`` names the metrics the result holds (the others are NaN: it cannot answer them);
    ``present`` is False when the result has no such section at all (launch statistics of a
    result analyzed without attribution).
    """

    frame: pd.DataFrame
    held: frozenset[str]
    schema: str
    source: str
    present: bool = True
    #: per entry (by identity): its kernels counted by kernel name and the units of work they
    #: were counted over (a range's instances with GPU work; 1 for a device); None when the
    #: result holds no kernel counts
    mix: dict[str, tuple[dict[str, int], float]] | None = None
    #: per range name and mode (gapscope.regression.entries.MODES): the medians over its
    #: instances in that mode, ``n``, ``verdict``, ``replay``; indexed by the name's identity
    modes: pd.DataFrame | None = None
    #: whether the result is of a time window of its trace (`--window`)
    windowed: bool = False


def label(domain: str | None, name: str) -> str:
    """A range name as the reports show it: ``[domain] name`` outside the default domain."""
    return f"[{domain}] {name}" if isinstance(domain, str) and domain else (name or "(unnamed)")


def _rows(result: dict[str, Any], section: str, source: str) -> list[dict[str, Any]]:
    rows = result.get(section)
    if rows is None and section == "launch":
        return []
    if not isinstance(rows, list):
        raise GapscopeError(f"{source}: result has no '{section}' list", 2)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise GapscopeError(f"{source}: {section}[{i}] is not an object", 2)
    return rows


def _flat(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The rows as a frame, ``gap_by_category_ns`` spread into ``gap_by_category_ns.<cat>``."""
    if not rows:
        return pd.DataFrame(index=pd.RangeIndex(0))
    frame = pd.DataFrame(rows)
    if "gap_by_category_ns" in frame.columns:
        cats = frame.pop("gap_by_category_ns")
        bad = cats.map(lambda c: c is not None and not isinstance(c, dict))
        cats = pd.DataFrame([c or {} for c in cats.where(~bad, None)], index=frame.index)
        frame = frame.join(cats.add_prefix("gap_by_category_ns."))
    return frame


def _held(rows: list[dict[str, Any]]) -> set[str]:
    """The fields every row holds, categories as ``gap_by_category_ns.<cat>`` (a field some rows
    lack is held by none: compare cannot answer it from this result)."""
    if not rows:
        return set()
    keys: set[str] = set.intersection(*(set(r) for r in rows))
    if "gap_by_category_ns" in keys and all(isinstance(r["gap_by_category_ns"], dict) for r in rows):
        cats = set.intersection(*(set(r["gap_by_category_ns"]) for r in rows))
        keys |= {f"gap_by_category_ns.{c}" for c in cats}
    return keys


def _numbers(frame: pd.DataFrame, column: str, what: str, keys: pd.Series, source: str) -> pd.Series:
    """A column as floats (null as NaN); GapscopeError naming the first row with a bad value."""
    raw = frame[column]
    if raw.dtype.kind in "iuf":
        values = raw.astype(float)
    else:
        ok = raw.map(lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)))
        values = pd.to_numeric(raw.where(ok, None), errors="coerce").astype(float)
        if not ok.all():
            i = int(np.flatnonzero(~ok.to_numpy())[0])
            raise GapscopeError(f"{source}: {what} {keys.iloc[i]} has a bad {column} {_plain(raw.iloc[i])!r}", 2)
    bad = ~np.isfinite(values.to_numpy()) & values.notna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise GapscopeError(f"{source}: {what} {keys.iloc[i]} has a bad {column} {_plain(raw.iloc[i])!r}", 2)
    return values


def _plain(value: Any) -> Any:
    """A value as the JSON held it (numpy scalars as Python ones), for messages."""
    return value.item() if isinstance(value, np.generic) else value


def _values(frame: pd.DataFrame, held: set[str], what: str, keys: pd.Series, source: str) -> pd.DataFrame:
    """One float column per metric (named by the metric): null as 0, not held as NaN."""
    out = {}
    for m in VALUE_METRICS:
        if m.key in held and m.key in frame.columns:
            out[m.name] = _numbers(frame, m.key, what, keys, source).fillna(0.0)
        else:
            out[m.name] = pd.Series(math.nan, index=frame.index, dtype=float)
    return pd.DataFrame(out, index=frame.index)


def _need(frame: pd.DataFrame, columns: Sequence[str], section: str, source: str) -> None:
    for column in columns:
        if column not in frame.columns or frame[column].isna().any():
            i = 0 if column not in frame.columns else int(np.flatnonzero(frame[column].isna().to_numpy())[0])
            raise GapscopeError(f"{source}: {section}[{i}] has no '{column}' field", 2)


def _identities(match: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """(identity, occurrence) per row: rows with the same identifying fields in one run (two
    processes on one device and stream) are told apart by order of appearance."""
    base = pd.Series([json.dumps(m, sort_keys=True) for m in match.to_dict("records")], index=match.index)
    occurrence = base.groupby(base, sort=False).cumcount() + 1
    return base, occurrence


def _verdicts(rows: list[dict[str, Any]], schema: Any) -> tuple[list[str | None], list[bool]]:
    """Each row's verdict code (None where it has none) and whether it is a graph replay row. A
    gapscope.analysis/1 row has no verdict: it reads as it did, computed from the row
    (docs/metrics.md, "Verdicts"); a many-trace result's pooled rows have none."""
    from gapscope.analysis.verdicts import is_graph_replay, verdict

    old = schema == "gapscope.analysis/1"
    codes = [r["verdict"] if isinstance(r.get("verdict"), str) else (verdict(r)[0] if old else None)
             for r in rows]
    return codes, [is_graph_replay(r) for r in rows]


def _domains(frame: pd.DataFrame) -> pd.Series:
    """Each row's NVTX domain, None for the default domain (or a result without domains)."""
    if "domain" not in frame.columns:
        return pd.Series([None] * len(frame), index=frame.index, dtype=object)
    domains = frame["domain"].astype(object)
    return domains.where(domains.notna(), None)


#: The modes a range instance runs in (gapscope.catalog.INSTANCE_MODES; docs/ci.md, "Modes"):
#: replayed when more than half of its kernels came from graph launches (catalog.GRAPH_SHARE),
#: else eager; one-off when it holds one-off gaps (``one_off_ns`` > 0), else steady.
MODES = catalog.INSTANCE_MODES


def _instances(result: dict[str, Any], source: str) -> pd.DataFrame:
    """One row per range instance with GPU work: ``_domain`` (the default domain as ""),
    ``_group`` (its group name), ``_mode`` (:data:`MODES`), ``_verdict`` (its own, or None) and
    every metric's value; empty when the result holds no instance rows (a many-trace result)."""
    if result.get("ranges") is None:  # a many-trace result: pooled rows only
        return pd.DataFrame()
    rows = _rows(result, "ranges", source)
    frame = _flat(rows)
    if frame.empty or "kernels" not in frame.columns or "name" not in frame.columns:
        return pd.DataFrame()
    _need(frame, ("name",), "ranges", source)  # a row without one cannot be matched
    keys = frame["name"].astype(str)
    kernels = _numbers(frame, "kernels", "range", keys, source).fillna(0.0)
    keep = kernels.to_numpy() > 0
    frame, kernels = frame[keep], kernels[keep]
    if frame.empty:
        return pd.DataFrame()
    names = frame["name"].astype(str).to_numpy(object)
    if (result.get("options") or {}).get("normalize_names"):
        from gapscope.analysis.ranges import group_names

        names = group_names(names)
    domains = _domains(frame)
    values = _values(frame, _held(rows), "range", frame["name"].astype(str), source)

    def field(name: str) -> np.ndarray:
        if name not in frame.columns:
            return np.zeros(len(frame))
        return _numbers(frame, name, "range", frame["name"].astype(str), source).fillna(0.0).to_numpy()

    from gapscope.catalog import GRAPH_SHARE

    replayed = (field("graph_replays") > 0) & (field("graph_kernels") > GRAPH_SHARE * kernels.to_numpy())
    one_off = field("one_off_ns") > 0
    values["_domain"] = domains.where(domains.notna(), _DEFAULT_DOMAIN).astype(str).to_numpy()
    values["_group"] = names
    values["_mode"] = np.asarray(MODES, dtype=object)[replayed.astype(int) + 2 * one_off.astype(int)]
    verdicts = frame["verdict"] if "verdict" in frame.columns else pd.Series(None, index=frame.index)
    values["_verdict"] = verdicts.where(verdicts.map(lambda v: isinstance(v, str)), None).to_numpy(object)
    return values


def _instance_medians(instances: pd.DataFrame) -> pd.DataFrame:
    """Per (domain key, group name): the median of every metric over the instances with GPU
    work, and how many there were (``instances``)."""
    if instances.empty:
        return pd.DataFrame()
    grouped = instances[[m.name for m in VALUE_METRICS] + ["_domain", "_group"]].groupby(
        ["_domain", "_group"], sort=False)
    medians = grouped.median()
    medians["instances"] = grouped.size()
    return medians


def _most_common(values: pd.Series) -> str | None:
    """The most common verdict of some instances (the first seen on a tie), None without any."""
    known = [v for v in values if isinstance(v, str)]
    return max(dict.fromkeys(known), key=known.count) if known else None


def _mode_medians(instances: pd.DataFrame, ident_of: dict[tuple[str, str], str]) -> pd.DataFrame:
    """Per (entry, mode): the median of every metric over the entry's instances in that mode,
    their number (``n``), their most common verdict and whether the mode is replayed; indexed by
    the entry's identity."""
    if instances.empty:
        return pd.DataFrame()
    metrics = [m.name for m in VALUE_METRICS]
    grouped = instances.groupby(["_domain", "_group", "_mode"], sort=False)
    out = grouped[metrics].median()
    out["n"] = grouped.size()
    out["verdict"] = grouped["_verdict"].agg(_most_common)
    out = out.reset_index()
    out["replay"] = out["_mode"].str.startswith("replayed")
    out.index = pd.Index([ident_of.get((d, g)) for d, g in zip(out["_domain"], out["_group"])], name="ident")
    out = out[out.index.notna()].rename(columns={"_mode": "mode"})
    return out.drop(columns=["_domain", "_group"])


def _kernel_counts(rows: list[dict[str, Any]], frame: pd.DataFrame) -> list[dict[str, int] | None] | None:
    """Each row's ``kernel_counts`` as {kernel name: count} (docs/schema.md), or None when some
    row lacks them (a result of an older gapscope): then no run's mix is read."""
    if not rows or not all(isinstance(r.get("kernel_counts"), list) for r in rows):
        return None
    return [{str(n): int(c) for n, c in r["kernel_counts"]} for r in rows]


def _ranges(result: dict[str, Any], source: str) -> Entries:
    rows = _rows(result, "by_name", source)
    frame = _flat(rows)
    held = _held(rows)
    if frame.empty:
        return _empty(result, source, held)
    _need(frame, ("name",), "by_name", source)
    names = frame["name"].astype(str)
    domains = _domains(frame)
    keys = pd.Series([label(d, n) for d, n in zip(domains, names)], index=frame.index)
    values = _values(frame, held, "range", keys, source)
    counts = (_numbers(frame, "count", "range", keys, source) if "count" in frame.columns
              else pd.Series(math.nan, index=frame.index))
    if ((counts < 0) | (counts % 1 != 0)).any():
        i = int(np.flatnonzero(((counts < 0) | (counts % 1 != 0)).to_numpy())[0])
        raise GapscopeError(f"{source}: by_name[{i}] has a bad count {rows[i].get('count')!r}", 2)
    work = values["kernels"].fillna(0.0) > 0
    per_instance = pd.Series(None, index=frame.index, dtype=object)
    # the mean per instance where the result holds no instances of a name (pooled rows)
    summed = [m.name for m in VALUE_METRICS if m.summed]
    has_count = counts.fillna(0) > 0
    values.loc[has_count, summed] = values.loc[has_count, summed].div(counts[has_count], axis=0)
    per_instance[has_count & work] = "mean"
    instances = _instances(result, source)
    medians = _instance_medians(instances)
    if not medians.empty:
        at = pd.MultiIndex.from_arrays([domains.where(domains.notna(), _DEFAULT_DOMAIN).astype(str), names])
        found = at.isin(medians.index) & work.to_numpy()
        if found.any():
            picked = medians.loc[at[found], [m.name for m in VALUE_METRICS]]
            held_cols = [m.name for m in VALUE_METRICS if m.key in held]
            values.loc[found, held_cols] = picked[held_cols].to_numpy()
            per_instance[found] = "median"
    match = pd.DataFrame({"domain": domains, "name": names}, index=frame.index)
    codes, replay = _verdicts(rows, result.get("schema"))
    meta = pd.DataFrame({"key": keys, "name": names, "count": counts, "work": work,
                         "per_instance": per_instance, "verdict": codes, "replay": replay}, index=frame.index)
    out = _finish(meta, match, values, held, result, source)
    at = list(zip(domains.where(domains.notna(), _DEFAULT_DOMAIN).astype(str), names))
    ident_of = dict(zip(at, out.frame.index))
    units = counts.fillna(1.0).to_numpy()  # pooled rows: the instance count
    if not medians.empty:
        found = medians["instances"].reindex(pd.MultiIndex.from_tuples(at)).to_numpy()
        units = np.where(np.isnan(found), units, found)
    return _with_mix(out, rows, frame, units, modes=_mode_medians(instances, ident_of))


def _with_mix(out: Entries, rows: list[dict[str, Any]], frame: pd.DataFrame, units: np.ndarray,
              modes: pd.DataFrame | None = None) -> Entries:
    """The entries with their kernel mixes (per entry: kernels counted by name, and the units of
    work they were counted over: a range's instances with GPU work, 1 for a device) and modes."""
    counts = _kernel_counts(rows, frame)
    mix = None if counts is None else {i: (c, float(u)) for i, c, u in zip(out.frame.index, counts, units)}
    return replace(out, mix=mix, modes=modes, windowed=out.windowed)


def _timelines(result: dict[str, Any], scope: str, source: str) -> Entries:
    section = SECTIONS[scope]
    rows = _rows(result, section, source)
    frame = _flat(rows)
    held = _held(rows)
    if frame.empty:
        return _empty(result, source, held)
    ids = ("device",) if scope == "device" else ("device", "stream")
    _need(frame, ids, section, source)
    match = frame[list(ids)].astype(object)
    keys = (match["device"].map(lambda d: f"GPU {d}") if scope == "device"
            else match.apply(lambda r: f"GPU {r['device']} stream {r['stream']}", axis=1))
    values = _values(frame, held, scope, keys, source)
    codes, replay = _verdicts(rows, result.get("schema")) if scope == "device" else ([None] * len(rows), [False] * len(rows))
    meta = pd.DataFrame({"key": keys, "name": None, "count": math.nan, "work": True, "per_instance": None,
                         "verdict": codes, "replay": replay}, index=frame.index)
    out = _finish(meta, match, values, held, result, source)
    return _with_mix(out, rows, frame, np.ones(len(rows))) if scope == "device" else out


def _launches(result: dict[str, Any], source: str) -> Entries:
    rows = _rows(result, "launch", source)
    frame = _flat(rows)
    held = {f"launch.{k}" for k in _held(rows)} if result.get("launch") is not None else set()
    if frame.empty:
        empty = _empty(result, source, held)
        return Entries(empty.frame, empty.held, empty.schema, source, result.get("launch") is not None)
    _need(frame, ("api",), "launch", source)
    keys = frame["api"].astype(str)
    out = {}
    for m in LAUNCH_METRICS:
        out[m.name] = (_numbers(frame, m.field, "launch", keys, source).fillna(0.0) if m.field in frame.columns
                       else pd.Series(math.nan, index=frame.index, dtype=float))
    values = pd.DataFrame(out, index=frame.index)
    meta = pd.DataFrame({"key": keys, "name": keys, "count": math.nan, "work": True, "per_instance": None,
                         "verdict": None, "replay": False}, index=frame.index)
    return _finish(meta, pd.DataFrame({"api": keys}, index=frame.index), values, held, result, source)


def _empty(result: dict[str, Any], source: str, held: set[str]) -> Entries:
    return Entries(pd.DataFrame(columns=["key", "name", "match", "count", "work", "per_instance", "verdict",
                                         "replay"]), frozenset(held), str(result.get("schema")), source)


def _finish(meta: pd.DataFrame, match: pd.DataFrame, values: pd.DataFrame, held: set[str],
            result: dict[str, Any], source: str) -> Entries:
    """The entries frame: identities (with the occurrence of a repeated one), meta columns and
    values; the metrics held (the verdict wherever the rows have verdicts)."""
    ident, occurrence = _identities(match)
    again = occurrence > 1
    records = match.to_dict("records")
    if again.any():
        for i in np.flatnonzero(again.to_numpy()):
            n = int(occurrence.iloc[i])
            records[i] = {**records[i], "occurrence": n}
            meta.iloc[i, meta.columns.get_loc("key")] = f"{meta['key'].iloc[i]} (#{n})"
        ident = pd.Series([json.dumps(m, sort_keys=True) for m in records], index=match.index)
    meta["match"] = records
    frame = pd.concat([meta, values], axis=1)
    frame.index = pd.Index(ident.to_numpy(), name="ident")
    metric_held = {m.name for m in (*VALUE_METRICS, *LAUNCH_METRICS) if m.key in held or m.name in held}
    if meta["verdict"].notna().all():
        metric_held.add("verdict")
    return Entries(frame, frozenset(metric_held), str(result.get("schema")), source,
                   windowed=isinstance((result.get("options") or {}).get("window"), dict))


def entries(result: dict[str, Any], scope: str, source: str) -> Entries:
    """The entries of ``scope`` (range, device, stream, launch) in one result dict."""
    if scope == "range":
        return _ranges(result, source)
    if scope == "launch":
        return _launches(result, source)
    return _timelines(result, scope, source)
