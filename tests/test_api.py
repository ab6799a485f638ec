"""The public Python API (docs/api.md), used only through ``import gapscope``.

Every number is checked against the command line's JSON of the same trace (the same numbers as
`gapscope analyze -f json`) or against tests/reference.py, the plain sort-and-merge and gap
rules written again over rows read with sqlite3; the per-gap and per-kernel tables are held to
the reference gap by gap and activity by activity.
"""

from __future__ import annotations

import html.parser
import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

import gapscope
import reference
from clirun import assert_one_line_error, gapscope as cli
from paths import ROOT, TRACES

CATEGORIES = reference.CATEGORIES
SECTIONS = {"ranges": "ranges", "by_name": "by_name", "devices": "devices", "streams": "streams",
            "launches": "launch", "payoff": "payoff", "top_gaps": "top_gaps"}


@contextmanager
def in_root() -> Iterator[None]:
    """Run from the repository root, so that paths read as the command line's do."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(cwd)


@pytest.fixture(scope="module")
def decode() -> gapscope.Analysis:
    with in_root():
        return gapscope.analyze("traces/torch_decode.sqlite")


@pytest.fixture(scope="module")
def decode_json() -> str:
    proc = cli("analyze", "traces/torch_decode.sqlite", "-f", "json")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def plain(value):
    """A DataFrame cell as the JSON has it: None for NaN and NA, Python numbers."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def as_json_rows(frame: pd.DataFrame) -> list[dict]:
    """A section DataFrame's rows folded back into the JSON's shape: the gap_<category>_ns
    columns into one gap_by_category_ns object."""
    out = []
    for record in frame.to_dict("records"):
        row = {k: plain(v) for k, v in record.items() if not (k.startswith("gap_") and k[4:-3] in CATEGORIES)}
        split = {c: record[f"gap_{c}_ns"] for c in CATEGORIES if f"gap_{c}_ns" in record}
        if split:
            row["gap_by_category_ns"] = split
        out.append(row)
    return out


# ------------------------------------------------------------------------------ the package


