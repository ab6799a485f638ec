"""The per-gap and per-activity tables of one analysis, for users' own analysis in pandas, Polars
or DuckDB (`gapscope analyze --format parquet`, ``gapscope.Analysis.gaps`` and ``.kernels``).

They are made once from the arrays behind a result (gapscope.analysis.pipeline.AnalysisArrays)
while the trace is still open, since the names of kernels and calls are looked up then; after
that they need nothing from the trace. Every column is built for all rows at once (each distinct
name is looked up once and the rows take codes into it), with no Python step per gap or
activity. docs/schema.md lists the columns, docs/metrics.md ("Gaps and activities by range")
the rule that gives a gap or an activity its range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gapscope.analysis.attribution import CATEGORY_LABELS, activities_before, api_names
from gapscope.analysis.keys import unpack_stream_key
from gapscope.analysis.metrics import GapList
from gapscope.analysis.pipeline import AnalysisArrays
from gapscope.trace.frames import ActivityKind

#: The schema the tables' Parquet files name in their metadata (docs/schema.md).
TABLES_SCHEMA = "gapscope.tables/1"
#: The column of each gap category's time, in CATEGORY_LABELS order (also in the result
#: DataFrames of gapscope.api, where ``gap_by_category_ns`` is spread into these columns).
CATEGORY_COLUMNS = tuple(f"gap_{c}_ns" for c in CATEGORY_LABELS)


@dataclass(frozen=True)
class ActivityTables:
    """``gaps``: every device-level gap of the trace (docs/metrics.md), in device then start
    order; ``kernels``: every activity (kernels, graph executions, copies, memsets) in the
    trace's reading order, its ``id`` the one ``gaps.before_id`` and ``after_id`` name. ``trace``
    and ``options``: the result's, for the files' metadata."""

    gaps: pd.DataFrame
    kernels: pd.DataFrame
    trace: dict[str, Any]
    options: dict[str, Any]


def categorical(codes: np.ndarray, labels: Any) -> pd.Categorical:
    """``labels[code]`` per row as a pandas Categorical (missing where the code is -1); labels
    that repeat (two name ids with one text) become one category."""
    ids, uniques = pd.factorize(pd.Series(list(labels), dtype=object), use_na_sentinel=True)
    codes = np.asarray(codes, dtype=np.int64)
    mapped = np.where(codes >= 0, ids[np.maximum(codes, 0)] if ids.size else -1, -1)
    return pd.Categorical.from_codes(mapped, categories=pd.Index(list(uniques)))


def nullable(values: np.ndarray) -> pd.arrays.IntegerArray:
    """int64 values with -1 (gapscope's "none") as missing values (pandas' Int64)."""
    values = np.asarray(values, dtype=np.int64)
    return pd.arrays.IntegerArray(values, mask=values < 0)


def innermost(keys: pd.DataFrame, owner: np.ndarray, depth: np.ndarray, on: list[str],
              query: pd.DataFrame) -> np.ndarray:
    """For each row of ``query``, the deepest owner (the latest-starting, that is the highest
    numbered, of equal depth) among the rows of ``keys`` that match it on the columns ``on``;
    -1 where none does. ``owner[i]`` (a range instance) and ``depth[i]`` belong to keys row i."""
    if len(keys) == 0 or len(query) == 0:
        return np.full(len(query), -1, dtype=np.int64)
    cand = keys[on].assign(owner=owner, depth=depth).sort_values(["depth", "owner"], kind="stable")
    best = cand.drop_duplicates(on, keep="last")[[*on, "owner"]]
    found = query[on].merge(best, on=on, how="left")["owner"].to_numpy(dtype=np.float64)
    return np.where(np.isnan(found), -1, found).astype(np.int64)


def process_ids(arrays: AnalysisArrays) -> np.ndarray:
    """Each activity's process id, as the result's stream rows give it (``pid``)."""
    return unpack_stream_key(arrays.acts.stream_keys)[0][arrays.acts.stream_code]


def activity_ranges(arrays: AnalysisArrays) -> np.ndarray:
    """Each activity's range instance: the deepest range whose GPU work it is (docs/metrics.md),
    -1 for work no range launched."""
    n = arrays.acts.start.size
    depth = arrays.ranges.frame["depth"].to_numpy()
    keys = pd.DataFrame({"act": arrays.member_act})
    query = pd.DataFrame({"act": np.arange(n, dtype=np.int64)})
    return innermost(keys, arrays.member_range, depth[arrays.member_range], ["act"], query)


def range_ids(arrays: AnalysisArrays, rng: np.ndarray) -> np.ndarray:
    """The result's ``id`` of each range instance at position ``rng`` of the analysis's range
    table (the instance's place in the whole trace, whatever the filters), -1 where ``rng`` is."""
    ids = arrays.ranges.frame["id"].to_numpy(np.int64)
    return np.where(rng >= 0, ids[np.maximum(rng, 0)], -1) if ids.size else np.full(rng.size, -1, np.int64)


def gap_ranges(arrays: AnalysisArrays, gaps: GapList) -> np.ndarray:
    """Each device-level gap's range instance: the deepest range one of whose own range-level
    gaps holds it (the range had work on the device before the gap, and its work resumes where
    the gap ends), -1 where no range's does."""
    rg = arrays.range_gaps
    depth = arrays.ranges.frame["depth"].to_numpy()
    keys = pd.DataFrame({"device": rg.device, "end": rg.start + rg.length})
    query = pd.DataFrame({"device": gaps.device, "end": gaps.start + gaps.length})
    return innermost(keys, rg.row, depth[rg.row] if rg.row.size else rg.row, ["device", "end"], query)


@dataclass(frozen=True)
class _Names:
    """The names both tables take codes into: every activity's label (TraceFrames.activity_labels)
    and every API call's name (attribution.api_names), each made once."""

    act_codes: np.ndarray
    act_labels: list[str]
    call_codes: np.ndarray
    call_table: np.ndarray
    range_names: np.ndarray

    @classmethod
    def of(cls, arrays: AnalysisArrays) -> "_Names":
        act_codes, act_labels, _ = arrays.frames.activity_labels()
        call_codes, call_table = api_names(arrays.frames)
        return cls(act_codes, act_labels, call_codes, call_table[:-1],
                   arrays.ranges.frame["name"].to_numpy(dtype=object))

    def activities(self, acts: np.ndarray) -> pd.Categorical:
        """The label of each activity ``acts`` (missing where it is -1)."""
        return categorical(np.where(acts >= 0, self.act_codes[np.maximum(acts, 0)], -1), self.act_labels)

    def calls(self, calls: np.ndarray) -> pd.Categorical:
        """The name of each API call ``calls`` (missing where it is -1)."""
        codes = self.call_codes[np.maximum(calls, 0)] if self.call_codes.size else np.zeros(calls.size, np.int64)
        return categorical(np.where(calls >= 0, codes, -1), self.call_table)

    def ranges(self, ranges: np.ndarray) -> pd.Categorical:
        """The full name of each range instance ``ranges`` (missing where it is -1)."""
        return categorical(ranges, self.range_names)


def kernel_table(arrays: AnalysisArrays, names: _Names) -> pd.DataFrame:
    """Every activity with its kind, name, place, times, launching call and range."""
    a = arrays.frames.activities
    acts = arrays.acts
    every = np.arange(acts.start.size, dtype=np.int64)
    call = arrays.launch
    c = np.maximum(call, 0)
    api = arrays.frames.api
    call_start = np.where(call >= 0, api["start"].to_numpy()[c], -1) if len(api) else np.full(every.size, -1)
    call_end = np.where(call >= 0, api["end"].to_numpy()[c], -1) if len(api) else np.full(every.size, -1)
    rng = activity_ranges(arrays)
    return pd.DataFrame(copy=False, data={  # fresh arrays, kept as they are (no block consolidation)
        "id": every,
        "kind": categorical(a["kind"].to_numpy().astype(np.int64), [k.name.lower() for k in ActivityKind]),
        "name": names.activities(every),
        "device": acts.device_of(every).astype(np.int64),
        "stream": a["stream"].to_numpy().astype(np.int64),
        "pid": process_ids(arrays)[every],
        "start_ns": acts.start.copy(),
        "end_ns": acts.end,
        "duration_ns": acts.end - acts.start,
        "busy": acts.busy,
        "correlation": a["corr"].to_numpy().astype(np.int64),
        "launched_by": names.calls(call),
        "call_start_ns": nullable(call_start),
        "call_end_ns": nullable(call_end),
        "range_id": nullable(range_ids(arrays, rng)),
        "range_name": names.ranges(rng),
    })


def gap_table(arrays: AnalysisArrays, names: _Names) -> pd.DataFrame:
    """Every device-level gap with its place, times, category split, the activities on either
    side, the call that launched the one after, and its range."""
    gaps = arrays.device_gaps
    every = np.arange(gaps.length.size, dtype=np.int64)
    a = arrays.frames.activities
    after = gaps.next_act
    before = activities_before(arrays.frames, arrays.acts, gaps, every)
    rng = gap_ranges(arrays, gaps)
    out: dict[str, Any] = {
        "device": gaps.device.astype(np.int64),
        "stream": a["stream"].to_numpy()[after].astype(np.int64),
        "pid": process_ids(arrays)[after],
        "start_ns": gaps.start.copy(),
        "end_ns": gaps.start + gaps.length,
        "gap_ns": gaps.length.copy(),
    }
    if gaps.category is not None:
        out["category"] = categorical(gaps.category.astype(np.int64), CATEGORY_LABELS)
        split = gaps.split.matrix(every, gaps.length)
        out.update({col: split[:, j] for j, col in enumerate(CATEGORY_COLUMNS)})
    out.update({
        "before": names.activities(before),
        "after": names.activities(after),
        "launched_by": names.calls(arrays.launch[after]),
        "before_id": nullable(before),
        "after_id": after.astype(np.int64),
        "range_id": nullable(range_ids(arrays, rng)),
        "range_name": names.ranges(rng),
    })
    return pd.DataFrame(out, copy=False)


def tables_of(arrays: AnalysisArrays) -> ActivityTables:
    """The per-gap and per-activity tables of an analysis whose trace is still open (inside
    ``gapscope.analysis.pipeline.opened_analysis``; with ``all_calls=True`` every activity's
    name id is read with the frames instead of looked up afterwards)."""
    names = _Names.of(arrays)
    return ActivityTables(gaps=gap_table(arrays, names), kernels=kernel_table(arrays, names),
                          trace=dict(arrays.result.trace), options=dict(arrays.result.options))
