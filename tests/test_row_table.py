"""A result section's rows held as columns (gapscope.analysis.rows, issue 18): a RowTable reads
out the dicts a list of rows would hold, built here cell by cell from the same columns; an
analysis's tables equal the rows of its own JSON; the graph ceiling of every row matches
docs/metrics.md's formula computed row by row, and its verdict is the whole row's.
"""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest

from gapscope.analysis.result import AnalysisResult, clean_rows
from gapscope.analysis.rows import Nested, RowTable
from gapscope.analysis.verdicts import verdict
from gapscope.render.json import dumps
from gapscope.schema import CATEGORIES

#: SYNTHETIC columns: ints, floats with NaN, text with None and a numpy scalar, bools, a Nested.
COLUMNS = {
    "id": np.arange(7, dtype=np.int64),
    "name": np.array(["a", None, "c", np.str_("d"), "e", "f", "g"], dtype=object),
    "span": np.array([5, 2**40, -1, 0, 3, 9, 11], dtype=np.int64),
    "fraction": np.array([0.5, np.nan, 1.0, np.nan, 0.25, 0.125, 2.0]),
    "flag": np.array([True, False, True, True, False, False, True]),
    "cats": Nested(("x", "y"), np.array([[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12], [13, 14]])),
}


def expected_rows() -> list[dict]:
    """The dicts, made one cell at a time."""
    out = []
    for i in range(7):
        f = float(COLUMNS["fraction"][i])
        out.append({
            "id": i,
            "name": ["a", None, "c", "d", "e", "f", "g"][i],
            "span": [5, 2**40, -1, 0, 3, 9, 11][i],
            "fraction": None if math.isnan(f) else f,
            "flag": [True, False, True, True, False, False, True][i],
            "cats": {"x": 2 * i + 1, "y": 2 * i + 2},
        })
    return out


def test_rows_read_out_as_the_dicts_a_list_holds(monkeypatch):
    table = RowTable(COLUMNS)
    want = expected_rows()
    assert len(table) == 7 and table.fields == ("id", "name", "span", "fraction", "flag", "cats")
    monkeypatch.setattr(RowTable, "SLICE", 3)  # iteration crosses slices of 3 rows
    got = list(table)
    assert got == want
    # Types, not only values: Python ints, floats, bools, str and None.
    assert [type(v) for v in got[3].values()] == [int, str, int, type(None), bool, dict]
    assert type(got[0]["fraction"]) is float and type(got[1]["span"]) is int
    assert table[0] == want[0] and table[-1] == want[6] and table[2:5] == want[2:5] and table[::3] == want[::3]
    assert table[5:2] == [] and table.rows() == want and table.rows(5) == want[5:]
    with pytest.raises(IndexError):
        table[7]
    # The key order is the columns' order, as the JSON writes it; rows read out are JSON-safe as
    # they are.
    assert dumps(list(table)) == dumps(want)
    assert clean_rows(got) == got
    assert [[type(v) for v in r.values()] for r in clean_rows(got)] == [[type(v) for v in r.values()] for r in got]


def test_a_table_is_read_only_and_equal_to_any_sequence_of_the_same_rows():
    table = RowTable(COLUMNS)
    row = table[1]
    row["span"] = 0
    row["cats"]["x"] = 0
    assert table[1]["span"] == 2**40 and table[1]["cats"] == {"x": 3, "y": 4}
    with pytest.raises(ValueError):
        table.column("span")[0] = 1
    want = expected_rows()
    assert table == want and want == table and table == RowTable(COLUMNS) and table != want[:6]
    changed = [dict(r) for r in want]
    changed[4]["fraction"] = 0.3
    assert table != changed
    assert pickle.loads(pickle.dumps(table)) == want  # results travel to the many-trace workers
    with pytest.raises(ValueError, match="different lengths"):
        RowTable({"a": np.arange(3), "b": np.arange(4)})
    assert list(RowTable({}, 0)) == [] and len(RowTable({}, 2)) == 2 and list(RowTable({}, 2)) == [{}, {}]


def test_an_analysis_rows_equal_its_json_and_the_ceiling_is_the_formula_row_by_row(analyzed):
    result = analyzed("torch_decode")
    loaded = AnalysisResult.from_dict(json.loads(dumps(result.to_dict())))
    for section in result.ROW_SECTIONS:
        rows = getattr(result, section)
        assert isinstance(rows, RowTable) and len(rows) > 0
        assert rows == getattr(loaded, section)
    assert loaded == result
    assert len(result.ranges) == 66 and len(result.by_name) == 3 and len(result.devices) == 1
    for section in ("ranges", "by_name", "devices"):
        for row in getattr(result, section):
            cats = row["gap_by_category_ns"]
            assert list(cats) == list(CATEGORIES) and sum(cats.values()) == row["gap_ns"]
            one_off = row["one_off_by_category_ns"]
            steady = row["gpu_span_ns"] - sum(one_off.values())
            # busy time less 150 ns for each eager kernel (at least half of it), the copies' own time
            # at most the memop gap time, or the stalls
            kernels = max(row["busy_ns"] - 150 * (row["kernels"] - row["graph_kernels"]), row["busy_ns"] / 2)
            least = max(kernels + min(row["memop_ns"], cats["memop"] - one_off["memop"]),
                        cats["stall"] - one_off["stall"])
            assert (row["steady_span_ns"], row["graph_ceiling_span_ns"]) == (steady, least)
            assert row["graph_ceiling_speedup"] == (steady / least if steady > 0 else None)
            # The pipeline hands verdict() only the fields it reads: the whole row reads the same.
            assert (row["verdict"], row["reading"]) == verdict(row)
    eager = next(r for r in result.by_name if r["name"] == "eager")
    # docs/api.md's figures: 28,039,394 ns launch and 72,036,096 ns host of a 16.03x ceiling.
    assert (eager["gap_by_category_ns"]["launch"], eager["gap_by_category_ns"]["host"]) == (28_039_394, 72_036_096)
    assert round(eager["graph_ceiling_speedup"], 2) == 16.03


def test_the_tables_pick_the_same_range_instances_from_columns_as_from_a_list(analyzed):
    """The range-instance and domain sections choose their rows by three fields: from a RowTable's
    columns (no row made but those shown) they are the sections of the same rows as a list."""
    from gapscope.render import sections

    for name in ("torch_decode", "torch_emit_nvtx", "jax_train"):
        result = analyzed(name)
        listed = result.listed()
        assert isinstance(result.ranges, RowTable) and isinstance(listed.ranges, list)
        for limit in (0, 1, 5, 20, 10**6):
            assert sections.ranges(result, limit) == sections.ranges(listed, limit)
        assert sections.domains(result) == sections.domains(listed)
    # Picked by hand: the 3 of torch_decode's 66 ranges with GPU work and the most gap time.
    result = analyzed("torch_decode")
    work = [r for r in result.ranges if r["kernels"] > 0]
    top = sorted(work, key=lambda r: -r["gap_ns"])[:3]
    assert [row[0] for row in sections.ranges(result, 3).rows] == [str(r["id"]) for r in top]  # most first
