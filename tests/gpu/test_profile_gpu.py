"""GPU tests of `gapscope profile`: real programs (traces/recipes) recorded end to end, under
nsys and under --tracer torch, as a user runs them (`python -m gapscope profile ... -- python
PROGRAM`), asserting what must hold on any run: the program's exit status, which ranges the
report has, kernels per range, and the readings (launch-bound eager loops, a compile warm-up that
is a host stall, never "graphs pay" on a graph replay).

They need a CUDA GPU, nsys on PATH, and torch, transformers and jax in the interpreter that runs
pytest (it runs the programs too); they carry the `gpu` marker, which the default run deselects.
On the GPU machine, from the repository root:

    source .devkit/setup.sh && GAPSCOPE_GPU_OUT=/tmp/gs-profile PYTHONPATH=$PWD python3 -m pytest -m gpu tests/gpu/test_profile_gpu.py -x

Each recording's output folder (its .nsys-rep or profiler trace, export, profile.json with the
exact commands, environment.json) goes to $GAPSCOPE_GPU_OUT/<test> (default: pytest's temporary
folder), with $GAPSCOPE_GPU_OUT/provenance.txt naming the versions, so they can be brought back
into traces/. Every program is small: each test runs in well under two minutes.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "traces" / "recipes"
PY = sys.executable
#: Readings that say "CUDA Graphs pay": never right for a graph replay.
GRAPHS_PAY = {"launch_bound", "host_bound"}
#: A recording's time limit (the slowest, the Hugging Face program, compiles for about 20 s).
LIMIT_S = 150


def verdict(row: dict) -> str:
    """The verdict code of a result row (docs/metrics.md, "Verdicts")."""
    return row["verdict"]


@pytest.fixture(scope="module")
def out_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = Path(os.environ.get("GAPSCOPE_GPU_OUT") or tmp_path_factory.mktemp("profile"))
    root.mkdir(parents=True, exist_ok=True)
    yield root
    _provenance(root)


def _provenance(root: Path) -> None:
    """What recorded the folders under ``root``: versions and each folder's commands."""
    from importlib import metadata

    lines = [f"python {sys.version.split()[0]} at {PY}"]
    for dist in ("torch", "transformers", "jax", "jaxlib", "nvtx"):
        try:
            lines.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            lines.append(f"{dist}: not installed")
    for saved in sorted(root.glob("*/profile.json")):
        data = json.loads(saved.read_text())
        lines += [f"\n{saved.parent.name}: program exit {data['program_exit_code']}, "
                  f"environment {json.dumps(data['environment'])}", *data["command_lines"]]
    (root / "provenance.txt").write_text("\n".join(lines) + "\n")


