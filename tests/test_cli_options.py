"""The command line's contract with scripts and newcomers: exit status on a closed pipe, the
format an ``-o`` suffix names, counts validated, a saved result refusing what it cannot redo,
and ``gapscope --help`` naming every command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from clirun import assert_one_line_error, gapscope
from paths import ROOT, TRACES

TRACE = "traces/torch_decode.sqlite"


def _closed_pipe_run(*args: str) -> subprocess.CompletedProcess:
    """Run gapscope with stdout a pipe whose reading end is closed before it writes anything."""
    read, write = os.pipe()
    os.close(read)  # nobody reads: the first write fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "gapscope", *args], stdout=write, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    finally:
        os.close(write)
    return proc


@pytest.mark.parametrize("args", [
    ("analyze", TRACE),
    ("analyze", TRACE, "-f", "json"),
    ("compare", TRACE, "traces/torch_decode_sync.sqlite"),  # a regression: still 141, not 1
])
def test_a_closed_pipe_ends_quietly_with_141(args):
    proc = _closed_pipe_run(*args)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""


def test_the_suffix_of_o_names_the_format(tmp_path):
    for suffix, check in ((".json", lambda t: json.loads(t)["schema"] == "gapscope.analysis/3"),
                          (".csv", lambda t: t.startswith("level,")),
                          (".md", lambda t: t.startswith("# gapscope report: torch_decode.sqlite\n")),
                          (".html", lambda t: t.startswith("<!DOCTYPE html>")),
                          (".txt", lambda t: t.startswith("gapscope torch_decode.sqlite  format: nsys SQLite "
                                                          "export, read in "))):
        out = tmp_path / f"r{suffix}"
        proc = gapscope("analyze", TRACE, "-o", str(out))
        assert proc.returncode == 0, proc.stderr
        assert check(out.read_text()), suffix
    # -f says otherwise: the table goes into the .json file as asked.
    out = tmp_path / "table.json"
    assert gapscope("analyze", TRACE, "-f", "table", "-o", str(out)).returncode == 0
    assert out.read_text().startswith("gapscope torch_decode.sqlite")


def test_compare_infers_json_and_refuses_a_format_it_does_not_write(tmp_path):
    out = tmp_path / "verdicts.json"
    proc = gapscope("compare", TRACE, TRACE, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["passed"] is True
    assert_one_line_error(gapscope("compare", TRACE, TRACE, "-o", str(tmp_path / "v.csv")),
                          "this command writes no csv (table, json); give -f table")


@pytest.mark.parametrize("args,needle", [
    (["analyze", TRACE, "--top", "-1"], "Invalid value for '--top': -1 is not in the range x>=0"),
    (["analyze", TRACE, "--limit", "-1"], "Invalid value for '--limit': -1 is not in the range x>=0"),
    (["report", TRACE, "-o", "{tmp}/r.md", "--limit", "-5"], "Invalid value for '--limit'"),
    (["run", "--dry-run", "--device", "-1"], "Invalid value for '--device'"),
])
def test_negative_counts_are_refused(tmp_path, args, needle):
    assert_one_line_error(gapscope(*[a.format(tmp=tmp_path) for a in args]), needle)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("saved") / "result.json"
    assert gapscope("analyze", TRACE, "-o", str(out)).returncode == 0
    return out


@pytest.mark.parametrize("args,needle", [
    (["--top", "11"], "--top 11: this saved result holds the 10 longest gaps; give the trace"),
    (["--count-memops"], "--count-memops: this saved result was analyzed without it"),
    (["--no-attribution"], "--no-attribution: this saved result was analyzed with gap attribution"),
    (["--range", "eager"], "--range applies to traces"),
])
def test_a_saved_result_refuses_what_it_cannot_honour(saved, args, needle):
    assert_one_line_error(gapscope("analyze", str(saved), *args), needle)


def test_a_saved_result_honours_what_it_can(saved, analyzed):
    want = analyzed("torch_decode").top_gaps
    proc = gapscope("analyze", str(saved), "--top", "3", "-f", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["top_gaps"] == json.loads(json.dumps(want[:3]))
    # The options it was made with, given again, are honoured as they are.
    again = gapscope("analyze", str(saved), "--top", "10", "--attribution", "-f", "json")
    assert json.loads(again.stdout) == json.loads(saved.read_text())


def test_top_level_help_names_every_command():
    from gapscope.cli import cli

    proc = gapscope("--help")
    assert proc.returncode == 0
    summary = proc.stdout.split("Options:")[0]
    listed = set(re.findall(r"^\s+gapscope (\w+)", summary, flags=re.M))
    every = {"analyze", "compare", "plot", "report", "export", "run", "profile", "mcp"}
    assert listed == set(cli.list_commands(None)) == every
    # Each is a command its module defines, imported when asked for; click's own list shows them all.
    assert all(cli.get_command(None, name).name == name for name in every)
    commands = proc.stdout.split("Commands:")[1].split()
    assert every <= set(commands)
    assert "_GAPSCOPE_COMPLETE=bash_source gapscope" in summary


def test_a_command_imports_no_other_commands_module(tmp_path):
    """`gapscope analyze` imports its own module of gapscope.cli, not those of the seven others
    (nor the MCP server or its SDK)."""
    code = ("import sys\nfrom gapscope.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "print(sorted(m for m in sys.modules if m.startswith(('gapscope.cli.', 'gapscope.agent', 'mcp'))))")
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-c", code, "analyze", str(TRACES / "torch_decode_small.sqlite"),
                           "-f", "json", "-o", str(out), "--no-cache"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1].replace("'", "\""))
    assert "gapscope.cli.analyze" in loaded and out.stat().st_size > 0
    assert not {f"gapscope.cli.{c}" for c in ("compare", "plot", "report", "export", "profile", "run", "mcp")} & \
        set(loaded)
    assert not [m for m in loaded if m.startswith(("gapscope.agent", "mcp"))]


def test_a_cached_result_is_reported_without_the_trace_status_line(tmp_path):
    """A result cache hit imports none of what analyzing a trace needs: not the status line of
    gapscope.cli.progress, while the miss before it did; and neither brings in the many-trace
    executors' multiprocessing (the status line's module names their outcomes for type checking
    only)."""
    code = ("import sys\nfrom gapscope.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "print([m for m in ('gapscope.cli.progress', 'multiprocessing') if m in sys.modules])")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "xdg"), "GAPSCOPE_NO_CACHE": ""}
    loaded = []
    for _ in ("miss", "hit"):
        proc = subprocess.run([sys.executable, "-c", code, "analyze", str(TRACES / "torch_decode_small.sqlite"),
                               "-f", "json", "-o", str(tmp_path / "r.json")], capture_output=True, text=True,
                              env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        loaded.append(json.loads(proc.stdout.strip().splitlines()[-1].replace("'", "\"")))
    assert loaded == [["gapscope.cli.progress"], []]
