"""Record the ground-truth suite of graph_truth.py on a CUDA machine with nsys (the devkit's).

    source .devkit/setup.sh && python3 traces/recipes/record_truth.py PART OUTDIR

PART a: untraced timings of every case (timings_a.json), the torch.profiler traces of every
        case (one process), then the nsys node-level recordings of the first cases.
PART e: the graph-size sweep (graph_sizes.py), decode_b1 six times under three pinnings,
        biggraph and decode_b1 at graph level (see main).
PART g: hf_llama (a Hugging Face model's forward as the decode step) at node level twice, at graph
        level and under torch.profiler, each with the same process's untraced timings.
PART h: torch.profiler's cost measured apart (profiler_cost.py: traced and untraced passes alternated
        in one process, each case's last traced pass kept), then every case under torch.profiler
        beside the same process's untraced timings (one process per case); on an H200 the
        graph-size sweep first. Four fastest cores; needs no nsys.
PART i: torch.profiler's cost again (profiler_cost.py, no traces kept), on the host's four fastest
        cores and on its four slowest, in one call: whether the cost follows the traced launch
        call, as the model scales it; on an H200 the graph-size sweep first.
PART j: torch.profiler's cost with its options (profiler_cost.py on four cases, four fastest cores):
        as part h's, with record_shapes=True, with with_stack=True; on an H200 the sweep first,
        and with what is left the eleven programs' plain cost.
PART l: hf_qwen2 (a second Hugging Face architecture) as part g recorded hf_llama.
PART q: hf_gemma (a third Hugging Face architecture, after the model was fixed) as part g
        recorded hf_llama.
PART r: hf_phi3 (a fourth) the same.
PART t: two workloads of other kinds, after the model and its calibration were fixed, as part g
        recorded hf_llama: train_mlp (a training step whose backward pass autograd's device thread
        launches) and cnn_b1 (a residual CNN's inference at batch 1, cuDNN convolutions); then
        biggraph at graph level again (the graph-level turnaround's case, on another host).
PART u: two more the same way: compiled_b1 (decode_b1's step under torch.compile's default mode:
        Inductor's Triton kernels and cuBLAS calls) and cnn_b32 (cnn_b1's network at batch 32:
        the device's work about as long as the host's).
PART v: torch.profiler's cost on compiled programs (profiler_cost.py, traced and untraced passes
        alternated: compiled_b1, compiled_cnn, and cnn_b1 eager beside them), then
        compiled_cnn (cnn_b1's step under torch.compile) recorded as part g recorded hf_llama.
PART w: hf_llama3_slice (a decode step of a real model's size: Llama-3-8B's layer dimensions and
        vocabulary, 4 of its layers; device and host work about equal) as part g recorded hf_llama.
PART w2: hf_llama70b_slice (Llama-3-70B's layer dimensions and vocabulary, 2 of its layers: the
        device's work longer than the host's) the same way.
PART m: launches through the driver API (cuLaunchKernel: CuPy, Triton) under nsys: cupy_tiny on the
        host's four fastest cores twice and on its four slowest once, cupy_pyhost and triton, and
        tiny (the runtime API's calibration program) beside them, each at node level in its own
        process with that process's untraced timings before and after the traced pass.
PART n: what nsys costs an eager step (nsys_cost.py: untraced passes and passes inside nsys's capture
        ranges alternated in one process, --capture-range-end=repeat), on the host's four fastest
        cores (tiny, cupy_tiny, triton, cupy_pyhost) and four slowest (tiny, cupy_tiny); the last
        round's report of each case exported to SQLite (its launches and traced launch call).
PART o: what nsys costs a process it is attached to while it records nothing (the state of the ground
        truth's untraced timings, taken in the traced process before and after its capture
        range): graph_truth.py's untraced timings of tiny, cupy_tiny and triton in a plain process
        and under nsys with a capture range never opened, alternated three times, on the host's
        four fastest cores.
PART p: what nsys costs a process it records, against a process without it: graph_truth.py's
        untraced timings of tiny, cupy_tiny, triton and decode_b1 in a plain process and in one
        that nsys records whole (node level, exported: its launches and traced launch calls),
        alternated three times (PAIRS in the environment sets how many), on the host's four
        fastest cores.
PART k: what copies and event calls cost torch.profiler (profiler_cost.py's probes beside the
        suite's copies, streams and tiny), twice; four fastest cores.
PART c: every case again, each trace beside untraced timings of the same process before and
        after it (`--timed 3`; nsys with --capture-range=cudaProfilerApi around the traced pass):
        node level, torch.profiler, graph level; then timings_c.json.
PART b: the remaining nsys node-level recordings, the graph-level recordings (tiny, decode_b1,
        biggraph), torch_decode.py at 32 and 64 steps (loop32, loop64), and the untraced
        timings once more (timings_b.json: the run-to-run spread).
Every nsys recording is
`nsys profile -t cuda,nvtx --cuda-graph-trace=LEVEL --sample=none --cpuctxsw=none --export sqlite
--force-overwrite true -o W/NAME PROGRAM`. Each command has a timeout; the part stops starting new
ones when BUDGET_S (default 500) seconds are spent. Writes OUTDIR/truth_PART.tar.gz (folder
truth_PART/: exports, traces, timings, walls, provenance.txt with every exact command and the
versions, logs.txt), repacked after every step so a call cut short returns what it finished, and
prints a summary table at the end.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TRUTH = HERE / "graph_truth.py"
NSYS = ["nsys", "profile", "-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none"]
BUDGET = float(os.environ.get("BUDGET_S", "500"))
T0 = time.monotonic()

NODE_A = ["tiny", "pyhost", "sleep", "sync", "gemm", "medium", "streams", "copies"]
NODE_B = ["decode_b1", "decode_b256", "triton", "oneoff", "fallback", "rerecord", "biggraph"]
GRAPH_LEVEL = ["tiny", "decode_b1", "biggraph", "sync", "streams"]


def left() -> float:
    return BUDGET - (time.monotonic() - T0)


class Recorder:
    def __init__(self, part: str, out: Path) -> None:
        self.part, self.out = part, out
        self.work = Path(tempfile.mkdtemp(prefix="gapscope-truth."))
        self.pack = self.work / f"truth_{part}"
        self.raw = self.work / "raw"
        self.pack.mkdir()
        self.raw.mkdir()
        self.prov = open(self.pack / "provenance.txt", "a")
        self.logs = open(self.pack / "logs.txt", "a")
        self.rows: list[tuple[str, str, str]] = []

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.prov.write(line + "\n")
        self.prov.flush()

    def pack_up(self) -> None:
        tmp = self.out / f"truth_{self.part}.tar.gz.tmp"
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(self.pack, arcname=self.pack.name)
        os.replace(tmp, self.out / f"truth_{self.part}.tar.gz")

    def run(self, label: str, cap: float, cmd: list[str], env: dict | None = None) -> bool:
        t = min(cap, left())
        if t < 20:
            self.rows.append((label, "SKIPPED", "budget spent"))
            self.say(f"SKIPPED: {label}")
            return False
        self.logs.write(f"== {label} ({time.strftime('%H:%M:%S')}, timeout {t:.0f}s): "
                        f"{shlex.join(cmd)}\n")
        self.logs.flush()
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=t, env={**os.environ, **(env or {})}, cwd=ROOT)
            rc, text = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as exc:
            rc, text = 124, (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        dt = time.monotonic() - t0
        self.logs.write(text + f"\n== {label}: rc {rc} after {dt:.1f}s\n")
        self.logs.flush()
        if rc != 0:
            self.rows.append((label, f"FAILED rc {rc}", f"{dt:.0f} s"))
            print(f"FAILED: {label} (rc {rc}); tail:\n" + "\n".join(
                "    | " + x for x in text.splitlines()[-15:]), flush=True)
            return False
        mine = [x for x in text.splitlines() if not x.startswith(("Collecting", "Generating",
                "Processing", "Generated", "Exporting", "    /", "[", "WARNING: CPU", "USDT"))]
        print(f"ok: {label} ({dt:.0f} s)\n" + "\n".join("    " + x for x in mine[-6:]), flush=True)
        self.rows.append((label, "ok", f"{dt:.0f} s"))
        return True

    def nsys(self, name: str, level: str, program: list[str], cap: float = 90,
             capture: bool = False, pin: list[str] | None = None) -> None:
        out = self.raw / name
        extra = ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"] if capture else []
        cmd = (pin or []) + NSYS + [f"--cuda-graph-trace={level}", *extra, "--export", "sqlite",
                      "--force-overwrite", "true", "-o", str(out)] + program
        if self.run(name, cap, cmd):
            db = out.with_suffix(".sqlite")
            if db.is_file():
                shutil.copy(db, self.pack / db.name)
                self.say(f"command {name}.sqlite: {shlex.join(cmd)}")
                self.rows[-1] = (name, "ok", f"{self.rows[-1][2]}, {db.stat().st_size:,} B")
            else:
                self.rows[-1] = (name, "FAILED", "no sqlite written")
            self.pack_up()

    def truth(self, *args: str) -> list[str]:
        return ["python3", str(TRUTH), *args]


def environment(rec: Recorder) -> None:
    def sh(cmd: str) -> str:
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True,
                                  timeout=60).stdout.strip()
        except Exception as exc:  # noqa: BLE001
            return f"? ({exc})"

    rec.say(f"ground-truth suite, part {rec.part}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    rec.say("gpu: " + sh("nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader"))
    rec.say("nsys: " + sh("nsys --version") + " at " + sh("command -v nsys"))
    rec.say("cpu: " + sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2") + f", {os.cpu_count()} cpus")
    rec.say("python: " + sh("python3 -c 'import sys,torch,triton;print(sys.version.split()[0], "
                            "\"torch\", torch.__version__, \"cuda\", torch.version.cuda, "
                            "\"triton\", triton.__version__)'"))
    rec.say("repo: " + sh(f"git -C {ROOT} rev-parse HEAD") + "; recipes sha256:")
    rec.say(sh(f"cd {HERE} && sha256sum graph_truth.py record_truth.py torch_decode.py"))


def ranked_cores(rec: Recorder, env: dict) -> list[int]:
    """The host's cores, fastest first for a tiny eager loop (graph_sizes.py cores), said in the
    provenance; empty when the ranking failed."""
    ranking = rec.raw / "cores.json"
    rec.run("cores", 60, ["python3", str(HERE / "graph_sizes.py"), "cores", "--out", str(ranking)], env)
    ranked = json.loads(ranking.read_text())["ranked"] if ranking.is_file() else []
    rec.say("cores, fastest first: " + " ".join(map(str, ranked)))
    return ranked


#: The eleven programs whose torch.profiler cost profiler_cost.py measures (parts h, i, j).
COST_CASES = "tiny,pyhost,sleep,sync,medium,streams,copies,decode_b1,decode_b256,oneoff,hf_llama"


def pinned(cores: list[int]) -> list[str]:
    """The taskset prefix that pins a command to ``cores`` (none: no prefix)."""
    return ["taskset", "-c", ",".join(map(str, cores))] if cores else []


def profiler_cost(rec: Recorder, label: str, out_name: str, cases: str, pin: list[str], env: dict, cap: float,
                  flags: tuple[str, ...] = (), trace_dir: str | None = None) -> None:
    """profiler_cost.py on ``cases`` (six alternated rounds of 10 steps, ``flags`` passed on),
    pinned by ``pin``, written as ``out_name`` (``trace_dir``: each case's last traced pass kept in
    that folder of the pack); its command said in the provenance."""
    traces = ["--trace-dir", str(rec.pack / trace_dir)] if trace_dir else []
    if trace_dir:
        (rec.pack / trace_dir).mkdir(parents=True, exist_ok=True)
    cmd = pin + ["python3", str(HERE / "profiler_cost.py"), "--cases", cases, "--rounds", "6",
                 "--steps", "10", *flags, *traces, "--out", str(rec.pack / out_name)]
    if rec.run(label, cap, cmd, env):
        said = cmd[:-1 - len(traces) - 1] + (["--trace-dir", trace_dir] if trace_dir else []) + ["--out", out_name]
        rec.say(f"command {out_name}: " + shlex.join(said))
    rec.pack_up()


def torch_case(rec: Recorder, case: str, pin: list[str], env: dict, cap: float = 60) -> None:
    """One case under torch.profiler in its own process (CUPTI stays attached after a session),
    with the same process's untraced timings before and after (`--timed 3`)."""
    def cmd(trace: str, wall: str) -> list[str]:
        return pin + rec.truth("run", "--case", case, "--tracer", "torch", "--timed", "3",
                               "--trace-out", trace, "--wall-out", wall)

    trace, wall = f"{case}.pt.trace.json.gz", f"{case}_torch_wall.json"
    if rec.run(f"{case}_torch", cap, cmd(str(rec.pack / trace), str(rec.pack / wall)), env):
        rec.say(f"command {trace}: " + shlex.join(cmd(trace, wall)))
    rec.pack_up()


