"""Many traces, one report: every file analyzed on its own (gapscope.fleet.ranks, wherever an
executor puts it), the results merged across ranks here.

A *rank* is one device of one input file: a file per rank (``nsys profile -o rank%q{RANK}``)
has one device, so one rank; a file that holds several GPUs gives one rank per device.
docs/metrics.md ("Many traces at once") defines every merged figure, docs/schema.md the JSON.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gapscope.analysis.metrics import STATS_FIELDS, fraction
from gapscope.analysis.result import clean_rows
from gapscope.fleet import collectives
from gapscope.fleet.executors import Executor, Outcome, within_memory
from gapscope.fleet.ranks import STEP_COLUMNS, analyze_rank_file
from gapscope.fleet.result import STRAGGLER_FLOOR_NS, FleetResult
from gapscope.inputs import trace_stem

#: Fields summed over ranks in the pooled ``by_name`` rows.
SUMMED = ("count", "kernels", "memops", "memop_ns", "gpu_span_ns", "busy_ns", "gap_ns", "gap_count")
#: The figures whose spread across ranks is reported.
SPREAD_METRICS = ("gap_fraction", "gap_ns", "gpu_span_ns")

def _labels(outcomes: Sequence[Outcome]) -> dict[int, str]:
    """A short name per file: its stem, or its path where two files share a stem."""
    stems = [trace_stem(o.path) for o in outcomes]
    taken = Counter(stems)
    return {o.index: (stem if taken[stem] == 1 else str(Path(o.path))) for o, stem in zip(outcomes, stems)}


def _spread(df: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """min/median/max of ``value`` per group, with the rank of the min and the max (the lowest
    rank on ties: rows are in rank order); NaN values are left out."""
    d = df[[*by, value, "rank"]].dropna(subset=[value])
    g = d.groupby(by, sort=False)[value]
    out = pd.DataFrame({"min": g.min(), "median": g.median(), "max": g.max()})
    out["min_rank"] = d.loc[g.idxmin().to_numpy(), "rank"].to_numpy()
    out["max_rank"] = d.loc[g.idxmax().to_numpy(), "rank"].to_numpy()
    return out


def _spread_dict(row: pd.Series | dict, fractional: bool = False, prefix: str = "") -> dict[str, Any]:
    """A SPREAD object: min, median, max and the ranks of the min and the max."""
    num = _frac if fractional else _num
    return {k: (int(row[prefix + k]) if k.endswith("_rank") else num(row[prefix + k]))
            for k in ("min", "median", "max", "min_rank", "max_rank")}


def _num(x: Any) -> int | float | None:
    """A time or count: int when integral, float otherwise (a median of two), None for NaN."""
    x = float(x)
    if np.isnan(x):
        return None
    return int(x) if x.is_integer() else x


def _frac(x: Any) -> float | None:
    x = float(x)
    return None if np.isnan(x) else x


def merge(outcomes: Sequence[Outcome], *, options: dict[str, Any], stragglers: int = 10) -> FleetResult:
    """Merge per-file results (from :func:`analyze_rank_file`) into one fleet report; see
    docs/metrics.md, "Many traces at once", for every figure."""
    outcomes = sorted(outcomes, key=lambda o: o.index)
    labels = _labels(outcomes)
    files: list[dict[str, Any]] = []
    ranks: list[dict[str, Any]] = []
    streams: list[dict[str, Any]] = []
    name_parts: list[pd.DataFrame] = []
    step_parts: list[pd.DataFrame] = []
    comm_parts: list[pd.DataFrame] = []
    for o in outcomes:  # one pass per file
        entry: dict[str, Any] = {"path": o.path, "name": Path(o.path).name, "error": o.error, "ranks": []}
        files.append(entry)
        if not o.ok or o.result is None:
            continue
        r = o.result
        tr = r["trace"]
        entry.update({k: tr.get(k) for k in ("format", "nsys_version", "export_schema", "graph_trace", "gpus")})
        entry["warnings"] = list(r["warnings"])
        if r.get("damaged"):
            entry["damaged"] = list(r["damaged"])
        rank_of: dict[int, int] = {}
        for d in r["devices"]:
            rank_of[d["device"]] = len(ranks)
            label = labels[o.index] + (f"/gpu{d['device']}" if len(r["devices"]) > 1 else "")
            ranks.append({"rank": len(ranks), "label": label, "file": o.path, **d})
        entry["ranks"] = list(rank_of.values())
        streams += [{"rank": rank_of[s["device"]], **s} for s in r["streams"]]
        if r["names"]:
            nd = pd.DataFrame(r["names"])
            nd.insert(0, "rank", nd["device"].map(rank_of).astype(np.int64))
            name_parts.append(nd)
            sd = pd.DataFrame({c: r["steps"][c] for c in STEP_COLUMNS})
            sd.insert(0, "rank", sd["device"].map(rank_of).astype(np.int64))
            step_parts.append(sd)
        if r.get("collectives"):
            cd = pd.DataFrame(r["collectives"])
            cd["rank"] = cd["device"].map(rank_of).astype(np.int64)
            cd["file"] = o.index
            comm_parts.append(cd)

    label_of = [r["label"] for r in ranks]
    for s in streams:
        s["label"] = label_of[s["rank"]]
    result = FleetResult(
        options={**options, "stragglers": stragglers}, files=files, devices=ranks, streams=streams,
    )
    _merge_ranges(result, name_parts, step_parts, label_of, stragglers)
    result.spread.insert(0, _device_spread(ranks))
    result.collectives, result.waits, comm_warnings = collectives.pair(comm_parts, label_of)
    result.warnings = _fleet_warnings(result) + comm_warnings
    return result


def _device_spread(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole-device timelines' spread across ranks."""
    row: dict[str, Any] = {"scope": "device", "name": None, "ranks": len(ranks)}
    df = pd.DataFrame(ranks, columns=["rank", *SPREAD_METRICS]).astype({m: float for m in SPREAD_METRICS})
    df["key"] = 0
    for m in SPREAD_METRICS:
        s = _spread(df, ["key"], m)
        row[m] = _spread_dict(s.iloc[0], m == "gap_fraction") if len(s) else None
    return row


