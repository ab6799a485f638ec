"""CPU-side tests of the workload: calibration math, launch paths and timing on a fake CuPy."""

from __future__ import annotations

import json
import sys

import pytest

from gapscope.errors import GapscopeError
from gapscope.run.workload import range_name
from gapscope.run.workload import kernels as K
from gapscope.run.workload import paths as P
import fakecupy  # tests/ is on sys.path under pytest's default rootdir import mode


@pytest.fixture()
def fake_cupy(monkeypatch: pytest.MonkeyPatch):
    cp = fakecupy.install(monkeypatch)
    monkeypatch.setattr(P, "_NVTX", None)
    return cp


# ---------------------------------------------------------------- pure math


def test_fit_line_exact() -> None:
    assert K.fit_line([0, 1000], [1.5, 3.5]) == (1.5, 0.002)
    # three points on t = 2 + 0.5 w, least squares returns the line itself
    assert K.fit_line([2, 4, 6], [3.0, 4.0, 5.0]) == (2.0, 0.5)


def test_fit_line_rejects_degenerate_input() -> None:
    with pytest.raises(ValueError):
        K.fit_line([5], [1.0])
    with pytest.raises(ValueError):
        K.fit_line([5, 5], [1.0, 2.0])


def test_solve_work_rounds_and_clamps() -> None:
    assert K.solve_work(1.5, 0.002, 3.5) == 1000
    assert K.solve_work(1.5, 0.002, 2.0005) == 250  # 250.25 rounds down
    assert K.solve_work(1.5, 0.002, 1.0) == 0  # below the floor: no work at all
    with pytest.raises(ValueError):
        K.solve_work(1.0, 0.0, 2.0)


def test_split_elements_stays_within_capacity() -> None:
    assert K.split_elements(1000, capacity=4096) == (1000, 1)
    assert K.split_elements(4097, capacity=4096) == (2049, 2)
    assert K.split_elements(12288, capacity=4096) == (4096, 3)
    assert K.split_elements(0, capacity=4096) == (1, 1)


def test_blocker_outlasts_the_queue() -> None:
    # 200 launches at 20 us each plus 2000 us margin = 6000 us; at 0.002 us/iter -> 3,000,000
    assert K.blocker_work(0.002, 200) == 3_000_000


def test_range_names() -> None:
    assert range_name("eager", None) == "eager"
    assert range_name("graph", 2.0) == "graph/k=2us"
    assert range_name("multistream", 0.5) == "multistream/k=0.5us"


def test_steps_and_path_checks() -> None:
    assert P.steps_for(300, 4) == 75
    assert P.steps_for(301, 4) == 76
    assert P.check_paths(["graph", "eager"]) == ["graph", "eager"]
    with pytest.raises(GapscopeError, match="unknown path"):
        P.check_paths(["eager", "cudagraph"])
    with pytest.raises(GapscopeError, match="--streams"):
        P.steps_for(10, 0)


def test_plan_round_trip() -> None:
    plan = K.KernelPlan("spin", 2.0, 1000, 132, 128, measured_us=2.01, intercept_us=1.0,
                        slope_us=0.001)
    calib = K.Calibration(0, "NVIDIA H200", 132, 1.1, 5.5, [plan])
    again = K.Calibration.from_dict(json.loads(json.dumps(calib.to_dict())))
    assert again == calib


def test_calibration_warnings() -> None:
    plans = [K.KernelPlan("spin", 1.0, 0, 132, 128, measured_us=2.01),
             K.KernelPlan("spin", 2.0, 0, 132, 128, measured_us=2.03),
             K.KernelPlan("memory", 10.0, 4646663, 528, 256, measured_us=11.19),
             K.KernelPlan("memory", 100.0, 21851512, 528, 256, measured_us=100.48),
             K.KernelPlan("empty", None, 0, 1, 32, measured_us=1.3)]
    calib = K.Calibration(0, "NVIDIA H200", 132, 1.35, 5.85, plans)
    assert K.calibration_warnings(calib) == [
        "k=1us is below the spin kernel's back-to-back floor: it runs at 2.01 us",
        "k=10us: the memory kernel's calibration reached 11.19 us"]


