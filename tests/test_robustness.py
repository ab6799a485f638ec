"""Damaged and hostile input (issue 20): one named regression test per failure the campaign
found, each built from a shipped trace by SQL (tests/damage.py), asserting the exact outcome:
the warning and the figures, checked against tests/reference.py's independent recomputation
from the undamaged rows, or the one-line error and its exit code."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import reference
from clirun import assert_one_line_error, gapscope
from damage import KERNEL, NVTX, RUNTIME, copy_trace, damage, files_of, small_trace
from paths import ROOT, TRACES


def analyzed_json(path: Path, *extra: str) -> dict:
    """`gapscope analyze PATH -f json`, which must succeed."""
    proc = gapscope("analyze", str(path), "-f", "json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def device(result: dict) -> tuple:
    d = result["devices"][0]
    return d["kernels"], d["gpu_span_ns"], d["gap_ns"], d["gap_fraction"]


def agrees_with_reference(path: Path, result: dict) -> None:
    assert reference.mismatches(result, reference.expected(str(path))) == []


@pytest.fixture
def small(tmp_path: Path) -> Path:
    """The fuzz seed (tests/damage.py, SYNTHETIC), a copy of this process's one cut."""
    return small_trace(tmp_path)


def test_the_small_trace_copy_is_a_fresh_cut(tmp_path):
    """small_trace copies the seed cut once per process: the copy has a fresh cut's bytes."""
    import damage as damage_module

    copy = small_trace(tmp_path, "copy.sqlite")
    fresh = damage_module._cut_small_trace(tmp_path, "fresh.sqlite")
    assert copy.read_bytes() == fresh.read_bytes()
    assert sorted(files_of(tmp_path)) == ["copy.sqlite", "fresh.sqlite"]  # the cut's scratch copy is gone


# -- wrong numbers, exit 0, no warning ------------------------------------------------------

def test_one_null_kernel_start_is_left_out_with_a_warning(tmp_path):
    """Was: the NULL read as -1 turned torch_decode's 97.6 % device gap into 1.7 %."""
    path = damage(copy_trace("torch_decode", tmp_path), f"UPDATE {KERNEL} SET start = NULL WHERE rowid = 100")
    r = analyzed_json(path)
    assert r["warnings"][0] == ("left out 1 of 5,633 GPU activity rows as damaged (start NULL: 1); "
                                "every figure covers the other rows")
    kernels, span, gap, fraction = device(r)
    assert kernels == 5231 and round(fraction, 3) == 0.976
    agrees_with_reference(path, r)


def test_damaged_cells_read_in_many_chunks_and_batches_give_the_one_chunk_result(tmp_path, monkeypatch):
    """A table with a text and a NULL cell is read again typed, chunk by chunk: with many rowid
    chunks and small Arrow batches the result is the one-chunk read's, damaged rows left out."""
    from gapscope.trace import sqlite_reads

    path = damage(copy_trace("torch_decode", tmp_path), f"UPDATE {KERNEL} SET start = 'x' WHERE rowid = 100",
                  f"UPDATE {KERNEL} SET end = NULL WHERE rowid = 4000")
    whole = analyzed_json(path)
    typed_reads, chunk = [], sqlite_reads.BulkReader._chunk
    monkeypatch.setattr(sqlite_reads, "CHUNK_ROWS", 500)
    monkeypatch.setattr(sqlite_reads, "BATCH_ROWS", 7)
    monkeypatch.setattr(sqlite_reads.BulkReader, "_chunk", lambda self, r, lo, hi, typed: (
        typed and typed_reads.append(r.table), chunk(self, r, lo, hi, typed=typed))[1])
    assert analyzed_json(path) == whole
    assert typed_reads == [KERNEL] * 11  # rowids 1-5,232 in chunks of 500
    assert whole["warnings"][0] == ("left out 2 of 5,633 GPU activity rows as damaged (start not an "
                                    "integer: 1, end NULL: 1); every figure covers the other rows")
    assert device(whole)[0] == 5232 - 2
    agrees_with_reference(path, whole)