def test_import_loads_no_pandas_numpy_or_pyarrow():
    code = ("import sys, gapscope; gapscope.analyze, gapscope.Analysis, gapscope.load, gapscope.compare; "
            "heavy = [m for m in ('pandas', 'numpy', 'pyarrow', 'matplotlib') if m in sys.modules]; "
            "print(','.join(heavy) or 'none')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "none"


def test_the_public_names_are_typed_and_documented():
    assert sorted(gapscope.__all__) == ["Analysis", "Fleet", "GapscopeError", "__version__", "analyze",
                                        "compare", "load"]
    assert set(gapscope.__all__) <= set(dir(gapscope))
    for name in ("analyze", "load", "compare"):
        fn = getattr(gapscope, name)
        assert fn.__doc__ and "return" in fn.__annotations__, name
    for cls in (gapscope.Analysis, gapscope.Fleet):
        assert cls.__doc__
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        gapscope.nothing  # noqa: B018


# ------------------------------------------------------------------ the result, as DataFrames


def test_to_json_is_the_command_lines_json(decode, decode_json):
    assert decode.to_json() == decode_json
    assert decode.to_dict() == json.loads(decode_json)


@pytest.mark.parametrize("prop,section", SECTIONS.items())
def test_every_section_holds_the_jsons_rows(decode, decode_json, prop, section):
    want = json.loads(decode_json)[section]
    got = as_json_rows(getattr(decode, prop))
    assert len(got) == len(want) > 0
    assert got == want


def test_the_numbers_are_the_references(decode):
    path = str(TRACES / "torch_decode.sqlite")
    ks, refs = reference.kernels(path), reference.ranges(path)
    ranges = decode.ranges
    assert ranges["name"].tolist() == [r["name"] for r in refs]
    assert list(zip(ranges["kernels"], ranges["gpu_span_ns"], ranges["gap_ns"])) == \
        [reference.range_metrics(r, ks) for r in refs]
    eager = decode.by_name.set_index("name").loc["eager"]
    assert (eager["kernels"], eager["gpu_span_ns"], eager["busy_ns"]) == (2496, 107_313_249, 7_050_083)
    assert (eager["gap_launch_ns"], eager["gap_host_ns"], eager["gap_setup_ns"]) == (28_039_394, 72_036_096, 187_676)
    span, gap, gaps = reference.by_device(ks)[0]
    dev = decode.devices.iloc[0]
    assert (dev["gpu_span_ns"], dev["gap_ns"], dev["gap_count"]) == (span, gap, len(gaps))


def test_verdicts_are_every_rows_verdict(decode, decode_json):
    data = json.loads(decode_json)
    v = decode.verdicts
    assert v["level"].value_counts().to_dict() == {"range": 66, "name": 3, "device": 1}
    names = v[v["level"] == "name"].set_index("name")
    assert names.loc["eager", ["verdict", "reading"]].tolist() == ["host_bound", "host-bound: graphs ~10x"]
    assert names.loc["graph", "verdict"] == "graph_replay"
    want = [(r["verdict"], r["reading"], r["gap_ns"]) for r in (*data["by_name"], *data["devices"], *data["ranges"])]
    assert list(zip(v["verdict"], v["reading"], v["gap_ns"])) == want
    assert v.loc[v["level"] == "device", "device"].tolist() == [0]
    assert v.loc[v["level"] == "range", "id"].tolist() == list(range(66))


def test_properties_hand_out_frames_that_do_not_change_the_analysis(decode):
    frame = decode.by_name
    frame["mine"] = 1
    del frame["gap_ns"]
    assert "mine" not in decode.by_name and "gap_ns" in decode.by_name


# -------------------------------------------------------------- every gap and every activity


def reference_tables(name: str) -> tuple[list[dict], list[dict]]:
    """(every device-level gap, every activity) of a shipped trace by the reference's rules,
    with the innermost range that holds each (range ids are the reference ranges' order)."""
    path = str(TRACES / f"{name}.sqlite")
    trace = reference.Trace(path)
    att = reference.Attribution(trace)
    names = reference.activity_names(path)
    refs = reference.ranges(path)
    holders, owners = defaultdict(list), defaultdict(list)
    for i, rng in enumerate(refs):
        acts = reference.range_acts(trace, rng)
        for a in acts:
            owners[a["i"]].append(i)
        for g0, length, _, after in att.gaps([a for a in acts if a["kind"] != "memop"]):
            holders[(after["device"], g0 + length)].append(i)
    gaps = []
    for g0, length, before, after in att.gaps([a for a in trace.acts if a["kind"] != "memop"]):
        split = {c: 0 for c in CATEGORIES} | att.classify(g0, length, after)
        call = trace.calls[after["call"]] if after["call"] is not None else None
        rng = reference.innermost(holders[(after["device"], g0 + length)], refs)
        gaps.append({"device": after["device"], "stream": after["stream"], "pid": after["pid"] & 0xFFFFFF,
                     "start_ns": g0, "end_ns": g0 + length, "gap_ns": length,
                     "category": max(CATEGORIES, key=lambda c: (split[c], -CATEGORIES.index(c))),
                     **{f"gap_{c}_ns": split[c] for c in CATEGORIES},
                     "before": names[before["i"]], "after": names[after["i"]],
                     "launched_by": call[3] if call else None, "before_id": before["i"], "after_id": after["i"],
                     "range_id": rng, "range_name": refs[rng]["name"] if rng is not None else None})
    acts = []
    for a in trace.acts:
        call = trace.calls[a["call"]] if a["call"] is not None else None
        rng = reference.innermost(owners[a["i"]], refs)
        acts.append({"id": a["i"], "name": names[a["i"]], "device": a["device"], "stream": a["stream"],
                     "start_ns": a["start"], "end_ns": a["end"], "busy": a["kind"] != "memop",
                     "launched_by": call[3] if call else None, "call_start_ns": call[0] if call else None,
                     "call_end_ns": call[1] if call else None, "range_id": rng})
    return gaps, acts


@pytest.mark.parametrize("name", ["torch_decode", "cupy_paths_node", "torch_emit_nvtx", "case_multi_gpu"])
def test_gaps_and_kernels_are_the_references_one_by_one(name):
    a = gapscope.analyze(TRACES / f"{name}.sqlite")
    want_gaps, want_acts = reference_tables(name)
    gaps = a.gaps.sort_values(["device", "start_ns"], kind="stable")
    got = [{k: plain(v) for k, v in r.items()} for r in gaps.to_dict("records")]
    assert len(got) == len(want_gaps) > 0
    assert got == want_gaps
    columns = list(want_acts[0])
    got = [{k: plain(v) for k, v in r.items()} for r in a.kernels[columns].to_dict("records")]
    assert got == want_acts


def test_gaps_add_up_to_the_result(decode):
    gaps = decode.gaps
    per_device = gaps.groupby("device")[["gap_ns", *(f"gap_{c}_ns" for c in CATEGORIES)]].sum()
    dev = decode.devices.set_index("device")
    assert per_device["gap_ns"].to_dict() == dev["gap_ns"].to_dict() == {0: 611_340_244}
    for c in CATEGORIES:
        assert per_device[f"gap_{c}_ns"].to_dict() == dev[f"gap_{c}_ns"].to_dict()
    # A decode step holds nothing but its own kernels: its gaps are exactly the step's gap time.
    steps = decode.ranges[decode.ranges["name"] == "decode_step"]
    held = gaps.groupby("range_id")["gap_ns"].sum()
    assert [held[i] for i in steps["id"]] == steps["gap_ns"].tolist()
    assert len(steps) == 64 and int(steps["gap_ns"].sum()) == 99_612_863


def test_the_longest_gaps_are_the_top_gaps(decode):
    longest = decode.gaps.sort_values("gap_ns", ascending=False, kind="stable").head(10)
    cols = [c for c in decode.top_gaps.columns]
    assert as_json_rows(longest[cols]) == as_json_rows(decode.top_gaps)
    assert longest["gap_ns"].iloc[0] == 115_273_158 and longest["category"].iloc[0] == "stall"


def test_without_attribution_the_gaps_have_no_categories():
    a = gapscope.analyze(TRACES / "cupy_paths_node.sqlite", attribution=False)
    assert "category" not in a.gaps and "gap_launch_ns" not in a.gaps
    assert len(a.gaps) == 3152 and a.top_gaps.empty and list(a.top_gaps.columns)[:2] == ["start_ns", "gap_ns"]
    assert "top_gaps" not in a.to_dict()


def test_options_reach_the_analysis():
    a = gapscope.analyze(TRACES / "torch_decode.sqlite", ranges="decode_step", stall_threshold="2ms",
                         tables=False)
    assert a.by_name["name"].tolist() == ["decode_step"]
    assert a.options["stall_threshold_ns"] == 2_000_000 and a.options["range_filter"] == ["decode_step"]
    with pytest.raises(gapscope.GapscopeError, match="tables=False"):
        a.gaps  # noqa: B018
    b = gapscope.analyze(TRACES / "torch_worker_thread.sqlite", threads="process", domains=["default"])
    assert b.options["threads"] == "process" and b.options["domain_filter"] == ["default"]


def test_bad_input_is_one_line_gapscope_error(tmp_path):
    with pytest.raises(gapscope.GapscopeError, match="no such file") as err:
        gapscope.analyze(tmp_path / "none.sqlite")
    assert "\n" not in str(err.value)
    with pytest.raises(gapscope.GapscopeError, match="stall_threshold"):
        gapscope.analyze(TRACES / "torch_decode.sqlite", stall_threshold="soon")
    with pytest.raises(gapscope.GapscopeError, match="no NVTX range matches 'nope'"):
        gapscope.analyze(TRACES / "torch_decode.sqlite", ranges="nope")


# ------------------------------------------------------------------------ save, load, compare


def test_save_and_load_round_trip(decode, tmp_path):
    saved = decode.save(tmp_path / "r.json")
    assert saved.read_text() == decode.to_json()
    back = gapscope.load(saved)
    assert isinstance(back, gapscope.Analysis)
    assert back.to_json() == decode.to_json()
    for prop in (*SECTIONS, "verdicts"):
        pd.testing.assert_frame_equal(getattr(back, prop), getattr(decode, prop))
    for prop in ("gaps", "kernels"):
        with pytest.raises(gapscope.GapscopeError, match="saved result .*r.json.*not every gap and kernel"):
            getattr(back, prop)
    with pytest.raises(gapscope.GapscopeError, match="no gap list to draw"):
        back.plot_timeline()


def test_nothing_is_written_over_the_trace(tmp_path):
    trace = tmp_path / "t.sqlite"
    trace.write_bytes((TRACES / "torch_decode_small.sqlite").read_bytes())
    before = trace.read_bytes()
    a = gapscope.analyze(trace)
    with pytest.raises(gapscope.GapscopeError, match="refusing to overwrite input"):
        a.save(trace)
    with pytest.raises(gapscope.GapscopeError, match="is the same file|refusing to overwrite input"):
        a.write_tables(trace)
    assert trace.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["t.sqlite"]


def test_load_refuses_a_trace():
    with pytest.raises(gapscope.GapscopeError, match="a trace; gapscope.load reads a saved analysis result"):
        gapscope.load(TRACES / "torch_decode.sqlite")


def test_compare_gives_the_command_lines_verdicts(decode):
    proc = cli("compare", "traces/torch_decode.sqlite", "traces/torch_decode_sync.sqlite", "--format", "json")
    assert proc.returncode == 1, proc.stderr
    want = json.loads(proc.stdout)
    sync = gapscope.analyze(TRACES / "torch_decode_sync.sqlite", tables=False)
    for base, cur in ((decode, sync), (str(TRACES / "torch_decode.sqlite"), str(TRACES / "torch_decode_sync.sqlite"))):
        got = gapscope.compare(base, cur)
        key = ["scope", "key", "metric"]
        rows = sorted(as_json_rows(got.drop(columns=[])), key=lambda r: [r[k] for k in key])
        assert rows == sorted(want["verdicts"], key=lambda r: [r[k] for k in key])
        assert got.attrs["passed"] is False and got.attrs["headline"] == want["headline"]
    regressed = got[got["status"] == "regression"]
    assert ("range", "graph", "gap_fraction") in set(zip(regressed["scope"], regressed["key"], regressed["metric"]))


def test_compare_takes_thresholds_and_several_runs(decode):
    same = gapscope.compare([decode, decode], decode.to_dict(), thresholds=["gap_fraction:+0.5"])
    assert set(same["status"]) == {"ok"} and same.attrs["passed"] is True
    assert "gap_fraction:+0.5" in same.attrs["thresholds"]
    assert set(same["baseline_runs"]) == {2}
    with pytest.raises(gapscope.GapscopeError, match="not a threshold|METRIC"):
        gapscope.compare(decode, decode, thresholds="gap_fraction")
    with pytest.raises(gapscope.GapscopeError, match="a path, an Analysis, a Fleet or a result dict"):
        gapscope.compare(decode, 42)


# --------------------------------------------------------------------------------- display


class Tags(html.parser.HTMLParser):
    """Checks that every element closes in order; collects the table cells and list items."""

    VOID = {"br", "meta", "img", "hr", "col"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.cells: list[str] = []
        self.items: list[str] = []
        self.tags: list[str] = []
        self._text: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in self.VOID:
            self.stack.append(tag)
        if tag in ("td", "li"):
            self._text = []

    def handle_endtag(self, tag):
        assert self.stack and self.stack.pop() == tag, (tag, self.stack)
        if tag in ("td", "li") and self._text is not None:
            (self.cells if tag == "td" else self.items).append("".join(self._text).strip())
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def test_notebook_display_holds_the_by_name_table_and_the_verdicts(decode):
    page = decode._repr_html_()
    tags = Tags()
    tags.feed(page)
    tags.close()
    assert tags.stack == [] and "html" not in tags.tags and "body" not in tags.tags
    assert tags.tags.count("table") == 1
    # The by-name table: each name, its count and gap share, and its reading.
    for name, count, share, reading in (("eager", "1", "93.4%", "host-bound: graphs ~10x"),
                                        ("decode_step", "64", "87.4%", "host-bound: graphs ~5.4x"),
                                        ("graph", "1", "17.6%", "graphs: device turnaround")):
        i = tags.cells.index(name)
        assert tags.cells[i + 1] == count and share in tags.cells[i:i + 16] and reading in tags.cells[i:i + 16]
    # The answer first: the ranges that matter, what a replay would win and what it left out.
    assert tags.items == ["eager (x1): host-bound: graphs ~10xpredicted 10x (9.9x-11x); ceiling 16x; measured replay "
                          "12x (graph, traced)one-off gaps left out: 326 us (setup)",
                          "decode_step (x64): host-bound: graphs ~5.4xpredicted 5.4x (5.2x-5.5x); ceiling 7.9x32 of "
                          "64 ran eager: +3.02 ms each; one-off gaps left out: 326 us (setup)",
                          "graph (x1): graphs: device turnaroundceiling 1.2x; graph launch 127 us (~5.55 us "
                          "untraced)"]


def test_repr_is_plain_text(decode, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    text = repr(decode)
    assert "\x1b[" not in text and "<" not in text
    lines = text.splitlines()
    assert lines[0].startswith("gapscope torch_decode.sqlite") and all(len(line) <= 100 for line in lines)
    assert "NVTX ranges by name (3 of 3 launched GPU work)" in text and "93.4%" in text


def test_a_range_name_is_text_in_the_page(tmp_path):
    from synthetic import Synthetic

    t = Synthetic().range(0, 10_000, "<b>step</b> & co").launch(100, 1_500, 2_000, 1).launch(2_100, 3_500, 4_000, 2)
    a = gapscope.analyze(t.write(tmp_path / "synthetic.sqlite"))
    page = a._repr_html_()
    assert "&lt;b&gt;step&lt;/b&gt; &amp; co" in page and "<b>step</b>" not in page


# --------------------------------------------------------------------------------- figures


def test_figures_are_matplotlib_figures(decode):
    fig = decode.plot_timeline(window="10ms:10.4ms")
    assert type(fig).__name__ == "Figure" and fig.axes
    assert "window 10 ms to 10.4 ms" in " ".join(t.get_text() for t in fig.texts)
    hist = decode.plot_histogram()
    assert len(hist.axes) == 3  # one panel per range name with gaps
    with pytest.raises(gapscope.GapscopeError, match="window"):
        decode.plot_timeline(window="5ms")


# --------------------------------------------------------------------------------- several


def test_several_traces_are_a_fleet(tmp_path):
    paths = ["traces/torch_decode.sqlite", "traces/cupy_paths_node.sqlite"]
    proc = cli("analyze", *paths, "-f", "json", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    with in_root():
        fleet = gapscope.analyze(paths, jobs=1)
    assert isinstance(fleet, gapscope.Fleet)
    assert fleet.to_json() == proc.stdout
    data = json.loads(proc.stdout)
    assert as_json_rows(fleet.devices) == data["devices"]
    assert fleet.devices["label"].tolist() == ["cupy_paths_node", "torch_decode"]  # natural order
    spread = fleet.spread
    assert spread.loc[0, "gap_fraction_max"] == data["spread"][0]["gap_fraction"]["max"]
    back = gapscope.load(fleet.save(tmp_path / "fleet.json"))
    assert isinstance(back, gapscope.Fleet) and back.to_json() == fleet.to_json()
    assert "<table" in fleet._repr_html_() and "torch_decode" in repr(fleet)
    with pytest.raises(gapscope.GapscopeError, match="apply to one trace"):
        gapscope.analyze([TRACES / "torch_decode.sqlite", TRACES / "cupy_paths_node.sqlite"], threads="process")


# ------------------------------------------------------------------ the tables on the command line


def test_analyze_format_parquet_writes_the_tables(decode, tmp_path):
    proc = cli("analyze", "traces/torch_decode.sqlite", "--format", "parquet", "-o", str(tmp_path / "t"))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["gaps.parquet", "kernels.parquet"]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "t" / "gaps.parquet"), decode.gaps)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "t" / "kernels.parquet"), decode.kernels)
    import pyarrow.parquet as pq

    meta = json.loads(pq.read_schema(tmp_path / "t" / "gaps.parquet").metadata[b"gapscope"])
    assert meta["schema"] == "gapscope.tables/1" and meta["trace"]["name"] == "torch_decode.sqlite"
    decode.write_tables(tmp_path / "api")
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "api" / "kernels.parquet"), decode.kernels)


