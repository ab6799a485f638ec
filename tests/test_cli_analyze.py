"""`gapscope analyze` from the command line: formats, bad input, read-only access."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import sqlite3
from pathlib import Path

from paths import ROOT
import pytest

from clirun import assert_one_line_error, gapscope
from synthetic import Synthetic






def small_trace(tmp_path: Path) -> Path:
    t = Synthetic()
    t.range(0, 10_000, "decode_step")
    t.launch(100, 1_000, 2_000, 1).launch(200, 3_000, 4_000, 2)
    return t.write(tmp_path / "synthetic.sqlite")





def test_table_json_csv(tmp_path):
    path = small_trace(tmp_path)
    table = gapscope("analyze", str(path))
    assert table.returncode == 0, table.stderr
    assert "decode_step" in table.stdout and "33.3%" in table.stdout
    js = gapscope("analyze", str(path), "--format", "json")
    data = json.loads(js.stdout)
    assert data["schema"] == "gapscope.analysis/3"
    (r,) = data["ranges"]
    assert (r["name"], r["kernels"], r["gpu_span_ns"], r["busy_ns"], r["gap_ns"], r["gap_fraction"]) == (
        "decode_step", 2, 3_000, 2_000, 1_000, 1_000 / 3_000)
    for key in ("trace", "nsys_version", "warnings", "by_name", "devices", "streams"):
        assert key in data
    rows = list(csv.DictReader(io.StringIO(gapscope("analyze", str(path), "-f", "csv").stdout)))
    assert [row["level"] for row in rows] == ["range", "name", "device", "stream"]
    assert rows[0]["gap_ns"] == "1000"


def test_saved_json_rerenders_the_same(tmp_path):
    path = small_trace(tmp_path)
    out = tmp_path / "result.json"
    assert gapscope("analyze", str(path), "-f", "json", "-o", str(out)).returncode == 0
    direct = gapscope("analyze", str(path), "-f", "csv").stdout
    again = gapscope("analyze", str(out), "-f", "csv").stdout
    assert direct == again


def test_real_trace_report(cloverleaf):
    proc = gapscope("analyze", str(cloverleaf))
    assert proc.returncode == 0, proc.stderr
    assert "1,312" in proc.stdout and "14.0%" in proc.stdout


def test_bad_inputs_one_line_exit_2(tmp_path, cloverleaf):
    assert_one_line_error(gapscope("analyze", str(tmp_path / "missing.sqlite")), "no such file")
    assert_one_line_error(gapscope("analyze", str(tmp_path)), "is a directory")
    text = tmp_path / "notes.sqlite"
    text.write_text("hello")
    assert_one_line_error(gapscope("analyze", str(text)), "not a SQLite file")

    plain = tmp_path / "plain.sqlite"
    conn = sqlite3.connect(plain)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    assert_one_line_error(gapscope("analyze", str(plain)), "not an nsys export")

    t = Synthetic()
    t.range(0, 10, "r")
    t.call(0, 5, 1)
    nokern = t.write(tmp_path / "nokernels.sqlite")
    assert_one_line_error(gapscope("analyze", str(nokern)), "no CUDA kernels")

    trunc = tmp_path / "truncated.sqlite"
    data = cloverleaf.read_bytes()
    trunc.write_bytes(data[: len(data) // 2])
    assert_one_line_error(gapscope("analyze", str(trunc)), "truncated")

    assert_one_line_error(gapscope("analyze", str(small_trace(tmp_path)), "--range", "nope*"),
                          "no NVTX range matches 'nope*'")
    assert_one_line_error(gapscope("analyze", str(cloverleaf), "--range", "x"), "has no NVTX ranges")
    rep = tmp_path / "x.nsys-rep"
    rep.write_bytes(b"\0" * 200)
    with pytest.MonkeyPatch.context() as mp:  # no nsys to export it with, on any machine
        mp.setenv("GAPSCOPE_NSYS", str(tmp_path / "no-nsys"))
        mp.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        assert_one_line_error(gapscope("analyze", str(rep)), f"{rep}: export it where nsys is (`nsys export "
                              "--type parquetdir -o DIR")


def test_trace_is_never_written(tmp_path, cloverleaf):
    copy = tmp_path / "cloverleaf.sqlite"
    shutil.copy(cloverleaf, copy)
    copy.chmod(0o444)
    before = (hashlib.sha256(copy.read_bytes()).hexdigest(), copy.stat().st_mtime_ns)
    assert gapscope("analyze", str(copy), "-f", "json").returncode == 0
    after = (hashlib.sha256(copy.read_bytes()).hexdigest(), copy.stat().st_mtime_ns)
    assert before == after
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cloverleaf.sqlite"]  # no journal, no -wal


def test_output_folder_must_exist(tmp_path):
    proc = gapscope("analyze", str(small_trace(tmp_path)), "-o", str(tmp_path / "no" / "out.txt"))
    assert_one_line_error(proc, "no such folder")


@pytest.mark.parametrize("args,needle", [
    (["--format=xml"], "'xml' is not one of"),
    (["--top", "many"], "'many' is not a valid integer"),
])
def test_usage_errors_one_line_exit_2(tmp_path, args, needle):
    assert_one_line_error(gapscope("analyze", str(small_trace(tmp_path)), *args), needle)


def test_missing_argument_and_unknown_command():
    assert_one_line_error(gapscope("analyze"), "Missing argument 'TRACE'")
    assert_one_line_error(gapscope("analyse"), "no such command 'analyse'; did you mean analyze?")
    assert_one_line_error(gapscope("comapre", "a", "b"), "no such command 'comapre'; did you mean compare?")
    assert_one_line_error(gapscope("frobnicate"), "no such command 'frobnicate'; the commands are analyze, compare, "
                          "export, mcp, plot, profile, report, run")


def test_unknown_schema_and_ranges_without_work(tmp_path):
    odd = tmp_path / "odd.sqlite"
    conn = sqlite3.connect(odd)
    conn.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    conn.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '9.0.0')")
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, finish INTEGER)")
    conn.commit()
    conn.close()
    assert_one_line_error(gapscope("analyze", str(odd)), "unknown export schema")

    t = Synthetic()
    t.range(0, 10, "idle_step").range(100, 20_000, "busy_step")
    t.launch(200, 1_000, 2_000, 1)
    path = t.write(tmp_path / "synthetic.sqlite")
    assert_one_line_error(gapscope("analyze", str(path), "--range", "idle*"), "launched no GPU work")


# ------------------------------------------------- domains, threads, stalls, op names, limits


def many_names(tmp_path: Path, n: int = 30) -> Path:
    """SYNTHETIC: ``n`` op ranges of distinct names, the i-th with one gap of 1000 * (i + 1) ns."""
    t = Synthetic()
    for i in range(n):
        base = i * 1_000_000
        t.range(base, base + 500_000, f"op{i}, seq = {i}, op_id = {i}")
        t.launch(base + 100, base + 1_000, base + 2_000, 2 * i + 1)
        t.launch(base + 200, base + 2_000 + 1_000 * (i + 1), base + 3_000 + 1_000 * (i + 1), 2 * i + 2)
    return t.write(tmp_path / "synthetic.sqlite")


def test_limit_shows_the_names_with_the_most_gap_time(tmp_path):
    path = many_names(tmp_path)
    out = gapscope("analyze", str(path), "--limit", "3").stdout
    assert "NVTX ranges by name (30 of 30 launched GPU work; the 3 with the most gap time, 27 left out" in out
    names = [line.split()[0] for line in out.splitlines() if line.strip().startswith("op")]
    assert names[:3] == ["op29", "op28", "op27"]  # the by-name table, the most gap time first
    assert "op29 (x1)" in out and "op26 (x1)" not in out  # why idle: the same rows
    assert "Range instances (30 with GPU work; the 3 with the most gap time, 27 left out" in out
    # --limit 0: the summary by name (its 20 names with the most gap time), no instances.
    none = gapscope("analyze", str(path), "--limit", "0").stdout
    assert "NVTX ranges by name (30 of 30 launched GPU work; the 20 with the most gap time, 10 left out" in none
    assert "Range instances" not in none and "Devices" in none
    summary = none.split("NVTX ranges by name")[1].split("\n\n")[0].splitlines()[3:]
    assert [line.split()[0] for line in summary] == [f"op{i}" for i in range(29, 9, -1)]
    data = json.loads(gapscope("analyze", str(path), "--limit", "3", "-f", "json").stdout)
    assert len(data["by_name"]) == 30  # JSON keeps every row
    assert data["ranges"][29]["name"] == "op29, seq = 29, op_id = 29"
    # The instance table names an instance as the by-name table groups it (its id tells them
    # apart); with --no-normalize, by its full name, as the JSON does.
    instances = out.split("Range instances")[1].split("\n\n")[0].splitlines()
    assert [line.split()[:2] for line in instances if line.strip().startswith("29 ")] == [["29", "op29"]]
    full = gapscope("analyze", str(path), "--limit", "3", "--no-normalize").stdout
    instances = full.split("Range instances")[1].split("\n\n")[0]
    assert "op29, seq = 29, op_id = 29" in instances


def test_options_reach_the_analysis_and_saved_results_refuse_them(tmp_path):
    path = many_names(tmp_path, 2)
    data = json.loads(gapscope("analyze", str(path), "-f", "json", "--stall-threshold", "500us",
                               "--threads", "process", "--no-normalize", "--domain", "default").stdout)
    assert data["options"] == {"count_memops": False, "range_filter": [], "domain_filter": ["default"],
                               "threads": "process", "normalize_names": False, "stall_threshold_ns": 500_000}
    assert data["by_name"][0]["name"] == "op0, seq = 0, op_id = 0"
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(data))
    for flag in (["--domain", "x"], ["--threads", "process"], ["--stall-threshold", "2ms"], ["--no-normalize"]):
        assert_one_line_error(gapscope("analyze", str(saved), *flag), "applies to traces, not to a saved result")
    assert gapscope("analyze", str(saved)).returncode == 0
    assert_one_line_error(gapscope("analyze", str(path), "--stall-threshold", "soon"),
                          "--stall-threshold: 'soon' is not a time")
    assert_one_line_error(gapscope("analyze", str(path), "--stall-threshold", "-1ms"), "is negative")
    assert_one_line_error(gapscope("analyze", str(path), "--threads", "all"), "'all' is not one of")
    other = tmp_path / "other.sqlite"
    shutil.copy(path, other)
    assert_one_line_error(gapscope("analyze", str(path), str(other), "--domain", "x"), "analyze one trace")


def test_a_version_1_result_still_loads_and_reads_as_it_did(tmp_path):
    """A gapscope.analysis/1 result (one category per gap, launch holding all host-side time)."""
    path = small_trace(tmp_path)
    data = json.loads(gapscope("analyze", str(path), "-f", "json").stdout)
    data["schema"] = "gapscope.analysis/1"
    for r in (*data["ranges"], *data["by_name"], *data["devices"]):
        for key in ("verdict", "reading", "graph_kernels", "graph_replays", "gap_between_replays_ns",
                    "gap_inside_replays_ns", "wall_ns", "one_off_by_category_ns", "one_off_stalls",
                    "steady_span_ns", "one_off_ns", "tracer_overhead_ns", "eager_untraced_ns",
                    "graph_predicted_ns", "graph_predicted_speedup", "graph_predicted_low", "graph_predicted_high",
                    "graph_ceiling_span_ns", "graph_ceiling_speedup", "replayed_instances", "eager_instances",
                    "first_eager_instance", "last_eager_instance", "eager_instance_span_ns",
                    "replayed_instance_span_ns"):
            r.pop(key, None)
        r["gap_by_category_ns"] = {"launch": r["gap_ns"], "sync": 0, "dependency": 0, "memop": 0,
                                   "pipeline": 0, "unknown": 0}
    data.pop("answer")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    table = gapscope("analyze", str(old))
    # Its rows carry no verdict: today's rules decide it, without a prediction (two kernels are
    # too few to judge; docs/metrics.md, "Verdicts").
    assert table.returncode == 0 and "too few kernels to judge" in table.stdout
    again = json.loads(gapscope("analyze", str(old), "-f", "json").stdout)
    assert again["schema"] == "gapscope.analysis/1" and again["by_name"] == data["by_name"]
