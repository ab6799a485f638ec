"""The MCP server's parts in this process (gapscope.agent): its tools against the SDK's
in-memory client (a slow analysis beside a fast call, a bug, saved results), the summaries'
paging and pass-through fields, the docs it ships and quotes, and `gapscope mcp` without the
SDK. tests/test_mcp_server.py drives the real server over stdio.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from clirun import assert_one_line_error, gapscope
from paths import ROOT, TRACES

try:
    import anyio
    from mcp import Client
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("the MCP SDK is not installed: pip install -e '.[test]' (or '.[mcp]')", allow_module_level=True)

from gapscope.agent import docs, server, summary, tools  # noqa: E402

DECODE = str(TRACES / "torch_decode.sqlite")
SMALL = str(TRACES / "torch_decode_small.sqlite")


def calls(*requests: tuple[str, dict[str, Any]]) -> list[Any]:
    """Each (tool, arguments) called in turn on a fresh in-process server."""
    async def main() -> list[Any]:
        async with Client(server.build()) as client:
            return [await client.call_tool(name, arguments) for name, arguments in requests]

    return anyio.run(main)


def saved(tmp_path: Path, *args: str) -> tuple[Path, dict[str, Any]]:
    """`gapscope analyze SMALL ARGS -f json` saved in tmp_path: its path and its JSON."""
    proc = gapscope("analyze", SMALL, *args, "-f", "json")
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "saved.json"
    path.write_text(proc.stdout)
    return path, json.loads(proc.stdout)


def test_a_slow_analysis_leaves_the_other_calls_answered(monkeypatch):
    """SYNTHETIC slow analysis: the analyze call's analysis waits until the test lets it go, so the
    other calls are made while it is surely running. Were it run on the event loop, no other call
    could be answered until it ended (and it ends only after they are)."""
    started, release = threading.Event(), threading.Event()
    real = tools._result

    def slow(*args: Any, **kwargs: Any) -> Any:
        started.set()
        if not release.wait(30):
            raise AssertionError("the fast calls were not answered while the analysis ran")
        return real(*args, **kwargs)

    monkeypatch.setattr(tools, "_result", slow)
    answered: list[str] = []

    async def main() -> dict[str, Any]:
        got: dict[str, Any] = {}
        async with Client(server.build()) as client:
            async def analyze() -> None:
                got["analyze"] = await client.call_tool("analyze", {"path": SMALL})
                answered.append("analyze")

            with anyio.fail_after(60):
                async with anyio.create_task_group() as group:
                    group.start_soon(analyze)
                    assert await anyio.to_thread.run_sync(started.wait, 30)
                    got["formats"] = await client.call_tool("formats", {})
                    answered.append("formats")
                    got["docs"] = await client.read_resource("gapscope://docs/metrics.md")
                    answered.append("docs")
                    release.set()
        return got

    got = anyio.run(main)
    assert answered == ["formats", "docs", "analyze"]
    assert not got["formats"].is_error and not got["analyze"].is_error
    assert got["analyze"].structured_content["trace"]["name"] == "torch_decode_small.sqlite"


def test_a_bug_is_the_one_line_internal_error(monkeypatch):
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(tools, "_result", broken)
    [result] = calls(("analyze", {"path": SMALL}))
    assert result.is_error
    [content] = result.content
    assert content.text.startswith("gapscope: internal error (a bug in gapscope ")
    assert "ZeroDivisionError: division by zero at gapscope/agent/tools.py:" in content.text
    assert "\n" not in content.text


def test_a_saved_result_is_read_as_it_is(tmp_path):
    path, data = saved(tmp_path, "--top", "4")
    analyzed, gaps, narrowed = calls(("analyze", {"path": str(path)}), ("top_gaps", {"path": str(path), "n": 2}),
                                     ("analyze", {"path": str(path), "domains": "default"}))
    assert analyzed.structured_content["cached"] is False
    assert [r["name"] for r in analyzed.structured_content["by_name"]["rows"]] == \
        [r["name"] for r in sorted(data["by_name"], key=lambda r: -r["gap_ns"])]
    assert gaps.structured_content["gaps"] == data["top_gaps"][:2]  # the saved list, cut
    assert narrowed.is_error and narrowed.content[0].text == "domains applies to traces, not to a saved result JSON"


def test_the_answer_block_and_predicted_speedups_pass_through(tmp_path):
    """The result's ``answer`` section and each row's predicted speedups are handed on as they
    are (the summaries copy, never recompute)."""
    path, data = saved(tmp_path)
    assert data["answer"]  # the result's own answer (gapscope.analysis.answer)
    analyzed, explained = calls(("analyze", {"path": str(path)}), ("explain", {"path": str(path), "range": "x"}))
    made = analyzed.structured_content
    assert made["answer"] == data["answer"]
    by_name = {r["name"]: r for r in data["by_name"]}
    fields = ("graph_predicted_speedup", "graph_predicted_low", "graph_predicted_high")
    for row in made["by_name"]["rows"]:
        want = by_name[row["name"]]
        assert [row.get(f) for f in fields] == [want.get(f) for f in fields]
    assert made["devices"]["rows"][0]["graph_predicted_speedup"] == data["devices"][0]["graph_predicted_speedup"]
    assert explained.is_error  # a range needs the trace: the saved result is refused, in one line
    assert explained.content[0].text == "ranges applies to traces, not to a saved result JSON"


def test_the_page_of_range_names_follows_the_gap_time():
    """torch_emit_nvtx's op ranges: more names than a page, 41 of them without GPU work."""
    trace = str(TRACES / "torch_emit_nvtx.sqlite")
    data = json.loads(gapscope("analyze", trace, "-f", "json").stdout)
    first, second = calls(("analyze", {"path": trace, "limit": 3}),
                          ("analyze", {"path": trace, "limit": 3, "offset": 3}))
    working = [r for r in data["by_name"] if r["kernels"] > 0]
    order = [r["name"] for r in sorted(working, key=lambda r: -r["gap_ns"])]
    page = first.structured_content["by_name"]
    assert (page["total"], page["next_offset"]) == (len(working), 3) == (74, 3)
    assert page["left_out"] == {"library_domains": 0, "no_gpu_work": 41}
    assert [r["name"] for r in page["rows"] + second.structured_content["by_name"]["rows"]] == order[:6]


