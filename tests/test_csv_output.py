"""The CSV of an analysis (gapscope.render.csv), written column by column from the result's
RowTables: the same text, byte for byte, as csv.DictWriter writes from the rows as dicts, and
the same for a result loaded from its JSON (lists of dicts)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from gapscope.analysis.result import AnalysisResult
from gapscope.analysis.rows import Nested, RowTable
from gapscope.render import csv as csv_render
from gapscope.render.json import render as render_json
from gapscope.schema import STATS_FIELDS

NAMES = ["cupy_paths_node", "case_multi_gpu", "torch_emit_nvtx", "torch_decode"]


def dict_writer_csv(result) -> str:
    """The CSV made one dict at a time (the independent computation)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[*csv_render.KEY_FIELDS, *STATS_FIELDS], extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for level, rows in (("range", result.ranges), ("name", result.by_name),
                        ("device", result.devices), ("stream", result.streams)):
        for row in rows:
            writer.writerow({"level": level, **{k: (None if v != v else v) for k, v in row.items()}})
    return out.getvalue()


@pytest.mark.parametrize("name", NAMES)
def test_csv_is_the_rows_written_one_dict_at_a_time(analyzed, name):
    result = analyzed(name)
    assert isinstance(result.ranges, RowTable)
    out = io.StringIO()
    csv_render.render(result, out)
    want = dict_writer_csv(result)
    assert out.getvalue() == want
    lines = want.splitlines()
    assert len(lines) == 1 + len(result.ranges) + len(result.by_name) + len(result.devices) + len(result.streams)
    # A loaded result (lists of dicts) writes the same text.
    text = io.StringIO()
    render_json(result, text)
    loaded = AnalysisResult.from_dict(json.loads(text.getvalue()))
    again = io.StringIO()
    csv_render.render(loaded, again)
    assert again.getvalue() == want


def test_fields_a_table_lacks_are_empty_and_nan_is_empty():
    """SYNTHETIC: a table with two of the CSV's fields, a NaN and a None among them."""
    table = RowTable({"id": np.array([3, 4]), "gap_fraction": np.array([0.25, np.nan]),
                      "name": np.array(["a,b", None], dtype=object),
                      "gap_by_category_ns": Nested(("launch",), np.array([[1], [2]]))})
    fields = [*csv_render.KEY_FIELDS, *STATS_FIELDS]
    got = [list(map(str, r)) for r in csv_render._cells("range", table, fields)]
    width = len(fields)
    want = [["range", "3", "a,b"] + [""] * (width - 3), ["range", "4", "None"] + [""] * (width - 3)]
    want[0][fields.index("gap_fraction")] = "0.25"
    want[1][fields.index("gap_fraction")] = "None"
    assert got == want
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(csv_render._cells("range", table, fields))
    first, second = out.getvalue().splitlines()
    assert first.split('"a,b"')[0] == "range,3," and first.count(",") == width  # the comma is quoted
    assert second.startswith("range,4,,") and second.count(",") == width - 1
