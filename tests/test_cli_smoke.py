"""The command line as a user starts it: `python -m gapscope` in a process of its own, a few
times (the other CLI tests run it in-process, which is faster)."""

from __future__ import annotations

import json

from clirun import assert_one_line_error, gapscope_process


def test_analyze_a_shipped_trace_in_a_process():
    proc = gapscope_process("analyze", "traces/torch_decode.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gapscope torch_decode.sqlite")
    assert "93.4%" in proc.stdout and "host-bound: graphs ~10x" in proc.stdout
    # The answer comes first: the eager range's predicted speedup within the first 15 lines.
    head = proc.stdout.splitlines()[:15]
    assert "eager (x1): host-bound: graphs ~10x" in head


def test_json_from_a_process_equals_the_in_process_result(analyzed):
    proc = gapscope_process("analyze", "traces/torch_decode.sqlite", "-f", "json")
    assert proc.returncode == 0, proc.stderr
    got, want = json.loads(proc.stdout), json.loads(json.dumps(analyzed("torch_decode").to_dict()))
    assert got["trace"].pop("path") == "traces/torch_decode.sqlite"  # as given on the command line
    want["trace"].pop("path")
    assert got == want


def test_bad_input_in_a_process_is_one_line_exit_2(tmp_path):
    assert_one_line_error(gapscope_process("analyze", str(tmp_path / "none.sqlite")), "no such file")


def test_compare_regression_in_a_process_exits_1():
    proc = gapscope_process("compare", "traces/torch_decode.sqlite", "traces/torch_decode_sync.sqlite")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("FAIL:")


def test_help_in_a_process():
    proc = gapscope_process("--help")
    assert proc.returncode == 0 and "analyze" in proc.stdout
