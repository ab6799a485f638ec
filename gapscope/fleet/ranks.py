"""One file of a many-trace report, analyzed where a worker runs it: the small, picklable
summary that :func:`gapscope.fleet.merge.merge` combines across ranks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from gapscope.analysis.attribution import as_dicts
from gapscope.analysis.communication import instances
from gapscope.analysis.metrics import member_kernels, rollup_stats
from gapscope.analysis.pipeline import AnalysisArrays, analysis_of
from gapscope.analysis.result import clean_rows

#: Per-instance columns a file sends back for step alignment (one entry per range instance and
#: device it ran work on).
STEP_COLUMNS = ("device", "name", "occurrence", "range_id", "kernels", "gpu_span_ns", "busy_ns", "gap_ns")


def analyze_rank_file(path: str, *, ranges: Sequence[str] = (), count_memops: bool = False,
                      attribution: bool = True) -> dict[str, Any]:
    """Analyze one export for the fleet report: the trace facts, its per-device and per-stream
    rows (as ``gapscope analyze`` reports them), per device its range names' figures and range
    instances, and its communication kernels (``collectives``: gapscope.analysis.communication's
    instances, None without any). Small (no per-kernel data but one row per communication
    kernel) and picklable; raises GapscopeError."""
    analysis = analysis_of(path, ranges=ranges, count_memops=count_memops,
                           attribution=attribution, top=0, gaps=False, merge=True)
    names, steps = per_device(analysis)
    r = analysis.result
    return {
        "path": str(path),
        "trace": r.trace,
        "options": r.options,
        "warnings": list(r.warnings),
        "damaged": list(analysis.frames.warnings),  # what the reader left out (a subset of warnings)
        "devices": clean_rows(r.devices),
        "streams": clean_rows(r.streams),
        "names": names,
        "steps": steps,
        "collectives": instances(analysis),
    }


def per_device(a: AnalysisArrays) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """Range work split by device: STATS (and gap categories) per (device, range name), rolled
    up from the analysis's (range, device) pairs, and one entry per pair with work, numbered
    per (device, name) in start order."""
    acts, rf, pairs = a.acts, a.ranges.frame, a.pairs
    n_dev, n_ranges = acts.device_ids.size, len(rf)
    if n_ranges == 0 or a.member_act.size == 0:
        return [], {c: np.zeros(0, dtype=object if c == "name" else np.int64) for c in STEP_COLUMNS}
    n_pairs = n_ranges * n_dev
    member_pair = a.member_pair
    name_codes, uniques = pd.factorize(rf["group"].to_numpy(), sort=False)  # names without op suffixes
    names = np.asarray(uniques, dtype=object)
    n_names = names.size
    pair_range, pair_dev = pairs.range_of, pairs.device_code_of
    group = pair_dev * n_names + name_codes[pair_range]  # (device, name), device first
    n_groups = n_dev * n_names
    rolled = rollup_stats(pairs.stats, group, n_groups, pairs.gap_lengths,
                          member_kernels(acts, a.member_act, member_pair))

    work = np.bincount(member_pair, minlength=n_pairs) > 0  # the instance launched work on the device
    count = np.bincount(group[work], minlength=n_groups)
    keep = np.flatnonzero(count > 0)
    keys = pd.DataFrame({
        "device": acts.device_ids[keep // n_names],
        "name": names[keep % n_names],
        "count": count[keep],
    })
    rows = clean_rows(pd.concat([keys, rolled.iloc[keep].reset_index(drop=True)], axis=1).to_dict("records"))
    if pairs.categories is not None:  # attribution ran: gap time per pair and category
        sums = np.zeros((n_groups, pairs.categories.shape[1]), dtype=np.int64)
        np.add.at(sums, group, pairs.categories)
        rows = [{**row, "gap_by_category_ns": by_cat} for row, by_cat in zip(rows, as_dicts(sums[keep]))]

    wp = np.flatnonzero(work)  # range-major: start order, then device
    occurrence = pd.Series(group[wp]).groupby(group[wp]).cumcount().to_numpy(np.int64)
    steps = {
        "device": acts.device_ids[pair_dev[wp]].astype(np.int64),
        "name": names[name_codes[pair_range[wp]]],
        "occurrence": occurrence,
        "range_id": rf["id"].to_numpy(np.int64)[pair_range[wp]],  # the instance's id in the whole trace
        **{c: pairs.stats[c].to_numpy(np.int64)[wp] for c in ("kernels", "gpu_span_ns", "busy_ns", "gap_ns")},
    }
    return rows, steps
