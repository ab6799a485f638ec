"""The compact JSON of an analysis, written a piece at a time (gapscope.render.json): the same
text, byte for byte, as one ``json.dumps`` of the whole JSON-safe object, whatever the slice."""

from __future__ import annotations

import io
import json
import math

import pytest

from gapscope.render import json as json_render

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