def workload(rec: Recorder, case: str, env: dict, p4: list[str] | None = None) -> None:
    """A workload outside the injected causes (a Hugging Face model's forward as the decode step):
    at node level twice (separate processes), at graph level and under torch.profiler, each with
    its own untraced timings; on the host's four fastest cores. The second node-level recording
    (not shipped: a check of the first) comes last, so that it is the one a short budget drops."""
    p4 = pinned(ranked_cores(rec, env)[:4]) if p4 is None else p4

    def node_or_graph(name: str, level: str) -> None:
        rec.nsys(name, level, rec.truth("run", "--case", case, "--timed", "3", "--profiler-api",
                                        "--wall-out", str(rec.pack / f"{name}_wall.json")),
                 cap=120, capture=True, pin=p4)

    node_or_graph(f"{case}_1", "node")
    node_or_graph(f"{case}_graphlevel", "graph")
    torch_case(rec, case, p4, env, cap=120)
    node_or_graph(f"{case}_2", "node")


def nsys_cost(rec: Recorder, label: str, pin: list[str], cases: str, rounds: int, env: dict) -> None:
    """nsys_cost.py on ``cases`` under nsys, a report per capture range (``rounds`` a case), pinned
    by ``pin``: nsys_cost_LABEL.json, and the last round's report of each case exported as
    nsys_cost_LABEL_CASE.sqlite; the commands said in the provenance."""
    names = cases.split(",")
    out = rec.raw / f"cost_{label}"
    program = ["python3", str(HERE / "nsys_cost.py"), "--cases", cases, "--rounds", str(rounds),
               "--out", str(rec.pack / f"nsys_cost_{label}.json")]
    cmd = pin + NSYS + ["--cuda-graph-trace=node", "--capture-range=cudaProfilerApi",
                        f"--capture-range-end=repeat:{rounds * len(names)}", "-o", str(out)] + program
    if not rec.run(f"nsys_cost_{label}", 240, cmd, env):
        rec.pack_up()
        return
    rec.say(f"command nsys_cost_{label}.json: " + shlex.join(cmd))
    reports = sorted(rec.raw.glob(f"cost_{label}*.nsys-rep"), key=lambda p: p.stat().st_mtime)
    rec.say(f"reports of nsys_cost_{label}: " + " ".join(p.name for p in reports))
    for i, case in enumerate(names):
        k = (i + 1) * rounds - 1
        if k >= len(reports):
            break
        db = rec.pack / f"nsys_cost_{label}_{case}.sqlite"
        export = ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(db), str(reports[k])]
        if rec.run(f"export_{label}_{case}", 60, export, env):
            rec.say(f"command {db.name}: nsys export --type sqlite -o {db.name} {reports[k].name}")
    rec.pack_up()


