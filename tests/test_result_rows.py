"""The per-row steps of a result's assembly (issue 18: made faster, results unchanged), each
against a straightforward computation written here: the verdict of many generated rows
(SYNTHETIC, fixed seed) read from docs/metrics.md's table, gap category sums summed gap by gap,
and frame rows made JSON-safe cell by cell.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pandas as pd

from gapscope.analysis.attribution import N_CATEGORIES, GapSplit, as_dicts
from gapscope.analysis.rows import RowTable
from gapscope.analysis.verdicts import READINGS, VERDICTS, column_verdicts, verdict
from gapscope.schema import CATEGORIES


ORDER = ("launch", "host", "stall", "setup", "sync", "dependency", "memop", "pipeline", "unknown")


def _win(p: float) -> str:
    return "graphs won't (<=1.05x)" if not p > 1.05 else (f"graphs ~{p:.1f}x" if p < 10 else f"graphs ~{p:.0f}x")


def reference_verdict(row: dict, graph_level: bool = False) -> tuple[str, str]:
    """docs/metrics.md, "Verdicts", first match wins: (code, reading), the readings written out."""
    texts = {"no_work": "no GPU work", "too_small": "too few kernels to judge", "warmup": "warm-up (one-time)",
             "amortized": "gaps amortized", "launch_bound": "launch-bound", "host_bound": "host-bound",
             "some_launch_gaps": "some launch gaps", "stall": "host stalls", "setup": "setup (loading, allocs)",
             "sync": "host syncs idle the GPU", "dependency": "waits on other streams", "memop": "idle behind copies",
             "pipeline": "device turnaround", "unknown": "gaps not attributable"}
    plain = {**texts, "launch_bound": "launch-bound: graphs pay", "host_bound": "host-bound: graphs pay",
             "stall": "host stalls: graphs won't"}
    f = row.get("gap_fraction")
    if f is None:
        return "no_work", texts["no_work"]
    kernels = row.get("kernels") or 0
    replay = bool(row.get("graph_replays")) and kernels > 0 and row.get("graph_kernels", 0) > kernels / 2
    if kernels < 10 and not replay:
        return "too_small", texts["too_small"]
    span = row.get("gpu_span_ns") or 0
    wall = row.get("wall_ns")
    if wall is not None and (row.get("count") or 1) <= 1 and 3 * (wall - span) >= wall and \
            wall - span >= 100_000_000:
        return "warmup", texts["warmup"]
    cats = row.get("gap_by_category_ns")
    with_cats = bool(cats) and bool(row.get("gap_ns"))
    one_off = row.get("one_off_by_category_ns") or {}
    steady = {c: (cats or {}).get(c, 0) - one_off.get(c, 0) for c in ORDER}
    steady_gap = sum(steady.values())
    steady_span = span - sum(one_off.values())
    removable = steady["launch"] + steady["host"]
    top_ns = max(steady[c] for c in ORDER[2:])
    top = next(c for c in ORDER[2:] if steady[c] == top_ns)  # the first in the catalog's order
    p = row.get("graph_predicted_speedup")
    if replay:
        if with_cats and top in ("stall", "setup", "sync") and top_ns >= removable:
            return top, texts[top]
        if graph_level:
            between = None
        elif with_cats:
            device = steady["dependency"] + steady["memop"] + steady["pipeline"]
            between = steady_gap - device > device
        else:
            between = row.get("gap_between_replays_ns", 0) >= row.get("gap_inside_replays_ns", 0)
        text = {None: "graphs (inside not traced: record with --cuda-graph-trace=node)", True: "graphs: host between",
                False: "graphs: device turnaround"}
        return "graph_replay", text[between]
    steady_f = (steady_gap / steady_span if steady_span > 0 else None) if with_cats else f
    if not (p is not None and p > 1.05) and steady_f is not None and steady_f < 0.05:
        return "amortized", texts["amortized"]
    if with_cats:
        bound = "launch_bound" if steady["launch"] >= steady["host"] else "host_bound"
        if p is not None and not p > 1.05:
            bound = "some_launch_gaps"
        cause = top if top_ns > removable else bound
        if p is not None:
            return cause, f"{texts[cause]}: {_win(p)}"
        if cause not in ("launch_bound", "host_bound", "some_launch_gaps") or f >= 0.2:
            return cause, plain[cause]
        return "some_launch_gaps", plain["some_launch_gaps"]
    if row.get("gap_p50_ns") is not None and row["gap_p50_ns"] > 100_000:
        return "stall", plain["stall"]
    return ("launch_bound", plain["launch_bound"]) if f >= 0.2 else ("some_launch_gaps", plain["some_launch_gaps"])


def generated_row(rng: random.Random) -> dict:
    """A SYNTHETIC result row: figures from small sets, so ties and edge values come often;
    fields and categories left out at random (older schemas, --no-attribution), categories in a
    random order (a tie goes to the first in the catalog's order)."""
    def maybe(name: str, values: tuple) -> None:
        if rng.random() < 0.85:
            row[name] = rng.choice(values)

    row: dict = {}
    maybe("gap_fraction", (None, 0.0, 0.049, 0.05, 0.1, 0.199, 0.2, 0.7))
    maybe("kernels", (None, 9, 10, 40, 40, 40, 40))
    maybe("gap_ns", (None, 0, 10))
    maybe("gpu_span_ns", (10_000, 200_000_000))
    maybe("graph_replays", (0, 1, 3))
    maybe("graph_kernels", (0, 5, 20, 40))
    maybe("gap_between_replays_ns", (0, 1, 2))
    maybe("gap_inside_replays_ns", (0, 1, 2))
    maybe("gap_p50_ns", (None, 100_000, 100_000.5, 5.0))
    maybe("graph_predicted_speedup", (None, None, 0.98, 1.05, 1.06, 4.44, 12.3))
    if rng.random() < 0.2:
        row["wall_ns"] = rng.choice((10_000, 150_000_000, 400_000_000))
        row["count"] = rng.choice((1, 2))
    shape = rng.random()
    if shape < 0.05:
        row["gap_by_category_ns"] = None
    elif shape < 0.1:
        row["gap_by_category_ns"] = {}
    elif shape < 0.9:
        names = [c for c in CATEGORIES if rng.random() < 0.7]
        rng.shuffle(names)
        row["gap_by_category_ns"] = {c: rng.choice((0, 1, 2, 3)) * 1_000 for c in names}
        if rng.random() < 0.3:
            row["one_off_by_category_ns"] = {c: rng.choice((0, 1_000)) if v else 0
                                             for c, v in row["gap_by_category_ns"].items()}
    return row


def test_verdict_agrees_with_the_table_on_generated_rows():
    rng = random.Random(18)
    seen = Counter()
    for _ in range(8_000):
        row = generated_row(rng)
        level = rng.random() < 0.1
        want = reference_verdict(row, level)
        assert verdict(row, level) == want, row
        seen[want[0]] += 1
    # Every verdict came up often, so each rule was exercised.
    assert set(seen) == set(VERDICTS)
    assert min(seen.values()) >= 10


def test_the_verdicts_decided_over_columns_are_each_rows_verdict():
    """SYNTHETIC sections as the pipeline holds them (every field, the categories a Nested in the
    schema's order, NaN for no figure), figures from small sets so that ties and edge values
    come often: column_verdicts gives each row's verdict(row)."""
    from gapscope.analysis.rows import Nested

    rng = np.random.default_rng(18)
    n = 8_000
    pick = lambda values: rng.choice(np.asarray(values), n)  # noqa: E731
    columns = {
        "gap_fraction": pick([np.nan, 0.0, 0.049, 0.05, 0.1, 0.199, 0.2, 0.7]),
        "kernels": pick([0, 9, 10, 40, 40, 40, 40]), "gap_ns": pick([0, 10]), "gpu_span_ns": pick([10_000, 200_000_000]),
        "gap_p50_ns": pick([np.nan, 100_000.0, 100_000.5, 5.0]),
        "graph_kernels": pick([0, 5, 20, 40]), "graph_replays": pick([0, 1, 3]),
        "gap_between_replays_ns": pick([0, 1, 2]), "gap_inside_replays_ns": pick([0, 1, 2]),
        "graph_predicted_speedup": pick([np.nan, np.nan, 0.98, 1.05, 1.06, 4.44, 12.3]),
        "wall_ns": pick([np.nan, np.nan, np.nan, np.nan, 10_000, 150_000_000, 400_000_000]),
    }
    for with_categories in (True, False):
        cols = dict(columns)
        if with_categories:
            cats = rng.integers(0, 4, (n, len(CATEGORIES))) * 1_000
            cols["gap_by_category_ns"] = Nested(tuple(CATEGORIES), cats)
            cols["one_off_by_category_ns"] = Nested(tuple(CATEGORIES), np.where(rng.random(cats.shape) < 0.2, cats, 0))
        codes, readings = column_verdicts(cols, n)
        rows = list(RowTable(cols))
        expected = [verdict(row) for row in rows]
        assert list(zip(codes.tolist(), readings.tolist())) == expected
        seen = Counter(code for code, _ in expected)
        # Every rule came up (the categories' rules only with categories).
        assert set(seen) >= {"no_work", "too_small", "warmup", "amortized", "launch_bound", "some_launch_gaps",
                             "graph_replay", "stall"}
        if with_categories:
            assert set(seen) == set(VERDICTS) and min(seen.values()) >= 20


def test_verdict_ties_and_missing_categories():
    base = {"gap_fraction": 0.5, "gap_ns": 10, "kernels": 40}
    # A tie between other categories: the first in the catalog's order; a tie with removable:
    # not larger.
    assert verdict({**base, "gap_by_category_ns": {"memop": 5, "stall": 5, "launch": 1}})[0] == "stall"
    assert verdict({**base, "gap_by_category_ns": {"stall": 5, "memop": 5, "launch": 1}})[0] == "stall"
    assert verdict({**base, "gap_by_category_ns": {"launch": 3, "host": 2, "sync": 5}})[0] == "launch_bound"
    # A schema-1 row (no host): launch alone is removable, and host counts as 0.
    assert verdict({**base, "gap_by_category_ns": {"launch": 0, "sync": 0}})[0] == "launch_bound"
    assert verdict({**base, "gap_by_category_ns": {"host": 1}})[0] == "host_bound"
    # A graph replay: a host wait at least as large as removable names it, else the replay's text
    # by where its gaps were (device-side: dependency, memop, pipeline).
    replay = {**base, "graph_replays": 1, "graph_kernels": 30, "gap_inside_replays_ns": 1}
    assert verdict({**replay, "gap_by_category_ns": {"host": 4, "setup": 4}})[0] == "setup"
    assert verdict({**replay, "gap_by_category_ns": {"host": 4, "memop": 9}}) == \
        ("graph_replay", "graphs: device turnaround")
    assert verdict({**replay, "gap_by_category_ns": {"host": 4, "memop": 9}}, graph_level=True) == \
        ("graph_replay", "graphs (inside not traced: record with --cuda-graph-trace=node)")
    # A prediction: the cause and the win; at WONT and below, launch and host gaps are "some".
    assert verdict({**base, "gap_by_category_ns": {"host": 9, "stall": 1}, "graph_predicted_speedup": 4.44}) == \
        ("host_bound", "host-bound: graphs ~4.4x")
    assert verdict({**base, "gap_by_category_ns": {"host": 9}, "graph_predicted_speedup": 1.05}) == \
        ("some_launch_gaps", "some launch gaps: graphs won't (<=1.05x)")


def summed_gap_by_gap(split: GapSplit, rows: np.ndarray, length: np.ndarray, n_rows: int) -> list[list[int]]:
    out = [[0] * N_CATEGORIES for _ in range(n_rows)]
    for g, r in enumerate(rows.tolist()):
        if split.whole[g] >= 0:
            out[r][int(split.whole[g])] += int(length[g])
        else:
            for c, ns in enumerate(split.states[split.state_row[g]].tolist()):
                out[r][c] += ns
    return out


def test_category_sums_agree_with_a_gap_by_gap_sum():
    rng = np.random.default_rng(18)
    for n_gaps, n_rows, share_split in ((2_000, 37, 0.5), (500, 3, 0.0), (500, 3, 1.0), (0, 4, 0.5), (0, 0, 0.5)):
        whole = np.where(rng.random(n_gaps) < share_split, -1, rng.integers(0, N_CATEGORIES, n_gaps)).astype(np.int8)
        states = rng.integers(0, 10**9, (n_gaps + 3, 5))  # more state rows than split gaps, shared
        state_row = np.where(whole < 0, rng.integers(0, n_gaps + 3, n_gaps), -1)
        split = GapSplit(whole, state_row, states, np.zeros(n_gaps, dtype=np.int8))
        length = rng.integers(1, 10**9, n_gaps)
        in_order = np.sort(rng.integers(0, max(n_rows, 1), n_gaps))
        for rows in (in_order, rng.permutation(in_order)):  # a level's order, and any other
            assert split.sums(rows, length, n_rows).tolist() == summed_gap_by_gap(split, rows, length, n_rows)


def test_category_dicts_name_every_category_in_order():
    assert as_dicts(np.array([[1, 2, 3, 4, 5, 6, 7, 8, 9]])) == [dict(zip(CATEGORIES, range(1, 10)))]


def test_a_frames_columns_read_out_as_its_records_made_json_safe():
    """A section's columns as the pipeline takes them from its frames (pipeline._columns): the
    RowTable's rows are the frame's records with numpy scalars made Python ones and NaN None."""
    frame = pd.DataFrame({
        "id": np.array([0, 1, 2, 3]),
        "share": [0.5, np.nan, 1.0, 2.0],
        "name": ["a", None, "b", "c"],
        "domain": pd.Series([None, np.int64(3), float("nan"), np.float64(2.5)], dtype=object),
        "flag": [True, False, True, True],
    })
    expected = []
    for record in frame.to_dict("records"):
        row = {}
        for k, v in record.items():
            v = v.item() if isinstance(v, np.generic) else v
            row[k] = None if isinstance(v, float) and math.isnan(v) else v
        expected.append(row)
    got = list(RowTable({c: frame[c].to_numpy() for c in frame.columns}))
    assert got == expected
    assert [[type(v) for v in r.values()] for r in got] == [[type(v) for v in r.values()] for r in expected]
    assert [r["domain"] for r in got] == [None, 3, None, 2.5] and type(got[1]["domain"]) is int