def test_an_nvtx_range_with_a_null_start_is_left_out(tmp_path):
    """Was: the range began at -1 and picked up 239 extra kernels."""
    path = damage(copy_trace("torch_decode", tmp_path), f"UPDATE {NVTX} SET start = NULL WHERE rowid = 5")
    r = analyzed_json(path)
    assert r["warnings"][0] == ("left out 1 of 66 NVTX rows as damaged (start NULL: 1); every figure "
                                "covers the other rows")
    steps = next(n for n in r["by_name"] if n["name"] == "decode_step")
    assert (steps["count"], steps["kernels"]) == (63, 4992 - 78)
    agrees_with_reference(path, r)


def test_rows_with_rowids_at_or_below_0_are_read_when_the_largest_passes_400000(tmp_path, analyzed):
    """Was: the chunked reader skipped every row with rowid <= 0 (3,241 of 5,232 kernels read)."""
    path = damage(copy_trace("torch_decode", tmp_path),
                  f"UPDATE {KERNEL} SET rowid = -rowid WHERE rowid <= 3241",
                  f"UPDATE {KERNEL} SET rowid = 500000 WHERE rowid = 5232")
    r = analyzed_json(path)
    assert r["warnings"] == analyzed("torch_decode").warnings
    assert r["devices"] == json.loads(json.dumps(list(analyzed("torch_decode").devices)))
    assert r["devices"][0]["kernels"] == 5232


@pytest.mark.parametrize("value, reason", [(2**63 - 1, "end out of range"), (9_000_000_000_000_000_000, "end out of range")])
def test_a_timestamp_near_2_63_is_left_out_not_a_292_year_span(small, value, reason):
    path = damage(small, f"UPDATE {KERNEL} SET end = {value} WHERE rowid = 7")
    r = analyzed_json(path)
    assert r["warnings"][0] == (f"left out 1 of 359 GPU activity rows as damaged ({reason}: 1); every figure "
                                "covers the other rows")
    assert r["devices"][0]["gpu_span_ns"] < 20_000_000  # the cut spans 11.5 ms, not 292 years
    agrees_with_reference(path, r)


def test_a_time_past_twice_the_session_end_is_left_out(small):
    """Plausible-looking but impossible: after twice the session's recorded end (ANALYSIS_DETAILS)."""
    path = damage(small, f"UPDATE {KERNEL} SET end = 2 * (SELECT stopTime FROM ANALYSIS_DETAILS) + 1 WHERE rowid = 7")
    r = analyzed_json(path)
    assert "(end out of range: 1)" in r["warnings"][0]
    agrees_with_reference(path, r)


def test_a_damaged_rank_file_is_named_in_the_merged_warnings(tmp_path):
    clean = small_trace(tmp_path, "rank0.sqlite")
    damaged = damage(small_trace(tmp_path, "rank1.sqlite"), f"UPDATE {KERNEL} SET start = NULL WHERE rowid = 4")
    r = analyzed_json(clean, str(damaged), "--jobs", "1")
    assert r["warnings"] == ["rank1.sqlite: left out 1 of 359 GPU activity rows as damaged (start NULL: 1); "
                             "every figure covers the other rows"]
    assert [f.get("damaged") for f in r["files"]] == [None, r["warnings"][0].split(": ", 1)[1:]]
    assert [d["kernels"] for d in r["devices"]] == [337, 336]


def test_one_kernel_spanning_the_whole_device_is_no_crash(small):
    """Found by the campaign (seeds 20168, 25152): with no gap at the device level (one kernel
    covers the device's whole span, as a persistent kernel does) the range level's gaps were
    looked up among none (IndexError). A valid trace: no warning, figures as recomputed."""
    path = damage(small, f"UPDATE {KERNEL} SET start = (SELECT min(start) FROM {KERNEL}), "
                         f"end = (SELECT max(end) FROM {KERNEL}) WHERE rowid = 1")
    r = analyzed_json(path)
    assert r["warnings"] == [] and r["devices"][0]["gap_count"] == 0
    assert any(x["gap_count"] for x in r["ranges"])
    agrees_with_reference(path, r)


# -- crashes (were tracebacks, exit 1) --------------------------------------------------------