def plain_against_nsys(rec: Recorder, env: dict, how: str, cases: str, extra: tuple[str, ...] = ()) -> None:
    """graph_truth.py's untraced timings of ``cases`` (``extra`` passed on) in a plain process and
    in one under nsys, alternated PAIRS times (default 3) on the host's four fastest cores: ``how`` is
    "idle" (a capture range never opened: nsys attached, recording nothing) or "traced" (nsys
    records the whole process at node level, exported)."""
    pin = pinned(ranked_cores(rec, env)[:4])
    for i in range(1, int(os.environ.get("PAIRS", "3")) + 1):
        for label in ("plain", how):
            name = f"time_{label}_{i}.json"
            program = rec.truth("time", "--case", cases, "--repeats", "3", *extra, "--out", str(rec.pack / name))
            if label == "traced":
                rec.nsys(f"traced_{i}", "node", program, cap=150, pin=pin)
            else:
                idle = NSYS + ["--capture-range=cudaProfilerApi", "--capture-range-end=stop",
                               "-o", str(rec.raw / f"idle_{i}")] if label == "idle" else []
                if rec.run(name, 90, pin + idle + program, env):
                    rec.say(f"command {name}: " + shlex.join(pin + idle + program))
            rec.pack_up()


def is_h200() -> bool:
    """Whether this machine's GPU is an H200 (nvidia-smi's name)."""
    return "H200" in subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                    capture_output=True, text=True).stdout