def record(out_root: Path, name: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """`gapscope profile -o OUT/name ARGS` as a user runs it; its profile.json and result.json."""
    out = out_root / name
    proc = subprocess.Popen([PY, "-m", "gapscope", "profile", "-q", "--force", "-o", str(out), *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                     [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
                                 "HF_HUB_OFFLINE": "1",
                                 "TRANSFORMERS_OFFLINE": "1", **(env or {})})
    try:
        _, stderr = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        # Ctrl-C three times, as a user would: gapscope passes each on and the third kills nsys
        # and the program, so nothing is left running on the GPU for the next test
        for _ in range(3):
            proc.send_signal(signal.SIGINT)
            time.sleep(2)
        try:
            proc.communicate(timeout=60)
        finally:
            proc.kill()
        pytest.fail(f"gapscope profile {name} ran past {LIMIT_S} s; stopped (its files are in {out})")
    log = (out / "output.log").read_text(errors="replace")[-3000:] if (out / "output.log").exists() else ""
    assert proc.returncode == 0, f"{stderr}\n--- output.log (end) ---\n{log}"
    saved = json.loads((out / "profile.json").read_text())
    result = json.loads((out / "result.json").read_text())
    return {"profile": saved, "result": result, "stderr": stderr, "out": out,
            "by_name": {r["name"]: r for r in result["by_name"]}}


def instances(run: dict, name: str) -> list[dict]:
    return [r for r in run["result"]["ranges"] if r["name"] == name]


HF = [PY, str(RECIPES / "hf_generate.py"), "--no-pointwise-autotune", "--max-new-tokens", "8"]


@pytest.fixture(scope="module")
def hf_nsys(out_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """hf_generate.py under nsys, SQLite export; a cold inductor cache, so the warm-up compiles."""
    cache = tmp_path_factory.mktemp("inductor")
    return record(out_root, "hf_generate_nsys", "--export-type", "sqlite", "--", *HF,
                  env={"TORCHINDUCTOR_CACHE_DIR": str(cache)})


def test_hf_generate_under_nsys_keeps_exit_status_and_files(hf_nsys: dict) -> None:
    saved = hf_nsys["profile"]
    assert (saved["program_exit_code"], saved["program_signal"], saved["interrupted"]) == (0, None, False)
    assert saved["tracer"] == "nsys" and saved["export_type"] == "sqlite"
    assert hf_nsys["result"]["trace"]["format"] == "nsys-sqlite"
    assert hf_nsys["result"]["trace"]["graph_trace"] in ("node", "none")
    for key in ("report", "trace", "log", "status", "commands", "environment", "result", "report_text"):
        assert Path(saved["files"][key]).exists(), key
    assert hf_nsys["stderr"].strip().endswith(f"the program exited with 0; everything is in {hf_nsys['out']}")


def test_hf_generate_ranges_and_kernels(hf_nsys: dict) -> None:
    by = hf_nsys["by_name"]
    assert {n: by[n]["count"] for n in ("generate_eager", "compile_warmup", "generate_compiled")} == {
        "generate_eager": 1, "compile_warmup": 1, "generate_compiled": 2}
    compiled = [r["kernels"] for r in instances(hf_nsys, "generate_compiled")]
    assert compiled[0] == compiled[1] > 0  # the same compiled graph, the same kernels, each call
    assert by["generate_eager"]["kernels"] > compiled[0]  # the compiled forward fuses kernels
    assert by["compile_warmup"]["kernels"] > 0


def test_hf_generate_readings(hf_nsys: dict) -> None:
    by = hf_nsys["by_name"]
    # a 2-layer model's eager decode: the GPU waits on the CPU's launches (or, where the first
    # calls plan cuDNN kernels for tens of ms, on that stall: traces/hf_generate_compile.sqlite
    # reads `stall`, 139 of 236 ms); the compiled calls wait on the launches alone
    eager = by["generate_eager"]
    assert verdict(eager) in GRAPHS_PAY | {"stall"}
    assert eager["gap_fraction"] > 0.5
    cats = eager["gap_by_category_ns"]
    assert cats["launch"] + cats["host"] > 0.25 * eager["gap_ns"]
    # (once in the tenth session's two runs this read another verdict; the message keeps the figures)
    compiled = by["generate_compiled"]
    assert verdict(compiled) in GRAPHS_PAY, {k: compiled.get(k) for k in (
        "verdict", "gap_fraction", "gap_ns", "kernels", "gap_by_category_ns", "graph_ceiling_speedup")}
    # the compile warm-up: one idle stretch of half a second or more with no GPU work at all
    assert by["compile_warmup"]["gap_max_ns"] >= 500_000_000
    assert by["compile_warmup"]["gap_max_ns"] > by["generate_eager"]["gap_max_ns"]


def test_hf_compile_warmup_reads_as_a_stall(hf_nsys: dict) -> None:
    assert verdict(hf_nsys["by_name"]["compile_warmup"]) in ("stall", "warmup")  # compiling: no win either way


@pytest.fixture(scope="module")
def hf_torch(out_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """hf_generate.py under torch.profiler, recording only the eager generate()."""
    cache = tmp_path_factory.mktemp("inductor")
    return record(out_root, "hf_generate_torch", "--tracer", "torch", "--capture-range", "nvtx:generate_eager",
                  "--", *HF, env={"TORCHINDUCTOR_CACHE_DIR": str(cache)})


def test_hf_generate_under_the_torch_profiler(hf_torch: dict, hf_nsys: dict) -> None:
    saved, by = hf_torch["profile"], hf_torch["by_name"]
    assert (saved["tracer"], saved["program_exit_code"], saved["capture_range"]) == ("torch", 0, "nvtx:generate_eager")
    assert hf_torch["result"]["trace"]["format"] == "kineto"
    status = json.loads(Path(saved["files"]["status"]).read_text())
    assert status["capture"] == {"range": "nvtx:generate_eager", "state": "done"} and status["cuda"] is True
    # only the capture range was recorded: its NVTX range, mirrored as a record_function
    assert by["generate_eager"]["count"] == 1
    assert not {"compile_warmup", "generate_compiled"} & set(by)
    eager, nsys_eager = by["generate_eager"]["kernels"], hf_nsys["by_name"]["generate_eager"]["kernels"]
    assert abs(eager - nsys_eager) <= max(2, nsys_eager // 100), (eager, nsys_eager)
    assert verdict(by["generate_eager"]) in GRAPHS_PAY | {"stall"}


DECODE = [PY, str(RECIPES / "torch_decode.py"), "--steps", "8"]


def test_torch_decode_whole_program_under_the_torch_profiler(out_root: Path) -> None:
    run = record(out_root, "torch_decode_torch", "--tracer", "torch", "--", *DECODE)
    by = run["by_name"]
    assert {n: by[n]["count"] for n in ("eager", "graph", "decode_step")} == {"eager": 1, "graph": 1, "decode_step": 16}
    steps = [r["kernels"] for r in instances(run, "decode_step")]
    assert len(set(steps)) == 1 and steps[0] > 0, steps  # eager and replayed steps: the same kernels
    assert verdict(by["eager"]) in GRAPHS_PAY
    assert verdict(by["graph"]) not in GRAPHS_PAY  # a graph replay never reads "graphs pay"
    pair = next(p for p in run["result"]["payoff"] if (p["eager"], p["graph"]) == ("eager", "graph"))
    assert pair["measured_speedup"] > 2


def test_torch_decode_capture_range_under_nsys(out_root: Path) -> None:
    run = record(out_root, "torch_decode_nsys_graph", "--capture-range", "nvtx:graph", "--", *DECODE)
    by = run["by_name"]
    assert run["profile"]["program_exit_code"] == 0  # the program ran on past the range's close
    assert "NSYS_NVTX_PROFILER_REGISTER_ONLY=0" in run["profile"]["command_lines"][0]
    # nsys recorded from the opening of `graph`: the graph path's 8 steps, not the eager path
    assert "eager" not in by and by["graph"]["count"] == 1 and by["decode_step"]["count"] == 8
    assert all(r["kernels"] > 0 for r in instances(run, "decode_step"))
    assert verdict(by["graph"]) not in GRAPHS_PAY


def test_jax_train_under_nsys(out_root: Path) -> None:
    run = record(out_root, "jax_train_nsys", "--export-type", "sqlite", "--",
                 PY, str(RECIPES / "jax_train.py"), "--device", "cuda", "--autotune-level", "0", "--steps", "6",
                 env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    assert run["profile"]["program_exit_code"] == 0
    steps = instances(run, "train_step")
    assert len(steps) == 6
    later = [r["kernels"] for r in steps[1:]]  # the first step compiles
    assert len(set(later)) == 1 and later[0] > 0, later
    db = sqlite3.connect(f"file:{run['profile']['files']['trace']}?mode=ro", uri=True)
    total, from_graphs = db.execute("SELECT count(*), count(graphNodeId) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    assert from_graphs > total / 2  # XLA runs the step as command buffers (CUDA graphs)
    for row in steps[1:]:
        assert verdict(row) not in GRAPHS_PAY, row  # a graph replay never reads "graphs pay"
