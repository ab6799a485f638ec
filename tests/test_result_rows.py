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


def reference_verdict(row: dict) -> tuple[str, str]:
    """docs/metrics.md, "Verdicts", first match wins; (code, key of its reading)."""
    f = row.get("gap_fraction")
    if f is None:
        return "no_work", "no_work"
    if f < 0.05:
        return "amortized", "amortized"
    kernels = row.get("kernels") or 0
    replay = bool(row.get("graph_replays")) and kernels > 0 and row.get("graph_kernels", 0) > kernels / 2
    between = row.get("gap_between_replays_ns", 0) >= row.get("gap_inside_replays_ns", 0)
    replay_reading = "graph_replay_between" if between else "graph_replay_inside"
    cats = row.get("gap_by_category_ns")
    if cats and row.get("gap_ns"):
        removable = cats.get("launch", 0) + cats.get("host", 0)
        others = [(name, ns) for name, ns in cats.items() if name not in ("launch", "host")]
        largest = max((ns for _, ns in others), default=None)
        top = next((name for name, ns in others if ns == largest), None)  # the first on a tie
        if replay:
            if top in ("stall", "setup", "sync") and largest >= removable:
                return top, top
            return "graph_replay", replay_reading
        if top is not None and largest > removable:
            return top, top
        bound = "launch_bound" if cats.get("launch", 0) >= cats.get("host", 0) else "host_bound"
        return (bound, bound) if f >= 0.2 else ("some_launch_gaps", "some_launch_gaps")
    if replay:
        return "graph_replay", replay_reading
    if row.get("gap_p50_ns") is not None and row["gap_p50_ns"] > 100_000:
        return "stall", "stall"
    return ("launch_bound", "launch_bound") if f >= 0.2 else ("some_launch_gaps", "some_launch_gaps")


def generated_row(rng: random.Random) -> dict:
    """A SYNTHETIC result row: figures from small sets, so ties and edge values come often;
    fields and categories left out at random (older schemas, --no-attribution), categories in a
    random order (a tie goes to the first)."""
    def maybe(name: str, values: tuple) -> None:
        if rng.random() < 0.85:
            row[name] = rng.choice(values)

    row: dict = {}
    maybe("gap_fraction", (None, 0.0, 0.049, 0.05, 0.1, 0.199, 0.2, 0.7))
    maybe("kernels", (None, 0, 1, 4))
    maybe("gap_ns", (None, 0, 10))
    maybe("graph_replays", (0, 1, 3))
    maybe("graph_kernels", (0, 2, 3, 4))
    maybe("gap_between_replays_ns", (0, 1, 2))
    maybe("gap_inside_replays_ns", (0, 1, 2))
    maybe("gap_p50_ns", (None, 100_000, 100_000.5, 5.0))
    shape = rng.random()
    if shape < 0.05:
        row["gap_by_category_ns"] = None
    elif shape < 0.1:
        row["gap_by_category_ns"] = {}
    elif shape < 0.9:
        names = [c for c in CATEGORIES if rng.random() < 0.7]
        rng.shuffle(names)
        row["gap_by_category_ns"] = {c: rng.choice((0, 1, 2, 3)) * 1_000 for c in names}
    return row


def test_verdict_agrees_with_the_table_on_generated_rows():
    rng = random.Random(18)
    seen = Counter()
    for _ in range(30_000):
        row = generated_row(rng)
        code, key = reference_verdict(row)
        assert verdict(row) == (code, READINGS[key]), row
        seen[key] += 1
    # Every verdict and both graph replay readings came up often, so each rule was exercised.
    assert set(seen) == {*VERDICTS, "graph_replay_between", "graph_replay_inside"} - {"graph_replay"}
    assert min(seen.values()) >= 30


def test_the_verdicts_decided_over_columns_are_each_rows_verdict():
    """SYNTHETIC sections as the pipeline holds them (every field, the categories a Nested in the
    schema's order, NaN for no figure), figures from small sets so that ties and edge values
    come often: column_verdicts gives each row's verdict(row)."""
    from gapscope.analysis.rows import Nested

    rng = np.random.default_rng(18)
    n = 20_000
    pick = lambda values: rng.choice(np.asarray(values), n)  # noqa: E731
    columns = {
        "gap_fraction": pick([np.nan, 0.0, 0.049, 0.05, 0.1, 0.199, 0.2, 0.7]),
        "kernels": pick([0, 1, 4]), "gap_ns": pick([0, 10]),
        "gap_p50_ns": pick([np.nan, 100_000.0, 100_000.5, 5.0]),
        "graph_kernels": pick([0, 2, 3, 4]), "graph_replays": pick([0, 1, 3]),
        "gap_between_replays_ns": pick([0, 1, 2]), "gap_inside_replays_ns": pick([0, 1, 2]),
    }
    for with_categories in (True, False):
        cols = dict(columns)
        if with_categories:
            cols["gap_by_category_ns"] = Nested(tuple(CATEGORIES), rng.integers(0, 4, (n, len(CATEGORIES))) * 1_000)
        codes, readings = column_verdicts(cols, n)
        rows = list(RowTable(cols))
        expected = [verdict(row) for row in rows]
        assert list(zip(codes.tolist(), readings.tolist())) == expected
        seen = Counter(code for code, _ in expected)
        # Every rule came up (the categories' rules only with categories).
        assert set(seen) >= {"no_work", "amortized", "launch_bound", "some_launch_gaps", "graph_replay", "stall"}
        if with_categories:
            assert set(seen) == set(VERDICTS) and min(seen.values()) >= 20


def test_verdict_ties_and_missing_categories():
    base = {"gap_fraction": 0.5, "gap_ns": 10, "kernels": 4}
    # A tie between other categories: the first in the row's order; a tie with removable: not larger.
    assert verdict({**base, "gap_by_category_ns": {"memop": 5, "stall": 5, "launch": 1}})[0] == "memop"
    assert verdict({**base, "gap_by_category_ns": {"stall": 5, "memop": 5, "launch": 1}})[0] == "stall"
    assert verdict({**base, "gap_by_category_ns": {"launch": 3, "host": 2, "sync": 5}})[0] == "launch_bound"
    # A schema-1 row (no host): launch alone is removable, and host counts as 0.
    assert verdict({**base, "gap_by_category_ns": {"launch": 0, "sync": 0}})[0] == "launch_bound"
    assert verdict({**base, "gap_by_category_ns": {"host": 1}})[0] == "host_bound"
    # A graph replay: a host wait at least as large as removable names it, else the replay's text.
    replay = {**base, "graph_replays": 1, "graph_kernels": 3, "gap_inside_replays_ns": 1}
    assert verdict({**replay, "gap_by_category_ns": {"host": 4, "setup": 4}})[0] == "setup"
    assert verdict({**replay, "gap_by_category_ns": {"host": 4, "memop": 9}}) == \
        ("graph_replay", READINGS["graph_replay_inside"])


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