@pytest.mark.parametrize("table, column, value, kept", [
    (KERNEL, "start", "'abc'", "left out 1 of 359 GPU activity rows as damaged (start not an integer: 1)"),
    (KERNEL, "end", "X'00FF'", "left out 1 of 359 GPU activity rows as damaged (end not an integer: 1)"),
    (KERNEL, "deviceId", "1e30", "left out 1 of 359 GPU activity rows as damaged (device not an integer: 1)"),
    (KERNEL, "correlationId", "'x'", "1 of 359 GPU activity rows had a damaged corr (not an integer: 1): "
                                     "kept, tied to no API call"),
    (RUNTIME, "globalTid", "'t'", "left out 1 of 256 CUDA API call rows as damaged (tid not an integer: 1)"),
    (NVTX, "globalTid", "2.5", "left out 1 of 6 NVTX rows as damaged (tid not an integer: 1)"),
])
def test_text_blobs_and_reals_in_integer_columns_are_damage_not_a_traceback(small, table, column, value, kept):
    """Was: TypeError / ValueError in trace.py, ranges.py, attribution.py, metrics.py."""
    path = damage(small, f"UPDATE {table} SET {column} = {value} WHERE rowid = 2")
    proc = gapscope("analyze", str(path), "-f", "json")
    if table == NVTX:  # 1 of 6 NVTX rows is more than 10 % of them: refused
        assert_one_line_error(proc, "1 of 6 NVTX rows are damaged (tid not an integer: 1): more than 10%")
        return
    r = json.loads(proc.stdout)
    assert r["warnings"][0].startswith(kept), r["warnings"]
    agrees_with_reference(path, r)


def test_a_huge_kernel_name_id_is_unknown_not_a_bad_kind(small):
    """Found by the campaign after issue 19 (every kernel's name id read; seeds 52519, 54345,
    54635): a shortName of 9e18 overflowed the 40 bits it is packed in beside the activity kind
    (ValueError: not a valid ActivityKind, exit 3). Now read as unknown, with a warning."""
    path = damage(small, f"UPDATE {KERNEL} SET shortName = 9000000000000000000 WHERE rowid = 39")
    r = analyzed_json(path)
    assert r["warnings"][0] == ("1 of 359 GPU activity rows had a damaged name_id (out of range: 1): kept, "
                                "named [unknown]")
    agrees_with_reference(path, r)


@pytest.mark.parametrize("value, reason", [(-(2**63), "start out of range"), ("1e30", "start not an integer")])
def test_extreme_timestamps_are_damage_not_an_overflow(small, value, reason):
    """Was: OverflowError from a timestamp of -2^63 or a REAL 1e30."""
    path = damage(small, f"UPDATE {KERNEL} SET start = {value} WHERE rowid = 3")
    r = analyzed_json(path)
    assert f"({reason}: 1)" in r["warnings"][0]
    agrees_with_reference(path, r)


@pytest.mark.parametrize("value", ["CAST(X'6465636fff' AS TEXT)", "X'6465636fff'"])
def test_nvtx_text_that_is_not_utf8_is_shown_with_replacement_characters(small, value):
    """Was: UnicodeDecodeError from blob NVTX text (or text that is not UTF-8)."""
    path = damage(small, f"UPDATE {NVTX} SET text = {value}, textId = NULL WHERE rowid = 2")
    proc = gapscope("analyze", str(path))
    assert proc.returncode == 0, proc.stderr
    assert ("gapscope: warning: 1 of 6 NVTX rows had a damaged name (not UTF-8 text: 1): kept, shown with U+FFFD "
            "in place of the bytes that were not UTF-8") in proc.stderr.splitlines()
    assert "deco\ufffd" in proc.stdout


