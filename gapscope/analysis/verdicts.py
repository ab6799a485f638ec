"""Reading a timeline row: what kept the GPU idle, and what CUDA Graphs would win
(docs/metrics.md, "Verdicts").

One evaluator, :func:`column_verdicts`, decides every row of a section at once by the rules of
gapscope.catalog.VERDICTS, in that order (the first that matches wins); :func:`verdict` is the
same evaluator on one row (a saved result of an older schema, a many-trace result's pooled
row). A row whose prediction was made (gapscope.analysis.prediction) reads its cause and the
predicted win (``launch-bound: graphs ~4.4x``, ``host stalls: graphs won't (<=1.05x)``); one
without (no attribution, an older result) reads the catalog's plain text.

This module imports numpy only when a verdict is decided, so the renderers of a saved result
(which read the stored ``reading``) stay numpy-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gapscope import catalog
from gapscope.catalog import (
    AMORTIZED, CATEGORY_NAMES, GRAPH_SHARE, HOST_WAITS, LAUNCH_BOUND, LAUNCH_SCALE_NS, MIN_KERNELS, PLAIN_READINGS,
    READINGS, REMOVED_BY_GRAPHS, REPLAY_READINGS, WARMUP_NS, WONT,
)

#: Every verdict code, in the order its rule is tried.
VERDICTS = catalog.VERDICT_CODES

__all__ = ["AMORTIZED", "LAUNCH_BOUND", "READINGS", "VERDICTS", "column_verdicts", "is_graph_replay", "reading",
           "verdict", "win"]


def is_graph_replay(row: Mapping[str, Any]) -> bool:
    """True when more than half of the row's kernels came from graph launches."""
    kernels = row.get("kernels") or 0
    return bool(row.get("graph_replays")) and kernels > 0 and (row.get("graph_kernels") or 0) > GRAPH_SHARE * kernels


def win(predicted: float) -> str:
    """The predicted win as a reading says it: ``graphs ~4.4x``, ``graphs ~12x`` or, at WONT
    and below, ``graphs won't (<=1.05x)``."""
    if not predicted > WONT:
        return f"graphs won't (<={WONT:.2f}x)"
    return f"graphs ~{predicted:.1f}x" if predicted < 10 else f"graphs ~{predicted:.0f}x"


def verdict(row: Mapping[str, Any], graph_level: bool = False) -> tuple[str, str]:
    """(code, reading) of one row: :func:`column_verdicts` on it alone."""
    nested = ("gap_by_category_ns", "one_off_by_category_ns")
    columns: dict[str, Any] = {k: [v] for k, v in row.items() if k not in nested and not isinstance(v, (dict, list))}
    for key in nested:
        cats = row.get(key)
        if isinstance(cats, Mapping) and cats:  # an empty split is none (as without attribution)
            columns[key] = [[cats.get(c, 0) or 0 for c in CATEGORY_NAMES]]
    codes, texts = column_verdicts(columns, 1, graph_level)
    return str(codes[0]), str(texts[0])


def reading(row: Mapping[str, Any]) -> str:
    """The phrase a table shows for a row: its stored ``reading``, else decided now."""
    text = row.get("reading")
    return text if isinstance(text, str) else verdict(row)[1]


def _matrix(columns: Mapping[str, Any], name: str, n: int) -> Any:
    """A nested per-category column as an (n, categories) array in the catalog's order, or None."""
    import numpy as np

    value = columns.get(name)
    if value is None:
        return None
    keys = getattr(value, "keys", None)
    if keys is not None and not callable(keys):  # gapscope.analysis.rows.Nested
        values = np.asarray(value.values, dtype=np.float64).reshape(n, len(keys))
        out = np.zeros((n, len(CATEGORY_NAMES)))
        for j, key in enumerate(keys):
            if key in CATEGORY_NAMES:
                out[:, CATEGORY_NAMES.index(key)] = values[:, j]
        return out
    return np.asarray(value, dtype=np.float64).reshape(n, len(CATEGORY_NAMES))