def test_library_domains_are_left_out_as_the_report_folds_them():
    """jax_train: 1,679 range names of XLA's TSL domain, 9 with GPU work, and one of the program's own."""
    trace = str(TRACES / "jax_train.sqlite")
    data = json.loads(gapscope("analyze", trace, "-f", "json").stdout)
    [made, tsl] = [r.structured_content for r in calls(("analyze", {"path": trace}),
                                                       ("analyze", {"path": trace, "domains": "TSL", "limit": 5}))]
    own = [r for r in data["by_name"] if r["domain"] is None]
    assert made["by_name"]["total"] == len(own) == 1
    assert made["by_name"]["left_out"] == {"library_domains": len(data["by_name"]) - 1, "no_gpu_work": 0}
    assert made["by_name"]["left_out"]["library_domains"] == 1679
    assert tsl["by_name"]["total"] == 9 and tsl["by_name"]["left_out"] == {"library_domains": 0,
                                                                             "no_gpu_work": 1670}


def test_the_quoted_definitions_come_from_the_docs():
    from gapscope.analysis.verdicts import VERDICTS
    from gapscope.trace.handle import READERS

    from gapscope.catalog import verdict_of

    rules = docs.verdict_rules()
    assert set(rules) == set(VERDICTS)
    assert rules["amortized"] == [verdict_of("amortized").rule]
    assert rules["amortized"] == ["steady-state gap fraction below AMORTIZED and no predicted win above WONT"]
    assert {f["format"] for f in docs.trace_formats()} == set(READERS)
    assert docs.trace_formats()[0] == {"format": "nsys-sqlite", "what": "nsys's SQLite export",
                                       "recorded": "`nsys profile --export sqlite`, `nsys export --type sqlite`",
                                       "recognised": "the SQLite header"}
    with pytest.raises(Exception, match="not a page gapscope serves"):
        docs.read("../README.md")


def test_the_docs_ship_inside_the_package():
    """gapscope/_docs is docs/ (a link in the checkout, so an editable install reads docs/ itself)
    and every page served is package data (so a wheel holds a copy)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    package = ROOT / "gapscope" / "_docs"
    assert package.is_symlink() and package.resolve() == (ROOT / "docs").resolve()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["setuptools"]["package-data"]["gapscope"] == [f"_docs/{name}" for name in docs.DOCS]
    for name in docs.DOCS:
        assert docs.read(name) == (ROOT / "docs" / name).read_text(encoding="utf-8")


def test_without_the_sdk_mcp_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "mcp.server", None)  # as if the SDK (2.x) were not installed
    proc = gapscope("mcp")
    assert_one_line_error(proc, "pip install -e '.[mcp]'")
    assert "extra gapscope[mcp]" in proc.stderr


def test_arguments_of_the_wrong_type_are_one_line_errors():
    wrong, missing, unknown = calls(("analyze", {"path": SMALL, "limit": "x"}), ("explain", {"path": SMALL}),
                                    ("nosuch", {}))
    assert [r.is_error for r in (wrong, missing, unknown)] == [True, True, True]
    assert wrong.content[0].text == "analyze: limit: Input should be a valid integer, unable to parse string as an integer"
    assert missing.content[0].text == "explain: range: Field required"
    assert unknown.content[0].text == "Unknown tool: nosuch"


def test_analyze_takes_a_time_window_as_the_command_does(tmp_path):
    """``window`` is `gapscope analyze --window`: the same figures, and refused for a saved result."""
    made, _ = tools.analyze(DECODE, window="400ms:600ms")
    proc = gapscope("analyze", DECODE, "--window", "400ms:600ms", "-f", "json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    want = json.loads(proc.stdout)
    assert made["options"]["window"] == want["options"]["window"]
    got = {r["name"]: r["gap_ns"] for r in made["by_name"]["rows"]}
    assert got == {r["name"]: r["gap_ns"] for r in want["by_name"] if r["name"] in got} and got
    path, _ = saved(tmp_path)
    with pytest.raises(Exception, match="window applies to traces, not to a saved result JSON"):
        tools.analyze(str(path), window="0:1ms")