def _merge_ranges(result: FleetResult, name_parts: list[pd.DataFrame], step_parts: list[pd.DataFrame],
                  label_of: list[str], top: int) -> None:
    """rank_names, by_name, per-name spread, aligned steps and stragglers."""
    if not name_parts:
        return
    rn = pd.concat(name_parts, ignore_index=True)
    s = pd.concat(step_parts, ignore_index=True)
    names = pd.unique(rn["name"])  # first appearance across the fleet
    code = {n: i for i, n in enumerate(names)}
    rn["name_code"] = rn["name"].map(code)
    s["name_code"] = s["name"].map(code)

    # Steps: instances aligned by (name, occurrence); rows are in rank order within a step.
    key = ["name_code", "occurrence"]
    g = s.groupby(key, sort=True)
    s["ranks"] = g["gap_ns"].transform("size")
    s["excess"] = s["gap_ns"] - g["gap_ns"].transform("median")
    s["slowest"] = False
    s.loc[g["gap_ns"].idxmax().to_numpy(), "slowest"] = True
    s["slowest"] &= s["ranks"] >= 2
    st = _spread(s, key, "gap_ns").add_prefix("gap_").join(_spread(s, key, "gpu_span_ns").add_prefix("span_"))
    st["ranks"] = g.size()
    for row in st.sort_index().reset_index().to_dict("records"):  # one JSON row per aligned step
        slowest = int(row["gap_max_rank"])
        result.steps.append({
            "name": names[int(row["name_code"])], "occurrence": int(row["occurrence"]), "ranks": int(row["ranks"]),
            "gap_ns": _spread_dict(row, prefix="gap_"), "gpu_span_ns": _spread_dict(row, prefix="span_"),
            "excess_gap_ns": _num(row["gap_max"] - row["gap_median"]),
            "slowest_rank": slowest, "slowest_label": label_of[slowest],
        })

    # Per rank and name: excess over the step medians, slowest steps, the worst step.
    by_rn = s.groupby(["rank", "name_code"], sort=False)
    worst = s.loc[by_rn["excess"].idxmax().to_numpy(), ["rank", "name_code", "occurrence", "excess"]]
    extra = pd.DataFrame({
        "excess_gap_ns": by_rn["excess"].sum(),
        "slowest_steps": by_rn["slowest"].sum().astype(np.int64),
    }).reset_index().merge(
        worst.rename(columns={"occurrence": "worst_step", "excess": "worst_step_excess_ns"}),
        on=["rank", "name_code"],
    )
    rn = rn.merge(extra, on=["rank", "name_code"], how="left", sort=False)
    rn.insert(1, "label", [label_of[i] for i in rn["rank"].tolist()])
    cols = ["rank", "label", "device", "name", "count", *STATS_FIELDS,
            *(["gap_by_category_ns"] if "gap_by_category_ns" in rn.columns else []),
            "excess_gap_ns", "slowest_steps", "worst_step", "worst_step_excess_ns"]
    result.rank_names = [
        {**row, **{k: _num(row[k]) for k in ("excess_gap_ns", "worst_step_excess_ns")}}
        for row in clean_rows(rn[cols].to_dict("records"))
    ]

    # Pooled per name, and the spread across ranks.
    pooled = rn.groupby("name_code", sort=True).agg(
        **{c: (c, "sum") for c in SUMMED}, ranks=("rank", "size"), gap_max_ns=("gap_max_ns", "max"),
    )
    pooled["gap_fraction"] = fraction(pooled["gap_ns"].to_numpy(), pooled["gpu_span_ns"].to_numpy())
    spreads = {m: _spread(rn.astype({m: float}), ["name_code"], m) for m in SPREAD_METRICS}
    for nc, p in zip(pooled.index.tolist(), clean_rows(pooled.to_dict("records"))):
        result.by_name.append({
            "name": names[nc], "count": p["count"], "ranks": p["ranks"],
            **{k: p[k] for k in ("kernels", "memops", "memop_ns", "gpu_span_ns", "busy_ns", "gap_ns",
                                  "gap_fraction", "gap_count", "gap_max_ns")},
        })
        result.spread.append({
            "scope": "range", "name": names[nc], "ranks": p["ranks"],
            **{m: _spread_dict(spreads[m].loc[nc], m == "gap_fraction") if nc in spreads[m].index else None
               for m in SPREAD_METRICS},
        })

    # Stragglers: per name, ranks above the step medians by more than identical work differs
    # (STRAGGLER_FLOOR_NS a step), furthest first.
    above = rn[(rn["excess_gap_ns"] > 0) & (rn["excess_gap_ns"] >= STRAGGLER_FLOOR_NS * rn["count"])].sort_values(
        ["name_code", "excess_gap_ns", "rank"], ascending=[True, False, True], kind="stable")
    for row in clean_rows(above.groupby("name_code", sort=False).head(top).to_dict("records")):
        result.stragglers.append({
            "name": row["name"], "rank": row["rank"], "label": row["label"], "device": row["device"],
            "excess_gap_ns": _num(row["excess_gap_ns"]), "steps": row["count"],
            "slowest_steps": row["slowest_steps"], "worst_step": row["worst_step"],
            "worst_step_excess_ns": _num(row["worst_step_excess_ns"]),
            "gap_ns": row["gap_ns"], "gap_fraction": row["gap_fraction"],
        })