# ---------------------------------------------------------------- missing CuPy / GPU


def test_missing_cupy_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(GapscopeError, match="CuPy is not installed") as info:
        K.require_cupy()
    assert info.value.exit_code == 2


def test_no_gpu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    fakecupy.install(monkeypatch, devices=0)
    with pytest.raises(GapscopeError, match="no CUDA GPU"):
        K.require_cupy()


def test_workload_cli_without_cupy_exits_2(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from gapscope.run.workload.__main__ import main

    monkeypatch.setitem(sys.modules, "cupy", None)
    assert main(["--kernel-us", "2", "--no-trace"]) == 2
    assert "CuPy is not installed" in capsys.readouterr().err


# ---------------------------------------------------------------- paths on the fake


def _launches(stream: int | None = None) -> list[tuple]:
    return [e for e in fakecupy.LOG if e[0] == "launch" and (stream is None or e[1] == stream)]


def test_calibration_on_fake_device_is_exact(fake_cupy) -> None:
    calib = K.calibrate([2.0, 50.0], "spin")
    # fake spin kernel: t = 1 + 0.001 * iters (us), so 2 us -> 1000 iters, 50 us -> 49000
    assert [p.work for p in calib.plans] == [1000, 49000]
    assert [p.measured_us for p in calib.plans] == [pytest.approx(2.0), pytest.approx(50.0)]
    assert calib.floor_us == pytest.approx(1.0)
    assert calib.gpu == "Fake GPU" and calib.sm_count == 4
    assert calib.plans[0].grid == 4 and calib.plans[0].block == K.SPIN_BLOCK


def test_calibration_refines_a_curved_kernel(fake_cupy, monkeypatch) -> None:
    # a memory kernel whose time bends upwards: t = 2 + 1e-6 e + 1e-13 e^2 for e elements
    monkeypatch.setitem(fakecupy.KERNEL_US, "gapscope_memory",
                        lambda a: 2 + 1e-6 * int(a[2]) * int(a[3]) + 1e-13 * (int(a[2]) * int(a[3])) ** 2)
    plan = K.calibrate([50.0], "memory").plans[0]
    assert abs(plan.measured_us - 50.0) <= 0.02 * 50.0
    assert plan.measured_us == pytest.approx(2 + 1e-6 * plan.work + 1e-13 * plan.work ** 2, rel=1e-6)


def test_eager_path_launches_n_on_one_stream(fake_cupy) -> None:
    ks = K.KernelSet()
    wl = P.Workload(ks, K.KernelPlan("spin", 2.0, 1000, 4, 128), n_kernels=10, n_streams=3)
    fakecupy.LOG.clear()
    wl.eager()
    assert len(_launches()) == 10
    assert len(_launches(wl.stream.ptr)) == 10


def test_multistream_path_forks_and_joins_each_step(fake_cupy) -> None:
    ks = K.KernelSet()
    wl = P.Workload(ks, K.KernelPlan("spin", 2.0, 1000, 4, 128), n_kernels=10, n_streams=3)
    fakecupy.LOG.clear()
    wl.multistream()
    assert wl.steps == 4
    per_stream = [len(_launches(s.ptr)) for s in wl.streams]
    assert per_stream == [4, 3, 3]  # 10 kernels, 3 per step, the last step only 1 wide
    records = [e for e in fakecupy.LOG if e[0] == "record"]
    waits = [e for e in fakecupy.LOG if e[0] == "wait"]
    # each step: 1 fork record + 2 join records; 2 waits on the fork + 2 joins waited by stream 0
    assert len(records) == 4 * 3 and len(waits) == 4 * 4
    assert sum(1 for e in waits if e[1] == wl.stream.ptr) == 4 * 2


def test_graph_path_captures_once_and_replays(fake_cupy) -> None:
    ks = K.KernelSet()
    wl = P.Workload(ks, K.KernelPlan("spin", 2.0, 1000, 4, 128), n_kernels=7, n_streams=2)
    fakecupy.LOG.clear()
    wl.graph()
    wl.graph()
    assert _launches() == []  # no eager launch: everything went into the graph
    assert [e for e in fakecupy.LOG if e[0] == "graph_launch"] == [
        ("graph_launch", wl.stream.ptr, 7), ("graph_launch", wl.stream.ptr, 7)]


def test_run_traced_names_ranges_and_keeps_warm_up_outside(fake_cupy) -> None:
    ks = K.KernelSet()
    plans = [K.KernelPlan("spin", 2.0, 1000, 4, 128), K.KernelPlan("spin", 50.0, 49000, 4, 128)]
    wls = [(p.target_us, P.Workload(ks, p, 5, 2)) for p in plans]
    fakecupy.LOG.clear()
    names = P.run_traced(wls, ["eager", "graph"], repeat=2)
    assert names == ["eager/k=2us", "graph/k=2us", "eager/k=50us", "graph/k=50us"] * 2
    pushes = [e[1] for e in fakecupy.LOG if e[0] == "push"]
    assert pushes == names
    first_push = next(i for i, e in enumerate(fakecupy.LOG) if e[0] == "push")
    warm = fakecupy.LOG[:first_push]
    assert sum(1 for e in warm if e[0] == "launch") == 10  # one eager run of 5 kernels each
    assert sum(1 for e in warm if e[0] == "graph_launch") == 2


def test_untraced_timing_per_kernel(fake_cupy) -> None:
    from gapscope.run.workload.timing import time_paths

    ks = K.KernelSet()
    wl = P.Workload(ks, K.KernelPlan("spin", 2.0, 1000, 4, 128), n_kernels=8, n_streams=2)
    timings = time_paths([(None, wl)], ["eager", "graph"], repeat=3)
    assert [(t.path, t.kernel_us) for t in timings] == [("eager", None), ("graph", None)]
    for t in timings:  # fake kernel of 1000 iters = 2.0 us, no gaps on the fake GPU
        assert t.per_kernel_us == [pytest.approx(2.0)] * 3
        assert t.median_us == pytest.approx(2.0) and t.spread_us == pytest.approx(0.0)


def test_workload_main_writes_plan_summary_and_timing(fake_cupy, tmp_path) -> None:
    from gapscope.run.workload.__main__ import main

    rc = main(["--kernel-us", "2,50", "--kernels", "6", "--streams", "2", "--paths",
               "eager,multistream", "--save-plan", str(tmp_path / "plan.json"),
               "--timing", str(tmp_path / "timing.json"), "--summary", str(tmp_path / "s.json"),
               "--quiet"])
    assert rc == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert [p["work"] for p in plan["plans"]] == [1000, 49000]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["ranges"] == ["eager/k=2us", "multistream/k=2us",
                                 "eager/k=50us", "multistream/k=50us"]
    timing = json.loads((tmp_path / "timing.json").read_text())
    # the fake GPU overlaps streams fully: 2 streams halve the time per kernel, and the stop
    # event on stream 0 still waits for the side stream's last kernel through the join
    assert [round(t["median_us"], 6) for t in timing] == [2.0, 1.0, 50.0, 25.0]


# ------------------------------------------- the CUDA Graph cases of docs/cases.md (fake GPU)

from gapscope.run.workload import cases as C  # noqa: E402
from gapscope.run.workload import ladder as L  # noqa: E402


def test_vllm_ladder_and_padding() -> None:
    ladder = L.vllm_ladder()
    assert len(ladder) == 67 and ladder[:5] == [1, 2, 4, 8, 16] and ladder[-1] == 512
    assert [L.pad(n, ladder) for n in (1, 3, 5, 8, 9, 505, 512, 513)] == \
        [1, 4, 8, 8, 16, 512, 512, None]
    assert L.parse_sizes("vllm") == ladder and L.parse_sizes("vllm:16") == [1, 2, 4, 8, 16]
    assert L.parse_sizes("8, 1,4,4") == [1, 4, 8]
    for bad in ("", "0,4", "a,b", "vllm:x", "vllm:0", "5000"):
        with pytest.raises(GapscopeError, match="--pool-sizes"):
            L.parse_sizes(bad)


def test_request_sizes_are_seeded_and_within_the_ladder() -> None:
    a = L.request_sizes(200, 512, seed=3)
    assert a == L.request_sizes(200, 512, seed=3) != L.request_sizes(200, 512, seed=4)
    assert min(a) >= 1 and max(a) <= 512
    assert sum(n <= 22 for n in a) > 60  # log-uniform: a third or more below sqrt(513)
    with pytest.raises(GapscopeError):
        L.request_sizes(0, 512)


def test_case_helpers() -> None:
    assert C.piece_layout(3) == [(0, 2), (2, 2), (2, 2), (2, 0)]
    assert C.alternate_iters(1384) == 2768 and C.alternate_iters(2) == 1000
    # 1 MiB in 11 us, 8 MiB in 81 us: 1 us + 10 us per MiB, so 21 us is 2 MiB
    assert C.copy_bytes(21.0, [(1 << 20, 11.0), (8 << 20, 81.0)]) == 2 << 20
    assert C.copy_bytes(0.5, [(1 << 20, 11.0), (8 << 20, 81.0)]) == 4096  # at least a page
    s = C.summarize_ns([3000, 1000, 2000, 10000])
    assert (s["count"], s["median_us"], s["p90_us"], s["min_us"], s["max_us"]) == (4, 2.5, 10.0, 1.0, 10.0)
    assert s["values_us"] == [3.0, 1.0, 2.0, 10.0] and C.summarize_ns([]) == {"count": 0}
    plan = K.KernelPlan("spin", 10.0, 4000, 132, 128, measured_us=10.0, slope_us=0.0025)
    assert C.token_iters(plan, 512) == 8  # 10 us / 512 tokens / 0.0025 us per iteration


def _cases(fake, names, cfg=None, plan_us=5.0):
    ks = K.KernelSet()
    calib = K.calibrate([plan_us], "spin", kernels=ks)
    fakecupy.LOG.clear()
    return C.run_cases(ks, calib.plans, names, cfg or C.CaseConfig(steps=4, layers=3, kernels=10,
                                                                  pool_sizes=[1, 2, 4, 8, 16]))


def _ranged(name: str) -> list[tuple]:
    """LOG entries between the push of `name` and its pop (first instance)."""
    start = next(i for i, e in enumerate(fakecupy.LOG) if e == ("push", name))
    depth, out = 0, []
    for e in fakecupy.LOG[start + 1:]:
        if e[0] == "push":
            depth += 1
        elif e[0] == "pop":
            if depth == 0:
                return out
            depth -= 1
        out.append(e)
    raise AssertionError(f"range {name} never closed")


def test_default_stream_case_streams(fake_cupy) -> None:
    out = _cases(fake_cupy, ["default-stream"])
    assert out["default-stream"]["info"]["pairs"] == 4
    # fake copy: 1 us + 10 us/MB; the 5 us kernel wants (5 - 1) / 1e-5 = 400,000 bytes
    assert out["default-stream"]["info"]["copy_bytes"] == 400000
    legacy = _ranged("default-stream/legacy")
    kernels = [e for e in legacy if e[0] == "launch"]
    copies = [e for e in legacy if e[0] == "memcpy"]
    assert len(kernels) == len(copies) == 4
    assert {e[1] for e in kernels} == {0}  # the legacy default stream
    copy_stream = fakecupy.Stream.by_ptr[copies[0][1]]
    assert not copy_stream.non_blocking and copies[0][2:] == (400000, 1)
    nb = _ranged("default-stream/nonblocking")
    assert all(fakecupy.Stream.by_ptr[e[1]].non_blocking for e in nb if e[0] in ("launch", "memcpy"))
    assert set(out["default-stream"]["host"]) == {"legacy", "user-streams", "nonblocking"}


def test_graph_pool_case_pads_requests_to_the_ladder(fake_cupy) -> None:
    cfg = C.CaseConfig(steps=6, layers=3, pool_sizes=[1, 2, 4, 8, 16], seed=0)
    out = _cases(fake_cupy, ["graph-pool"], cfg)
    info = out["graph-pool"]["info"]
    assert info["requests"] == L.request_sizes(6, 16, 0) == [10, 8, 3, 2, 4, 3]
    assert info["padded"] == [16, 8, 4, 2, 4, 4]
    # fake token kernel: 1 + 0.001 * iters * tokens us; 16 tokens at 5 us -> 250 iterations
    assert (info["iters_per_token"], info["largest_kernel_us"]) == (250, 5.0)
    eager = [e for e in _ranged("graph-pool/eager") if e[0] == "launch"]
    assert [e[5] // 4 for e in eager] == [n for n in info["requests"] for _ in range(3)]
    padded = [e for e in _ranged("graph-pool/padded") if e[0] == "graph_launch"]
    assert [e[2] for e in padded] == [3] * 6  # one 3-kernel graph per request
    assert out["graph-pool"]["warnings"] == []
    capture = [e for e in fakecupy.LOG if e == ("push", "graph-pool/capture")]
    assert len(capture) == 1 and set(out["graph-pool"]["host"]) == {"capture", "eager", "exact", "padded"}


@pytest.mark.parametrize("driver_nodes, runtime_set, api", [
    (True, False, "driver"), (True, True, "driver+runtime"), (False, False, "runtime")])
def test_graph_update_case_changes_the_argument_every_replay(monkeypatch, driver_nodes, runtime_set,
                                                             api) -> None:
    fakecupy.install(monkeypatch, driver_nodes=driver_nodes, runtime_set_cufunction=runtime_set)
    monkeypatch.setattr(P, "_NVTX", None)
    out = _cases(None, ["graph-update"])
    info = out["graph-update"]["info"]
    assert info["params_api"] == api and info["iters"] == [4000, 8000]
    for method in ("recapture", "exec-update", "set-params"):
        body = _ranged(f"graph-update/{method}")
        assert sum(e == ("push", f"graph-update/{method}/update") for e in body) == 4
        launches = [e for e in body if e[0] == "graph_launch"]
        assert len(launches) == 4 and all(e[2] == 3 for e in launches)
    sets = [e for e in _ranged("graph-update/set-params") if e[0] == "set_params"]
    assert [e[2][2] for e in sets] == [8000] * 3 + [4000] * 3 + [8000] * 3 + [4000] * 3
    updates = [e for e in _ranged("graph-update/exec-update") if e[0] == "exec_update"]
    assert len(updates) == 4
    host = out["graph-update"]["host"]
    assert host["set-params/update"]["count"] == 4 and host["eager/step"]["count"] == 4


def test_graph_update_replays_run_the_new_argument(fake_cupy) -> None:
    ks = K.KernelSet()
    plan = K.KernelPlan("spin", 5.0, 4000, 4, 128, measured_us=5.0, slope_us=0.001)
    case = C.GraphUpdateCase(ks, plan, C.CaseConfig(steps=4, layers=2))
    case.warm_up()
    case._fresh()
    s = case.stream
    for method in ("recapture", "exec-update", "set-params"):
        times = []
        for u in range(4):
            case.update(method, u)
            t0 = fakecupy._Clock.now[s.ptr]
            case.api.launch(case.state[method][1], s.ptr)
            times.append(fakecupy._Clock.now[s.ptr] - t0)
        assert times == [2 * 9.0, 2 * 5.0, 2 * 9.0, 2 * 5.0], method  # 1 + 0.001 * iters, x2


def test_piecewise_case_structure(fake_cupy) -> None:
    out = _cases(fake_cupy, ["piecewise"])
    info = out["piecewise"]["info"]
    assert info["pieces"] == 4 and info["attention_grids"] == [4, 7]
    pieces = _ranged("piecewise/pieces")
    graphs = [e for e in pieces if e[0] == "graph_launch"]
    attends = [e for e in pieces if e[0] == "launch"]
    assert len(graphs) == 4 * 4 and [g[2] for g in graphs[:4]] == [2, 4, 4, 2]
    assert [e[2] for e in attends] == ["gapscope_attend"] * 12
    assert [e[3] for e in attends] == [4, 4, 4, 5, 5, 5, 6, 6, 6, 7, 7, 7]  # grid grows per step
    full = _ranged("piecewise/full")
    assert [e[2] for e in full if e[0] == "graph_launch"] == [15] * 4 and \
        not [e for e in full if e[0] == "launch"]
    eager = [e for e in _ranged("piecewise/eager") if e[0] == "launch"]
    assert len(eager) == 4 * 3 * 5
    assert sum(e == ("push", "piecewise/eager/step") for e in fakecupy.LOG) == 4


def test_instantiate_case_phases(fake_cupy) -> None:
    out = _cases(fake_cupy, ["instantiate"], C.CaseConfig(steps=12, layers=3, kernels=10))
    pushes = [e[1] for e in fakecupy.LOG if e[0] == "push"]
    cycle = ["instantiate/capture", "instantiate/instantiate", "instantiate/first-launch"] + \
        ["instantiate/replay"] * 3
    assert pushes == cycle * 3 + ["instantiate/eager"] * 3
    assert [e for e in _ranged("instantiate/capture") if e[0] == "end_capture"][0][2] == 10
    host = out["instantiate"]["host"]
    assert {k: v["count"] for k, v in host.items()} == {
        "capture": 3, "instantiate": 3, "first-launch": 3, "replay": 9, "eager": 3}


def test_multi_gpu_case_needs_two_gpus(fake_cupy) -> None:
    with pytest.raises(GapscopeError, match="multi-gpu needs two GPUs.*has 1") as info:
        _cases(fake_cupy, ["multi-gpu"])
    assert info.value.exit_code == 2


def test_multi_gpu_case_waits_across_devices(monkeypatch) -> None:
    fakecupy.install(monkeypatch, devices=2)
    monkeypatch.setattr(P, "_NVTX", None)
    out = _cases(None, ["multi-gpu"])
    assert out["multi-gpu"]["info"]["devices"] == [0, 1]
    one = [e[0] for e in _ranged("multi-gpu/one-way") if e[0] in ("record", "wait")]
    assert one == ["record", "wait"] * 4
    ping = [e[0] for e in _ranged("multi-gpu/ping-pong") if e[0] in ("record", "wait")]
    assert ping == ["record", "wait", "record"] + ["wait", "record", "wait", "record"] * 3


def test_cases_want_spin_kernels(fake_cupy) -> None:
    ks = K.KernelSet()
    with pytest.raises(GapscopeError, match="--kind spin"):
        C.run_cases(ks, [K.KernelPlan("memory", 5.0, 1000, 4, 256)], ["piecewise"], C.CaseConfig())


def test_missing_cuda_bindings_is_a_clear_error(monkeypatch) -> None:
    fakecupy.install(monkeypatch, bindings=False)
    monkeypatch.setattr(P, "_NVTX", None)
    with pytest.raises(GapscopeError, match="needs cuda-bindings") as info:
        _cases(None, ["instantiate"])
    assert info.value.exit_code == 2