def h200_sweep(rec: Recorder, ranked: list[int], env: dict, name: str) -> None:
    """On an H200 only: the graph-size sweep (graph_sizes.py, untraced; the replay turnaround's
    calibration) on the fastest core, written as ``name``."""
    if not is_h200():
        return
    cmd = pinned(ranked[:1]) + [
        "python3", str(HERE / "graph_sizes.py"), "sweep", "--out", str(rec.pack / name)]
    if rec.run("graph_sizes", 120, cmd, env):
        rec.say(f"command {name}: " + shlex.join(cmd[:-1] + [name]))
    rec.pack_up()


def main() -> int:
    global NSYS
    part, out = sys.argv[1], Path(sys.argv[2]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rec = Recorder(part, out)
    environment(rec)
    env = {"PYTHONUNBUFFERED": "1"}
    if part == "a":
        timings = rec.pack / "timings_a.json"
        if rec.run("time_a", 200, rec.truth("time", "--out", str(timings)), env):
            rec.say(f"command timings_a.json: {shlex.join(rec.truth('time', '--out', 'timings_a.json'))}")
        rec.pack_up()
        torch_cmd = rec.truth("run", "--tracer", "torch", "--trace-out",
                              str(rec.pack / "{case}.pt.trace.json.gz"), "--wall-out",
                              str(rec.pack / "{case}_torch_wall.json"))
        if rec.run("torch_profiler", 200, torch_cmd, env):
            rec.say("command {case}.pt.trace.json.gz: " + shlex.join(rec.truth(
                "run", "--tracer", "torch", "--trace-out", "{case}.pt.trace.json.gz",
                "--wall-out", "{case}_torch_wall.json")))
        rec.pack_up()
        for case in NODE_A:
            rec.nsys(case, "node", rec.truth("run", "--case", case, "--wall-out",
                                             str(rec.pack / f"{case}_nsys_wall.json")))
    elif part == "d":
        # Part c again, pinned: first every core's speed for the tiny loop, then every process
        # pinned to the two fastest cores (a process's host speed varied up to 2x between runs
        # and within one as the scheduler moved it; see docs/metrics.md).
        speeds = {}
        for core in range(os.cpu_count() or 1):
            p = rec.raw / f"core{core}.json"
            if rec.run(f"core{core}", 40, pinned([core]) + rec.truth(
                    "time", "--case", "tiny", "--repeats", "3", "--time-steps", "20",
                    "--out", str(p)), env):
                c = json.loads(p.read_text())["cases"]["tiny"]
                speeds[core] = c["eager_step_s"]
        ranked = sorted(speeds, key=speeds.get)
        rec.say("tiny eager us/step by core: " + ", ".join(
            f"{c}: {speeds[c] * 1e6:.0f}" for c in sorted(speeds)))
        pin = ["taskset", "-c", ",".join(str(c) for c in ranked[:2])] if len(ranked) >= 2 else []
        rec.say(f"pinned to: {shlex.join(pin) or 'nothing'}")
        NSYS = pin + NSYS
        for case in NODE_A + NODE_B:
            rec.nsys(case, "node", rec.truth("run", "--case", case, "--timed", "3",
                                             "--profiler-api", "--wall-out",
                                             str(rec.pack / f"{case}_nsys_wall.json")),
                     capture=True)
        for case in NODE_A + NODE_B:  # one process per case: CUPTI stays attached after a session
            torch_case(rec, case, pin, env)
        for case in GRAPH_LEVEL:
            rec.nsys(f"{case}_graphlevel", "graph", rec.truth(
                "run", "--case", case, "--timed", "3", "--profiler-api", "--wall-out",
                str(rec.pack / f"{case}_graphlevel_wall.json")), capture=True)
        timings = rec.pack / "timings_d.json"
        if rec.run("time_d", 120, pin + rec.truth("time", "--repeats", "3", "--out", str(timings)), env):
            rec.say("command timings_d.json: " + shlex.join(pin + rec.truth(
                "time", "--repeats", "3", "--out", "timings_d.json")))
        rec.pack_up()
    elif part == "e":
        # The graph-size sweep (graph_sizes.py, untraced: the replay turnaround's calibration),
        # then decode_b1 recorded several times in separate processes under three pinnings (two
        # fastest cores as in part d, four fastest, none), each with its own untraced timings:
        # how much of part d's decode_b1 tracer cost came from the pinning; then biggraph and
        # decode_b1 at graph level (four cores).
        ranked = ranked_cores(rec, env)
        pins = {"p2": ranked[:2], "p4": ranked[:4], "free": []}
        pin = {k: pinned(v) for k, v in pins.items()}
        sweep = rec.pack / "graph_sizes.json"
        cmd = pinned(ranked[:1]) + [
            "python3", str(HERE / "graph_sizes.py"), "sweep", "--out", str(sweep)]
        if rec.run("graph_sizes", 150, cmd, env):
            rec.say("command graph_sizes.json: " + shlex.join(cmd[:-1] + ["graph_sizes.json"]))
        rec.pack_up()
        for i in (1, 2):
            for mode in ("p2", "p4", "free"):
                name = f"decode_b1_{mode}_{i}"
                rec.nsys(name, "node", rec.truth("run", "--case", "decode_b1", "--timed", "3",
                                                 "--profiler-api", "--wall-out",
                                                 str(rec.pack / f"{name}_wall.json")),
                         cap=75, capture=True, pin=pin[mode])
        for case in ("biggraph", "decode_b1"):
            name = f"{case}_graphlevel_p4"
            rec.nsys(name, "graph", rec.truth("run", "--case", case, "--timed", "3", "--profiler-api",
                                              "--wall-out", str(rec.pack / f"{name}_wall.json")),
                     cap=90, capture=True, pin=pin["p4"])
    elif part == "f":
        # Part e's sweep and graph-level recordings again on the H200 (part e ran on an H100),
        # the sweep also under nsys at node level (the inside-replay gaps nsys records, by chain
        # length), and decode_b1 twice more at node level (four cores).
        ranked = ranked_cores(rec, env)
        p4 = pinned(ranked[:4])
        sweep = rec.pack / "graph_sizes_f.json"
        cmd = pinned(ranked[:1]) + [
            "python3", str(HERE / "graph_sizes.py"), "sweep", "--out", str(sweep)]
        if rec.run("graph_sizes", 120, cmd, env):
            rec.say("command graph_sizes_f.json: " + shlex.join(cmd[:-1] + ["graph_sizes_f.json"]))
        rec.pack_up()
        rec.nsys("graph_sizes_node", "node", ["python3", str(HERE / "graph_sizes.py"), "sweep", "--no-cupti",
                                              "--replays", "3", "--out", str(rec.raw / "sizes_nsys.json")],
                 cap=120, pin=p4)
        for case in ("biggraph", "tiny"):
            name = f"{case}_graphlevel_p4"
            rec.nsys(name, "graph", rec.truth("run", "--case", case, "--timed", "3", "--profiler-api",
                                              "--wall-out", str(rec.pack / f"{name}_wall.json")),
                     cap=90, capture=True, pin=p4)
        for i in (1, 2):
            name = f"decode_b1_p4_{i}"
            rec.nsys(name, "node", rec.truth("run", "--case", "decode_b1", "--timed", "3", "--profiler-api",
                                             "--wall-out", str(rec.pack / f"{name}_wall.json")),
                     cap=75, capture=True, pin=p4)
    elif part == "g":
        # A workload outside the injected causes (graph_truth.py's hf_llama: a Hugging Face
        # model's own forward as a decode step).
        workload(rec, "hf_llama", env)
    elif part == "h":
        # torch.profiler on a second host: what it costs each case, measured with traced and
        # untraced passes alternated (the traces those passes wrote kept beside), then each case
        # recorded under it with its own untraced timings, as part d did on the H200; on an H200,
        # the graph-size sweep first (its turnaround calibration, which part f did not get to).
        ranked = ranked_cores(rec, env)
        p4 = pinned(ranked[:4])
        h200_sweep(rec, ranked, env, "graph_sizes_h.json")
        traces = rec.pack / "cost_traces"
        traces.mkdir(exist_ok=True)
        cmd = p4 + ["python3", str(HERE / "profiler_cost.py"), "--cases", COST_CASES, "--rounds", "6",
                    "--steps", "10", "--out", str(rec.pack / "profiler_cost_h.json"),
                    "--trace-dir", str(traces)]
        if rec.run("profiler_cost", 200, cmd, env):
            rec.say("command profiler_cost_h.json: " + shlex.join(cmd[:-4] + [
                "--out", "profiler_cost_h.json", "--trace-dir", "cost_traces"]))
        rec.pack_up()
        for case in ("tiny", "decode_b1", "decode_b256", "sync", "copies", "streams", "medium", "pyhost",
                     "sleep", "oneoff", "triton", "gemm", "biggraph", "fallback", "rerecord"):
            torch_case(rec, case, p4, env)
    elif part == "i":
        # The cost model's host scaling, out of sample: the same programs' torch.profiler cost on
        # the fastest and the slowest cores of one host (their traced launch calls differ).
        ranked = ranked_cores(rec, env)
        h200_sweep(rec, ranked, env, "graph_sizes_i.json")
        for label, cores in (("slow", ranked[-4:]), ("fast", ranked[:4])):
            profiler_cost(rec, f"profiler_cost_{label}", f"profiler_cost_i_{label}.json", COST_CASES,
                          pinned(cores), env, 150)
    elif part == "j":
        # What the profiler's options add to its cost, beside its plain cost on the same host.
        ranked = ranked_cores(rec, env)
        h200_sweep(rec, ranked, env, "graph_sizes_j.json")
        pin = pinned(ranked[:4])
        for label, flags in (("plain", ()), ("shapes", ("--record-shapes",)), ("stack", ("--with-stack",))):
            profiler_cost(rec, f"profiler_cost_{label}", f"profiler_cost_j_{label}.json",
                          "tiny,pyhost,decode_b1,hf_llama", pin, env, 120, flags)
        if is_h200():
            # With what is left on an H200: the plain cost of the eleven programs on its host,
            # the host whose traced launch calls (5.5-14.0 us) the H200 validation traces carry.
            profiler_cost(rec, "profiler_cost_all", "profiler_cost_j_all.json", COST_CASES, pin, env, 200)
    elif part == "l":
        # A second workload outside the injected causes, recorded after the model was fitted
        # (graph_truth.py's hf_qwen2), as part g recorded hf_llama.
        workload(rec, "hf_qwen2", env)
    elif part in ("q", "r"):
        # Two more workloads outside the injected causes, recorded after the model and its
        # calibration were fixed (graph_truth.py's hf_gemma, hf_phi3), as part g recorded hf_llama.
        workload(rec, {"q": "hf_gemma", "r": "hf_phi3"}[part], env)
    elif part == "t":
        p4 = pinned(ranked_cores(rec, env)[:4])
        workload(rec, "train_mlp", env, p4)
        workload(rec, "cnn_b1", env, p4)
        rec.nsys("biggraph_graphlevel_t", "graph", rec.truth(
            "run", "--case", "biggraph", "--timed", "3", "--profiler-api", "--wall-out",
            str(rec.pack / "biggraph_graphlevel_t_wall.json")), cap=120, capture=True, pin=p4)
    elif part == "u":
        p4 = pinned(ranked_cores(rec, env)[:4])
        workload(rec, "compiled_b1", env, p4)
        workload(rec, "cnn_b32", env, p4)
    elif part == "v":
        p4 = pinned(ranked_cores(rec, env)[:4])
        profiler_cost(rec, "profiler_cost_v", "profiler_cost_v.json", "compiled_b1,compiled_cnn,cnn_b1", p4, env, 200,
                      trace_dir="cost_traces_v")
        workload(rec, "compiled_cnn", env, p4)
    elif part == "w":
        # A decode step of a real model's size (graph_truth.py's hf_llama3_slice: Llama-3-8B's
        # layers and vocabulary, 4 layers), recorded after the model was fixed, as part g recorded
        # hf_llama: the regime where the device's work is about as long as the host's.
        workload(rec, "hf_llama3_slice", env, pinned(ranked_cores(rec, env)[:4]))
    elif part == "w2":
        # The same with Llama-3-70B's layers (graph_truth.py's hf_llama70b_slice, 2 layers): the
        # device's work longer than the host's, a replay's win small.
        workload(rec, "hf_llama70b_slice", env, pinned(ranked_cores(rec, env)[:4]))
    elif part == "k":
        # What copies and event calls cost the profiler: probes that vary the copies' count and
        # size and the event calls' kind, beside the suite's copies, streams and tiny, twice.
        pin = pinned(ranked_cores(rec, env)[:4])
        for label in ("1", "2"):
            profiler_cost(rec, f"profiler_cost_{label}", f"profiler_cost_k_{label}.json",
                          "copy2_4k,copy2_1m,copy20_4k,events,event_waits,copies,streams,tiny", pin, env, 150)
    elif part == "m":
        ranked = ranked_cores(rec, env)
        fast, slow = pinned(ranked[:4]), pinned(ranked[-4:])
        for name, case, pin in (("cupy_tiny_1", "cupy_tiny", fast), ("triton_1", "triton", fast),
                                ("cupy_pyhost_1", "cupy_pyhost", fast), ("tiny_1", "tiny", fast),
                                ("cupy_tiny_slow", "cupy_tiny", slow), ("cupy_tiny_2", "cupy_tiny", fast),
                                ("triton_2", "triton", fast)):
            rec.nsys(name, "node", rec.truth("run", "--case", case, "--timed", "3", "--profiler-api",
                                             "--wall-out", str(rec.pack / f"{name}_wall.json")),
                     cap=90, capture=True, pin=pin)
    elif part == "n":
        ranked = ranked_cores(rec, env)
        for label, pin, cases in (("fast", pinned(ranked[:4]), "tiny,cupy_tiny,triton,cupy_pyhost"),
                                  ("slow", pinned(ranked[-4:]), "tiny,cupy_tiny")):
            nsys_cost(rec, label, pin, cases, rounds=5, env=env)
    elif part == "o":
        plain_against_nsys(rec, env, "idle", "tiny,cupy_tiny,triton")
    elif part == "p":
        plain_against_nsys(rec, env, "traced", "tiny,cupy_tiny,triton,decode_b1", ("--time-steps", "20"))
    elif part == "c":
        # Every trace with the same process's untraced timings before and after it (--timed):
        # nsys records only the traced pass (--capture-range=cudaProfilerApi).
        for case in NODE_A + NODE_B:
            rec.nsys(case, "node", rec.truth("run", "--case", case, "--timed", "3",
                                             "--profiler-api", "--wall-out",
                                             str(rec.pack / f"{case}_nsys_wall.json")),
                     capture=True)
        torch_cmd = rec.truth("run", "--tracer", "torch", "--timed", "3", "--trace-out",
                              str(rec.pack / "{case}.pt.trace.json.gz"), "--wall-out",
                              str(rec.pack / "{case}_torch_wall.json"))
        if rec.run("torch_profiler", 240, torch_cmd, env):
            rec.say("command {case}.pt.trace.json.gz: " + shlex.join(rec.truth(
                "run", "--tracer", "torch", "--timed", "3", "--trace-out",
                "{case}.pt.trace.json.gz", "--wall-out", "{case}_torch_wall.json")))
        rec.pack_up()
        for case in GRAPH_LEVEL:
            rec.nsys(f"{case}_graphlevel", "graph", rec.truth(
                "run", "--case", case, "--timed", "3", "--profiler-api", "--wall-out",
                str(rec.pack / f"{case}_graphlevel_wall.json")), capture=True)
        timings = rec.pack / "timings_c.json"
        if rec.run("time_c", 200, rec.truth("time", "--out", str(timings)), env):
            rec.say(f"command timings_c.json: {shlex.join(rec.truth('time', '--out', 'timings_c.json'))}")
        rec.pack_up()
    else:
        for case in NODE_B:
            rec.nsys(case, "node", rec.truth("run", "--case", case, "--wall-out",
                                             str(rec.pack / f"{case}_nsys_wall.json")))
        for case in GRAPH_LEVEL:
            rec.nsys(f"{case}_graphlevel", "graph", rec.truth(
                "run", "--case", case, "--wall-out", str(rec.pack / f"{case}_graphlevel_wall.json")))
        for steps in (32, 64):
            rec.nsys(f"loop{steps}", "node", ["python3", str(HERE / "torch_decode.py"), "--steps",
                                              str(steps)])
        timings = rec.pack / "timings_b.json"
        if rec.run("time_b", 200, rec.truth("time", "--out", str(timings)), env):
            rec.say(f"command timings_b.json: {shlex.join(rec.truth('time', '--out', 'timings_b.json'))}")
        rec.pack_up()
    # summary
    print(f"\nsummary (part {part}, {time.monotonic() - T0:.0f} s)")
    for label, status, note in rec.rows:
        print(f"  {label:22} {status:14} {note}")
    for w in sorted(rec.pack.glob("*_wall.json")):
        d = json.loads(w.read_text())
        if "untraced_speedup" in d:
            print(f"  {w.stem:28} traced e {d['eager_traced_step_s'] * 1e6:8.1f} g "
                  f"{d['graph_traced_step_s'] * 1e6:7.1f} | untraced e "
                  f"{d['untraced_eager_step_s'] * 1e6:8.1f} g {d['untraced_graph_step_s'] * 1e6:7.1f}"
                  f" {d['untraced_speedup']:6.2f}x spread {d['untraced_eager_spread'] * 100:3.0f}%")
    for cost in sorted(rec.pack.glob("profiler_cost_*.json")):
        print(f"  {cost.name}")
        for case, c in json.loads(cost.read_text())["cases"].items():
            calls = sorted(x for x in c["launch_call_us"] if x)
            print(f"  cost {case:12} untraced {c['untraced_median_s'] * 1e6:8.1f} traced "
                  f"{c['traced_median_s'] * 1e6:8.1f} us/step  ops {c['ops_per_step']:6.1f} launches "
                  f"{c['launches_per_step']:6.1f}  call {calls[len(calls) // 2] if calls else 0:5.2f} us  "
                  f"per op {c['per_op_us']:5.2f} us")
    for name in ("timings_a.json", "timings_b.json", "timings_c.json", "timings_d.json"):
        p = rec.pack / name
        if p.is_file():
            cases = json.loads(p.read_text())["cases"]
            print(f"  {name}: " + "  ".join(f"{k} {v['speedup']:.2f}x" for k, v in cases.items()))
    rec.pack_up()
    tb = out / f"truth_{part}.tar.gz"
    size = tb.stat().st_size
    print("tarball:", tb, f"{size:,} B")
    if size > 15 * 2**20:  # $OUT returns files of at most 16 MiB: split, `cat` joins them
        data = tb.read_bytes()
        for i in range(0, len(data), 15 * 2**20):
            (out / f"truth_{part}.tar.gz.part-{i // (15 * 2**20):02d}").write_bytes(data[i:i + 15 * 2**20])
        tb.unlink()
        print("split into", sorted(p.name for p in out.glob(f"truth_{part}.tar.gz.part-*")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
