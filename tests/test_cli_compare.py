"""`gapscope compare` end to end through gapscope.cli.main on synthetic result JSON files:
exit codes 0/1/2, and the offending range and metric named, with what changed in words, in every
output format."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Callable

import pytest

import gapscope.cli
from tests.test_comparison import synthetic_result, synthetic_stats

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Run:
    """Run ``gapscope ARGS`` in tmp_path (no pyproject.toml, no $GITHUB_STEP_SUMMARY) and return
    (exit code, stdout, stderr)."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.chdir(tmp_path)

    def _run(*args: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as info:
            gapscope.cli.main(list(args))
        out, err = capsys.readouterr()
        assert "Traceback" not in out + err
        return info.value.code, out, err

    return _run


def _write(path: Path, result: dict[str, Any]) -> str:
    path.write_text(json.dumps(result), encoding="utf-8")
    return str(path)


def _v2(span: int, gap: int, verdict: str = "host_bound") -> dict[str, Any]:
    """A synthetic gapscope.analysis/2 row: every gap is host time."""
    return synthetic_stats(span, gap, categories={}, verdict=verdict)


def _result(decode_gap: int, *, prefill_gap: int = 100) -> dict[str, Any]:
    """A synthetic gapscope.analysis/2 run: decode_step x10 and prefill x1 ranges (no instance
    rows: per instance is the mean), GPU 0, stream 7."""
    return synthetic_result(
        {
            "decode_step": (10, _v2(10_000_000, decode_gap)),
            "prefill": (1, _v2(1_000_000, prefill_gap, "amortized")),
        },
        {0: _v2(20_000_000, 5_000_000)},
        [(1234, 0, 7, _v2(20_000_000, 5_000_000))],
        schema="gapscope.analysis/2",
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """base.json (decode_step 25% idle) and cur.json (decode_step 50% idle: a regression)."""
    return {
        "base": _write(tmp_path / "base.json", _result(2_500_000)),
        "cur": _write(tmp_path / "cur.json", _result(5_000_000)),
    }


def test_identical_inputs_exit_0(run: Run, files: dict[str, str]) -> None:
    code, out, err = run("compare", files["base"], files["base"])
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "PASS: no regression in 8 checks (8 ok)"
    assert "compared: range  ·  thresholds: gap_fraction:+0.1, kernels:+0, sync:+10%+20us, eager_fallback:+0, verdict:same" in out


def test_regression_exit_1_table_names_range_and_metric(run: Run, files: dict[str, str]) -> None:
    code, out, err = run("compare", files["base"], files["cur"])
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert lines[0] == "FAIL: 1 regression: range decode_step gap_fraction"
    # what changed, in words, right under the headline (the mean per step, with its largest category)
    assert lines[2] == ("  ✗ range decode_step: gap fraction per step 25.0% -> 50.0%: the GPU sits idle for "
                        "more of its span (largest rise: host time 250 us -> 500 us; the results hold no host work to tell a "
                        "slower host from a GPU that ran dry earlier)")
    first_row = next(line for line in lines if line.startswith("REGRESSION"))
    assert first_row.split() == [
        "REGRESSION", "range", "decode_step", "gap_fraction", "25.0%", "50.0%", "+25.0", "pp",
        "+100.0%", "+10.0", "pp",
    ]
    # the regression is the first row of the table
    rows = [line for line in lines if line.split() and line.split()[0] in ("REGRESSION", "ok")]
    assert rows[0] == first_row and len(rows) == 8


def test_regression_named_in_markdown_junit_and_json(run: Run, files: dict[str, str], tmp_path: Path) -> None:
    code, out, err = run(
        "compare", files["base"], files["cur"], "--format", "json", "-o", "report.json",
        "--markdown", "report.md", "--junit", "report.xml",
    )
    assert (code, err) == (1, "")
    assert out == "FAIL: 1 regression: range decode_step gap_fraction\n"

    data = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert (data["passed"], data["exit_code"]) == (False, 1)
    first = data["verdicts"][0]
    assert (first["scope"], first["key"], first["metric"], first["status"]) == (
        "range", "decode_step", "gap_fraction", "regression"
    )
    assert (first["baseline"], first["current"], first["delta"]) == (0.25, 0.5, 0.25)

    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert md.startswith("### ❌ gapscope compare — FAIL: 1 regression: range decode_step gap_fraction\n")
    words = ("range decode_step: gap fraction per step 25.0% -> 50.0%: the GPU sits idle for more of its span "
             "(largest rise: host time 250 us -> 500 us; the results hold no host work to tell a slower host from a "
             "GPU that ran dry earlier)")
    assert data["failures"] == [words]
    assert (
        "| ❌ regression | range | `decode_step` | `gap_fraction` | 25.0% | 50.0% | **+25.0 pp** | +100.0% | +10.0 pp |"
        in md.splitlines()
    )
    assert f"- ❌ {words.replace('->', '-&gt;')}" in md.splitlines()
    assert "<details><summary>7 checks ok</summary>" in md

    root = ET.parse(tmp_path / "report.xml").getroot()
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("8", "1", "0")
    failed = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failed] == [("gapscope.compare.range", "decode_step: gap_fraction")]
    failure = failed[0].find("failure")
    assert failure is not None
    assert failure.get("message") == f"{words} (+25.0 pp, limit +10.0 pp): regression"


def test_json_to_stdout(run: Run, files: dict[str, str]) -> None:
    code, out, _ = run("compare", files["base"], files["cur"], "--format", "json")
    assert code == 1
    data = json.loads(out)
    assert data["headline"] == "FAIL: 1 regression: range decode_step gap_fraction"
    assert data["counts"] == {"regression": 1, "missing": 0, "within-noise": 0, "improved": 0, "new": 0, "info": 0, "ok": 7}


def test_improvement_exit_0(run: Run, files: dict[str, str]) -> None:
    code, out, _ = run("compare", files["cur"], files["base"])
    assert code == 0
    assert out.splitlines()[0] == "PASS: no regression in 8 checks (1 improved, 7 ok)"
    assert any(line.split()[:4] == ["improved", "range", "decode_step", "gap_fraction"] for line in out.splitlines())


def test_span_threshold_from_the_command_line(run: Run, tmp_path: Path) -> None:
    base = _result(2_500_000)
    slower = _result(2_500_000)
    slower["by_name"][1].update(_v2(1_100_000, 110, "amortized"))  # prefill 10% longer, same share idle
    a, b = _write(tmp_path / "a.json", base), _write(tmp_path / "b.json", slower)
    code, out, _ = run("compare", a, b)
    assert code == 0
    code, out, _ = run("compare", a, b, "--fail", "gpu_span:+5%")
    assert code == 1
    assert out.splitlines()[0] == "FAIL: 1 regression: range prefill gpu_span"
    row = next(line for line in out.splitlines() if line.startswith("REGRESSION"))
    assert row.split() == [
        "REGRESSION", "range", "prefill", "gpu_span", "1", "ms", "1.1", "ms", "+100", "us", "+10.0%", "+5%"
    ]
    assert "  ✗ range prefill: GPU span 1 ms -> 1.1 ms: the work takes longer on the GPU" in out.splitlines()


def test_fail_option_overrides_default(run: Run, files: dict[str, str]) -> None:
    code, out, _ = run("compare", files["base"], files["cur"], "--fail", "gap_fraction:+0.3")
    assert code == 0
    code, out, _ = run(
        "compare", files["base"], files["cur"], "--fail", "gap_fraction:+0.3", "--fail", "decode*:gap_fraction:+0.1",
        "--format", "json",
    )
    assert code == 1
    assert json.loads(out)["verdicts"][0]["threshold"] == "decode*:gap_fraction:+0.1"


def test_pyproject_in_cwd_is_read_and_config_option(run: Run, files: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.gapscope.compare]\nfail = ["gap_fraction:+0.5"]\n', encoding="utf-8")
    code, out, _ = run("compare", files["base"], files["cur"])
    assert code == 0
    assert "thresholds: kernels:+0, sync:+10%+20us, eager_fallback:+0, verdict:same, gap_fraction:+0.5" in out
    other = tmp_path / "ci.toml"
    other.write_text('[tool.gapscope.compare]\nfail = ["gap_fraction:+0.01"]\n', encoding="utf-8")
    code, _, _ = run("compare", files["base"], files["cur"], "--config", str(other))
    assert code == 1


def test_scope_and_missing_from_the_command_line_and_pyproject(run: Run, tmp_path: Path) -> None:
    base, cur = _result(2_500_000), _result(2_500_000)
    cur["by_name"].pop(1)  # prefill gone
    cur["devices"][0].update(_v2(20_000_000, 10_000_000))  # the device 25% -> 50% idle
    a, b = _write(tmp_path / "a.json", base), _write(tmp_path / "b.json", cur)
    code, out, _ = run("compare", a, b)
    assert code == 1
    assert out.splitlines()[:3] == [
        "FAIL: 1 missing: range prefill missing",
        f"baseline: {a}  ·  current: {b}  ·  compared: range  ·  thresholds: gap_fraction:+0.1, kernels:+0, "
        "sync:+10%+20us, eager_fallback:+0, verdict:same",
        "  ✗ range prefill: missing from current (baseline: 10 kernels)",
    ]
    code, out, _ = run("compare", a, b, "--missing", "warn")
    assert code == 0 and "only in baseline (missing, not failed): range prefill" in out
    code, out, _ = run("compare", a, b, "--missing", "ignore", "--scope", "range,device")
    assert code == 1 and out.splitlines()[0] == "FAIL: 1 regression: device GPU 0 gap_fraction"
    assert "prefill" not in out
    (tmp_path / "pyproject.toml").write_text('[tool.gapscope.compare]\nmissing = "warn"\nscope = ["device"]\n',
                                             encoding="utf-8")
    code, out, _ = run("compare", a, b)
    assert code == 1 and out.splitlines()[0] == "FAIL: 1 regression: device GPU 0 gap_fraction"
    code, out, _ = run("compare", a, b, "--scope", "range")  # the option beats the file
    assert code == 0 and "only in baseline (missing, not failed): range prefill" in out


def _runs(tmp_path: Path, prefix: str, gaps: tuple[int, ...]) -> list[str]:
    return [_write(tmp_path / f"{prefix}{i}.json", _result(g)) for i, g in enumerate(gaps)]


def test_several_runs_per_side(run: Run, tmp_path: Path) -> None:
    # decode_step gap fraction per run: baseline 10%, 25%, 40%; current 40%, 40%, 41%
    base = _runs(tmp_path, "b", (1_000_000, 2_500_000, 4_000_000))
    noisy = _runs(tmp_path, "c", (4_000_000, 4_000_000, 4_100_000))
    code, out, _ = run("compare", "--baseline", *base, "--current", *noisy, "--format", "json")
    assert code == 0
    v = next(v for v in json.loads(out)["verdicts"] if (v["key"], v["metric"]) == ("decode_step", "gap_fraction"))
    assert (v["status"], v["baseline_runs"], v["current_runs"]) == ("within-noise", 3, 3)
    assert v["baseline"] == 0.25 and v["current"] == 0.4
    # well beyond the spread: 70% .. 71%; repeated -b/-c options work the same
    far = _runs(tmp_path, "f", (7_000_000, 7_000_000, 7_100_000))
    code, out, _ = run("compare", "-b", base[0], "-b", base[1], "-b", base[2], "-c", far[0], far[1], far[2])
    assert code == 1
    assert out.splitlines()[0] == "FAIL: 1 regression: range decode_step gap_fraction"
    header = next(line for line in out.splitlines() if line.startswith("status"))
    assert header.split() == [  # a noise column with several runs
        "status", "scope", "name", "metric", "baseline", "current", "Δ", "Δ%", "limit", "noise",
    ]


def test_markdown_appended_to_github_step_summary(
    run: Run, files: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code, _, _ = run("compare", files["base"], files["cur"])
    assert code == 1
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("# earlier step\n### ❌ gapscope compare — FAIL: 1 regression: range decode_step gap_fraction\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "no" / "summary.md"))
    code, out, err = run("compare", files["base"], files["cur"])
    assert code == 1 and out.startswith("FAIL: 1 regression")
    assert err == f"gapscope: warning: $GITHUB_STEP_SUMMARY: {tmp_path}/no: no such folder for the output file\n"


def test_unmatched_ranges_listed(run: Run, tmp_path: Path) -> None:
    base = _result(2_500_000)
    cur = _result(2_500_000)
    cur["by_name"][1]["name"] = "prefill_v2"
    code, out, _ = run("compare", _write(tmp_path / "a.json", base), _write(tmp_path / "b.json", cur))
    assert code == 1  # a renamed range is a missing one
    assert "  ✗ range prefill: missing from current (baseline: 10 kernels)" in out.splitlines()
    assert "only in current (new, not failed): range prefill_v2" in out
    code, out, _ = run("compare", _write(tmp_path / "a.json", base), _write(tmp_path / "b.json", cur),
                       "--missing", "warn")
    assert code == 0
    assert "only in current (new, not failed): range prefill_v2" in out
    assert "only in baseline (missing, not failed): range prefill" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("compare", "{base}"), "missing CURRENT: usage: gapscope compare BASELINE CURRENT (or --baseline A ... --current X ...)"),
        (("compare",), "missing BASELINE: usage: gapscope compare BASELINE CURRENT (or --baseline A ... --current X ...)"),
        (("compare", "{base}", "{cur}", "{cur}"), "expected BASELINE and CURRENT, got 3 paths; for several runs per side use --baseline A B ... --current X Y ..."),
        (("compare", "--baseline", "{base}"), "missing CURRENT: usage: gapscope compare BASELINE CURRENT (or --baseline A ... --current X ...)"),
        (("compare", "{base}", "--current", "{cur}"), "give either BASELINE CURRENT or --baseline ... --current ..., not both"),
        (("compare", "{base}", "{tmp}/nope.json"), "{tmp}/nope.json: no such file"),
        (("compare", "{base}", "{tmp}/bad.json"), "{tmp}/bad.json: not valid JSON (line 1, column 1: Expecting value); expected a gapscope result JSON"),
        (("compare", "{base}", "{cur}", "--fail", "gap_fraction:+x"), "bad threshold 'gap_fraction:+x': limit '+x' is not a number like +0.02, +5%, +50us or +10%+20us"),
        (("compare", "{base}", "{cur}", "--fail", "gapfraction:+0.02"), "bad threshold 'gapfraction:+0.02': unknown metric 'gapfraction' (known: gap_fraction, gpu_span, busy, gap, gap_count, gap_p50, gap_p90, gap_p99, gap_max, kernels, kernel_median, memops, memop_ns, graph_kernels, graph_replays, gap_between_replays, gap_inside_replays, graph_ceiling_span, graph_ceiling_speedup, wall, api_calls, api_ns, recordings, recording_ns, launch, host, stall, setup, sync, dependency, memop, pipeline, unknown, eager_fallback, verdict, launch.API.{{calls|host_median|host_p90|latency_median|latency_p90|per_second}})"),
        (("compare", "{base}", "{cur}", "--scope", "ranges"), "--scope: 'ranges' is not a scope (give some of range, device, stream, comma-separated, or auto)"),
        (("compare", "{base}", "{cur}", "--fail", "launch.cudaGraphLaunch.host_median:+20%"), "{base} has no launch statistics (analyzed with --no-attribution); cannot check launch.cudaGraphLaunch.host_median_ns:+20%"),
        (("compare", "{base}", "{cur}", "--config", "{tmp}/none.toml"), "config file not found: {tmp}/none.toml"),
        (("compare", "{base}", "{cur}", "-o", "{tmp}/no/dir/out.txt"), "{tmp}/no/dir: no such folder for the output file"),
        (("compare", "{base}", "{cur}", "-o", "{cur}"), "refusing to overwrite input {cur} with a report; give another output file"),
        (("compare", "{base}", "{cur}", "--markdown", "-"), "only one report can go to stdout, not the main report and --markdown"),
        (("compare", "{base}", "{cur}", "-o", "r.txt", "--junit", "./r.txt"), "two reports cannot go to the same file (r.txt and ./r.txt)"),
    ],
)
def test_bad_input_exit_2_one_line(run: Run, files: dict[str, str], tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    (tmp_path / "bad.json").write_text("", encoding="utf-8")
    fill = {"base": files["base"], "cur": files["cur"], "tmp": str(tmp_path)}
    code, out, err = run(*(a.format(**fill) for a in args))
    assert (code, out) == (2, "")
    assert err == f"gapscope: error: {message.format(**fill)}\n"


def test_click_usage_errors_exit_2(run: Run, files: dict[str, str]) -> None:
    code, out, err = run("compare", files["base"], files["cur"], "--format", "xml")
    assert (code, out) == (2, "")
    assert err == (
        "gapscope: error: Invalid value for '--format': 'xml' is not one of 'table', 'json'. "
        "(see: gapscope compare --help)\n"
    )
    code, out, err = run("compare", "--bogus")
    assert (code, out, err) == (2, "", "gapscope: error: No such option '--bogus'. (see: gapscope compare --help)\n")
    code, out, err = run("compare", files["base"], files["cur"], "--missing", "maybe")
    assert (code, out) == (2, "")
    assert err == ("gapscope: error: Invalid value for '--missing': 'maybe' is not one of 'fail', 'warn', 'ignore'. "
                   "(see: gapscope compare --help)\n")


def test_help_shows_usage(run: Run) -> None:
    code, out, _ = run("compare", "--help")
    assert code == 0
    assert "Usage: gapscope compare [OPTIONS] [BASELINE CURRENT]" in out
    assert "--baseline PATH..." in out and "Exit status: 0 no regression, 1 regression, 2 bad input or usage." in out


# --------------------------------------------------------------------------------------------
# Real traces recorded on the H200 (traces/README.md): the PyTorch decode loop, and the same loop
# with torch.cuda.synchronize() at the end of every decode_step, a real regression. The sync
# hurts the CUDA-graph replay (`graph` range) and hides in the already launch-bound eager loop.

REPO = Path(__file__).resolve().parents[1]
PLAIN = REPO / "traces" / "torch_decode.sqlite"
SYNC = REPO / "traces" / "torch_decode_sync.sqlite"


@pytest.fixture(scope="module")
def analyzed() -> dict[Path, dict[str, Any]]:
    """The analyzer's own results for both traces, to check that compare reports them as is."""
    from gapscope.analysis import analyze

    return {p: analyze(p).to_dict() for p in (PLAIN, SYNC)}


def _stat(result: dict[str, Any], name: str, field: str) -> Any:
    return next(e for e in result["by_name"] if e["name"] == name)[field]


def _sync(result: dict[str, Any], name: str) -> int:
    return next(e for e in result["by_name"] if e["name"] == name)["gap_by_category_ns"]["sync"]


def test_real_identical_traces_exit_0(run: Run) -> None:
    code, out, err = run("compare", str(PLAIN), str(PLAIN))
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "PASS: no regression in 22 checks (22 ok)"
    checks = [" ".join(re.split(r"\s{2,}", line)[2:4]) for line in out.splitlines() if line.startswith("ok ")]
    # decode_step's 32 steps: 16 replayed, 15 eager and the first eager one with one-off gaps
    # (module loading), each mode compared with its own; the name itself for its eager fallback
    per_range = ("gap_fraction", "kernels", "sync", "verdict")
    assert checks == [
        *(f"eager {m}" for m in per_range), "decode_step eager_fallback",
        *(f"decode_step ({mode}) {m}" for mode in ("eager", "replayed", "eager one-off") for m in per_range),
        *(f"graph {m}" for m in ("gap_fraction", "kernels", "sync", "eager_fallback", "verdict"))]


#: What the sync after every step breaks (torch_decode -> torch_decode_sync), in report order.
SYNC_FAILURES = [("range", "eager", "sync_ns"), ("range", "graph", "gap_fraction"), ("range", "graph", "sync_ns"),
                 ("range", "graph", "verdict")]


def test_real_sync_every_step_is_a_regression_in_every_format(
    run: Run, tmp_path: Path, analyzed: dict[Path, dict[str, Any]]
) -> None:
    code, out, err = run(
        "compare", str(PLAIN), str(SYNC), "-o", "report.txt", "--markdown", "report.md", "--junit", "report.xml"
    )
    assert (code, err) == (1, "")
    headline = "FAIL: 4 regressions: range eager sync, range graph gap_fraction, range graph sync, range graph verdict"
    assert out == headline + "\n"
    # the analyzer's own numbers (traces/README.md checks the gap fractions by an independent merge)
    plain, sync = analyzed[PLAIN], analyzed[SYNC]
    assert (_sync(plain, "eager"), _sync(plain, "graph")) == (0, 0)
    assert (round(_sync(sync, "eager") / 1e3), round(_sync(sync, "graph") / 1e3, -1)) == (582, 4740)
    words = [
        "range eager: sync time 0 -> 582 us: a new host synchronize",
        "range graph: gap fraction 17.6% -> 45.7%: the GPU sits idle for more of its span (largest rise: sync "
        "time 0 -> 4.74 ms)",
        "range graph: sync time 0 -> 4.74 ms: a new host synchronize",
        "range graph: verdict graph_replay -> sync: host syncs idle the GPU",
    ]

    table = (tmp_path / "report.txt").read_text(encoding="utf-8").splitlines()
    assert table[0] == headline
    assert table[2:6] == [f"  ✗ {w}" for w in words]
    row = next(line for line in table if re.split(r"\s{2,}", line)[:4] == ["REGRESSION", "range", "graph", "gap_fraction"])
    assert row.split() == [
        "REGRESSION", "range", "graph", "gap_fraction", "17.6%", "45.7%", "+28.1", "pp", "+159.3%", "+10.0", "pp"
    ]
    assert sum(line.startswith("REGRESSION") for line in table) == 4

    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert md.startswith(f"### ❌ gapscope compare — {headline}\n")
    assert [f"- ❌ {w.replace('->', '-&gt;')}" for w in words] == [line for line in md.splitlines() if line.startswith("- ")]
    assert (
        "| ❌ regression | range | `graph` | `gap_fraction` | 17.6% | 45.7% | **+28.1 pp** | +159.3% | +10.0 pp |"
        in md.splitlines()
    )

    suite = ET.parse(tmp_path / "report.xml").getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("22", "4")
    failed = [(c.get("name"), c.find("failure").get("message")) for c in suite.iter("testcase")  # type: ignore[union-attr]
              if c.find("failure") is not None]
    assert [name for name, _ in failed] == ["eager: sync", "graph: gap_fraction", "graph: sync", "graph: verdict"]
    assert [message.split(" (")[0] for _, message in failed] == [
        w.split(" (")[0] for w in words]

    code, out, _ = run("compare", str(PLAIN), str(SYNC), "--format", "json")
    assert code == 1
    data = json.loads(out)
    assert data["failures"] == words
    regs = [v for v in data["verdicts"] if v["status"] == "regression"]
    assert [(v["scope"], v["key"], v["metric"]) for v in regs] == SYNC_FAILURES
    v = regs[1]
    assert v["baseline"] == _stat(plain, "graph", "gap_fraction")
    assert v["current"] == _stat(sync, "graph", "gap_fraction")
    assert (round(v["baseline"], 3), round(v["current"], 3)) == (0.176, 0.457)
    assert v["delta"] == v["current"] - v["baseline"]
    assert (v["baseline_runs"], v["current_runs"], v["noise"]) == (1, 1, 0.0)
    assert (regs[0]["current"], regs[2]["current"]) == (_sync(sync, "eager"), _sync(sync, "graph"))
    assert (regs[3]["baseline"], regs[3]["current"]) == (_stat(plain, "graph", "verdict"), _stat(sync, "graph", "verdict"))


def test_real_sync_regression_in_the_graph_span(run: Run, analyzed: dict[Path, dict[str, Any]]) -> None:
    code, out, _ = run("compare", str(PLAIN), str(SYNC), "--fail", "graph:gpu_span:+5%", "--format", "json")
    assert code == 1
    regs = [(v["key"], v["metric"], v["baseline"], v["current"]) for v in json.loads(out)["verdicts"] if v["status"] == "regression"]
    span_plain = _stat(analyzed[PLAIN], "graph", "gpu_span_ns")
    span_sync = _stat(analyzed[SYNC], "graph", "gpu_span_ns")
    assert (round(span_plain / 1e3, 1), round(span_sync / 1e3, 1)) == (8885.7, 13471.7)  # traces/README.md
    assert [r[:2] for r in regs] == [("eager", "sync_ns"), ("graph", "gap_fraction"), ("graph", "gpu_span_ns"),
                                     ("graph", "sync_ns"), ("graph", "verdict")]
    assert regs[2][2:] == (float(span_plain), float(span_sync))  # one instance: per instance = total


def test_real_improvement_never_fails(run: Run) -> None:
    code, out, err = run("compare", str(SYNC), str(PLAIN), "--format", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["headline"] == "PASS: no regression in 22 checks (4 improved, 18 ok)"
    improved = [(v["scope"], v["key"], v["metric"]) for v in data["verdicts"] if v["status"] == "improved"]
    assert improved == SYNC_FAILURES
    _, forward, _ = run("compare", str(PLAIN), str(SYNC), "--format", "json")
    back = {(v["key"], v["metric"]): v["delta"] for v in json.loads(forward)["verdicts"]}
    assert all(v["delta"] == -back[(v["key"], v["metric"])] for v in data["verdicts"] if v["delta"] is not None)


def _gapscope(*args: str, cwd: Path) -> tuple[int, str, str]:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "gapscope", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_real_traces_through_python_m_gapscope(tmp_path: Path) -> None:
    code, out, err = _gapscope("compare", str(PLAIN), str(SYNC), cwd=tmp_path)
    assert (code, err) == (1, "")
    assert out.splitlines()[0] == "FAIL: 4 regressions: range eager sync, range graph gap_fraction, range graph sync, range graph verdict"
    code, out, err = _gapscope("compare", str(SYNC), str(PLAIN), cwd=tmp_path)
    assert (code, err) == (0, "")
    code, out, err = _gapscope("compare", str(PLAIN), "missing.json", cwd=tmp_path)
    assert (code, out, err) == (2, "", "gapscope: error: missing.json: no such file\n")


def test_a_sqlite_file_that_is_not_an_nsys_export_exit_2(tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x INTEGER)")
    code, out, err = _gapscope("compare", str(PLAIN), str(other), cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err.startswith("gapscope: error: ") and err.count("\n") == 1 and "other.sqlite" in err