#: Range names with uneven instance counts named one per warning line up to this many; more are
#: one line naming this many.
UNEVEN_NAMED = 3


def _fleet_warnings(result: FleetResult) -> list[str]:
    out = []
    failed = result.failed
    if failed:
        out.append(f"{len(failed)} of {len(result.files)} traces failed and are left out")
    unrelated = _unrelated(result)
    if unrelated:
        out.append(unrelated)
    out += [f"{f['name']}: {w}" for f in result.files for w in f.get("damaged", [])]
    modes = sorted({f["graph_trace"] for f in result.files if f.get("graph_trace")})
    if len(modes) > 1 and {"graph", "mixed"} & set(modes):
        out.append(f"the traces differ in graph tracing mode ({', '.join(modes)}): "
                   "graph-level traces hide the gaps inside graphs")
    counts: dict[str, list[int]] = {}
    for r in result.rank_names:
        counts.setdefault(r["name"], []).append(r["count"])
    uneven = [(name, min(c), max(c)) for name, c in counts.items() if len(c) > 1 and min(c) != max(c)]
    if len(uneven) <= UNEVEN_NAMED:
        out += [f"range {name!r}: {lo} to {hi} instances per rank; steps past the first {lo} are compared "
                "among fewer ranks" for name, lo, hi in uneven]
    else:  # per-op ranges (emit_nvtx) differ by a few on many names: one line, not one each
        named = ", ".join(f"{name!r} {lo} to {hi}" for name, lo, hi in uneven[:UNEVEN_NAMED])
        out.append(f"{len(uneven)} range names have different instance counts per rank ({named} and "
                   f"{len(uneven) - UNEVEN_NAMED} more); each name's steps past its smallest count are "
                   "compared among fewer ranks")
    return out


