"""`gapscope mcp` as a client meets it: started as a subprocess and driven over stdio by the MCP
Python SDK's own client, one server process for the whole module (caches on, in a folder of the
module's own). Each figure is checked against `gapscope analyze -f json` or `gapscope compare -f
json` of the same inputs, run beside it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from clirun import gapscope
from paths import ROOT, TRACES

try:
    from anyio.from_thread import start_blocking_portal
    from mcp import Client, StdioServerParameters
except ImportError:
    if os.environ.get("CI"):
        raise
    pytest.skip("the MCP SDK is not installed: pip install -e '.[test]' (or '.[mcp]')", allow_module_level=True)

DECODE = "traces/torch_decode.sqlite"
DECODE_SYNC = "traces/torch_decode_sync.sqlite"
TOOLS = {"analyze", "compare", "top_gaps", "explain", "formats"}


class Served:
    """The client of the module's server, called from synchronous tests through a portal."""

    def __init__(self, portal: Any, client: Any, cache: Path) -> None:
        self.portal, self.client, self.cache = portal, client, cache

    def call(self, tool: str, **arguments: Any) -> Any:
        return self.portal.call(self.client.call_tool, tool, arguments)

    def __getattr__(self, name: str) -> Any:  # list_tools, list_resources, read_resource
        method = getattr(self.client, name)
        return lambda *args: self.portal.call(method, *args)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache = tmp_path_factory.mktemp("mcp-xdg")
    env = {"PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache), "GAPSCOPE_NO_CACHE": ""}
    params = StdioServerParameters(command=sys.executable, args=["-m", "gapscope", "mcp"], env=env, cwd=ROOT)
    with start_blocking_portal() as portal:
        client = Client(params, read_timeout_seconds=120)
        with portal.wrap_async_context_manager(client):
            yield Served(portal, client, cache)


def command_json(*args: str) -> dict[str, Any]:
    """The JSON a gapscope command prints (exit status 0 or 1)."""
    proc = gapscope(*args)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return result.structured_content


def test_lists_its_tools_and_serves_the_definitions(served: Served) -> None:
    tools = served.list_tools().tools
    assert {t.name for t in tools} == TOOLS
    for tool in tools:
        assert tool.annotations.read_only_hint is True and tool.output_schema["type"] == "object", tool.name
        assert tool.description
    analyze = next(t for t in tools if t.name == "analyze")
    assert set(analyze.input_schema["properties"]) == {"path", "ranges", "domains", "window", "limit", "offset"}
    assert analyze.input_schema["required"] == ["path"]
    uris = {str(r.uri) for r in served.list_resources().resources}
    assert "gapscope://docs/metrics.md" in uris
    for name in ("metrics.md", "schema.md", "formats.md", "ci.md", "agents.md"):
        [content] = served.read_resource(f"gapscope://docs/{name}").contents
        assert content.text == (ROOT / "docs" / name).read_text(encoding="utf-8"), name
        assert content.mime_type == "text/markdown"


def test_analyze_returns_the_figures_of_the_command(served: Served) -> None:
    data = structured(served.call("analyze", path=DECODE))
    want = command_json("analyze", DECODE, "-f", "json")
    assert data["schema"] == want["schema"] == "gapscope.analysis/3"
    assert data["trace"] == want["trace"] and data["options"] == want["options"]
    # The range names, most gap time first, with the command's figures.
    order = sorted(want["by_name"], key=lambda r: -r["gap_ns"])
    fields = ("name", "count", "kernels", "gpu_span_ns", "gap_ns", "gap_fraction", "gap_p50_ns",
              "kernel_median_ns", "graph_ceiling_speedup", "verdict", "reading")
    rows = data["by_name"]["rows"]
    assert [r["name"] for r in rows] == [r["name"] for r in order] == ["eager", "decode_step", "graph"]
    for got, row in zip(rows, order):
        assert {f: got[f] for f in fields} == {f: row[f] for f in fields}
    assert "gap_by_category_ns" not in rows[0]  # compact: the split is in why_idle, as shares
    eager = rows[0]
    assert (eager["gap_ns"], eager["gpu_span_ns"], eager["reading"]) == (100263166, 107313249, "host-bound: graphs ~10x")
    assert data["by_name"]["total"] == 3 and data["by_name"]["next_offset"] is None
    [device] = data["devices"]["rows"]
    assert {f: device[f] for f in ("device", "gap_ns", "gap_fraction", "verdict")} == \
        {f: want["devices"][0][f] for f in ("device", "gap_ns", "gap_fraction", "verdict")}
    # Why idle: each category's gap time over the row's, as the report's table shows it.
    idle = {r["timeline"]: r for r in data["why_idle"]}
    assert list(idle) == ["eager (x1)", "decode_step (x64)", "graph (x1)", "device 0"]
    cats = order[0]["gap_by_category_ns"]
    assert idle["eager (x1)"]["shares"] == {c: round(v / order[0]["gap_ns"], 4) for c, v in
                                            sorted(cats.items(), key=lambda kv: -kv[1]) if v}
    assert idle["eager (x1)"]["shares"] == {"host": 0.7185, "launch": 0.2797, "setup": 0.0019}
    assert idle["eager (x1)"]["largest"] == "host"
    assert data["payoff"]["rows"] == want["payoff"]
    assert data["launch"]["rows"] == want["launch"]
    assert data["held"] == {"ranges": 66, "streams": 3, "top_gaps": 10}
    text = served.call("analyze", path=DECODE).content[0].text
    assert "eager (x1): gap 93.4% of 107 ms, host-bound: graphs ~10x, graph ceiling 16.03x" in text


def test_analyze_pages_the_range_names_and_narrows_like_the_command(served: Served) -> None:
    page = structured(served.call("analyze", path=DECODE, limit=1, offset=1))["by_name"]
    assert [r["name"] for r in page["rows"]] == ["decode_step"]
    assert (page["total"], page["offset"], page["limit"], page["next_offset"]) == (3, 1, 1, 2)
    last = structured(served.call("analyze", path=DECODE, limit=1, offset=2))["by_name"]
    assert [r["name"] for r in last["rows"]] == ["graph"] and last["next_offset"] is None
    narrowed = structured(served.call("analyze", path=DECODE, ranges=["eager", "graph"]))
    want = command_json("analyze", DECODE, "--range", "eager", "--range", "graph", "-f", "json")
    assert narrowed["options"]["range_filter"] == ["eager", "graph"] == want["options"]["range_filter"]
    assert [r["gap_ns"] for r in narrowed["by_name"]["rows"]] == \
        sorted((r["gap_ns"] for r in want["by_name"]), reverse=True)


@pytest.mark.parametrize("arguments, command", [
    ({"path": "traces/no_such_trace.sqlite"}, ["traces/no_such_trace.sqlite"]),
    ({"path": "README.md"}, ["README.md"]),
    ({"path": "traces/provenance"}, ["traces/provenance"]),
    ({"path": DECODE, "ranges": "nosuch"}, [DECODE, "--range", "nosuch"]),
])
def test_bad_input_is_a_tool_error_in_the_command_lines_words(served: Served, arguments: dict,
                                                               command: list[str]) -> None:
    result = served.call("analyze", **arguments)
    proc = gapscope("analyze", *command)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert result.is_error and result.structured_content is None
    [content] = result.content
    assert "gapscope: error: " + content.text + "\n" == proc.stderr


def test_bad_arguments_are_one_line_tool_errors(served: Served) -> None:
    for tool, arguments, words in (
            ("analyze", {"path": DECODE, "limit": 0}, "limit: give a whole number from 1 to 200, not 0"),
            ("top_gaps", {"path": DECODE, "n": 101}, "n: give a whole number from 1 to 100, not 101"),
            ("explain", {"path": DECODE, "range": " "}, "range: give an NVTX range name or glob"),
            ("compare", {"baseline": DECODE, "current": DECODE, "thresholds": "gap_fraction:lots"},
             "gap_fraction:lots")):
        result = served.call(tool, **arguments)
        assert result.is_error, tool
        [content] = result.content
        assert words in content.text and "\n" not in content.text, content.text


def test_compare_says_the_regression_in_words(served: Served) -> None:
    result = served.call("compare", baseline=DECODE, current=DECODE_SYNC)
    data = structured(result)
    want = command_json("compare", DECODE, DECODE_SYNC, "--format", "json")
    assert data["schema"] == "gapscope.comparison/2" and data["passed"] is False
    assert data["headline"] == want["headline"] and data["failures"] == want["failures"]
    assert "range eager: sync time 0 -> 582 us: a new host synchronize" in data["failures"]
    failed = [v for v in want["verdicts"] if v["failed"]]
    assert [(v["key"], v["metric"], v["baseline"], v["current"]) for v in data["failing"]] == \
        [(v["key"], v["metric"], v["baseline"], v["current"]) for v in failed]
    assert data["checks"] == len(want["verdicts"]) and data["counts"] == want["counts"]
    assert result.content[0].text.splitlines() == [want["headline"], *want["failures"]]
    same = structured(served.call("compare", baseline=DECODE, current=DECODE))
    assert same["passed"] is True and same["failures"] == [] and same["headline"].startswith("PASS")


def test_top_gaps_and_explain_are_the_commands_longest_gaps_and_range(served: Served) -> None:
    gaps = structured(served.call("top_gaps", path=DECODE, n=3))
    assert gaps["gaps"] == command_json("analyze", DECODE, "--top", "3", "-f", "json")["top_gaps"]
    first = gaps["gaps"][0]
    assert (first["gap_ns"], first["category"], first["launched_by"]) == (115273158, "stall", "cuLaunchKernelEx")
    eager = structured(served.call("explain", path=DECODE, range="eager"))
    want = command_json("analyze", DECODE, "--range", "eager", "-f", "json")
    [row] = eager["names"]["rows"]
    assert (row["name"], row["gap_ns"], row["verdict"]) == ("eager", want["by_name"][0]["gap_ns"], "host_bound")
    assert row["verdict_rules"] == ["launch and host gap time together hold the most (host more)"]
    assert eager["launch"]["rows"] == want["launch"] and eager["top_gaps"] == want["top_gaps"]
    assert [r["id"] for r in eager["instances"]["most_gap"]] == [r["id"] for r in want["ranges"]] == [0]
    # A glob selecting both twins has their payoff; one step of 64 instances lists the 5 with most gap.
    both = structured(served.call("explain", path=DECODE, range="*"))
    assert both["payoff"]["rows"] == command_json("analyze", DECODE, "--range", "*", "-f", "json")["payoff"]
    steps = structured(served.call("explain", path=DECODE, range="decode_step"))["instances"]
    ranges = command_json("analyze", DECODE, "--range", "decode_step", "-f", "json")["ranges"]
    most = sorted(ranges, key=lambda r: -r["gap_ns"])[:5]
    assert steps["total"] == 64 and [r["id"] for r in steps["most_gap"]] == [r["id"] for r in most]  # most gap first


def test_formats_says_what_gapscope_reads_and_how_to_record(served: Served) -> None:
    data = structured(served.call("formats"))
    assert [f["format"] for f in data["formats"]] == ["nsys-sqlite", "nsys-parquet", "nsys-arrow", "nsys-rep",
                                                       "kineto"]
    nsys = data["record"]["nsys"]
    assert nsys["profile"] == ("nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none "
                               "--export sqlite -o REPORT python PROGRAM.py")
    assert nsys["export"] == "nsys export --type sqlite -o REPORT.sqlite REPORT.nsys-rep"
    assert "enable_cuda_sync_events=True" in data["record"]["torch_profiler"]["python"]


def test_shares_the_result_cache_and_writes_nothing_beside_the_trace(served: Served, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(served.cache))  # the server's cache, for the command here
    monkeypatch.delenv("GAPSCOPE_NO_CACHE")
    for name in ("first_served.sqlite", "first_analyzed.sqlite"):
        shutil.copyfile(TRACES / "torch_decode_small.sqlite", tmp_path / name)
    before = sorted(p.name for p in tmp_path.iterdir())
    served_first, analyzed_first = str(tmp_path / "first_served.sqlite"), str(tmp_path / "first_analyzed.sqlite")
    # Analyzed by the server, then read back by the server and by the command.
    assert structured(served.call("analyze", path=served_first))["cached"] is False
    assert structured(served.call("analyze", path=served_first))["cached"] is True
    assert "cached result" in gapscope("analyze", served_first).stdout.splitlines()[0]
    # Analyzed by the command, then read back by the server, figures unchanged.
    want = command_json("analyze", analyzed_first, "-f", "json")
    again = structured(served.call("analyze", path=analyzed_first))
    assert again["cached"] is True
    assert [r["gap_ns"] for r in again["by_name"]["rows"]] == sorted((r["gap_ns"] for r in want["by_name"]),
                                                                     reverse=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