def test_a_damaged_schema_and_string_table_read_without_a_traceback(small):
    """Was: UnicodeDecodeError from a damaged schema (names that are not UTF-8)."""
    conn = sqlite3.connect(small)
    conn.execute("CREATE TABLE ThreadNames (nameId INTEGER, globalTid INTEGER)")
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET name = CAST(X'54ff' AS TEXT), tbl_name = CAST(X'54ff' AS TEXT), "
                 "sql = CAST(X'435245415445205441424c45202254ff2220286129' AS TEXT) WHERE name = 'ThreadNames'")
    conn.execute("UPDATE StringIds SET value = 'cudaLaunch' || CAST(X'ff' AS TEXT) || 'Kernel_v7000' "
                 "WHERE value = 'cudaLaunchKernel_v7000'")
    conn.commit()
    conn.close()
    r = analyzed_json(small)
    assert r["warnings"] == []  # a call's name is not a figure: replaced, not warned about
    assert [x["api"] for x in r["launch"]] == ["cudaLaunch\ufffdKernel", "cuLaunchKernelEx", "cudaMemcpyAsync",
                                               "cudaLaunchKernelExC", "cudaGraphLaunch"]
    agrees_with_reference(small, r)


def test_markup_in_a_range_name_prints_as_typed(small, tmp_path):
    """Was: rich MarkupError for a range named decode[/]; [bold red]x shown as x."""
    path = damage(small, f"UPDATE {NVTX} SET text = 'decode[/]', textId = NULL WHERE rowid IN (1, 2, 3)",
                  f"UPDATE {NVTX} SET text = '[bold red]x', textId = NULL WHERE rowid IN (4, 5, 6)")
    table = gapscope("analyze", str(path))
    assert table.returncode == 0, table.stderr
    assert "decode[/]" in table.stdout and "[bold red]x" in table.stdout
    report = tmp_path / "out" / "r.md"
    report.parent.mkdir()
    assert gapscope("report", str(path), "-o", str(report), "--no-figures").returncode == 0
    assert "`decode[/]`" in report.read_text() and "`[bold red]x`" in report.read_text()
    fleet = gapscope("analyze", str(path), str(copy_trace("torch_decode", tmp_path)))
    assert fleet.returncode == 0, fleet.stderr
    assert "decode[/]" in fleet.stdout and "[bold red]x" in fleet.stdout
    base = tmp_path / "base.json"
    base.write_text(gapscope("analyze", str(path), "-f", "json").stdout)
    compared = gapscope("compare", str(base), str(base), "--all")
    assert compared.returncode == 0 and "[bold red]x" in compared.stdout


def test_control_characters_and_long_names_print_escaped_and_cut(small, tmp_path):
    from gapscope.text import NAME_MAX, name

    raw = "\x1b[31mred\x1b[0m" + "n" * 300
    shown = name(raw)
    assert shown == "\\x1b[31mred\\x1b[0m" + "n" * (NAME_MAX - 19) + "…" and len(shown) == NAME_MAX
    conn = sqlite3.connect(small)
    conn.execute(f"UPDATE {NVTX} SET text = ?, textId = NULL WHERE rowid = 2", (raw,))
    conn.commit()
    conn.close()
    out = gapscope("analyze", str(small)).stdout
    assert "\x1b" not in out and "\\x1b[31mred\\x1b[0m" in out and "…" in out
    report = tmp_path / "r.md"
    assert gapscope("report", str(small), "-o", str(report), "--no-figures").returncode == 0
    assert "`" + shown.replace("\\", "\\\\") + "`" in report.read_text()


def test_a_file_name_that_is_not_utf8_prints(tmp_path):
    """Was: UnicodeEncodeError for a file name that is not UTF-8."""
    folder = os.fsencode(tmp_path)
    name = os.fsdecode(folder + b"/tr\xffce.sqlite")
    shutil.copyfile(TRACES / "torch_decode.sqlite", name)
    proc = gapscope("analyze", name)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gapscope tr\\xffce.sqlite  format: nsys SQLite export, read in ")
    assert_one_line_error(gapscope("analyze", name + ".missing"), "tr\\xffce.sqlite.missing: no such file")


