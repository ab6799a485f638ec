"""The long fuzz campaign of issue 20: thousands of mutated traces and result JSONs.

    python tools/fuzz_campaign.py --traces 5000 --jsons 1000 [--seed 0] [--timeout 60]

Each case is one of tests/mutations.py's: a copy of the fuzz seed (a small SYNTHETIC cut of
traces/torch_decode.sqlite, tests/damage.py) damaged by seeded SQL-level or byte-level
mutations and analyzed, or a mutated result JSON analyzed, reported and compared under two
random threshold specs. Cases run in ONE worker process (in-process CLI calls, so a case costs
tens of milliseconds, not an interpreter start); the parent bounds every case to --timeout
seconds and kills and restarts the worker on a hang or a crash, so neither can stop the
campaign. At the end it prints a table: tracebacks, hangs, changed inputs, new files, every
other failure kind, and the correct / warned / refused counts, with the time per case. Exit
status 1 when any case failed; --failures FILE keeps their seeds and mutations to replay.

Needs the test extras (``pip install -e '.[test]'``): it imports tests/ helpers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
RESULT = "@@result "
READY = "@@ready"


def worker(workdir: Path) -> None:
    """Read case lines ({"kind", "seed"}) on stdin, answer one RESULT line per case."""
    sys.path.insert(0, str(TESTS))
    sys.path.insert(0, str(ROOT))
    from mutations import describe, json_case, run_cli, trace_case

    seed_trace = workdir / "seed" / "small.sqlite"
    code, base, err = run_cli("analyze", str(seed_trace), "-f", "json")
    if code != 0:
        raise SystemExit(f"the fuzz seed does not analyze: {err}")
    cases = workdir / "cases"
    cases.mkdir(exist_ok=True)
    out = os.fdopen(os.dup(1), "w", buffering=1)  # gapscope's own output is captured per case
    out.write(READY + "\n")
    for line in sys.stdin:
        case = json.loads(line)
        t = time.perf_counter()
        if case["kind"] == "trace":
            outcome = trace_case(seed_trace, cases, case["seed"])
        else:
            outcome = json_case(base, cases, case["seed"])
        out.write(RESULT + json.dumps({**describe(outcome), "seconds": time.perf_counter() - t}) + "\n")


class Worker:
    """The one worker process, restarted after a hang or a crash."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def _start(self) -> None:
        # The caches (issue 18) stay on, so their paths are fuzzed too, but in the scratch folder
        # (never the user's) and bounded small: thousands of cases make thousands of entries.
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "XDG_CACHE_HOME": str(self.workdir / "cache"), "GAPSCOPE_CACHE_SIZE": "32M"}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(self.workdir)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1, env=env,
            start_new_session=True)
        self.starts += 1
        if self._answer(120) != READY:  # imports and the seed's own analysis, outside any case's bound
            self.stop()
            raise SystemExit("the worker did not start")

    def _answer(self, timeout: float) -> str | None:
        """The worker's next protocol line; None on a timeout, '' when it died."""
        assert self.proc is not None and self.proc.stdout
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line or line.startswith((RESULT, READY)):
                return line.rstrip("\n")

    def stop(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None

    def run(self, case: dict, timeout: float) -> dict:
        """The case's outcome; ``hang`` after ``timeout`` s, ``traceback`` when the worker died."""
        if self.proc is None:
            self._start()
        assert self.proc is not None and self.proc.stdin
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        line = self._answer(timeout)
        if line is None:
            self.stop()
            return {"kind": "hang", "detail": f"no answer in {timeout:.0f} s", "mutations": [], "seconds": timeout}
        if not line:  # the worker died: a crash gapscope could not turn into a line
            code = self.proc.wait()
            self.proc = None
            return {"kind": "traceback", "detail": f"worker died (exit {code})", "mutations": [], "seconds": 0}
        return json.loads(line[len(RESULT):])


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=int, default=5000, help="mutated traces")
    ap.add_argument("--jsons", type=int, default=1000, help="mutated result JSONs (two threshold specs each)")
    ap.add_argument("--seed", type=int, default=10_000,
                    help="first seed; case i uses seed + i (tests/test_fuzz.py uses 0-239)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per case before it counts as a hang")
    ap.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a new temporary one)")
    ap.add_argument("--failures", type=Path, default=None, help="write the failed cases here (JSON)")
    ap.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        return worker(args.worker)

    sys.path.insert(0, str(TESTS))
    sys.path.insert(0, str(ROOT))
    from damage import small_trace
    from mutations import FAILURES

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gapscope-fuzz-"))
    (workdir / "seed").mkdir(parents=True, exist_ok=True)
    seed_trace = small_trace(workdir / "seed")
    shipped = ROOT / "traces" / "torch_decode.sqlite"
    seed_digest, shipped_digest = digest(seed_trace), digest(shipped)
    cases = [{"kind": "trace", "seed": args.seed + i} for i in range(args.traces)]
    cases += [{"kind": "json", "seed": args.seed + i} for i in range(args.jsons)]
    print(f"fuzz campaign: {args.traces:,} mutated traces, {args.jsons:,} mutated result JSONs "
          f"({2 * args.jsons:,} threshold specs), {args.timeout:.0f} s bound per case, one worker; "
          f"{os.cpu_count()} CPUs; seed {args.seed}; in {workdir}", flush=True)
    w = Worker(workdir)
    outcomes: dict[str, list[dict]] = {"trace": [], "json": []}
    failed = []
    t0 = time.perf_counter()
    try:
        for i, case in enumerate(cases):
            got = w.run(case, args.timeout)
            outcomes[case["kind"]].append(got)
            if got["kind"] in FAILURES:
                failed.append({**case, **got})
                print(f"  FAILED {case['kind']} seed {case['seed']}: {got['kind']}: {got['detail'][:200]} "
                      f"{got['mutations']}", flush=True)
            if (i + 1) % 500 == 0:
                print(f"  {i + 1:,} of {len(cases):,} cases, {time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        w.stop()
    wall = time.perf_counter() - t0
    if digest(seed_trace) != seed_digest or digest(shipped) != shipped_digest:
        failed.append({"kind": "changed input", "detail": "the fuzz seed or the shipped trace changed"})
        outcomes["trace"].append({"kind": "changed input", "seconds": 0})

    kinds = ("traceback", "hang", "changed input", "new file", "bad error", "wrong figures", "unwarned damage",
             "should have refused", "unverifiable", "correct", "warned", "refused")
    print()
    print(f"{'outcome':<22}{'traces':>10}{'jsons':>10}")
    for kind in kinds:
        row = [sum(o["kind"] == kind for o in outcomes[k]) for k in ("trace", "json")]
        print(f"{kind:<22}{row[0]:>10,}{row[1]:>10,}")
    for k in ("trace", "json"):
        secs = sorted(o["seconds"] for o in outcomes[k]) or [0.0]
        print(f"{k} cases: {len(outcomes[k]):,}, {sum(secs) / len(secs) * 1000:.0f} ms per case in the worker "
              f"(median {secs[len(secs) // 2] * 1000:.0f} ms, max {secs[-1]:.2f} s)")
    print(f"wall time {wall:.0f} s ({wall / max(len(cases), 1) * 1000:.0f} ms per case, worker started "
          f"{w.starts} time(s)); failures: {len(failed)}")
    if args.failures is not None:
        args.failures.write_text(json.dumps(failed, indent=1))
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
