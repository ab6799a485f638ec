"""The compact JSON of an analysis, written a piece at a time (gapscope.render.json): the same
text, byte for byte, as one ``json.dumps`` of the whole JSON-safe object, whatever the slice."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from gapscope.analysis.result import AnalysisResult
from gapscope.analysis.rows import Nested, RowTable
from gapscope.render import json as json_render
from gapscope.render.json_rows import row_texts

#: Graph replays (NaN medians for ranges without kernels), several devices, many ranges.
NAMES = ["cupy_paths_node", "case_multi_gpu", "torch_emit_nvtx", "torch_decode"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("rows", [1, 7, 4096])
def test_compact_json_in_pieces_is_one_dumps_of_the_whole(analyzed, monkeypatch, name, rows):
    result = analyzed(name)
    monkeypatch.setattr(json_render, "ROW_SLICE", rows)
    out = io.StringIO()
    json_render.render(result, out)
    whole = json.dumps(result.to_dict(), separators=(",", ":"), allow_nan=False) + "\n"
    assert out.getvalue() == whole
    back = json.loads(out.getvalue())
    assert len(back["ranges"]) == len(result.ranges) > 0
    # Values that are NaN in the rows come out as null, never as NaN.
    nan_cells = sum(1 for r in result.ranges for v in r.values() if isinstance(v, float) and math.isnan(v))
    null_cells = sum(1 for r in back["ranges"] for v in r.values() if v is None)
    assert null_cells >= nan_cells


def test_indented_json_is_unchanged(analyzed):
    result = analyzed("case_multi_gpu")
    out = io.StringIO()
    json_render.render(result, out, indent=2)
    assert out.getvalue() == json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n"


#: SYNTHETIC columns with every kind of cell a section holds, and the awkward ones: NaN and
#: infinities (null), -0.0, 2**62, text with quotes, a percent sign, a newline and non-ASCII
#: letters (escaped as json escapes them), None, numpy scalars in an object column, bools, and a
#: Nested whose keys need escaping.
AWKWARD = {
    "id": np.array([0, 1, 2, 2**62, -5], dtype=np.int64),
    "small": np.array([1, 2, 3, 4, 255], dtype=np.uint8),
    "f": np.array([0.1, np.nan, np.inf, -0.0, -np.inf]),
    "f32": np.array([0.5, 1e-7, np.nan, 3.0, 1e30], dtype=np.float32),
    'na"me%s': np.array(['q"uote', None, "100%", "caf\u00e9\nline", np.str_("ü")], dtype=object),
    "mixed": np.array([1, 2.5, None, float("inf"), np.int64(7)], dtype=object),
    "flag": np.array([True, False, True, False, True]),
    "cats": Nested(("a%", 'b"'), np.array([[1, 2], [3, 4], [5, 6], [7, 8], [9, -10]])),
}


@pytest.mark.parametrize("lo,hi", [(0, 5), (1, 4), (2, 2), (4, 5)])
def test_rows_written_column_by_column_are_json_dumps_of_the_rows(lo, hi):
    table = RowTable(AWKWARD)
    want = [json.dumps(json_render._finite(row), separators=(",", ":"), allow_nan=False) for row in table[lo:hi]]
    assert row_texts(table, lo, hi) == want
    # Each text is one row's object: null where the cell was NaN or infinite.
    if hi > lo:
        back = [json.loads(t) for t in row_texts(table, lo, hi)]
        assert [r["f"] for r in back] == [None if not math.isfinite(v) else v for v in AWKWARD["f"][lo:hi]]
        assert [r["cats"] for r in back] == [{"a%": int(a), 'b"': int(b)} for a, b in AWKWARD["cats"].values[lo:hi]]


def test_a_table_without_columns_writes_empty_objects():
    assert row_texts(RowTable({}, rows=3), 0, 3) == ["{}", "{}", "{}"]
    assert row_texts(RowTable({"c": Nested((), np.zeros((2, 0), dtype=np.int64))}), 0, 2) == \
        ['{"c":{}}', '{"c":{}}']


def test_a_loaded_result_writes_the_same_text_as_the_analysis(analyzed):
    result = analyzed("case_multi_gpu")
    out, again = io.StringIO(), io.StringIO()
    json_render.render(result, out)
    loaded = AnalysisResult.from_dict(json.loads(out.getvalue()))
    assert isinstance(loaded.ranges, list)  # a loaded result's sections are lists of dicts
    json_render.render(loaded, again)
    assert again.getvalue() == out.getvalue()
