"""Timeline metrics per group of GPU work: span, busy, gap, gap fraction, gap percentiles.

The definitions (docs/metrics.md holds them once):

* GPU span: first start to last end of the group's work on a device, summed over devices.
* busy: the union of the work's busy intervals (overlapping streams count once).
* gap: span - busy; gap fraction: gap / span.
* gap count and percentiles: over the individual idle stretches inside the span.

Work is given as membership rows (an activity index and the "pair" it belongs to: one group on
one device); pairs roll up into output rows (a range, a device, a stream).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gapscope.analysis.intervals import group_timelines, grouped_quantiles, key_dtype
from gapscope.analysis.keys import narrowed, narrowed_blocks, narrowed_to_fit, unpack_stream_key
from gapscope.schema import STATS_FIELDS  # noqa: F401  (the columns every timeline row carries)

QUANTILES = (0.5, 0.9, 0.99, 1.0)
#: Activities whose durations :meth:`ActivityArrays.narrow_durations` computes at a time.
DURATION_BLOCK = 1 << 18


@dataclass(frozen=True)
class ActivityArrays:
    """Column arrays of the activity frame, plus the masks the metrics use."""

    start: np.ndarray
    end: np.ndarray
    is_kernel: np.ndarray  # kernels and graph-level executions
    is_memop: np.ndarray
    busy: np.ndarray  # counted in the busy union
    device_code: np.ndarray  # index into device_ids (keys.small_codes: 8 bits for up to 127 devices)
    device_ids: np.ndarray  # sorted device ids
    stream_code: np.ndarray  # index into stream_keys (keys.small_codes)
    stream_keys: np.ndarray  # sorted packed stream keys (gapscope.analysis.keys.stream_key)

    def device_of(self, idx: np.ndarray) -> np.ndarray:
        """The device ids of the activities ``idx`` (from their codes: no array of every
        activity's id is held), 32-bit where the ids fit."""
        return narrowed_to_fit(self.device_ids)[self.device_code[idx]]

    def stream_of(self, idx: np.ndarray) -> np.ndarray:
        """The stream ids of the activities ``idx``, as the stream keys hold them (the streams
        table's ``stream``), from their codes."""
        return unpack_stream_key(self.stream_keys)[2][self.stream_code[idx]]

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    def duration_of(self, idx: np.ndarray) -> np.ndarray:
        """The durations of the activities ``idx`` (without one of every activity first)."""
        return self.end[idx] - self.start[idx]

    def narrow_durations(self, idx: np.ndarray) -> np.ndarray:
        """:meth:`duration_of` in 32 bits where every duration fits (as ``narrowed_to_fit``
        gives it), computed DURATION_BLOCK activities at a time: no 64-bit copy of them all, and
        no two gathers of every start and end held at once."""
        idx = np.asarray(idx)
        return narrowed_blocks(idx.size, DURATION_BLOCK, lambda lo, hi: self.duration_of(idx[lo:hi]))


@dataclass(frozen=True)
class GapList:
    """Every gap of a level: its output row, device, length, start, the activity ending it and
    the one whose end starts it."""

    row: np.ndarray
    device: np.ndarray
    length: np.ndarray
    start: np.ndarray
    next_act: np.ndarray
    prev_act: np.ndarray
    category: np.ndarray | None = None  # the largest IdleCategory of each gap, once attributed
    split: Any = None  # gapscope.analysis.attribution.GapSplit, once attributed


def fraction(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den as float, NaN where den is 0."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def group_medians(values: np.ndarray, mask: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """The median of ``values`` over the rows of ``mask`` in each of ``n_groups`` groups
    (``groups``: each row's group), nan for a group with no such row."""
    medians = pd.Series(np.asarray(values)[mask]).groupby(groups[mask]).median()
    out = np.full(n_groups, np.nan)
    out[medians.index.to_numpy()] = medians.to_numpy()
    return out


def _sum_to(rows: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, rows, values.astype(np.int64))
    return out


def _member_counts(flag: np.ndarray, member_act: np.ndarray | None, member_row: np.ndarray, n_rows: int) -> np.ndarray:
    """Per row, its members whose activity is ``flag``ged (``member_act`` None: activity i is
    member i): counted COUNT_BLOCK memberships at a time (or ``n_rows``, the counts' own size,
    when more), so that no mask or row list of every membership is made beside them."""
    if member_act is None:
        return np.bincount(member_row[flag], minlength=n_rows).astype(np.int64)
    out = np.zeros(n_rows, dtype=np.int64)
    block = max(COUNT_BLOCK, n_rows)
    for lo in range(0, member_act.size, block):
        out += np.bincount(member_row[lo:lo + block][flag[member_act[lo:lo + block]]], minlength=n_rows)
    return out


def level_stats(
    acts: ActivityArrays,
    member_act: np.ndarray,
    member_pair: np.ndarray,
    pair_row: np.ndarray,
    n_rows: int,
    *,
    percentiles: bool = True,
) -> tuple[pd.DataFrame, GapList]:
    """STATS columns for ``n_rows`` output rows, plus the list of their gaps.

    ``member_act[i]`` is an activity that belongs to pair ``member_pair[i]``; each pair is one
    row on one device (``pair_row[p]`` gives its row) and is the unit whose span and gaps are
    measured. A row's span, busy and gap are the sums over its pairs. Without ``percentiles``
    the gap percentiles and kernel median are left NaN (and ``gap_max_ns`` 0): for rows that
    are only rolled up further (:func:`rollup_stats` computes them over the groups).
    """
    n_pairs = pair_row.size
    busy_m = acts.busy[member_act]
    b_act = member_act[busy_m]
    tl = group_timelines(member_pair[busy_m], acts.start[b_act], acts.end[b_act], n_pairs)

    span = _sum_to(pair_row, tl.span_ns, n_rows)
    gap = _sum_to(pair_row, tl.gap_ns, n_rows)
    gap_count = _sum_to(pair_row, tl.gap_count, n_rows)
    next_act = b_act[tl.gaps_next]
    gaps = GapList(
        row=pair_row[tl.gaps_group],
        device=acts.device_of(next_act) if next_act.size else np.zeros(0, np.int64),
        length=tl.gaps_len,
        start=tl.gaps_start,
        next_act=next_act,
        prev_act=b_act[tl.gaps_prev],
    )
    del tl, b_act, busy_m  # the timelines' own index arrays, no longer needed
    table = level_table(acts, member_act, pair_row[member_pair], n_rows, span, gap, gap_count,
                        (gaps.row, gaps.length) if percentiles else None)
    return table, gaps


def member_kernels(acts: ActivityArrays, member_act: np.ndarray | None,
                   member_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, duration) of every member that is a kernel, in member order: what the kernel
    counts and medians read (``member_act`` None: every activity, ``member_row`` one per
    activity). Rows and durations are 32-bit where they fit, to halve what the medians' sorts
    are given."""
    if member_act is None:
        idx = np.flatnonzero(acts.is_kernel)
        rows = member_row[idx]
    else:
        kern_m = acts.is_kernel[member_act]
        idx = member_act[kern_m]
        rows = member_row[kern_m]
    return narrowed_to_fit(rows), acts.narrow_durations(idx)


def level_table(acts: ActivityArrays, member_act: np.ndarray | None, member_row: np.ndarray, n_rows: int,
                span: np.ndarray, gap: np.ndarray, gap_count: np.ndarray,
                gaps: tuple[np.ndarray, np.ndarray] | None,
                kernels: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """STATS columns for ``n_rows`` rows from their span, gap and gap count sums, their members
    (``member_act[i]`` is in row ``member_row[i]``; None: every activity, in row
    ``member_row[activity]``: kernel and copy counts, the kernel median) and ``gaps``, every
    gap's (row, length), for the percentiles (None: left NaN, as :func:`level_stats` without
    ``percentiles``); ``kernels``: :func:`member_kernels` of the members, when the caller has it."""
    if kernels is None and gaps is None:  # counts only: no kernel's duration is read
        kernels_n = _member_counts(acts.is_kernel, member_act, member_row, n_rows)
    else:
        k_rows, k_dur = kernels if kernels is not None else member_kernels(acts, member_act, member_row)
        kernels_n = np.bincount(k_rows, minlength=n_rows).astype(np.int64)
    mem_m = acts.is_memop if member_act is None else acts.is_memop[member_act]
    mem_act = np.flatnonzero(mem_m) if member_act is None else member_act[mem_m]
    memops = np.bincount(member_row[mem_m], minlength=n_rows).astype(np.int64)
    memop_ns = _sum_to(member_row[mem_m], acts.duration_of(mem_act), n_rows)

    if gaps is not None:
        gq = grouped_quantiles(gaps[0], gaps[1], n_rows, QUANTILES)
        kq = grouped_quantiles(k_rows, k_dur, n_rows, (0.5,))
    else:
        gq, kq = np.full((n_rows, len(QUANTILES)), np.nan), np.full((n_rows, 1), np.nan)
    return pd.DataFrame(
        {
            "kernels": kernels_n,
            "memops": memops,
            "memop_ns": memop_ns,
            "gpu_span_ns": span,
            "busy_ns": span - gap,
            "gap_ns": gap,
            "gap_fraction": fraction(gap, span),
            "gap_count": gap_count,
            "gap_p50_ns": gq[:, 0],
            "gap_p90_ns": gq[:, 1],
            "gap_p99_ns": gq[:, 2],
            "gap_max_ns": np.nan_to_num(gq[:, 3], nan=0.0).astype(np.int64),
            "kernel_median_ns": kq[:, 0],
        }
    )


def rollup_stats(
    rows: pd.DataFrame,
    row_group: np.ndarray,
    n_groups: int,
    gaps: tuple[np.ndarray, np.ndarray],
    kernels: tuple[np.ndarray, np.ndarray],
) -> pd.DataFrame:
    """STATS for groups of rows (ranges grouped by name): sums of the rows' totals, with
    percentiles and the kernel median taken over all the rows' gaps (``gaps``: every gap's row
    and length) and kernels (``kernels``: :func:`member_kernels` of the rows' members)."""
    return rollup_table(rows, row_group, n_groups, rollup_quantiles(row_group, n_groups, gaps, QUANTILES),
                        rollup_quantiles(row_group, n_groups, kernels, (0.5,)))


def rollup_quantiles(row_group: np.ndarray, n_groups: int, values: tuple[np.ndarray, np.ndarray],
                     qs: tuple[float, ...]) -> np.ndarray:
    """Quantiles ``qs`` per group of rows of ``values`` (each value's row, the value): the gap
    percentiles (the rows' gaps) or the kernel median (:func:`member_kernels`) of a rollup."""
    rows, v = values
    dtype = key_dtype(v, n_groups) if v.size else None
    group = narrowed(row_group, n_groups)
    # Each value's group, gathered in the dtype of the sort keys, which are then built in this
    # temporary (no copy of it).
    return grouped_quantiles((group if dtype is None else group.astype(dtype, copy=False))[rows], v, n_groups,
                             qs, spare_groups=True)


def rollup_table(rows: pd.DataFrame, row_group: np.ndarray, n_groups: int, gq: np.ndarray, kq: np.ndarray
                 ) -> pd.DataFrame:
    """:func:`rollup_stats`' table from the rows' sums and the groups' gap percentiles ``gq``
    and kernel median ``kq`` (:func:`rollup_quantiles`)."""
    sums = {
        col: _sum_to(row_group, rows[col].to_numpy(), n_groups)
        for col in ("kernels", "memops", "memop_ns", "gpu_span_ns", "busy_ns", "gap_ns", "gap_count")
    }
    return pd.DataFrame(
        {
            **sums,
            "gap_fraction": fraction(sums["gap_ns"], sums["gpu_span_ns"]),
            "gap_p50_ns": gq[:, 0],
            "gap_p90_ns": gq[:, 1],
            "gap_p99_ns": gq[:, 2],
            "gap_max_ns": np.nan_to_num(gq[:, 3], nan=0.0).astype(np.int64),
            "kernel_median_ns": kq[:, 0],
        }
    )[list(STATS_FIELDS)]


#: Memberships :func:`kernel_counts` counts at a time.
COUNT_BLOCK = 1 << 20


def kernel_counts(labels: np.ndarray, names: list[str], member_act: np.ndarray | None, member_row: np.ndarray,
                  n_rows: int, row_of: np.ndarray | None = None) -> np.ndarray:
    """Per output row, its kernels counted by name: a list of ``[name, count]`` pairs, most
    frequent first (then by name), as an object array of ``n_rows`` lists (docs/schema.md,
    ``kernel_counts``). ``labels``: each activity's name code into ``names``, which are sorted
    (-1: not a kernel);
    ``member_act`` None: every activity is a member of ``member_row`` (one per activity);
    ``row_of``: the output row of each ``member_row`` value (a membership's range to its name),
    when given. Counted COUNT_BLOCK memberships at a time, each block's distinct (row, name)
    pairs summed with the others': no temporary over every membership."""
    n_names = max(len(names), 1)
    n = np.asarray(member_row).size
    pairs, pair_counts = [], []
    for lo in range(0, n, COUNT_BLOCK):
        rows = member_row[lo:lo + COUNT_BLOCK]
        if row_of is not None:
            rows = row_of[rows]
        codes = labels[lo:lo + COUNT_BLOCK] if member_act is None else labels[member_act[lo:lo + COUNT_BLOCK]]
        keep = codes >= 0
        key = rows[keep].astype(np.int64)
        key *= n_names
        key += codes[keep]
        pair, counts = np.unique(key, return_counts=True)
        pairs.append(pair)
        pair_counts.append(counts)
    pair = np.concatenate(pairs) if pairs else np.zeros(0, dtype=np.int64)
    counts = np.concatenate(pair_counts) if pair_counts else np.zeros(0, dtype=np.int64)
    if len(pairs) > 1 and pair.size:  # a pair met in several blocks: its counts summed
        order = np.argsort(pair, kind="stable")
        pair, counts = pair[order], counts[order]
        first = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
        pair, counts = pair[first], np.add.reduceat(counts, first)
    row, code = pair // n_names, pair % n_names
    text = np.asarray(names, dtype=object)
    order = np.lexsort((code, -counts, row))  # codes follow the names' order
    row, code, counts = row[order], code[order], counts[order]
    out = np.empty(n_rows, dtype=object)
    for i in range(n_rows):
        out[i] = []
    bounds = np.searchsorted(row, np.arange(n_rows + 1))
    names_of = text[code].tolist()
    count_list = counts.tolist()
    for i in np.flatnonzero(np.diff(bounds)).tolist():
        a, b = bounds[i], bounds[i + 1]
        out[i] = [[n, c] for n, c in zip(names_of[a:b], count_list[a:b])]
    return out
