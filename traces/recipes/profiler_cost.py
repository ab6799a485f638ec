"""What torch.profiler costs an eager step, per recorded operator and per kernel launch (issue 37's
torch.profiler calibration), measured in one process with untraced and traced passes alternated,
so that a drift of the host's speed falls on both alike.

    python3 profiler_cost.py --cases tiny,decode_b1,hf_llama --rounds 5 --out profiler_cost.json

Each round: `steps` eager steps untraced, then the same under torch.profiler (CPU and CUDA
activities, as graph_truth.py records), each timed from a drained queue. The traced pass's
events give the operators (cpu_op) and kernel launch calls (cuda_runtime/cuda_driver launches)
per step, and the traced kernel launch calls' mean duration (what the trace shows of the tracer's
cost inside each call), every round. Prints per case: untraced and traced step (medians over
rounds), and the difference per operator and per launch. `--trace-dir D` also writes each case's
last traced pass as D/CASE.pt.trace.json.gz (10 steps: the trace the measurement belongs to);
`--record-shapes` and `--with-stack` trace with those profiler options (the JSON says which).
Besides the suite's programs, probes of the cost of copies and event calls (`probes`: copy2_4k,
copy2_1m, copy20_4k, events, event_waits).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ContextManager

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import graph_truth as gt  # noqa: E402


#: torch.compile's (Inductor's) Triton kernels, whose launches Inductor wraps in a record function of
#: the kernel's name under the profiler (gapscope.trace.kineto.INDUCTOR_KERNEL's pattern).
INDUCTOR_KERNEL = re.compile(r"triton_[a-z]{3}_fused")
#: The kernel launch calls whose traced duration is recorded (the ones the model reads).
LAUNCH_CALLS = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"})


class CopyProbe(gt.Case):
    """Probes of what a copy costs the profiler: per step ``copies`` pinned host-to-device copies
    of ``size`` floats (non_blocking) among 20 tiny kernels, as graph_truth's copies program
    does with two 1 MiB copies (one each way)."""

    def __init__(self, dev: torch.device, name: str, copies: int, size: int) -> None:
        super().__init__(dev)
        self.name, self.copies, self.size = name, copies, size

    def setup(self) -> None:
        pin = self.dev.type == "cuda"
        self.h = torch.ones(self.size, pin_memory=pin)
        self.d = torch.empty(self.size, device=self.dev)
        self.y = torch.zeros(1024, device=self.dev)

    def body(self) -> None:
        for i in range(20):
            if i < self.copies:
                self.d.copy_(self.h, non_blocking=True)
            self.y.add_(1.0)
        for _ in range(20, self.copies):
            self.d.copy_(self.h, non_blocking=True)


class EventProbe(gt.Case):
    """Probes of what other CUDA calls cost the profiler: 80 tiny kernels a step, each followed by
    an event record (``wait``: and the current stream waiting on it, as streams does without the
    second stream)."""

    def __init__(self, dev: torch.device, name: str, wait: bool) -> None:
        super().__init__(dev)
        self.name, self.wait = name, wait

    def setup(self) -> None:
        self.y = torch.zeros(1024, device=self.dev)
        self.ev = [torch.cuda.Event() for _ in range(80)] if self.dev.type == "cuda" else []

    def body(self) -> None:
        cur = torch.cuda.current_stream() if self.ev else None
        for i in range(80):
            self.y.add_(1.0)
            if self.ev:
                self.ev[i].record(cur)
                if self.wait:
                    cur.wait_event(self.ev[i])


def probes(dev: torch.device) -> dict[str, gt.Case]:
    """The probe programs by name (not part of the ground-truth suite)."""
    cases = [CopyProbe(dev, "copy2_4k", 2, 1024), CopyProbe(dev, "copy2_1m", 2, 256 * 1024),
             CopyProbe(dev, "copy20_4k", 20, 1024), EventProbe(dev, "events", False),
             EventProbe(dev, "event_waits", True)]
    return {c.name: c for c in cases}


def arguments(cases: str, rounds: int, out: str) -> argparse.ArgumentParser:
    """The options of a tracer's cost measurement (this one's and nsys_cost.py's): the cases,
    the alternated rounds, the steps a pass and the JSON written."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=cases)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", default=out)
    return ap


