"""Real PyTorch profiler traces from other stacks (issue 39), shipped in traces/thirdparty/
(MIT-licensed test data of AMD's TraceLens and Meta's Holistic Trace Analysis; provenance in
traces/README.md): AMD ROCm (MI300X, MI210, MI250), NVIDIA (H100, A100), metadata after
traceEvents, Unix-epoch timestamps, HTA's rank folders. Every figure is checked against an
independent computation from the JSON (stdlib json, exact decimals), and, where TraceLens's repo
holds its own figure, against that."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest

from clirun import gapscope
from gapscope.trace.cuda_api import (
    GRAPH_LAUNCH_CALLS, QUIET_CALLS, ROLE_GRAPH_LAUNCH, ROLE_LAUNCH, ROLE_OTHER, ROLE_SETUP, ROLE_SYNC, call_role,
)
from paths import TRACES

HERE = TRACES / "thirdparty"
TL = HERE / "tracelens"
HTA = HERE / "hta"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}

#: TraceLens's own idle share of each trace (its gpu_timeline.csv, idle_time percent / 100, in
#: the same TraceLens commit as the trace: traces/README.md).
TRACELENS_IDLE = {
    "sglang_Qwen3-8B_decode.json.gz": 0.979371124265182,
    "mi300_gaunernst_bert-small-uncased__1016001.json.gz": 0.8882290591065984,
    "h100_gaunernst_bert-small-uncased__1016001.json.gz": 0.9208164178547929,
    "mi210_gpu_only_trace.json.gz": 0.10638556749285605,
}
#: TraceLens's idle share of the two traces whose GPU work partly has no launching call in the
#: trace (launched before the profiler's window): TraceLens leaves that work out of its timeline.
TRACELENS_IDLE_LAUNCHED_ONLY = {
    "h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": 0.0856041478722671,
    "mi300_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": 0.10224175740219245,
}


def events(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh, parse_float=Decimal)["traceEvents"]


def ns(us: object) -> int:
    return int((Decimal(us) * 1000).to_integral_value(ROUND_HALF_EVEN))


def reference(path: Path, launched_only: bool = False) -> dict:
    """Span, busy (kernels and copies, as --count-memops), kernels of the one device with GPU
    work: a sort-and-merge of the JSON's own intervals (``launched_only``: of the GPU events
    whose correlation id a runtime or driver call of the trace carries, as TraceLens keeps them);
    ``unlaunched``: how many GPU events no call of the trace launched."""
    evs = events(path)
    gpu = [e for e in evs if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    calls = {e["args"].get("correlation") for e in evs if e.get("ph") == "X" and "args" in e
             and e.get("cat") in ("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver")}
    launched = [e for e in gpu if e["args"].get("correlation") in calls]
    unlaunched = len(gpu) - len(launched)
    if launched_only:
        gpu = launched
    devices = {e["args"]["device"] for e in gpu}
    assert len(devices) == 1, devices
    spans = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in gpu)
    busy, (lo, hi) = 0, spans[0]
    for s, e in spans[1:]:
        if s > hi:
            busy, lo, hi = busy + hi - lo, s, e
        else:
            hi = max(hi, e)
    busy += hi - lo
    span = max(e for _, e in spans) - spans[0][0]
    kernels = sum(1 for e in gpu if e["cat"] == "kernel" and not re.fullmatch(r"memcpy\d+_post", e["name"]))
    return {"device": devices.pop(), "span": span, "busy": busy, "kernels": kernels, "unlaunched": unlaunched}


def analyzed(path: Path, *extra: str) -> dict:
    proc = gapscope("analyze", str(path), "--format", "json", "--no-cache", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


SHIPPED = sorted([*TL.glob("*.json.gz"), *HTA.glob("*.json.gz")])


def test_the_shipped_third_party_traces_are_there():
    assert [p.name for p in SHIPPED] == [
        "benchmark_result_2869224_1695835535_trace.json.gz", "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "sampled_rank-0.json.gz", "sampled_rank-1.json.gz",
        "h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "h100_gaunernst_bert-small-uncased__1016001.json.gz",
        "mi210_gpu_only_trace.json.gz", "mi300_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
        "mi300_gaunernst_bert-small-uncased__1016001.json.gz", "sglang_Qwen3-8B_decode.json.gz"]
    assert (TL / "LICENSE").read_text().startswith("# MIT License")
    assert (HTA / "LICENSE").read_text().startswith("MIT License")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_device_figures_match_an_independent_merge(path):
    ref = reference(path)
    r = analyzed(path, "--count-memops")
    (dev,) = [d for d in r["devices"] if d["device"] == ref["device"]]
    assert (dev["gpu_span_ns"], dev["busy_ns"], dev["kernels"]) == (ref["span"], ref["busy"], ref["kernels"])
    assert dev["gap_fraction"] == pytest.approx(1 - ref["busy"] / ref["span"], abs=1e-12)
    if path.name in TRACELENS_IDLE:
        assert abs(dev["gap_fraction"] - TRACELENS_IDLE[path.name]) < 0.0005


@pytest.mark.parametrize("name", sorted(TRACELENS_IDLE_LAUNCHED_ONLY))
def test_tracelens_leaves_out_the_work_launched_before_the_window(name):
    """The two Qwen1.5-0.5B traces (H100, MI300X) start with GPU work launched before the
    profiler's window: no call of the trace carries its correlation id. gapscope counts that work
    (it ran on the GPU inside the window) and warns; TraceLens leaves it out of its timeline, so
    its idle share is that of the launched work alone, which the merge reproduces to 1e-6 (TraceLens
    sums floating microseconds, the merge whole nanoseconds). The
    two figures differ by that work only (0.0049 and 0.0168)."""
    path = TL / name
    everything, launched = reference(path), reference(path, launched_only=True)
    assert 1 - launched["busy"] / launched["span"] == pytest.approx(TRACELENS_IDLE_LAUNCHED_ONLY[name], abs=1e-6)
    proc = gapscope("analyze", str(path), "--format", "json", "--no-cache", "--count-memops")
    (dev,) = json.loads(proc.stdout)["devices"]
    assert dev["gap_fraction"] == pytest.approx(1 - everything["busy"] / everything["span"], abs=1e-12)
    assert abs(dev["gap_fraction"] - TRACELENS_IDLE_LAUNCHED_ONLY[name]) > 0.004
    assert f"{everything['unlaunched']} GPU activities have no launching API call in the trace" in proc.stderr


def test_rocm_gpu_vendor_and_model_are_named():
    """The model from deviceProperties (after traceEvents in the Hugging Face traces), the
    vendor from the HIP runtime's fields."""
    r = analyzed(TL / "mi300_gaunernst_bert-small-uncased__1016001.json.gz")
    assert r["trace"]["gpus"] == {"0": "AMD Instinct MI300X VF"} and r["trace"]["export_schema"] == "1"
    r = analyzed(HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert set(r["trace"]["gpus"].values()) == {"AMD Radeon Graphics"}
    r = analyzed(HTA / "sampled_rank-0.json.gz")  # no deviceProperties: the vendor from the CUDA calls
    assert r["trace"]["gpus"] == {"0": "NVIDIA GPU (model not recorded)"}


def test_hip_calls_have_their_cuda_twins_roles():
    for name in ("hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel", "hipExtLaunchKernel",
                 "hipMemcpyAsync", "hipMemsetAsync"):
        assert call_role(name) == ROLE_LAUNCH, name
    assert call_role("hipGraphLaunch") == call_role("cudaGraphLaunch") == ROLE_GRAPH_LAUNCH
    for name in ("hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy",
                 "hipMemcpyWithStream"):
        assert call_role(name) == ROLE_SYNC, name
    for name in ("hipMalloc", "hipFree", "hipModuleLoadData", "hipGraphInstantiate", "hipStreamCreate"):
        assert call_role(name) == ROLE_SETUP, name
    assert "hipStreamWaitEvent" in QUIET_CALLS and call_role("hipStreamWaitEvent") == ROLE_OTHER
    assert "hipGraphLaunch" in GRAPH_LAUNCH_CALLS


def test_the_sglang_mi300x_decode_reads_as_a_graph_replay():
    """TraceLens's SGLang decode on an MI300X: the kernels of its one hipGraphLaunch are graph
    work, and every HIP call that launched GPU work is in the launch table with its count."""
    path = TL / "sglang_Qwen3-8B_decode.json.gz"
    ev = events(path)
    calls = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"]
    gpu_corr = Counter(e["args"].get("correlation") for e in ev if e.get("ph") == "X" and e.get("cat") in GPU_CATS)
    graph = [c["args"]["correlation"] for c in calls if c["name"] == "hipGraphLaunch"]
    launched = Counter(c["name"] for c in calls if gpu_corr[c["args"].get("correlation")])
    r = analyzed(path, "--count-memops")
    dev = r["devices"][0]
    assert (dev["graph_replays"], dev["graph_kernels"]) == (len(graph), sum(gpu_corr[c] for c in graph)) == (1, 544)
    assert {x["api"]: x["calls"] for x in r["launch"]} == dict(launched)
    # The replayed range reads as one (it read "launch-bound: graphs pay", ceiling 47x), and its
    # 463 ms gap is not launch time: resolve_future_token_ids_kernel's hipLaunchKernel returned
    # 10 us after a hipStreamWaitEvent and the kernel started 463 ms later (the trace has no
    # cuda_sync events to show the wait): queued, a dependency (docs/metrics.md, rule 4).
    (rng,) = [x for x in r["by_name"] if x["name"].startswith("execute_32")]
    assert (rng["verdict"], rng["reading"]) == ("graph_replay", "graphs: device turnaround")
    (kernel,) = [e for e in ev if e.get("cat") == "kernel" and "resolve_future_token_ids_kernel" in e["name"]]
    (call,) = [c for c in calls if c["args"]["correlation"] == kernel["args"]["correlation"]]
    queued_us = float(kernel["ts"]) - float(call["ts"]) - float(call["dur"])
    assert queued_us > 463_000
    top = r["top_gaps"][0]
    assert (top["category"], top["gap_ns"] > 463_000_000, top["after"]) == ("dependency", True,
                                                                           "resolve_future_token_ids_kernel")


def test_hta_rank_folder_is_read_as_ranks(tmp_path):
    """HTA's layout (rank-N.json.gz) and TensorBoard's (worker.pt.trace.json.gz) in one folder
    with an unrelated JSON: the two traces are the ranks, each with its own device."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(HTA / "sampled_rank-0.json.gz", run / "rank-0.json.gz")
    shutil.copy(HTA / "sampled_rank-1.json.gz", run / "worker1_4242.1682725897000.pt.trace.json.gz")
    (run / "notes.json").write_text('{"not": "a trace"}')
    proc = gapscope("analyze", str(run), "--format", "json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    files = json.loads(proc.stdout)["files"]
    assert [(f["name"], f["error"], f["gpus"]) for f in files] == [
        ("rank-0.json.gz", None, {"0": "NVIDIA GPU (model not recorded)"}),
        ("worker1_4242.1682725897000.pt.trace.json.gz", None, {"1": "NVIDIA GPU (model not recorded)"})]


@pytest.mark.parametrize("path", sorted(TL.glob("*.json.gz")) + sorted(HTA.glob("*.json.gz")),
                         ids=lambda p: p.name)
def test_python_tracing_is_named_where_the_trace_holds_it(path: Path) -> None:
    """A trace recorded with the profiler's Python tracer (``python_function`` events: with_stack)
    is warned of with their count, and one recorded with shapes (``Input Dims`` in its operators'
    args: record_shapes) is warned of too, since the prediction's torch.profiler cost leaves both
    out (docs/metrics.md); the counts of the operators and kernel launch calls the prediction
    reads are the JSON's, and so is the count of its other CUDA calls (neither a kernel nor a graph
    launch), each of which costs the profiler too."""
    from gapscope.analysis import analyze
    from gapscope.trace.handle import open_trace

    cats = Counter(e.get("cat") for e in events(path))
    warnings = analyze(path).warnings
    warned = [w for w in warnings if "python_function events" in w]
    n = cats["python_function"]
    assert warned == ([f"{n:,} python_function events: the profiler traced Python (with_stack=True), whose "
                       "cost (0.1-0.9 us an event, measured) the predicted untraced time does not take off "
                       "(its torch.profiler calibration is without it), so the predicted graph speedups may "
                       "be high; see docs/metrics.md"] if n else [])
    shapes = any("Input Dims" in e.get("args", {}) for e in events(path) if e.get("cat") == "cpu_op")
    assert [w for w in warnings if "record_shapes" in w] == (
        ["the profiler recorded operator shapes (record_shapes=True: cpu_op events carry Input Dims), which "
         "adds to its cost (0.1-0.7 us an operator, measured) beyond what the predicted untraced time takes "
         "off (its torch.profiler calibration is without them), so the predicted graph speedups may be high; "
         "see docs/metrics.md"]
        if shapes else [])
    kernel_launches = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                       "hipLaunchKernel", "hipLaunchKernelExC", "hipExtLaunchKernel", "hipModuleLaunchKernel",
                       "hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel", "hipDrvLaunchKernelEx"}
    launches = sum(1 for e in events(path) if e.get("cat") in ("cuda_runtime", "cuda_driver")
                   and e.get("name") in kernel_launches)
    graph_launches = {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}
    others = sum(1 for e in events(path) if e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime", "Driver")
                 and e.get("name") not in kernel_launches | graph_launches)
    with open_trace(path) as trace:
        meta = trace.frames(syncs=True, all_calls=False).meta
    assert (meta.operators, meta.launch_calls, meta.other_calls) == (cats["cpu_op"], launches, others)


def test_rocm_calls_with_a_text_stream_are_read() -> None:
    """ROCm's Kineto writes a HIP call's ``args.stream`` as text (``"0x0"``): the calls are read
    (they were left out once, and with them every kernel's launch), so each range holds the GPU
    work its thread launched inside it, counted here from the JSON by correlation id."""
    from gapscope.analysis import analyze

    path = HTA / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    evs = events(path)
    assert any(e.get("cat") == "cuda_runtime" and isinstance(e.get("args", {}).get("stream"), str) for e in evs)
    result = analyze(path)
    assert not [w for w in result.warnings if "left out" in w or "no launching API call" in w]
    kernels = Counter(e["args"]["correlation"] for e in evs if e.get("cat") == "kernel")
    for row in result.ranges:
        (rng,) = [e for e in evs if e.get("cat") == "user_annotation" and e["name"] == row["name"]]
        lo, hi = ns(rng["ts"]), ns(rng["ts"]) + ns(rng["dur"])
        calls = [e for e in evs if e.get("cat") == "cuda_runtime" and e["tid"] == rng["tid"]
                 and lo <= ns(e["ts"]) <= hi]
        assert row["kernels"] == sum(kernels[c["args"]["correlation"]] for c in calls)
    assert sum(r["kernels"] for r in result.ranges) == 8