def test_analyze_gaps_csv_writes_every_gap(decode, tmp_path):
    proc = cli("analyze", "traces/torch_decode.sqlite", "--gaps-csv", str(tmp_path / "g.csv"))
    assert proc.returncode == 0 and "NVTX ranges by name" in proc.stdout
    got = pd.read_csv(tmp_path / "g.csv")
    want = decode.gaps
    assert list(got.columns) == list(want.columns) and len(got) == len(want) == 5231
    for col in ("start_ns", "gap_ns", "gap_host_ns", "after_id"):
        assert got[col].tolist() == want[col].tolist()
    assert got["range_name"].fillna("").tolist() == want["range_name"].astype(object).fillna("").tolist()


@pytest.mark.parametrize("args,needle", [
    (["traces/torch_decode.sqlite", "-f", "parquet"], "name it with -o DIR"),
    (["traces/torch_decode.sqlite", "traces/cupy_paths_node.sqlite", "--gaps-csv", "x.csv"], "of one trace"),
    (["traces/torch_decode_small_parquet", "-f", "parquet", "-o", "traces/torch_decode_small_parquet"],
     "is the input folder"),
    (["traces/torch_decode_small_parquet", "-f", "parquet", "-o", "traces/torch_decode_small_parquet/tables"],
     "inside the input folder"),
    (["traces/torch_decode.sqlite", "--gaps-csv", "traces/torch_decode.sqlite"], "refusing to overwrite input"),
    (["traces/torch_decode.sqlite", "--gaps-csv", "-"], "already goes to stdout"),
    (["traces/torch_decode.sqlite", "-f", "parquet", "-o", "README.md"], "is not a folder"),
])
def test_table_outputs_that_cannot_be_written_are_refused(args, needle):
    before = sorted(p.name for p in (TRACES / "torch_decode_small_parquet").iterdir())
    assert_one_line_error(cli("analyze", *args), needle)
    assert sorted(p.name for p in (TRACES / "torch_decode_small_parquet").iterdir()) == before


