"""GPU tests of the CUDA Graph cases under `gapscope run` (docs/cases.md): a real capture of every
single-GPU case, and multi-gpu as the machine allows (two GPUs: recorded and measured; one GPU:
refused with exit 2). They carry the `gpu` marker, deselected by default; on the GPU machine:

    python3 -m pytest -m gpu tests/gpu -q
"""

from __future__ import annotations

import pytest

from gapscope.errors import GapscopeError
from gapscope.run.runner import RunOptions, run
from gapscope.run.workload.ladder import pad

pytestmark = pytest.mark.gpu

SINGLE = ["default-stream", "graph-pool", "graph-update", "piecewise", "instantiate"]
STEPS, LAYERS, N = 8, 4, 40
LADDER = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]


@pytest.fixture(scope="module")
def cases_run(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("cases")
    opts = RunOptions(out_dir=out, kernel_us=[10.0], kernels=N, paths=SINGLE, steps=STEPS,
                      layers=LAYERS, pool_sizes=LADDER)
    return run(opts, progress=False)


def rows(result, case: str, key: str) -> dict:
    return {r[key]: r for r in result.cases[case]["rows"]}


def test_every_case_has_its_figures(cases_run) -> None:
    assert not [w for w in cases_run.warnings if "case figures failed" in w]
    assert list(cases_run.cases) == SINGLE
    assert list(cases_run.host_timed) == SINGLE and list(cases_run.host_timed_traced) == SINGLE


def test_default_stream_serializes_only_on_the_legacy_stream(cases_run) -> None:
    by = rows(cases_run, "default-stream", "variant")
    for r in by.values():
        assert (r["kernels"], r["copies"]) == (STEPS, STEPS)
    assert by["legacy"]["overlap_share"] < 0.1
    assert by["nonblocking"]["overlap_share"] > 0.5
    assert by["user-streams"]["overlap_share"] > 0.5


def test_graph_pool_pads_exactly_the_ladder_says(cases_run) -> None:
    info = cases_run.host_timed["graph-pool"]["info"]
    by = rows(cases_run, "graph-pool", "variant")
    requests = info["requests"]
    assert by["exact"]["work_tokens"] == by["eager"]["work_tokens"] == sum(requests) * LAYERS
    assert by["padded"]["work_tokens"] == sum(pad(r, LADDER) for r in requests) * LAYERS
    assert by["eager"]["graph_launches"] == 0 and by["eager"]["kernel_launches"] == STEPS * LAYERS
    assert by["padded"]["graph_launches"] == by["exact"]["graph_launches"] == STEPS
    assert cases_run.cases["graph-pool"]["summary"]["graphs_captured"] == len(LADDER)
    assert cases_run.cases["graph-pool"]["summary"]["padded_speedup_vs_eager"] > 1.0


def test_graph_updates_take_effect_and_set_params_is_cheapest(cases_run) -> None:
    by = rows(cases_run, "graph-update", "method")
    for method, r in by.items():
        assert r["steps"] == STEPS and r["kernels"] == STEPS * LAYERS
        assert r["steps_as_expected"] == STEPS, method  # every replay ran the new argument
        assert r["updates"] == (0 if method == "eager" else STEPS)
    assert by["set-params"]["host_update_us"] < by["recapture"]["host_update_us"]


def test_piecewise_attention_changes_shape_outside_the_pieces(cases_run) -> None:
    by = rows(cases_run, "piecewise", "variant")
    assert by["eager"]["attention_grids"] == by["pieces"]["attention_grids"] == STEPS
    assert by["full"]["attention_grids"] == 1
    assert by["pieces"]["graph_launches"] == STEPS * (LAYERS + 1)
    assert by["full"]["graph_launches"] == STEPS
    for r in by.values():
        assert r["kernels"] == STEPS * LAYERS * 5 and r["steps"] == STEPS
    assert by["full"]["span_ns"] < by["eager"]["span_ns"]


def test_instantiate_phases_and_break_even(cases_run) -> None:
    by = rows(cases_run, "instantiate", "phase")
    assert by["capture"]["ranges"] == by["instantiate"]["ranges"] == 3
    assert by["replay"]["kernels_per_run"] == by["eager"]["kernels_per_run"] == N
    assert by["replay"]["gpu_span_ns"] < by["eager"]["gpu_span_ns"]
    summary = cases_run.cases["instantiate"]["summary"]
    # Without the profiler a replay of N kernels beats N eager launches, so a graph pays off
    # after some runs; under nsys's node-level tracing at k=10 us it may not (then None).
    assert summary["host_saving_per_run_us"] > 0 and summary["host_break_even_runs"] >= 1
    if summary["saving_per_run_ns"] > 0:
        assert summary["break_even_runs"] >= 1
    else:
        assert summary["break_even_runs"] is None


def test_multi_gpu_as_the_machine_allows(tmp_path) -> None:
    import cupy

    opts = RunOptions(out_dir=tmp_path / "mg", kernel_us=[20.0], paths=["multi-gpu"], steps=STEPS,
                      layers=LAYERS)
    if cupy.cuda.runtime.getDeviceCount() < 2:
        with pytest.raises(GapscopeError, match="multi-gpu needs two GPUs") as info:
            run(opts, progress=False)
        assert info.value.exit_code == 2
        return
    res = run(opts, progress=False)
    devs = [(r["variant"], r["device"], r["kernels"], r["waits"])
            for r in res.cases["multi-gpu"]["rows"]]
    assert devs == [("one-way", 0, STEPS * LAYERS, 0), ("one-way", 1, STEPS * LAYERS, STEPS),
                    ("ping-pong", 0, STEPS * LAYERS, STEPS - 1),
                    ("ping-pong", 1, STEPS * LAYERS, STEPS)]
    s = res.cases["multi-gpu"]["summary"]
    assert s["one-way"]["hops"] == STEPS and s["ping-pong"]["hops"] == 2 * STEPS - 1
    assert s["ping-pong"]["cross_wait_ns"] > s["one-way"]["cross_wait_ns"]
