"""What nsys costs an eager step (issue 37's nsys calibration), measured in one process with
untraced and traced passes alternated, so that a drift of the host's speed falls on both alike.
Run it under nsys with a capture range that re-arms after each stop:

    nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none --cuda-graph-trace=node \\
        --capture-range=cudaProfilerApi --capture-range-end=repeat:N -o W/cost \\
        python3 nsys_cost.py --cases tiny,cupy_tiny,triton --rounds 6 --out nsys_cost.json

(N = cases x rounds). Each round: `steps` eager steps of graph_truth.py's case untraced, then the
same between cudaProfilerStart and cudaProfilerStop (nsys records them: one report a round), each
timed from a drained queue. Outside the capture ranges nsys is attached but records nothing, as
in the ground truth's untraced timings before and after a traced pass. Prints per case the
untraced and traced step (medians over rounds) and their difference; the launches a step and the
traced launch call are read from a round's report afterwards (gapscope on its SQLite export).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import graph_truth as gt  # noqa: E402
from profiler_cost import alternated, arguments  # noqa: E402


@contextlib.contextmanager
def captured(dev: torch.device):
    """A pass between cudaProfilerStart and cudaProfilerStop (one nsys capture range), from a
    drained queue."""
    gt.sync(dev)
    if dev.type == "cuda":
        torch.cuda.profiler.start()
    try:
        yield None
    finally:
        if dev.type == "cuda":
            torch.cuda.profiler.stop()


def main() -> int:
    args = arguments("tiny,cupy_tiny,triton", 6, "nsys_cost.json").parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cases = gt.make_cases(dev)
    result = {"env": gt.environment(), "rounds": args.rounds, "steps": args.steps, "cases": {}}
    for name in args.cases.split(","):
        un, tr = alternated(cases[name], args.rounds, args.steps, lambda: captured(dev))
        u, t = statistics.median(un), statistics.median(tr)
        result["cases"][name] = {"untraced_step_s": un, "traced_step_s": tr, "untraced_median_s": u,
                                 "traced_median_s": t}
        print(f"{name:12s} untraced {u * 1e6:8.1f} us  traced {t * 1e6:8.1f} us  cost {(t - u) * 1e6:7.1f} us a step"
              "  rounds untraced " + " ".join(f"{x * 1e6:.0f}" for x in un) + " traced "
              + " ".join(f"{x * 1e6:.0f}" for x in tr), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