def test_deeply_nested_json_in_compare_is_one_line(tmp_path):
    """Was: RecursionError in compare."""
    deep = tmp_path / "deep.json"
    deep.write_text('{"schema": "gapscope.analysis/1", "by_name": ' + "[" * 100_000 + "]" * 100_000 + "}")
    base = tmp_path / "base.json"
    base.write_text(gapscope("analyze", str(TRACES / "torch_decode.sqlite"), "-f", "json").stdout)
    assert_one_line_error(gapscope("compare", str(base), str(deep)), "deep.json: JSON nested too deeply")
    medium = tmp_path / "medium.json"
    medium.write_text('{"schema": "gapscope.analysis/1", "by_name": ' + "[" * 500 + "]" * 500 + "}")
    assert_one_line_error(gapscope("compare", str(base), str(medium)), "medium.json: JSON nested more than 64 levels")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_in_a_result_json_are_bad_input(tmp_path, literal):
    """Was: NaN/inf in a result JSON broke --format json."""
    data = json.loads(gapscope("analyze", str(TRACES / "torch_decode.sqlite"), "-f", "json").stdout)
    data["devices"][0]["gap_fraction"] = "SENTINEL"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data).replace('"SENTINEL"', literal))
    expect = "is inf, not a finite number" if literal == "1e999" else f"not strict JSON ({literal} is not a JSON number)"
    assert_one_line_error(gapscope("analyze", str(bad), "-f", "json"), expect)
    assert_one_line_error(gapscope("compare", str(bad), str(bad)), expect)


def test_plot_window_of_1e999_is_one_line():
    assert_one_line_error(gapscope("plot", str(TRACES / "torch_decode.sqlite"), "-o", "/nonexistent",
                                   "--window", "1e999:"), "--window: '1e999' is out of range")


def test_a_bug_exits_3_with_one_line_naming_the_tracker(monkeypatch):
    import gapscope.loading as loading

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(loading, "load_input", broken)
    proc = gapscope("analyze", str(TRACES / "torch_decode.sqlite"))
    assert proc.returncode == 3
    (line,) = proc.stderr.splitlines()
    assert line.startswith("gapscope: internal error (a bug in gapscope 0.1.0, not in your input): "
                           "ZeroDivisionError: division by zero at gapscope/loading.py:")
    assert line.endswith("please report it on the gapscope issue tracker with this line and the command you ran")


def test_the_bug_line_names_no_frame_outside_the_package(tmp_path):
    """A file whose path merely says gapscope (a checkout named gapscope, the user's own
    ~/gapscope-runs/) is not where gapscope's bug is."""
    from gapscope.errors import internal_error_line

    ns: dict = {}
    exec(compile("def outside(f):\n    f()\n", str(tmp_path / "gapscope" / "tests" / "helper.py"), "exec"), ns)

    def boom():
        raise ZeroDivisionError("division by zero")

    with pytest.raises(ZeroDivisionError) as caught:
        ns["outside"](boom)
    line = internal_error_line(caught.value, "0.1.0")
    assert line == ("gapscope: internal error (a bug in gapscope 0.1.0, not in your input): ZeroDivisionError: "
                    "division by zero; please report it on the gapscope issue tracker with this line and the "
                    "command you ran")


# -- hangs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [("analyze", "{fifo}"), ("compare", "{fifo}", "{fifo}"),
                                     ("report", "{fifo}", "-o", "{tmp}/r.md"),
                                     ("compare", "{trace}", "{trace}", "--config", "{fifo}")])
def test_a_fifo_is_refused_before_it_is_opened(tmp_path, command):
    """Was: a FIFO given as a trace blocked forever (nothing ever writes to it here)."""
    fifo = tmp_path / "trace.sqlite"
    os.mkfifo(fifo)
    fill = {"fifo": str(fifo), "tmp": str(tmp_path), "trace": str(TRACES / "torch_decode.sqlite")}
    proc = gapscope(*(a.format(**fill) for a in command))
    assert_one_line_error(proc, "not a regular file (a pipe, socket or device); give a file")


@pytest.mark.parametrize("rowid", [10**12, 9 * 10**18, -(2**63)])
def test_a_huge_or_negative_rowid_is_read_in_a_few_queries(tmp_path, rowid, analyzed):
    """Was: rowid 1e12 made the chunked reader issue 2.5 million queries; 9e18 a SystemError."""
    from gapscope.trace.sqlite_reads import MAX_CHUNKS, Read, _bounds
    from gapscope.trace.sqlite_source import Source

    path = damage(copy_trace("torch_decode", tmp_path), f"UPDATE {KERNEL} SET rowid = {rowid} WHERE rowid = 5232")
    source = Source(path)
    conn = source.connect()
    bounds = _bounds(conn, Read(KERNEL, (("start", "start"),)))
    conn.close()
    assert len(bounds) <= MAX_CHUNKS and bounds[0][0] is None and bounds[-1][1] is None
    assert analyzed_json(path)["devices"] == json.loads(json.dumps(list(analyzed("torch_decode").devices)))


