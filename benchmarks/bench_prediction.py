"""The CUDA Graph prediction against untraced measurements (issue 37's ground truth).

    python benchmarks/bench_prediction.py [--truth traces/truth] [--tolerance F]

For every trace of traces/truth/ (traces/README.md, "Ground truth"; its GPU as the trace names it): gapscope's predicted
speedup of the `eager` range (steady state, untraced) beside the speedup measured without any
profiler in the same process (eager step time / replayed step time, each of the six timed
repeats before and after the traced pass: the range min..max), the graph ceiling beside the
speedup the trace itself measured (traced eager span / traced graph span), and whether the
prediction lies within the tolerance of the measured range (issue 37's: 15 % from nsys traces,
25 % from torch.profiler traces; ``--tolerance`` one for both). Coverage cases (fallback, rerecord:
their graph phase is not a full replay) and the calibration case (tiny under nsys on the H200:
nsys's calibration came from its loop) are listed apart; every other trace is validation. A case
whose trace warns that other threads launched inside its ranges (train_mlp: autograd's device
thread) is analyzed as the warning says (``--threads process``).

Then the two sides of each prediction, a step each: the untraced eager step and the replayed step
as the model predicts them beside the same process's untraced repeats (which side a miss is on).

Then torch.profiler's cost itself: for each measurement of it in traces/truth
(`*profiler_cost_*.json` that record their traced launch calls: traced and untraced passes of the
same eager steps alternated in one process), the model's cost per step
(gapscope.analysis.prediction.launch_cost_ns on the pass's operators, launches, other CUDA calls,
launches of Inductor's Triton code and traced launch call) beside the measured one (medians of the
rounds, and the rounds' range). Part h's measurement is the calibration itself (the constants
were fitted to it), and part v's compiled_b1 fitted the cost per Inductor launch; part i's, part
j's (the H200's host; its shapes and stack passes recorded with record_shapes and with_stack,
which the model does not count) and part v's other programs are not.
Prints the tables; exits 0 (the numbers are the point, not a pass/fail).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROLES = {"fallback": "coverage", "rerecord": "coverage"}
#: Analysis options by case, as the trace's own warning asks for them: train_mlp's backward pass is
#: launched by autograd's device thread, which the default `--threads same` leaves out of the step.
OPTIONS = {"train_mlp": {"threads": "process"}}
#: nsys's calibration (gapscope.catalog.TRACERS) was fitted on this case on this GPU (torch.profiler's
#: on traced and untraced passes alternated: the table after the first).
CALIBRATION = ("tiny", "nsys", "H200")


def repeats(timing: dict, phase: str) -> list[float]:
    """Seconds a step of ``phase`` ("eager_s", "graph_s") in each of the same process's untraced
    repeats, before the traced pass then after it (the two phases' lists in the same order)."""
    return [t for k in ("before", "after") for t in timing["untraced"][k][phase]]


def measured(timing: dict) -> tuple[float, float]:
    """(min, max) of eager / graph over the same process's untraced repeats."""
    speedups = [e / g for e, g in zip(repeats(timing, "eager_s"), repeats(timing, "graph_s"))]
    return min(speedups), max(speedups)


def error(predicted: float, lo: float, hi: float) -> float:
    """0 inside [lo, hi], else the relative distance to the nearer end."""
    if lo <= predicted <= hi:
        return 0.0
    return predicted / hi - 1 if predicted > hi else predicted / lo - 1


def rows(truth: Path) -> list[dict]:
    from gapscope.analysis import analyze

    timings = json.loads((truth / "timings.json").read_text())["traces"]
    out = []
    for name, timing in sorted(timings.items()):
        result = analyze(truth / name, **OPTIONS.get(timing["case"], {}))
        by_name = {r["name"]: r for r in result.by_name}
        eager, graph = by_name["eager"], by_name["graph"]
        lo, hi = measured(timing)
        p = eager["graph_predicted_speedup"]
        gpu = next(iter(result.trace.get("gpus", {}).values()), "?") if result.trace else "?"
        gpu = gpu.replace("NVIDIA ", "").split()[0]
        role = "calibration" if (timing["case"], timing["tracer"], gpu) == CALIBRATION \
            else ROLES.get(timing["case"], "validation")
        eager_range = next(x for x in result.ranges if x["name"] == "eager")
        steps = sum(1 for x in result.ranges if x["name"] == "step"
                    and eager_range["start_ns"] <= x["start_ns"] <= eager_range["end_ns"])
        out.append({
            "steps": steps,
            "eager_step_us": eager["eager_untraced_ns"] / steps / 1e3,
            "replay_step_us": eager["graph_predicted_ns"] / steps / 1e3,
            "eager_measured_us": [min(repeats(timing, "eager_s")) * 1e6, max(repeats(timing, "eager_s")) * 1e6],
            "replay_measured_us": [min(repeats(timing, "graph_s")) * 1e6, max(repeats(timing, "graph_s")) * 1e6],
            "traced_eager_step_us": timing["traced_step_s"]["eager"] * 1e6,
            "trace": name, "case": timing["case"], "tracer": timing["tracer"],
            "gpu": gpu, "level": timing["graph_trace"] or "-", "role": role,
            "predicted": p, "low": eager["graph_predicted_low"], "high": eager["graph_predicted_high"],
            "measured_lo": lo, "measured_hi": hi, "error": error(p, lo, hi),
            "ceiling": eager["graph_ceiling_speedup"],
            "traced": eager["steady_span_ns"] / graph["steady_span_ns"],
            "one_off_ns": eager["one_off_ns"], "reading": eager["reading"],
        })
    return out


#: Issue 37's tolerance of a prediction against its measured range, by the trace's tracer.
TOLERANCE = {"nsys": 0.15, "torch": 0.25}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--truth", type=Path, default=ROOT / "traces" / "truth")
    ap.add_argument("--tolerance", type=float, default=None,
                    help="one tolerance for the table's marks (default: each tracer's, TOLERANCE)")
    args = ap.parse_args()
    table = rows(args.truth)
    print(f"{'trace':36} {'GPU':5} {'role':11} {'predicted (range)':>24} {'measured untraced':>18} {'error':>7} "
          f"{'ceiling':>8} {'traced':>7}  reading")
    for r in table:
        limit = TOLERANCE[r["tracer"]] if args.tolerance is None else args.tolerance
        flag = "" if abs(r["error"]) <= limit else "  <-- outside"
        print(f"{r['trace']:36} {r['gpu']:5} {r['role']:11} {r['predicted']:7.2f}x ({r['low']:5.2f}-{r['high']:6.2f}) "
              f"{r['measured_lo']:7.2f}-{r['measured_hi']:6.2f}x {r['error'] * 100:+6.0f}% {r['ceiling']:7.2f}x "
              f"{r['traced']:6.2f}x  {r['reading']}{flag}")
    for tracer, default in TOLERANCE.items():
        limit = default if args.tolerance is None else args.tolerance
        for gpu in sorted({r["gpu"] for r in table}):
            checked = [r for r in table if r["role"] == "validation" and r["tracer"] == tracer and r["gpu"] == gpu]
            if not checked:
                continue
            within = [r for r in checked if abs(r["error"]) <= limit]
            print(f"{tracer} on {gpu}: {len(within)} of {len(checked)} validation traces within {limit:.0%} of their "
                  f"measured range; median |error| "
                  f"{statistics.median(abs(r['error']) for r in checked) * 100:.1f}%")
    below = [r["trace"] for r in table if r["ceiling"] < r["traced"] - 1e-9]
    print("ceiling below the trace's own measured replay speedup:", ", ".join(below) or "none")
    sides(table)
    tracer_cost(args.truth)
    return 0


def sides(table: list[dict]) -> None:
    """The two sides of each predicted speedup, a step each: the untraced eager step and the replayed
    step as the model predicts them (the eager range's eager_untraced_ns and graph_predicted_ns over
    the `step` ranges inside it) beside the same process's untraced repeats (min-max), and the
    traced eager step: which side a prediction outside its range missed on."""
    print(f"\nthe two sides, a step (us): predicted beside the untraced repeats; error = distance to that range")
    print(f"{'trace':36} {'steps':>5} {'traced eager':>12} {'eager predicted':>15} {'measured':>17} {'error':>6} "
          f"{'replay predicted':>16} {'measured':>15} {'error':>6}")
    for r in table:
        e_lo, e_hi = r["eager_measured_us"]
        g_lo, g_hi = r["replay_measured_us"]
        print(f"{r['trace']:36} {r['steps']:5} {r['traced_eager_step_us']:12.0f} {r['eager_step_us']:15.0f} "
              f"{e_lo:8.0f}-{e_hi:8.0f} {error(r['eager_step_us'], e_lo, e_hi) * 100:+5.0f}% "
              f"{r['replay_step_us']:16.1f} {g_lo:7.1f}-{g_hi:7.1f} {error(r['replay_step_us'], g_lo, g_hi) * 100:+5.0f}%")


def tracer_cost(truth: Path) -> None:
    """torch.profiler's cost per step as the model computes it from each alternated measurement's
    operators, launches, other calls, launches of torch.compile's Triton code and traced launch
    call, beside the cost measured."""
    from gapscope.analysis.prediction import launch_cost_ns
    from gapscope.catalog import TRACERS

    for path in sorted(truth.glob("*profiler_cost_*.json")):
        data = json.loads(path.read_text())
        cases = {k: c for k, c in data["cases"].items() if c.get("launch_call_us")}
        if not cases:
            continue
        print(f"\ntorch.profiler's cost per eager step, {path.name} ({data['env']['gpu']}: {data['rounds']} "
              f"rounds of {data['steps']} steps, traced and untraced alternated)")
        print(f"{'program':12} {'operators':>9} {'launches':>8} {'other calls':>11} {'traced call':>11} {'model':>9} "
              f"{'measured (rounds)':>24} {'error':>6}")
        errors = []
        for case, c in cases.items():
            call = statistics.median([x for x in c["launch_call_us"] if x])
            # the cpu_op events alone, where the measurement counted them apart (a pass with
            # with_stack also records Python events, which ops_per_step counts too)
            operators = c.get("cpu_ops_per_step", c["ops_per_step"])
            # the CUDA calls other than launches (event records, stream waits, copies)
            others = c["api_calls_per_step"] - c["launches_per_step"]
            # the launches of torch.compile's Triton code, where the measurement counted them
            inductor = c.get("inductor_launches_per_step", 0.0)
            model = c["launches_per_step"] * launch_cost_ns(
                TRACERS["torch"], call * 1e3, operators / c["launches_per_step"], None, 1.0,
                others / c["launches_per_step"], inductor / c["launches_per_step"]) / 1e3
            rounds = [(t - u) * 1e6 for u, t in zip(c["untraced_step_s"], c["traced_step_s"])]
            cost = (c["traced_median_s"] - c["untraced_median_s"]) * 1e6
            errors.append(model / cost - 1)
            print(f"{case:12} {operators:9.1f} {c['launches_per_step']:8.1f} {others:11.1f} {call:9.2f}us "
                  f"{model:7.1f}us {cost:8.1f}us ({min(rounds):6.1f}-{max(rounds):6.1f}) {model / cost - 1:+6.0%}")
        print(f"median |error| {statistics.median(abs(e) for e in errors):.0%}, within 25 %: "
              f"{sum(abs(e) <= 0.25 for e in errors)} of {len(errors)}")


if __name__ == "__main__":
    sys.exit(main())
