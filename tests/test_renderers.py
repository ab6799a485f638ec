"""One contract over every renderer of the registry: each is ``render(result, file, **options)``,
ignores options it does not use, writes to the file it is given, and writes its format."""

from __future__ import annotations

import csv
import inspect
import io
import json
import xml.etree.ElementTree as ET
from importlib import import_module
from pathlib import Path

import pytest

from gapscope.analysis.sweep import sweep_rows
from gapscope.regression.comparison import compare
from gapscope.fleet.executors import InProcess
from gapscope.fleet.merge import analyze_fleet
from gapscope.render import RENDERERS, formats, kind_of, render
from gapscope.run.runner import RunOptions, RunResult
from paths import TRACES


@pytest.fixture(scope="module")
def results(analyzed):
    from gapscope.analysis.pipeline import opened_analysis
    from gapscope.analysis.tables import tables_of
    from gapscope.render.document import Document, Part

    base, cur = analyzed("torch_decode"), analyzed("torch_decode_sync")
    sweep = analyzed("run_sweep_node")
    run = RunResult(options=RunOptions(out_dir=Path("out"), kernel_us=[2, 10, 50, 200, 1000]), command=["nsys"],
                    rows=sweep_rows(sweep.ranges, [], ["eager", "multistream", "graph"], [2, 10, 50, 200, 1000], 150))
    fleet = analyze_fleet([str(TRACES / "torch_decode.sqlite"), str(TRACES / "cupy_paths_node.sqlite")], InProcess())
    document = Document((Part("torch_decode.sqlite", base), Part("torch_decode_sync.sqlite", cur)))
    with opened_analysis(TRACES / "cupy_paths_node.sqlite", all_calls=True) as timeline:  # names need it open
        tables = tables_of(timeline)
        yield {"analysis": base, "fleet": fleet, "comparison": compare([base.to_dict()], [cur.to_dict()]),
               "run": run, "document": document, "timeline": timeline, "tables": tables}


def test_every_renderer_has_the_one_signature():
    for (kind, fmt), module in RENDERERS.items():
        fn = import_module(f"gapscope.render.{module}").render
        params = list(inspect.signature(fn).parameters.values())
        assert [p.kind for p in params[:2]] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 2, (kind, fmt)
        assert params[-1].kind is inspect.Parameter.VAR_KEYWORD, (kind, fmt)
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[2:-1]), (kind, fmt)


#: The formats that write a folder (their ``file`` is its path), and what they write into it.
FOLDER_FORMATS = {"parquet": {"gaps.parquet", "kernels.parquet"}}


@pytest.mark.parametrize("kind,fmt", sorted(RENDERERS))
def test_each_renderer_writes_its_format_to_the_given_file(results, kind, fmt, tmp_path):
    result = results[kind]
    assert kind_of(result) == kind and fmt in formats(kind)
    if fmt in FOLDER_FORMATS:
        import pyarrow.parquet as pq

        render(result, fmt, tmp_path / "out", an_option_nobody_takes=1, limit=5)
        assert {p.name for p in (tmp_path / "out").iterdir()} == FOLDER_FORMATS[fmt]
        assert pq.read_table(tmp_path / "out" / "gaps.parquet").num_rows == len(result.gaps)
        assert pq.read_table(tmp_path / "out" / "kernels.parquet").num_rows == len(result.kernels)
        return
    out = io.StringIO()
    render(result, fmt, out, an_option_nobody_takes=1, limit=5)
    text = out.getvalue()
    assert text.strip(), (kind, fmt)
    if fmt == "json":
        assert json.loads(text) == json.loads(json.dumps(result.to_dict()))
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(text)))
        assert rows and "level" in rows[0]
    elif fmt == "junit":
        assert ET.fromstring(text).tag in ("testsuites", "testsuite")
    elif fmt == "markdown":
        assert "|" in text and "---" in text
    elif fmt == "html":
        assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>") and "<table>" in text
    elif fmt == "notebook":  # a fragment for a Jupyter cell: no page around it
        assert text.startswith('<div class="gapscope-report">') and "<table>" in text and "<html" not in text
    elif fmt == "perfetto":
        assert {e["ph"] for e in json.loads(text)["traceEvents"]} == {"X", "M"}
    elif fmt == "gaps-csv":
        rows = list(csv.DictReader(io.StringIO(text)))
        assert len(rows) == len(result.gaps) and rows[0].keys() == set(result.gaps.columns)
    else:  # table
        assert "\x1b[" not in text  # not a terminal: no colour codes


def test_an_unknown_format_is_one_clear_error(results):
    from gapscope.errors import GapscopeError

    with pytest.raises(GapscopeError, match=r"a fleet result has no 'markdown' format \(it has: table, json, csv\)"):
        render(results["fleet"], "markdown", io.StringIO())
