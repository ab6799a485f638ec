"""How far identical code moves what `gapscope compare` checks: the spread of every candidate
metric over the three recordings of one program (traces/cmp_base_1..3), against the default
thresholds (docs/ci.md, "Defaults and noise", quotes this script's output).

    python benchmarks/compare_noise.py

One row per range (and the whole device) and metric: the value compare reads in each run (per
instance: the median over the range's instances with GPU work; a range name whose instances ran
in several modes, decode_step's 16 replayed, 15 eager and 1 eager one-off steps, one row per
mode, as compare checks it), the largest change between two
runs (max - min) and as a share of the smallest (max / min - 1), and for a metric with a default
threshold what that default allows and how much of it the spread uses. A default must stay well
above the spread, or identical code fails; a metric whose spread is large is left opt-in.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNS = ("cmp_base_1", "cmp_base_2", "cmp_base_3")
#: The candidate metrics, in the order of the table.
CANDIDATES = ("gap_fraction", "kernels", "sync_ns", "gpu_span_ns", "gap_ns", "busy_ns", "gap_p99_ns",
              "launch_ns", "host_ns", "setup_ns", "pipeline_ns", "kernel_median_ns", "graph_kernels")
LAUNCH = ("cudaLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")


def main() -> None:
    from gapscope.analysis import analyze
    from gapscope.regression.entries import entries
    from gapscope.regression.metrics import METRICS
    from gapscope.regression.plan import Plan
    from gapscope.regression.thresholds import ThresholdSet

    results = [analyze(ROOT / "traces" / f"{r}.sqlite").to_dict() for r in RUNS]
    defaults = ThresholdSet.defaults()
    rows = []
    ranges = ("eager", "decode_step (eager)", "decode_step (replayed)", "decode_step (eager one-off)", "graph")
    for scope, keys in (("range", ranges), ("device", ("GPU 0",)), ("launch", LAUNCH)):
        runs = [entries(r, scope, name) for r, name in zip(results, RUNS)]
        plan = Plan.of(scope, runs, runs)  # the entries compare checks: one per mode of a split name
        frames = [e.frame.set_index("key") for e in plan.base]
        metrics = ("launch.host_median_ns",) if scope == "launch" else CANDIDATES
        for metric in metrics:
            for key in keys:
                values = [float(f.at[key, metric]) for f in frames]
                name = key.split(" (")[0]
                th = defaults.for_entry(scope, name).get(metric)
                rows.append((scope, key, metric, values, th))
        if scope == "range":
            for ident, (runs_b, _) in plan.coverage.items():
                if any(r for _, r in runs_b):
                    key = json.loads(ident)["name"]
                    print(f"{key}: eager, replayed instances per run: {runs_b}  (eager_fallback "
                          f"{defaults.for_entry('range', key)['eager_fallback'].describe_limit()}: moves by "
                          f"{max(e for e, _ in runs_b) - min(e for e, _ in runs_b)})")
            print()
    verdicts = {key: {r["by_name"][i]["verdict"] for r in results} for i, key in
                enumerate(("eager", "decode_step", "graph"))}

    print(f"{'scope':7} {'entry':28} {'metric':21} {'run 1':>10} {'run 2':>10} {'run 3':>10} "
          f"{'max-min':>10} {'max/min':>8} {'default':>12} {'uses':>5}")
    for scope, key, metric, values, th in rows:
        m = METRICS[metric]
        spread = max(values) - min(values)
        ratio = f"{max(values) / min(values) - 1:+.1%}" if min(values) > 0 else "-"
        allowed = th.allowed_increase(min(values)) if th is not None else None
        uses = f"{spread / allowed:.0%}" if allowed else ("-" if allowed is None else ("0%" if spread == 0 else "ALL"))
        print(f"{scope:7} {key:28} {m.short:21} {m.format(values[0]):>10} {m.format(values[1]):>10} "
              f"{m.format(values[2]):>10} {m.format_delta(spread).lstrip('+'):>10} {ratio:>8} "
              f"{th.describe_limit() if th else '(opt-in)':>12} {uses:>5}")
    print()
    for key, seen in verdicts.items():
        print(f"verdict of {key}: {', '.join(sorted(seen))} in all three runs" if len(seen) == 1
              else f"verdict of {key}: {', '.join(sorted(seen))} (changes between runs)")


if __name__ == "__main__":
    main()