def _unrelated(result: FleetResult) -> str | None:
    """One line when the files look like different programs rather than ranks of one job: their
    formats differ, or some have range names and others none, or no range name is in every file
    that has some (files without any range name at all say nothing either way)."""
    ok = [f for f in result.files if not f.get("error")]
    if len(ok) < 2:
        return None
    file_of = {rank["rank"]: rank["file"] for rank in result.devices}
    by_file: dict[str, set[str]] = {f["path"]: set() for f in ok}
    for r in result.rank_names:
        by_file.setdefault(file_of.get(r["rank"], ""), set()).add(str(r["name"]))
    per_file = [by_file[f["path"]] for f in ok]
    formats = {f.get("format") for f in ok}
    named = [n for n in per_file if n]
    why = None
    if len(formats) > 1:
        why = f"they come from {len(formats)} trace formats"
    elif named and len(named) < len(per_file):
        why = f"{len(per_file) - len(named)} of them have no range with GPU work"
    elif named and not set.intersection(*named):
        why = "no range name is in all of them"
    if why is None:
        return None
    return (f"these {len(ok)} traces look like different programs, not ranks of one job ({why}): "
            "the figures across ranks compare unrelated work")


# --------------------------------------------------------------------------------------------
# running it


def _as_warning(line: str) -> None:
    warnings.warn(f"gapscope: {line}", RuntimeWarning, stacklevel=3)


def analyze_fleet(
    paths: Sequence[str], executor: Executor, *, ranges: Sequence[str] = (), count_memops: bool = False,
    attribution: bool = True, stragglers: int = 10, on_done: Callable[[Outcome], None] | None = None,
    on_note: Callable[[str], None] | None = None,
) -> FleetResult:
    """Analyze every file on ``executor`` (calling ``on_done`` as each finishes) and merge; a
    local pool runs fewer files at once when they would not fit in memory together, said in one
    line through ``on_note`` (default: a RuntimeWarning; the command line prints it on stderr)."""
    task = partial(analyze_rank_file, ranges=tuple(ranges), count_memops=count_memops,
                   attribution=attribution)
    executor = within_memory(executor, paths, on_note or _as_warning)
    outcomes = []
    for outcome in executor.run(task, list(paths)):
        outcomes.append(outcome)
        if on_done is not None:
            on_done(outcome)
    options = {"count_memops": count_memops, "range_filter": list(ranges)}
    return merge(outcomes, options=options, stragglers=stragglers)
