"""Threshold parsing, resolution and pyproject.toml config for `gapscope compare`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gapscope.errors import GapscopeError
from gapscope.regression.metrics import CATEGORIES, VERDICT_RANK, verdict_change
from gapscope.regression.thresholds import (
    DEFAULT_THRESHOLDS,
    METRICS,
    Threshold,
    ThresholdSet,
    load_config,
    metric_for,
    parse_scope,
    parse_threshold,
    resolve_settings,
    resolve_thresholds,
)
from gapscope.analysis.verdicts import VERDICTS


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("gap_fraction:+0.02", Threshold("gap_fraction", 0.02, False, None)),
        ("sync:+10%+20us", Threshold("sync_ns", 0.1, True, None, 20_000.0)),
        ("sync_ns:+10%", Threshold("sync_ns", 0.1, True, None)),
        ("launch_ns:+5%", Threshold("launch_ns", 0.05, True, None)),
        ("host_ns:+1ms", Threshold("host_ns", 1e6, False, None)),
        ("gap_by_category_ns.stall:+0", Threshold("stall_ns", 0.0, False, None)),
        ("memop:+1us", Threshold("memop_gap_ns", 1000.0, False, None)),
        ("memop_ns:+1us", Threshold("memop_ns", 1000.0, False, None)),
        ("gap_fraction:+5%+1pp", Threshold("gap_fraction", 0.05, True, None, 0.01)),
        ("verdict:same", Threshold("verdict", 0.0, False, None)),
        ("graph*:verdict:off", Threshold("verdict", None, False, "graph*")),
        ("graph_kernels:-0", Threshold("graph_kernels", 0.0, False, None)),
        ("graph_replays:2", Threshold("graph_replays", 2.0, False, None)),
        ("launch.cudaGraphLaunch.host_median_ns:+20%", Threshold("launch.host_median_ns", 0.2, True, api="cudaGraphLaunch")),
        ("launch.*.latency_p90:+50us", Threshold("launch.latency_p90_ns", 50_000.0, api="*")),
        ("launch.cudaLaunchKernel.per_second:-10%", Threshold("launch.per_second", 0.1, True, api="cudaLaunchKernel")),
        ("gap_fraction:0.02", Threshold("gap_fraction", 0.02, False, None)),
        ("gap_fraction:+2pp", Threshold("gap_fraction", 0.02, False, None)),
        ("gap_fraction:+2%", Threshold("gap_fraction", 0.02, True, None)),
        ("gpu_span:+5%", Threshold("gpu_span_ns", 0.05, True, None)),
        ("gpu_span_ns:+5%", Threshold("gpu_span_ns", 0.05, True, None)),
        ("span:+12.5%", Threshold("gpu_span_ns", 0.125, True, None)),
        ("gap:+1000", Threshold("gap_ns", 1000.0, False, None)),
        ("busy:+2ms", Threshold("busy_ns", 2_000_000.0, False, None)),
        ("gap_p99:+50us", Threshold("gap_p99_ns", 50_000.0, False, None)),
        ("gap_p99_ns:+50µs", Threshold("gap_p99_ns", 50_000.0, False, None)),
        ("gap_max:+1s", Threshold("gap_max_ns", 1e9, False, None)),
        ("gap_p50:+250ns", Threshold("gap_p50_ns", 250.0, False, None)),
        ("kernels:+0", Threshold("kernels", 0.0, False, None)),
        ("gaps:+10%", Threshold("gap_count", 0.1, True, None)),
        ("kernel_median:+1e3", Threshold("kernel_median_ns", 1000.0, False, None)),
        ("decode*:gap_fraction:+0.01", Threshold("gap_fraction", 0.01, False, "decode*")),
        ("aten::mm:gpu_span:+10%", Threshold("gpu_span_ns", 0.1, True, "aten::mm")),
        ("gpu_span:off", Threshold("gpu_span_ns", None, False, None)),
        ("prefill*:GAP_FRACTION:OFF", Threshold("gap_fraction", None, False, "prefill*")),
        ("  gap_fraction : +0.5  ", Threshold("gap_fraction", 0.5, False, None)),
    ],
)
def test_parse_valid(spec: str, expected: Threshold) -> None:
    assert parse_threshold(spec) == expected


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("gap_fraction", "expected [RANGE_GLOB:]METRIC:LIMIT"),
        ("", "expected [RANGE_GLOB:]METRIC:LIMIT"),
        ("gapfrac:+0.02", "unknown metric 'gapfrac'"),
        (":+0.02", "no metric name"),
        (":gap_fraction:+0.02", "empty range pattern"),
        ("gap_fraction:+abc", "limit '+abc' is not a number"),
        ("gap_fraction:", "limit '' is not a number"),
        ("gap_fraction:-0.02", "cannot be negative"),
        ("graph_kernels:+1", "graph_kernels is worse when lower, so its limit is an allowed fall: write -1"),
        ("verdict:+0", "verdict takes 'same'"),
        ("launch.cudaGraphLaunch.host_median:same", "is not a number"),
        ("decode*:launch.cudaGraphLaunch.host_median:+5%", "drop the range pattern"),
        ("launch..host_median:+5%", "no launch API between"),
        ("launch.cudaGraphLaunch.duration:+5%", "unknown launch statistic 'duration'"),
        ("host_median_ns:+5%", "'host_median_ns' is a launch statistic: write launch.API.host_median_ns"),
        ("sync:+20us+10%", "is not a number"),
        ("kernels:+5%+2us", "kernels is a count, not a time"),
        ("gpu_span:+5pp", "'pp' (percentage points) applies only to gap_fraction"),
        ("kernels:+5ms", "kernels is a count, not a time"),
        ("gap_fraction:+2us", "gap_fraction is a fraction, not a time"),
        ("gap_fraction:+2", "gap_fraction is between 0 and 1"),
        ("gpu_span:+5 %%", "is not a number"),
        ("gpu_span:+inf", "is not a number"),
        ("gpu_span:+nan%", "is not a number"),
    ],
)
def test_parse_malformed_names_the_problem(spec: str, fragment: str) -> None:
    with pytest.raises(GapscopeError) as info:
        parse_threshold(spec)
    assert info.value.exit_code == 2
    assert fragment in info.value.message
    assert repr(spec) in info.value.message or not spec.strip()
    assert "\n" not in info.value.message


def test_unknown_metric_lists_known_names() -> None:
    with pytest.raises(GapscopeError) as info:
        metric_for("idle")
    assert info.value.message == (
        "unknown metric 'idle' (known: gap_fraction, gpu_span, busy, gap, gap_count, gap_p50, "
        "gap_p90, gap_p99, gap_max, kernels, kernel_median, memops, memop_ns, graph_kernels, graph_replays, "
        "gap_between_replays, gap_inside_replays, graph_ceiling_span, graph_ceiling_speedup, wall, api_calls, "
        "api_ns, recordings, recording_ns, launch, host, stall, setup, sync, dependency, memop, pipeline, unknown, eager_fallback, verdict, "
        "launch.API.{calls|host_median|host_p90|latency_median|latency_p90|per_second})"
    )


def test_every_metric_is_a_documented_schema_field_with_words() -> None:
    rows = [m.name for m in METRICS.values() if m.kind == "row"]
    assert rows == [
        "gap_fraction", "gpu_span_ns", "busy_ns", "gap_ns", "gap_count", "gap_p50_ns",
        "gap_p90_ns", "gap_p99_ns", "gap_max_ns", "kernels", "kernel_median_ns", "memops", "memop_ns",
        "graph_kernels", "graph_replays", "gap_between_replays_ns", "gap_inside_replays_ns",
        "graph_ceiling_span_ns", "graph_ceiling_speedup", "wall_ns", "api_calls", "api_ns", "graph_recordings",
        "recording_ns",
    ]
    schema = (Path(__file__).parents[1] / "docs" / "schema.md").read_text(encoding="utf-8")
    ci = (Path(__file__).parents[1] / "docs" / "ci.md").read_text(encoding="utf-8")
    for m in METRICS.values():
        assert m.label and m.worse_means and m.meaning
        if m.kind in ("row", "launch"):
            assert f"`{m.field}`" in schema, m.name  # a documented field of a row
        assert f"`{m.short}`" in ci, m.name  # and a documented metric of compare
    assert [m.field for m in METRICS.values() if m.kind == "category"] == list(CATEGORIES)
    assert [m.name for m in METRICS.values() if m.worse < 0] == ["graph_kernels", "graph_replays", "launch.per_second"]
    assert [m.name for m in METRICS.values() if m.summed and m.kind == "row"] == [
        "gpu_span_ns", "busy_ns", "gap_ns", "gap_count", "kernels", "memops", "memop_ns", "graph_kernels",
        "graph_replays", "gap_between_replays_ns", "gap_inside_replays_ns", "graph_ceiling_span_ns", "wall_ns",
        "api_calls", "api_ns", "graph_recordings", "recording_ns",
    ]


def test_every_verdict_has_a_rank() -> None:
    assert sorted(VERDICT_RANK) == sorted(VERDICTS)
    assert verdict_change("graph_replay", "pipeline", True, False) == 1  # same rank, but the graph is gone
    assert verdict_change("graph_replay", "amortized", True, False) == -1
    assert verdict_change("launch_bound", "host_bound", False, False) == 0


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ("gap_fraction:+2pp", "gap_fraction:+0.02"),
        ("gpu_span_ns:+5%", "gpu_span:+5%"),
        ("gap_p99:+50us", "gap_p99:+50us"),
        ("gap_p99:+1500ns", "gap_p99:+1.5us"),
        ("gap_max:+2000ms", "gap_max:+2s"),
        ("gap_max:+1001", "gap_max:+1001ns"),
        ("sync_ns:+10%+20000", "sync:+10%+20us"),
        ("verdict:same", "verdict:same"),
        ("graph_kernels:0", "graph_kernels:-0"),
        ("launch.cudaGraphLaunch.host_median_ns:+20%", "launch.cudaGraphLaunch.host_median_ns:+20%"),
        ("decode*:gap_fraction:+0.01", "decode*:gap_fraction:+0.01"),
        ("gpu_span:off", "gpu_span:off"),
    ],
)
def test_canonical_text_round_trips(spec: str, text: str) -> None:
    t = parse_threshold(spec)
    assert str(t) == text
    assert parse_threshold(text) == t


def test_allowed_increase_absolute_and_relative() -> None:
    assert parse_threshold("gap_fraction:+0.02").allowed_increase(0.3) == 0.02
    assert parse_threshold("gpu_span:+5%").allowed_increase(2_000_000) == pytest.approx(100_000.0)
    assert parse_threshold("gpu_span:+5%").allowed_increase(0) == 0.0
    assert parse_threshold("gpu_span:off").allowed_increase(5) == math.inf
    assert parse_threshold("sync:+10%+20us").allowed_increase(100_000) == pytest.approx(30_000.0)
    assert parse_threshold("sync:+10%+20us").allowed_increase(0) == 20_000.0
    assert parse_threshold("graph_kernels:-2").allowed_increase(78) == 2.0


def test_describe_limit() -> None:
    assert parse_threshold("gap_fraction:+0.02").describe_limit() == "+2.0 pp"
    assert parse_threshold("gpu_span:+5%").describe_limit() == "+5%"
    assert parse_threshold("gap_p99:+50us").describe_limit() == "+50 us"
    assert parse_threshold("kernels:+3").describe_limit() == "+3"
    assert parse_threshold("gpu_span:off").describe_limit() == "off"
    assert parse_threshold("sync:+10%+20us").describe_limit() == "+10%+20 us"
    assert parse_threshold("verdict:same").describe_limit() == "same"
    assert parse_threshold("graph_kernels:-2").describe_limit() == "-2"


def test_defaults() -> None:
    assert DEFAULT_THRESHOLDS == ("gap_fraction:+0.10", "kernels:+0", "sync:+10%+20us", "eager_fallback:+0",
                                  "verdict:same")
    defaults = ThresholdSet.defaults()
    assert defaults.specs() == ["gap_fraction:+0.1", "kernels:+0", "sync:+10%+20us", "eager_fallback:+0",
                                "verdict:same"]
    assert {t.origin for t in defaults} == {"default"}
    for scope, name in (("range", "decode_step"), ("device", None), ("stream", None)):
        assert {m: str(t) for m, t in defaults.for_entry(scope, name).items()} == {
            "gap_fraction": "gap_fraction:+0.1", "kernels": "kernels:+0", "sync_ns": "sync:+10%+20us",
            **({"eager_fallback": "eager_fallback:+0"} if scope == "range" else {}), "verdict": "verdict:same",
        }
    assert defaults.for_entry("launch", "cudaGraphLaunch") == {} and not defaults.has_launch()


def test_launch_thresholds_apply_to_launch_apis_only() -> None:
    s = ThresholdSet.parse(["launch.*.host_median_ns:+100%", "launch.cudaGraphLaunch.host_median_ns:+20%",
                            "launch.*.host_median_ns:+50%", "gap_fraction:+0.02"])
    assert s.has_launch()
    assert {m: str(t) for m, t in s.for_entry("launch", "cudaGraphLaunch").items()} == {
        "launch.host_median_ns": "launch.cudaGraphLaunch.host_median_ns:+20%"}  # an exact name beats a glob
    assert {m: str(t) for m, t in s.for_entry("launch", "cudaLaunchKernel").items()} == {
        "launch.host_median_ns": "launch.*.host_median_ns:+50%"}  # among globs the last wins
    assert list(s.for_entry("range", "decode_step")) == ["gap_fraction"]


def test_later_threshold_replaces_same_glob_and_metric() -> None:
    s = ThresholdSet.parse(["gap_fraction:+0.02", "gpu_span:+5%", "gap_fraction:+0.05"])
    assert s.specs() == ["gpu_span:+5%", "gap_fraction:+0.05"]


def test_scoped_beats_unscoped_and_last_matching_glob_wins() -> None:
    s = ThresholdSet.parse(
        [
            "gap_fraction:+0.02",
            "gpu_span:+5%",
            "decode*:gap_fraction:+0.01",
            "decode_step:gap_fraction:+0.005",
            "gap_fraction:+0.03",  # unscoped, given last: still loses to the scoped ones
            "prefill:gpu_span:off",
            "decode*:kernels:+0",
        ]
    )
    decode = {m: str(t) for m, t in s.for_entry("range", "decode_step").items()}
    assert decode == {
        "gap_fraction": "decode_step:gap_fraction:+0.005",
        "gpu_span_ns": "gpu_span:+5%",
        "kernels": "decode*:kernels:+0",
    }
    decode_other = {m: str(t) for m, t in s.for_entry("range", "decode_attn").items()}
    assert decode_other == {
        "gap_fraction": "decode*:gap_fraction:+0.01",
        "gpu_span_ns": "gpu_span:+5%",
        "kernels": "decode*:kernels:+0",
    }
    assert {m: str(t) for m, t in s.for_entry("range", "prefill").items()} == {
        "gap_fraction": "gap_fraction:+0.03"
    }
    # devices and streams see only unscoped thresholds, even when a glob would match "*"
    assert {m: str(t) for m, t in s.for_entry("device").items()} == {
        "gap_fraction": "gap_fraction:+0.03",
        "gpu_span_ns": "gpu_span:+5%",
    }


def test_glob_is_case_sensitive_and_matches_whole_name() -> None:
    t = parse_threshold("decode*:gap_fraction:+0.01")
    assert t.applies_to("range", "decode_step")
    assert not t.applies_to("range", "Decode_step")
    assert not t.applies_to("range", "predecode")
    assert not t.applies_to("stream", None)
    assert parse_threshold("*:gap_fraction:+0.01").applies_to("range", "")


def _pyproject(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "x"\n\n' + body, encoding="utf-8")
    return path


def test_config_fail_list(tmp_path: Path) -> None:
    path = _pyproject(
        tmp_path,
        '[tool.gapscope.compare]\nfail = ["gap_fraction:+0.01", "decode*:gap_p99:+20us"]\n',
    )
    assert [str(t) for t in load_config(path)] == ["gap_fraction:+0.01", "decode*:gap_p99:+20us"]
    assert {t.origin for t in load_config(path)} == {"config"}


def test_config_layers_defaults_config_cli(tmp_path: Path) -> None:
    path = _pyproject(tmp_path, '[tool.gapscope.compare]\nfail = ["gap_fraction:+0.01", "kernels:+0"]\n')
    s = resolve_thresholds(["kernels:off", "gpu_span:+10%"], path)
    assert s.specs() == ["sync:+10%+20us", "eager_fallback:+0", "verdict:same", "gap_fraction:+0.01", "kernels:off",
                         "gpu_span:+10%"]
    assert list(s.for_entry("device")) == ["gap_fraction", "gpu_span_ns", "sync_ns", "verdict"]


def test_default_config_found_in_search_dir(tmp_path: Path) -> None:
    _pyproject(tmp_path, '[tool.gapscope.compare]\nfail = ["gpu_span:+5%", "gap_fraction:off"]\n')
    assert resolve_thresholds(search_dir=tmp_path).specs() == [
        "kernels:+0", "sync:+10%+20us", "eager_fallback:+0", "verdict:same", "gpu_span:+5%", "gap_fraction:off"]
    assert resolve_thresholds(search_dir=None).specs() == ThresholdSet.defaults().specs()


def test_pyproject_without_table_is_ignored_by_default_but_not_when_named(tmp_path: Path) -> None:
    path = _pyproject(tmp_path, "[tool.ruff]\nline-length = 100\n")
    assert resolve_thresholds(search_dir=tmp_path).specs() == ThresholdSet.defaults().specs()
    with pytest.raises(GapscopeError) as info:
        resolve_thresholds(config=path)
    assert info.value.message == f"{path} has no [tool.gapscope.compare] table"
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ('[tool.gapscope.compare]\nfail = "gap_fraction:+0.02"\n', "fail must be a list of strings"),
        ("[tool.gapscope.compare]\nfail = [1]\n", "fail must be a list of strings"),
        ('[tool.gapscope.compare]\nfails = ["gap_fraction:+0.02"]\n', "unknown key 'fails' in [tool.gapscope.compare] (known: fail, scope, missing)"),
        ('[tool.gapscope.compare]\nscope = "ranges"\n', "scope: 'ranges' is not a scope (give some of range, device, stream"),
        ('[tool.gapscope.compare]\nscope = [1]\n', "scope must be scope names"),
        ('[tool.gapscope.compare]\nmissing = "error"\n', "missing: 'error' is not one of fail, warn, ignore"),
        ('[tool.gapscope.compare]\nmissing = false\n', "missing: False is not one of fail, warn, ignore"),
        ('[tool.gapscope.compare]\nfail = ["gap_frac:+0.02"]\n', "unknown metric 'gap_frac'"),
        ("[tool.gapscope.compare\nfail = []\n", "is not valid TOML"),
        ("[tool.gapscope]\ncompare = 3\n", "[tool.gapscope.compare] must be a table"),
    ],
)
def test_bad_config_is_one_clear_error(tmp_path: Path, body: str, fragment: str) -> None:
    path = _pyproject(tmp_path, body)
    with pytest.raises(GapscopeError) as info:
        resolve_thresholds(config=path)
    assert info.value.exit_code == 2
    assert fragment in info.value.message
    assert str(path) in info.value.message


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(GapscopeError) as info:
        resolve_thresholds(config=tmp_path / "nope.toml")
    assert info.value.message == f"config file not found: {tmp_path / 'nope.toml'}"


def test_settings_from_config_and_options(tmp_path: Path) -> None:
    path = _pyproject(tmp_path, '[tool.gapscope.compare]\nfail = ["kernels:off"]\nscope = ["device", "range"]\n'
                                'missing = "warn"\n')
    s = resolve_settings(config=path)
    assert (s.scope, s.missing) == (("range", "device"), "warn")
    assert "kernels:off" in s.thresholds.specs()
    s = resolve_settings(config=path, scope="stream", missing="IGNORE")
    assert (s.scope, s.missing) == (("stream",), "ignore")
    assert resolve_settings(config=path, scope="auto").scope is None
    plain = resolve_settings(search_dir=None)
    assert (plain.scope, plain.missing, plain.thresholds.specs()) == (None, "fail", ThresholdSet.defaults().specs())


@pytest.mark.parametrize(
    ("value", "expected"),
    [("range", ("range",)), ("stream,range", ("range", "stream")), (" Device , stream ", ("device", "stream")),
     (["range", "device", "stream"], ("range", "device", "stream")), ("auto", None)],
)
def test_parse_scope(value: object, expected: tuple[str, ...] | None) -> None:
    assert parse_scope(value) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["", "ranges", "range,launch", "auto,range"])
def test_parse_scope_refuses_unknown_names(value: str) -> None:
    with pytest.raises(GapscopeError) as info:
        parse_scope(value)
    assert info.value.exit_code == 2 and info.value.message.startswith("--scope: ")