# -- the user's files -------------------------------------------------------------------------

@pytest.mark.parametrize("command", [
    ("analyze", "{t}", "-o", "{t}"), ("analyze", "{t}", "-f", "json", "-o", "{link}"),
    ("report", "{t}", "-o", "{t}"), ("report", "{t}", "-o", "{link}", "--no-figures"),
    ("compare", "{t}", "{t}", "-o", "{link}"), ("compare", "{t}", "{t}", "--markdown", "{t}"),
    ("compare", "{t}", "{t}", "--junit", "{link}"), ("plot", "{t}", "-o", "{folder}"),
    ("export", "{t}", "--perfetto", "{link}"), ("report", "{t}", "--html", "{link}", "--no-figures"),
])
def test_no_output_is_written_over_an_input(tmp_path, command):
    """Was: analyze/report -o T overwrote the trace; compare compared path strings, so a hard
    link to an input was overwritten."""
    folder = tmp_path / "in"
    folder.mkdir()
    trace = copy_trace("torch_decode", folder, "timeline.png" if command[0] == "plot" else "t.sqlite")
    os.link(trace, folder / "link")
    before = files_of(folder)
    fill = {"t": str(trace), "link": str(folder / "link"), "folder": str(folder)}
    proc = gapscope(*(a.format(**fill) for a in command))
    assert_one_line_error(proc, f"refusing to overwrite input {trace} with a report")
    assert files_of(folder) == before


def test_github_step_summary_pointing_at_an_input_is_refused(tmp_path, monkeypatch):
    """Was: $GITHUB_STEP_SUMMARY pointing at an input got Markdown appended."""
    trace = copy_trace("torch_decode", tmp_path)
    before = files_of(tmp_path)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(trace))
    assert_one_line_error(gapscope("compare", str(trace), str(trace)),
                          f"refusing to overwrite input {trace} with a report")
    assert files_of(tmp_path) == before


def test_an_output_inside_an_input_run_folder_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "analysis.json").write_text(gapscope("analyze", str(TRACES / "torch_decode.sqlite"), "-f", "json").stdout)
    before = files_of(run)
    assert_one_line_error(gapscope("analyze", str(run), "-o", str(run / "new.txt")),
                          f"{run / 'new.txt'}: inside the input folder {run}; gapscope adds nothing to its inputs")
    assert files_of(run) == before


def _wal_copy(tmp_path: Path, folder: Path) -> tuple[Path, int]:
    """A WAL-mode copy of the small trace whose last kernel is only in its -wal file (copied
    while the writer still holds it open), and that kernel's rowid."""
    src = small_trace(tmp_path, "wal-source.sqlite")
    writer = sqlite3.connect(src)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute(f"INSERT INTO {KERNEL} SELECT * FROM {KERNEL} WHERE rowid = (SELECT max(rowid) FROM {KERNEL})")
    writer.commit()
    rowid = writer.execute(f"SELECT max(rowid) FROM {KERNEL}").fetchone()[0]
    shutil.copyfile(src, folder / "wal.sqlite")
    shutil.copyfile(f"{src}-wal", folder / "wal.sqlite-wal")
    writer.close()
    return folder / "wal.sqlite", rowid


def test_a_wal_mode_trace_is_read_with_its_wal_and_nothing_created(tmp_path):
    """Was: -wal/-shm files created beside a WAL-mode trace."""
    folder = tmp_path / "in"
    folder.mkdir()
    path, rowid = _wal_copy(tmp_path, folder)
    before = files_of(folder)
    r = analyzed_json(path)
    assert files_of(folder) == before  # no -shm, the -wal untouched
    assert r["devices"][0]["kernels"] == 338  # the kernel that is only in the -wal counts
    assert r["warnings"] == []


