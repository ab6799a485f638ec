"""How a CUDA Graph replay's device time grows with its node count, untraced (issue 37's
turnaround calibration for traces recorded at graph level, where a replay's inside is not seen).

    python3 graph_sizes.py sweep --out sweep.json     # replay and eager timings per chain length
    python3 graph_sizes.py cores                      # rank the host's cores by a tiny eager loop
    nsys profile --cuda-graph-trace=node ... python3 graph_sizes.py sweep --no-cupti --replays 3

`sweep`: for each kernel kind and chain length n, one graph of n dependent kernels on one stream
(a chain, as an eager loop's capture is). Untraced: the stream is held by a `torch.cuda._sleep`
kernel while the host queues R replays (or the n eager launches) behind it, so CUDA events around
them time the device alone, launch cost excluded: the replay's device time per replay (T) and the
eager kernels' back-to-back time (Q). Then, under torch.profiler (CUPTI), the kernels' own
durations: eager (k_eager) and inside a replay (k_graph), and the gaps inside a replay (g). The
turnaround a replay adds per boundary is t = (T - n x k_eager) / (n - 1). Also the wall time per
replay from a drained queue (W: graph_truth.py's way of timing a graph step).

`cores`: each core's time per step of 200 tiny adds (in-process, sched_setaffinity), fastest
first, for pinning the recordings.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time

import torch

KINDS = {
    # name: (elements, chain lengths)
    "tiny": (1024, (10, 25, 50, 100, 200, 400, 1000, 2000, 4000, 8000)),
    "medium": (2 * 1024 * 1024, (25, 100, 400, 2000)),
    "mixed": (None, (25, 100, 400, 2000)),
}


class Chain:
    def __init__(self, kind: str, n: int, dev: torch.device) -> None:
        self.kind, self.n = kind, n
        if kind == "mixed":
            # alternating kernels of different shapes: a small add, a 64k-element mul, a 64x64 matmul
            self.a = torch.zeros(1024, device=dev)
            self.b = torch.ones(65536, device=dev)
            self.m = torch.randn(64, 64, device=dev)
            self.o = torch.empty(64, 64, device=dev)
        else:
            self.a = torch.zeros(KINDS[kind][0], device=dev)

    def body(self) -> None:
        if self.kind == "mixed":
            for i in range(self.n):
                r = i % 3
                if r == 0:
                    self.a.add_(1.0)
                elif r == 1:
                    self.b.mul_(1.0)
                else:
                    torch.mm(self.m, self.m, out=self.o)
        else:
            a = self.a
            for _ in range(self.n):
                a.add_(1.0)


def capture(chain: Chain) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            chain.body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        chain.body()
    torch.cuda.synchronize()
    for _ in range(2):
        g.replay()
    torch.cuda.synchronize()
    return g


def held(work, repeats: int, hold_cycles: int) -> tuple[float, float, float]:
    """Device seconds per repeat of `work`, queued behind a sleep kernel; also the host's queueing
    time and the sleep's device time (the hold covers the queueing when the latter is larger)."""
    e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    torch.cuda.synchronize()
    e0.record()
    torch.cuda._sleep(hold_cycles)
    e1.record()
    t0 = time.perf_counter()
    for _ in range(repeats):
        work()
    host = time.perf_counter() - t0
    e2.record()
    torch.cuda.synchronize()
    return e1.elapsed_time(e2) / 1e3 / repeats, host, e0.elapsed_time(e1) / 1e3


def walled(work, repeats: int) -> float:
    """Wall seconds per repeat of `work`, from a drained queue to the last one's end (graph_truth's
    way of timing a graph step: the launch of the first replay included)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        work()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / repeats


def kernel_durations(chain: Chain, graph: torch.cuda.CUDAGraph) -> dict:
    """CUPTI's kernel durations (ns) eager and inside a replay, and the gaps inside a replay."""
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=acts) as prof:
        chain.body()
        torch.cuda.synchronize()
        for _ in range(2):
            graph.replay()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    n = chain.n
    if len(kernels) != 3 * n:  # one kernel per node expected; else the split below is wrong
        return {"kernels_seen": len(kernels)}
    eager, graph_k = kernels[:n], kernels[n:3 * n]

    def dur(ks: list) -> list:
        return [1e3 * k["dur"] for k in ks]

    gaps = []
    for rep in (graph_k[:n], graph_k[n:]):
        gaps += [1e3 * (b["ts"] - (a["ts"] + a["dur"])) for a, b in itertools.pairwise(rep)]
    return {"kernels_seen": len(kernels), "k_eager_ns": statistics.median(dur(eager)),
            "k_eager_mean_ns": statistics.fmean(dur(eager)),
            "k_graph_ns": statistics.median(dur(graph_k)), "k_graph_mean_ns": statistics.fmean(dur(graph_k)),
            "inside_gap_mean_ns": statistics.fmean(gaps) if gaps else None,
            "inside_gap_median_ns": statistics.median(gaps) if gaps else None}


