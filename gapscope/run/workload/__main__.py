"""`python -m gapscope.run.workload`: run the micro-kernel paths in this process (what nsys wraps).

Typical use, as `gapscope run` does it:
    python -m gapscope.run.workload --kernel-us 2,50 --save-plan plan.json --no-trace   # calibrate
    nsys profile ... python -m gapscope.run.workload --plan plan.json --kernels 300 --streams 3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from gapscope.errors import GapscopeError
from gapscope.run.workload import KERNEL_KINDS, PATHS, parse_us_list, split_paths


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gapscope.run.workload", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernel-us", default="10", help="target kernel times, comma-separated (us)")
    p.add_argument("--kind", default="spin", choices=KERNEL_KINDS)
    p.add_argument("--kernels", type=int, default=1000, help="kernels per path (N)")
    p.add_argument("--streams", type=int, default=4, help="streams of the multistream path (S)")
    p.add_argument("--paths", default=",".join(PATHS))
    p.add_argument("--repeat", type=int, default=1, help="runs of each path under its range")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--plan", type=Path, help="reuse this calibration (JSON) instead of calibrating")
    p.add_argument("--save-plan", type=Path, help="write the calibration here (JSON)")
    p.add_argument("--timing", type=Path, help="also time the paths untraced; write JSON here")
    p.add_argument("--no-trace", action="store_true", help="skip the NVTX-ranged runs")
    p.add_argument("--steps", type=int, default=32, help="cases: requests, steps, updates, pairs")
    p.add_argument("--layers", type=int, default=8, help="cases: kernels (or layers) per step")
    p.add_argument("--pool-sizes", default="vllm", help="graph-pool ladder: sizes or vllm[:N]")
    p.add_argument("--seed", type=int, default=0, help="graph-pool: seed of the request sizes")
    p.add_argument("--summary", type=Path, help="write the range names run (JSON) here")
    p.add_argument("--quiet", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except GapscopeError as exc:
        print(f"gapscope.run.workload: error: {exc.message}", file=sys.stderr)
        return exc.exit_code


def _run(args: argparse.Namespace) -> int:
    from gapscope.run.workload.cases import CaseConfig, run_cases
    from gapscope.run.workload.kernels import Calibration, KernelSet, calibrate
    from gapscope.run.workload.ladder import parse_sizes
    from gapscope.run.workload.paths import Workload, check_paths, run_traced
    from gapscope.run.workload.timing import time_paths

    paths, cases = split_paths(check_paths([p.strip() for p in args.paths.split(",") if p.strip()]))
    if args.repeat < 1:
        raise GapscopeError(f"--repeat must be at least 1, got {args.repeat}")
    cfg = CaseConfig(steps=args.steps, layers=args.layers, kernels=args.kernels,
                     pool_sizes=parse_sizes(args.pool_sizes), seed=args.seed)
    cfg.validate()
    say = (lambda _m: None) if args.quiet else (lambda m: print(f"[workload] {m}", file=sys.stderr))

    ks = KernelSet(args.device)
    if args.plan:
        try:
            calib = Calibration.from_dict(json.loads(args.plan.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise GapscopeError(f"cannot read calibration {args.plan}: {exc}") from exc
    else:
        calib = calibrate(parse_us_list(args.kernel_us), args.kind, args.device, say, ks)
    if args.save_plan:
        args.save_plan.write_text(json.dumps(calib.to_dict(), indent=2))
    for p in calib.plans:
        say(f"plan {p.kind} target {p.target_us:g} us: work {p.work}, measured {p.measured_us:.2f} us")

    sweep = len(calib.plans) > 1
    workloads = [(p.target_us if sweep else None, Workload(ks, p, args.kernels, args.streams))
                 for p in calib.plans] if paths else []

    if args.timing and paths:
        timings = time_paths(workloads, paths, repeat=max(3, args.repeat))
        for t in timings:
            say(f"untraced {t.path} k={t.kernel_us}: {t.median_us:.2f} us/kernel")
        args.timing.write_text(json.dumps([t.to_dict() for t in timings], indent=2))

    names: list[str] = []
    case_runs: dict = {}
    if not args.no_trace:
        if paths:
            names = run_traced(workloads, paths, args.repeat, say)
        if cases:
            case_runs = run_cases(ks, calib.plans, cases, cfg, args.repeat, say)
    if args.summary:
        args.summary.write_text(json.dumps({
            "ranges": names, "paths": paths, "cases": case_runs, "kernels": args.kernels,
            "streams": args.streams, "repeat": args.repeat, "calibration": calib.to_dict()},
            indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