def test_concurrent_reads_of_a_wal_trace_all_succeed(tmp_path):
    """Was: 3 of 4 runs under load failed with "database is locked"."""
    from gapscope.analysis import analyze

    folder = tmp_path / "in"
    folder.mkdir()
    path, _ = _wal_copy(tmp_path, folder)
    outcomes: list[object] = []

    def run() -> None:
        try:
            outcomes.append(analyze(path).devices[0]["kernels"])
        except Exception as exc:  # noqa: BLE001 - recorded, then asserted
            outcomes.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes == [338] * 4


def _unwritable(folder: Path) -> bool:
    """Make ``folder`` unwritable, even for root (chattr +i); False when this system cannot."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)],
                                                           capture_output=True).returncode != 0:
            return False
    else:
        folder.chmod(0o555)
    try:
        (folder / "probe").touch()
    except OSError:
        return True
    (folder / "probe").unlink()
    return False


def _writable(folder: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
    folder.chmod(0o755)


@pytest.mark.parametrize("wal", [False, True])
def test_a_trace_in_a_read_only_folder_is_read(tmp_path, wal):
    """Was: a WAL-mode trace could not be read at all from a read-only directory."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if wal:
        path, _ = _wal_copy(tmp_path, folder)
    else:
        path = damage(small_trace(folder), "PRAGMA journal_mode = WAL", loose=())
    before = files_of(folder)
    if not _unwritable(folder):
        _writable(folder)
        pytest.skip("this system cannot make a folder read-only for this user (no chattr as root)")
    try:
        r = analyzed_json(path)
    finally:
        _writable(folder)
    assert files_of(folder) == before
    assert r["devices"][0]["kernels"] == (338 if wal else 337)