def sweep(out: str, traced: bool, replays: int | None) -> int:
    """``traced``: also CUPTI's kernel durations (torch.profiler; off under nsys, which holds
    CUPTI itself); ``replays``: replays timed per repeat (default: about 40,000 kernels' worth)."""
    dev = torch.device("cuda")
    rows = []
    hold = int(4e7)  # ~20 ms at the H200's ~2 GHz
    for kind, (_, sizes) in KINDS.items():
        for n in sizes:
            chain = Chain(kind, n, dev)
            g = capture(chain)
            reps = replays or max(3, min(200, 40000 // n))
            for _ in range(2):  # warm
                held(g.replay, 2, hold // 10)
            torch.cuda.nvtx.range_push(f"{kind}_{n}")
            T = [held(g.replay, reps, hold) for _ in range(3)]
            e_reps = 1 if replays else max(1, min(20, 8000 // n))
            hold_e = int(max(hold, n * e_reps * 7e-6 * 2e9 * 2))  # ~7 us of host per eager launch
            Q = [held(chain.body, e_reps, hold_e) for _ in range(3)]
            W = [walled(g.replay, reps) for _ in range(3)]
            torch.cuda.nvtx.range_pop()
            k = kernel_durations(chain, g) if traced else {}
            t_dev = statistics.median(x[0] for x in T)
            q_dev = statistics.median(x[0] for x in Q)
            row = {"kind": kind, "n": n, "replays": reps, "replay_s": [x[0] for x in T],
                   "replay_host_queue_s": [x[1] for x in T], "hold_s": [x[2] for x in T],
                   "eager_queued_s": [x[0] for x in Q], "eager_host_queue_s": [x[1] for x in Q],
                   "eager_hold_s": [x[2] for x in Q], "replay_wall_s": W, **k}
            covered = all(x[1] < x[2] for x in T + Q)
            row["hold_covered_queueing"] = covered
            if "k_eager_ns" in k:
                row["turnaround_ns"] = (t_dev * 1e9 - n * k["k_eager_ns"]) / max(n - 1, 1)
                # the mean: a mixed chain's kernels differ, their sum is n x the mean
                row["turnaround_mean_ns"] = (t_dev * 1e9 - n * k["k_eager_mean_ns"]) / max(n - 1, 1)
                row["eager_queued_turnaround_ns"] = (q_dev * 1e9 - n * k["k_eager_ns"]) / max(n - 1, 1)
            rows.append(row)
            w = statistics.median(W)
            print(f"{kind:7} n {n:5d}  replay {t_dev * 1e6:9.1f} us ({t_dev * 1e9 / n:7.1f} ns/node, wall "
                  f"{w * 1e9 / n:7.1f})  "
                  f"eager queued {q_dev * 1e9 / n:7.1f} ns/kernel  k_eager {k.get('k_eager_ns', 0):6.0f}  "
                  f"k_graph {k.get('k_graph_ns', 0):6.0f}  inside gap {k.get('inside_gap_mean_ns') or 0:6.0f}  "
                  f"t {row.get('turnaround_ns', float('nan')):6.0f} ns  covered {covered}", flush=True)
            del g, chain
            torch.cuda.empty_cache()
    env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
           "python": sys.version.split()[0], "affinity": sorted(os.sched_getaffinity(0)),
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "argv": sys.argv}
    with open(out, "w") as f:
        json.dump({"environment": env, "rows": rows}, f, indent=1)
    return 0


def cores(out: str | None) -> int:
    dev = torch.device("cuda")
    x = torch.zeros(1024, device=dev)

    def step() -> None:
        for _ in range(200):
            x.add_(1.0)

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    speeds = {}
    for core in sorted(os.sched_getaffinity(0)):
        os.sched_setaffinity(0, {core})
        times = []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(20):
                step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / 20)
        speeds[core] = min(times)
    ranked = sorted(speeds, key=speeds.get)
    print(json.dumps({"ranked": ranked, "step_us": {c: round(speeds[c] * 1e6, 1) for c in ranked}}))
    if out:
        with open(out, "w") as f:
            json.dump({"ranked": ranked, "step_s": speeds}, f)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("sweep", "cores"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-cupti", action="store_true", help="sweep: no torch.profiler pass (under nsys)")
    ap.add_argument("--replays", type=int, default=None, help="sweep: replays per timed repeat")
    args = ap.parse_args()
    if args.mode == "sweep":
        return sweep(args.out or "sweep.json", not args.no_cupti, args.replays)
    return cores(args.out)


if __name__ == "__main__":
    sys.exit(main())