def test_a_saved_result_has_no_tables_to_write(decode, tmp_path):
    saved = decode.save(tmp_path / "r.json")
    assert_one_line_error(cli("analyze", str(saved), "--gaps-csv", str(tmp_path / "g.csv")), "holds no gap list")
    assert not (tmp_path / "g.csv").exists()


# ------------------------------------------------------------------ other formats, other exports


def test_the_tables_are_the_same_from_every_nsys_export_format():
    sqlite = gapscope.analyze(TRACES / "torch_decode_small.sqlite")
    for folder in ("torch_decode_small_parquet", "torch_decode_small_arrow"):
        other = gapscope.analyze(TRACES / folder)
        pd.testing.assert_frame_equal(other.gaps, sqlite.gaps)
        pd.testing.assert_frame_equal(other.kernels, sqlite.kernels)
    assert len(sqlite.gaps) == 1487 and len(sqlite.kernels) == 1649


def test_a_trace_without_nvtx_has_gaps_in_no_range(cloverleaf):
    a = gapscope.analyze(cloverleaf)
    gaps, kernels = a.gaps, a.kernels
    assert len(gaps) == int(a.devices.gap_count.sum()) == 1311
    assert gaps.range_id.isna().all() and kernels.range_id.isna().all() and a.ranges.empty
    assert kernels.kind.value_counts().to_dict() == {"kernel": 1312, "memcpy": 279, "memset": 0, "graph": 0}
    assert not kernels.loc[kernels.kind == "memcpy", "busy"].any()


def test_two_gpus_in_two_processes(fsdp):
    a = gapscope.analyze(fsdp)
    per_device = a.gaps.groupby("device")["gap_ns"].agg(["sum", "count"])
    dev = a.devices.set_index("device")
    assert per_device["sum"].to_dict() == dev["gap_ns"].to_dict()
    assert per_device["count"].to_dict() == dev["gap_count"].to_dict()
    assert sorted(a.kernels.pid.unique().tolist()) == sorted(a.streams.pid.unique().tolist()) == [144, 145]


def test_one_trace_of_two_gpus_as_ranks(fsdp):
    proc = cli("analyze", str(fsdp), "--ranks", "-f", "json")
    assert proc.returncode == 0, proc.stderr
    fleet = gapscope.analyze(fsdp, ranks=True)
    assert isinstance(fleet, gapscope.Fleet) and fleet.to_json() == proc.stdout
    data = json.loads(proc.stdout)
    assert len(fleet.devices) == 2 and len(fleet.collectives) == len(data["collectives"]) > 0
    assert as_json_rows(fleet.waits) == data["waits"]