def _hot_journal(path: Path) -> None:
    """Leave ``path`` with a hot rollback journal: a process changes every kernel's start
    (spilling pages to the file) and dies before committing."""
    code = (
        "import os, sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1])\n"
        "c.execute('PRAGMA cache_size = 2')\n"
        "c.execute('BEGIN')\n"
        f"c.execute('UPDATE {KERNEL} SET start = start + 1000000')\n"
        f"c.execute('UPDATE {RUNTIME} SET start = start + 1000000')\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)


def test_a_hot_journal_is_rolled_back_in_a_private_copy(tmp_path):
    """Was: "attempt to write a readonly database" for a trace with a hot journal."""
    folder = tmp_path / "in"
    folder.mkdir()
    path = small_trace(folder)
    clean = analyzed_json(path)
    _hot_journal(path)
    assert (folder / "small.sqlite-journal").stat().st_size > 0
    before = files_of(folder)
    r = analyzed_json(path)
    assert files_of(folder) == before
    assert r["warnings"][0] == ("the export was left with an unfinished write (small.sqlite-journal beside "
                                "it): read from a private copy with that write rolled back, as SQLite would; "
                                "the files were not changed")
    assert r["devices"] == clean["devices"] and r["ranges"] == clean["ranges"]


# -- misleading messages ----------------------------------------------------------------------

def test_a_missing_column_is_named_not_called_corrupt(small):
    path = damage(small, f"ALTER TABLE {RUNTIME} DROP COLUMN globalTid", loose=())
    assert_one_line_error(gapscope("analyze", str(path)),
                          f"{path}: unknown export schema: {RUNTIME} lacks column(s) globalTid")


def test_one_flipped_byte_is_one_line(small):
    """Was: a 15-line error. The byte is the kernel table's root page type."""
    conn = sqlite3.connect(small)
    root = conn.execute(f"SELECT rootpage FROM sqlite_master WHERE name = '{KERNEL}'").fetchone()[0]
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(small.read_bytes())
    data[(root - 1) * page] ^= 0xFF
    small.write_bytes(bytes(data))
    assert_one_line_error(gapscope("analyze", str(small)), f"{small}: cannot read the export (SQLite: ")


def test_too_much_damage_is_refused(small):
    path = damage(small, f"UPDATE {KERNEL} SET start = NULL WHERE rowid % 5 = 0")
    assert_one_line_error(gapscope("analyze", str(path)),
                          f"{path}: 67 of 359 GPU activity rows are damaged (start NULL: 67): more than 10%, "
                          "too many to analyze the rest; re-export the trace")


def test_a_future_schema_is_refused_by_compare_and_analyze_alike(tmp_path):
    text = gapscope("analyze", str(TRACES / "torch_decode.sqlite"), "-f", "json").stdout
    future = tmp_path / "future.json"
    future.write_text(text.replace('"gapscope.analysis/3"', '"gapscope.analysis/4"', 1))
    message = (f"{future}: result schema 'gapscope.analysis/4' is not supported (this gapscope reads "
               "gapscope.analysis/1, gapscope.analysis/2, gapscope.analysis/3")
    assert_one_line_error(gapscope("analyze", str(future)), message)
    assert_one_line_error(gapscope("compare", str(future), str(future)), message)


def test_a_gap_fraction_of_7_5_is_bad_input_not_a_regression(tmp_path):
    text = gapscope("analyze", str(TRACES / "torch_decode.sqlite"), "-f", "json").stdout
    base, cur = tmp_path / "base.json", tmp_path / "cur.json"
    base.write_text(text)
    data = json.loads(text)
    data["by_name"][0]["gap_fraction"] = 7.5
    cur.write_text(json.dumps(data))
    assert_one_line_error(gapscope("compare", str(base), str(cur)),
                          f"{cur}: by_name[0].gap_fraction is 7.5, not a fraction in [0, 1]; not a result gapscope wrote")


def test_a_null_graph_kernel_count_is_bad_input(tmp_path):
    """Found by the campaign (JSON seed 10243): a null graph_kernels reached the verdict (TypeError)."""
    data = json.loads(gapscope("analyze", str(TRACES / "torch_decode.sqlite"), "-f", "json").stdout)
    data["by_name"][0]["graph_kernels"] = None
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    assert_one_line_error(gapscope("analyze", str(bad)),
                          f"{bad}: by_name[0].graph_kernels is None, not a value; not a result gapscope wrote")


def test_a_range_row_without_a_name_is_bad_input_in_compare(tmp_path):
    """Found by the campaign after issue 18's merge (JSON seed 70248): one range row of a
    normalized result without its name reached the name grouping as NaN (ArrowTypeError, exit 3)."""
    text = gapscope("analyze", str(TRACES / "torch_decode.sqlite"), "-f", "json").stdout
    data = json.loads(text)
    del data["ranges"][1]["name"]
    base, bad = tmp_path / "base.json", tmp_path / "bad.json"
    base.write_text(text)
    bad.write_text(json.dumps(data))
    assert_one_line_error(gapscope("compare", str(base), str(bad)), f"{bad}: ranges[1] has no 'name' field")


def test_a_lone_surrogate_in_a_result_name_is_bad_input(tmp_path):
    """Found by the fuzz test after issue 17's merge (JSON seed 15): a range named "\\ud800" (valid
    JSON, not encodable as UTF-8) reached pandas' Arrow strings in compare (UnicodeEncodeError)."""
    text = gapscope("analyze", str(TRACES / "torch_decode.sqlite"), "-f", "json").stdout
    data = json.loads(text)
    data["ranges"][4]["name"] = "SENTINEL"
    base, bad = tmp_path / "base.json", tmp_path / "bad.json"
    base.write_text(text)
    bad.write_text(json.dumps(data).replace('"SENTINEL"', '"\\ud800"'))
    assert json.loads(bad.read_text())["ranges"][4]["name"] == "\ud800"  # the file holds the escape
    message = f"{bad}: ranges[4].name is '\\ud800', not UTF-8 text (it holds a lone surrogate)"
    assert_one_line_error(gapscope("compare", str(base), str(bad)), message)
    assert_one_line_error(gapscope("analyze", str(bad)), message)


def test_exit_codes_are_documented_apart():
    from gapscope.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_REGRESSION

    assert (EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_INTERNAL) == (1, 2, 3)
    text = (ROOT / "docs" / "robustness.md").read_text()
    assert "| 3 | internal error" in text and "| 2 | bad input" in text
