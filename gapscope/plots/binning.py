"""Data preparation for the figures: plain numpy, no matplotlib, every function exact.

* ``column_coverage``: how many nanoseconds of each pixel column of a time window the intervals
  of each row cover (one pass of bincounts: no loop per interval), so a million kernels
  become one row of numbers per stream;
* ``timeline_bins``: the timeline's busy fraction per (stream row, pixel column) and its idle
  fraction per (device, gap category, pixel column);
* ``log_edges`` and ``log_histogram``: log-spaced gap-duration bins and counts per (group,
  category, bin);
* ``percentile_marks``: the p50/p90/p99 a result row already holds, as labelled marks;
* ``sweep_series`` and ``crossing``: a `gapscope run` sweep as one line per path, and where a
  line crosses a level (log-linear interpolation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def column_coverage(
    start: np.ndarray, end: np.ndarray, row: np.ndarray, n_rows: int, t0: int, t1: int, n_cols: int
) -> np.ndarray:
    """Nanoseconds of each pixel column covered by the intervals ``[start, end)`` of each row.

    The window ``[t0, t1)`` is cut into ``n_cols`` columns of equal width ``(t1 - t0) / n_cols``;
    intervals are clipped to the window. Returns float64 of shape ``(n_rows, n_cols)``.
    Intervals of one row that overlap are counted once each (callers clip the fraction to 1).
    """
    if t1 <= t0 or n_cols < 1:
        raise ValueError("column_coverage needs t1 > t0 and at least one column")
    out = np.zeros(n_rows * n_cols, dtype=np.float64)
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    row = np.asarray(row, dtype=np.int64)
    s = np.clip(start, t0, t1)
    e = np.clip(end, t0, t1)
    keep = e > s
    if not keep.any():
        return out.reshape(n_rows, n_cols)
    s, e, r = (s[keep] - t0).astype(np.float64), (e[keep] - t0).astype(np.float64), row[keep]
    width = (t1 - t0) / n_cols
    c0 = np.minimum(np.floor(s / width).astype(np.int64), n_cols - 1)
    c1 = np.minimum(np.ceil(e / width).astype(np.int64) - 1, n_cols - 1)  # last column touched
    c1 = np.maximum(c1, c0)
    base = r * n_cols
    size = n_rows * n_cols
    one = c0 == c1
    # An interval inside one column.
    out += np.bincount(base[one] + c0[one], weights=e[one] - s[one], minlength=size)
    # Its first and last (partial) columns, then the full columns between them.
    many = ~one
    out += np.bincount(base[many] + c0[many], weights=(c0[many] + 1) * width - s[many], minlength=size)
    out += np.bincount(base[many] + c1[many], weights=e[many] - c1[many] * width, minlength=size)
    inner = many & (c1 > c0 + 1)
    if inner.any():
        step = np.zeros(n_rows * (n_cols + 1), dtype=np.int64)
        rb = r[inner] * (n_cols + 1)
        np.add.at(step, rb + c0[inner] + 1, 1)
        np.add.at(step, rb + c1[inner], -1)
        full = np.cumsum(step.reshape(n_rows, n_cols + 1), axis=1)[:, :n_cols]
        out += full.ravel() * width
    return out.reshape(n_rows, n_cols)


@dataclass(frozen=True)
class TimelineBins:
    """A time window cut into pixel columns.

    ``rows``: the stream codes drawn, one per row, ordered by device then stream code;
    ``row_device``: each row's device code; ``busy``/``memop``: fraction of each (row, column)
    covered by busy work (kernels, graph executions) and by memcpy/memset, in [0, 1];
    ``devices``: the device codes drawn; ``gaps``: fraction of each (device, category, column)
    that lies in a gap of that category, in [0, 1]; ``idle``: those summed over categories.
    """

    t0: int
    t1: int
    n_cols: int
    rows: np.ndarray
    row_device: np.ndarray
    busy: np.ndarray
    memop: np.ndarray
    devices: np.ndarray
    gaps: np.ndarray

    @property
    def column_ns(self) -> float:
        return (self.t1 - self.t0) / self.n_cols

    @property
    def idle(self) -> np.ndarray:
        return self.gaps.sum(axis=1)


def timeline_bins(
    start: np.ndarray, end: np.ndarray, stream: np.ndarray, is_memop: np.ndarray,
    stream_device: np.ndarray, gap_start: np.ndarray, gap_len: np.ndarray, gap_device: np.ndarray,
    gap_cat: np.ndarray, n_cats: int, t0: int, t1: int, n_cols: int,
) -> TimelineBins:
    """Aggregate activities and gaps of a window into pixel columns.

    ``stream`` is each activity's stream code and ``stream_device[code]`` the device code of a
    stream; ``gap_device`` is each gap's device code and ``gap_cat`` its category (0..n_cats-1).
    Only streams with an activity overlapping ``[t0, t1)`` get a row, only devices with such a
    stream a gap band.
    """
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    stream = np.asarray(stream, dtype=np.int64)
    stream_device = np.asarray(stream_device, dtype=np.int64)
    inside = (end > t0) & (start < t1) | (start >= t0) & (start < t1)
    present = np.unique(stream[inside])
    rows = present[np.lexsort((present, stream_device[present]))]
    row_of = np.full(stream_device.size, -1, dtype=np.int64)
    row_of[rows] = np.arange(rows.size)
    width = (t1 - t0) / n_cols
    is_memop = np.asarray(is_memop, dtype=bool)
    r = row_of[stream[inside]]
    s, e, m = start[inside], end[inside], is_memop[inside]
    busy = column_coverage(s[~m], e[~m], r[~m], rows.size, t0, t1, n_cols) / width
    memop = column_coverage(s[m], e[m], r[m], rows.size, t0, t1, n_cols) / width

    devices = np.unique(stream_device[rows])
    dev_of = np.full(int(stream_device.max()) + 1 if stream_device.size else 0, -1, dtype=np.int64)
    dev_of[devices] = np.arange(devices.size)
    gap_start = np.asarray(gap_start, dtype=np.int64)
    gap_end = gap_start + np.asarray(gap_len, dtype=np.int64)
    gap_device = np.asarray(gap_device, dtype=np.int64)
    g_in = (gap_end > t0) & (gap_start < t1) & (gap_device < dev_of.size)
    g_in[g_in] &= dev_of[gap_device[g_in]] >= 0
    group = dev_of[gap_device[g_in]] * n_cats + np.asarray(gap_cat, dtype=np.int64)[g_in]
    gaps = column_coverage(gap_start[g_in], gap_end[g_in], group, devices.size * n_cats, t0, t1, n_cols)
    return TimelineBins(
        t0=t0, t1=t1, n_cols=n_cols, rows=rows, row_device=stream_device[rows],
        busy=np.minimum(busy, 1.0), memop=np.minimum(memop, 1.0), devices=devices,
        gaps=np.minimum(gaps / width, 1.0).reshape(devices.size, n_cats, n_cols),
    )


def dominant(shares: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the largest share, total) along axis 0 of ``shares`` (categories x columns)."""
    return np.argmax(shares, axis=0), shares.sum(axis=0)