def alternated(case: gt.Case, rounds: int, steps: int, tracing: Callable[[], ContextManager],
               after: Callable[[Any], None] | None = None) -> tuple[list[float], list[float]]:
    """(untraced, traced) seconds a step, a figure a round: ``case`` set up and warmed up, then
    ``rounds`` times ``steps`` eager steps untraced and the same inside ``tracing()`` (``after``
    called with what it entered as, once each traced pass is done), each timed from a drained
    queue."""
    case.setup()
    un, tr = [], []
    with torch.inference_mode():
        for _ in range(3):
            gt.time_phase(case, case.eager_step, 3)
        for _ in range(rounds):
            un.append(gt.time_phase(case, case.eager_step, steps))
            with tracing() as session:
                tr.append(gt.time_phase(case, case.eager_step, steps))
            if after is not None:
                after(session)
    return un, tr


def main() -> int:
    ap = arguments("tiny,decode_b1,hf_llama", 5, "profiler_cost.json")
    ap.add_argument("--trace-dir", default=None, help="write each case's last traced pass here")
    ap.add_argument("--record-shapes", action="store_true", help="the profiler with record_shapes=True")
    ap.add_argument("--with-stack", action="store_true", help="the profiler with with_stack=True (its Python tracer)")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    acts = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    cases = {**gt.make_cases(dev), **probes(dev)}
    options = {"record_shapes": args.record_shapes, "with_stack": args.with_stack}
    result = {"env": gt.environment(), "rounds": args.rounds, "steps": args.steps, "profiler": options,
              "cases": {}}
    for name in args.cases.split(","):
        case = cases[name]
        call_us, last = [], []

        def traced_calls(prof) -> None:
            durs = [e.cpu_time_total for e in prof.events() if e.name in LAUNCH_CALLS]
            call_us.append(statistics.fmean(durs) if durs else None)
            last[:] = [prof]

        un, tr = alternated(case, args.rounds, args.steps,
                            lambda: torch.profiler.profile(activities=acts, **options), traced_calls)
        (prof,) = last
        # The last traced pass's events by category, as its exported trace holds them.
        with tempfile.TemporaryDirectory() as tmp:
            plain = os.path.join(args.trace_dir or tmp, f"{name}.pt.trace.json")
            prof.export_chrome_trace(plain)
            with open(plain) as f:
                cats = Counter(e.get("cat") for e in json.load(f)["traceEvents"])
            if args.trace_dir:
                with open(plain, "rb") as src, gzip.open(plain + ".gz", "wb") as dst:
                    shutil.copyfileobj(src, dst)
            os.remove(plain)
        ev = prof.events()
        ops = sum(1 for e in ev if e.device_type == torch.autograd.DeviceType.CPU
                  and not e.name.startswith(("cuda", "cu")))
        launches = sum(1 for e in ev if "LaunchKernel" in e.name or e.name == "cuLaunchKernel"
                       or "LaunchCooperative" in e.name)
        calls = sum(1 for e in ev if e.name.startswith(("cuda", "cu")))
        inductor = sum(1 for e in ev if e.device_type == torch.autograd.DeviceType.CPU
                       and INDUCTOR_KERNEL.match(e.name))
        u, t = statistics.median(un), statistics.median(tr)
        call = statistics.median([c for c in call_us if c] or [0])
        row = {"untraced_step_s": un, "traced_step_s": tr, "untraced_median_s": u,
               "traced_median_s": t, "ops_per_step": ops / args.steps,
               "launches_per_step": launches / args.steps, "api_calls_per_step": calls / args.steps,
               "launch_call_us": call_us, "cpu_ops_per_step": cats["cpu_op"] / args.steps,
               "python_functions_per_step": cats["python_function"] / args.steps,
               "inductor_launches_per_step": inductor / args.steps}
        row["per_op_us"] = (t - u) / max(1, row["ops_per_step"]) * 1e6
        row["per_launch_us"] = (t - u) / max(1, row["launches_per_step"]) * 1e6
        result["cases"][name] = row
        print(f"{name:10s} untraced {u * 1e6:8.1f} us  traced {t * 1e6:8.1f} us  "
              f"ops {row['ops_per_step']:6.0f}  launches {row['launches_per_step']:5.0f}  "
              f"api {row['api_calls_per_step']:5.0f}  inductor {row['inductor_launches_per_step']:4.0f}  call {call:5.2f} us  per op {row['per_op_us']:5.2f} us  "
              f"per launch {row['per_launch_us']:6.2f} us  rounds untraced "
              + " ".join(f"{x * 1e6:.0f}" for x in un) + " traced "
              + " ".join(f"{x * 1e6:.0f}" for x in tr), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