def column_verdicts(columns: Mapping[str, Any], n: int, graph_level: bool = False) -> tuple[Any, Any]:
    """(codes, readings), two object arrays, of the ``n`` rows of a section held as columns
    (the pipeline's, gapscope.analysis.rows; every STATS and replay field, the categories as a
    Nested or an (n, categories) array when attribution ran, the prediction's fields when it was
    made), by the catalog's rules in order. ``graph_level``: the trace recorded graphs at graph
    level (a replay's inside gaps were not traced)."""
    import numpy as np

    def col(name: str, default: float = np.nan) -> np.ndarray:
        value = columns.get(name)
        if value is None:
            return np.full(n, default)
        return np.asarray([default if v is None else v for v in value] if isinstance(value, list) else value,
                          dtype=np.float64)

    f = col("gap_fraction")
    kernels, gap_ns, span = col("kernels", 0.0), col("gap_ns", 0.0), col("gpu_span_ns", 0.0)
    replay = (col("graph_replays", 0.0) != 0) & (kernels > 0) & (col("graph_kernels", 0.0) > GRAPH_SHARE * kernels)
    predicted = col("graph_predicted_speedup")
    has_prediction = ~np.isnan(predicted)
    wall = col("wall_ns")
    code = np.empty(n, dtype=object)
    text = np.empty(n, dtype=object)
    open_ = np.ones(n, dtype=bool)  # rows no rule has decided yet

    def decide(mask: np.ndarray, verdict_code: Any, reading_text: Any) -> None:
        hit = open_ & mask
        code[hit] = verdict_code if isinstance(verdict_code, str) else verdict_code[hit]
        text[hit] = reading_text if isinstance(reading_text, str) else reading_text[hit]
        open_[hit] = False

    decide(np.isnan(f), "no_work", READINGS["no_work"])
    decide((kernels < MIN_KERNELS) & ~replay, "too_small", READINGS["too_small"])
    # Host time before the GPU work of one range (a name's instances are judged one by one: a
    # loop whose first step compiles is not a warm-up, its first instance is).
    host_first = wall - span
    decide(~np.isnan(wall) & (col("count", 1.0) <= 1) & (3 * host_first >= wall) & (host_first >= WARMUP_NS),
           "warmup", READINGS["warmup"])

    cats = _matrix(columns, "gap_by_category_ns", n)
    with_cats = np.zeros(n, dtype=bool) if cats is None else gap_ns != 0
    if cats is None:
        cats = np.zeros((n, len(CATEGORY_NAMES)))
    one_off = _matrix(columns, "one_off_by_category_ns", n)
    steady = cats - one_off if one_off is not None else cats
    steady_gap = steady.sum(axis=1)
    steady_span = span - (one_off.sum(axis=1) if one_off is not None else 0.0)
    steady_f = np.where(with_cats, np.divide(steady_gap, steady_span, out=np.full(n, np.nan),
                                             where=steady_span > 0), f)
    index = {c: i for i, c in enumerate(CATEGORY_NAMES)}
    removable = sum(steady[:, index[c]] for c in REMOVED_BY_GRAPHS)
    others = [i for i, c in enumerate(CATEGORY_NAMES) if c not in REMOVED_BY_GRAPHS]
    top_at = np.argmax(steady[:, others], axis=1)  # the first of the largest
    top_ns = steady[:, others].max(axis=1)
    top = np.array([CATEGORY_NAMES[i] for i in others], dtype=object)[top_at]
    launch, host = steady[:, index["launch"]], steady[:, index["host"]]
    bound = np.where(launch >= host, "launch_bound", "host_bound").astype(object)
    # Launch and host gaps that a graph would barely shorten are "some launch gaps".
    bound = np.where(has_prediction & ~(predicted > WONT), "some_launch_gaps", bound).astype(object)
    cause = np.where(top_ns > removable, top, bound).astype(object)

    # A replay: what the replays left. Host waits that hold the most name it; else the host's
    # time between replays or the device's turnaround inside them, by the categories (without
    # attribution, by which side of the replays held the gap time).
    device_side = sum(steady[:, index[c]] for c in ("dependency", "memop", "pipeline"))
    host_side = steady_gap - device_side
    between = np.where(with_cats, host_side > device_side,
                       col("gap_between_replays_ns", 0.0) >= col("gap_inside_replays_ns", 0.0))
    replay_text = np.where(between, REPLAY_READINGS["between"], REPLAY_READINGS["inside"]).astype(object)
    if graph_level:
        replay_text[:] = REPLAY_READINGS["untraced"]
    # A graph recorded (instantiated or updated) for every other replay or more often: the
    # graph is re-recorded, not just replayed.
    recordings = col("graph_recordings", 0.0)
    re_recorded = (recordings > 0) & (2 * recordings >= col("graph_replays", 0.0))
    replay_text[re_recorded] = REPLAY_READINGS["recorded"]
    waits = np.isin(top, HOST_WAITS) & (top_ns >= removable) & with_cats
    decide(replay & waits, top, np.array([READINGS[c] for c in top], dtype=object))
    decide(replay, "graph_replay", replay_text)

    decide(~(predicted > WONT) & (steady_f < AMORTIZED), "amortized", READINGS["amortized"])

    # The cause, with the predicted win where a prediction was made.
    if has_prediction.any():
        rows = np.flatnonzero(open_ & with_cats & has_prediction)
        texts = np.array([f"{READINGS[c]}: {win(p)}" for c, p in zip(cause[rows], predicted[rows])], dtype=object)
        full = np.empty(n, dtype=object)
        full[rows] = texts
        decide(with_cats & has_prediction, cause, full)
    plain = np.array([PLAIN_READINGS[c] for c in cause], dtype=object)
    is_bound = np.isin(cause, ("launch_bound", "host_bound", "some_launch_gaps"))
    decide(with_cats & ~is_bound, cause, plain)
    decide(with_cats & (f >= LAUNCH_BOUND), cause, plain)
    decide(with_cats, "some_launch_gaps", PLAIN_READINGS["some_launch_gaps"])
    # Without attribution.
    decide(replay, "graph_replay", replay_text)
    p50 = col("gap_p50_ns")
    decide(~np.isnan(p50) & (p50 > LAUNCH_SCALE_NS), "stall", PLAIN_READINGS["stall"])
    decide(f >= LAUNCH_BOUND, "launch_bound", PLAIN_READINGS["launch_bound"])
    decide(open_, "some_launch_gaps", PLAIN_READINGS["some_launch_gaps"])
    return code, text