def log_edges(lengths: np.ndarray, per_decade: int = 10) -> np.ndarray:
    """Log-spaced bin edges covering ``lengths`` (> 0): ``per_decade`` bins per power of ten,
    from the power of ten at or below the shortest to the one at or above the longest."""
    lengths = np.asarray(lengths)
    lengths = lengths[lengths > 0]
    if lengths.size == 0:
        return np.array([1.0, 10.0])
    lo = math.floor(math.log10(float(lengths.min())))
    hi = math.ceil(math.log10(float(lengths.max())))
    hi = max(hi, lo + 1)
    edges = 10.0 ** (np.arange(lo * per_decade, hi * per_decade + 1) / per_decade)
    edges[-1] = max(edges[-1], float(lengths.max()))
    return edges


def log_histogram(
    lengths: np.ndarray, group: np.ndarray, cat: np.ndarray, edges: np.ndarray, n_groups: int, n_cats: int
) -> np.ndarray:
    """Counts of ``lengths`` per (group, category, bin), shape ``(n_groups, n_cats, len(edges)-1)``.

    Bins are ``[edges[i], edges[i+1])``, the last one closed; values outside the edges are
    dropped.
    """
    n_bins = edges.size - 1
    v = np.asarray(lengths, dtype=np.float64)
    b = np.searchsorted(edges, v, side="right") - 1
    b = np.where(v == edges[-1], n_bins - 1, b)
    ok = (b >= 0) & (b < n_bins)
    key = (np.asarray(group, dtype=np.int64)[ok] * n_cats + np.asarray(cat, dtype=np.int64)[ok]) * n_bins + b[ok]
    return np.bincount(key, minlength=n_groups * n_cats * n_bins).reshape(n_groups, n_cats, n_bins)


PERCENTILES = (("p50", "gap_p50_ns"), ("p90", "gap_p90_ns"), ("p99", "gap_p99_ns"))


def percentile_marks(row: dict[str, Any]) -> list[tuple[str, float]]:
    """The gap percentiles a result row holds (docs/metrics.md), as (label, ns); none missing."""
    return [(label, float(row[key])) for label, key in PERCENTILES if row.get(key) is not None]


@dataclass(frozen=True)
class SweepSeries:
    """One path of a sweep, by increasing kernel time (NaN where the run has no value)."""

    path: str
    kernel_us: np.ndarray
    gap_fraction: np.ndarray
    speedup: np.ndarray


def sweep_series(rows: Sequence[Any]) -> list[SweepSeries]:
    """SweepRows (or their dicts) as one series per path, paths in first-appearance order."""
    def get(r: Any, k: str) -> Any:
        return r[k] if isinstance(r, dict) else getattr(r, k)

    paths = list(dict.fromkeys(get(r, "path") for r in rows))
    out = []
    for p in paths:
        mine = sorted((r for r in rows if get(r, "path") == p), key=lambda r: get(r, "kernel_us"))
        num = lambda k: np.array([np.nan if get(r, k) is None else float(get(r, k)) for r in mine])  # noqa: E731
        out.append(SweepSeries(p, num("kernel_us"), num("gap_fraction"), num("speedup_vs_eager")))
    return out


def crossing(x: np.ndarray, y: np.ndarray, level: float) -> float | None:
    """The first x at which the falling line (x, y) reaches ``level``, interpolated linearly in
    log x between the two points around it; None if it never goes from above to at-or-below."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = ~np.isnan(y) & (x > 0)
    x, y = x[ok], y[ok]
    for i in range(1, x.size):  # one step per sweep point, a handful
        if y[i - 1] > level >= y[i]:
            frac = (y[i - 1] - level) / (y[i - 1] - y[i])
            return float(10 ** (math.log10(x[i - 1]) + frac * (math.log10(x[i]) - math.log10(x[i - 1]))))
    return None
