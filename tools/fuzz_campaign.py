"""The long fuzz campaign of issues 20 and 41: thousands of mutated traces and result JSONs.

    python tools/fuzz_campaign.py --traces 5000 --jsons 1000 --kineto 2000 --columnar 1000 \
        [--seed 0] [--timeout 60] [--memory 2]

Each case is one of tests/mutations.py's: a copy of the fuzz seed (a small SYNTHETIC cut of
traces/torch_decode.sqlite, tests/damage.py) damaged by seeded SQL-level or byte-level
mutations and analyzed, a mutated result JSON analyzed, reported and compared under two
random threshold specs, a mutated PyTorch profiler trace (.json or .json.gz), or a mutated
parquetdir or arrowdir export. Cases run in ONE worker process (in-process CLI calls, so a case
costs tens of milliseconds, not an interpreter start) under a memory limit (--memory GiB of
address space, RLIMIT_AS) with its temporary folder (TMPDIR) watched; the parent bounds every
case to --timeout seconds and kills and restarts the worker on a hang or a crash, so neither can
stop the campaign, and starts a fresh worker after a traceback and every --recycle cases. At the end it prints a table: tracebacks, hangs, changed inputs, new files
(beside or in the input, or left in the temporary folder), every other failure kind, and the
correct / warned / refused counts, with the time per case; then the failures by class (the
mutation classes of a PyTorch profiler case, and the file a traceback's line names), so the
PyTorch profiler reader's own (tests/mutations.py KINETO_READER_CLASSES) are counted apart.
Exit status 1 when any case failed; --failures FILE keeps their seeds and mutations to replay.

Needs the test extras (``pip install -e '.[test]'``): it imports tests/ helpers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import select
import shutil
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


def _warnings_of(run_cli, path: Path) -> set[str]:
    code, out, err = run_cli("analyze", str(path), "-f", "json")
    if code != 0:
        raise SystemExit(f"the fuzz seed {path} does not analyze: {err}")
    return set(json.loads(out)["warnings"])


def worker(workdir: Path, memory_gib: float) -> None:
    """Read case lines ({"kind", "seed"}) on stdin, answer one RESULT line per case."""
    if memory_gib > 0:
        import resource

        limit = int(memory_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.path.insert(0, str(TESTS))
    sys.path.insert(0, str(ROOT))
    from mutations import (
        Outcome, columnar_case, columnar_seed, describe, json_case, kineto_case, kineto_seed, run_cli, trace_case,
    )

    seed_trace = workdir / "seed" / "small.sqlite"
    code, base, err = run_cli("analyze", str(seed_trace), "-f", "json")
    if code != 0:
        raise SystemExit(f"the fuzz seed does not analyze: {err}")
    kineto_text = kineto_seed()
    (workdir / "seed" / "kineto.pt.trace.json").write_text(kineto_text, encoding="utf-8")
    kineto_warnings = _warnings_of(run_cli, workdir / "seed" / "kineto.pt.trace.json")
    columnar = {fmt: columnar_seed(workdir / "seed", fmt) for fmt in ("parquet", "arrow")}
    columnar_warnings = {fmt: _warnings_of(run_cli, path) for fmt, path in columnar.items()}
    cases = workdir / "cases"
    cases.mkdir(exist_ok=True)
    tmp = Path(os.environ["TMPDIR"])
    out = os.fdopen(os.dup(1), "w", buffering=1)  # gapscope's own output is captured per case
    out.write(READY + "\n")
    for line in sys.stdin:
        case = json.loads(line)
        t = time.perf_counter()
        if case["kind"] == "trace":
            outcome = trace_case(seed_trace, cases, case["seed"])
        elif case["kind"] == "kineto":
            outcome = kineto_case(kineto_text, kineto_warnings, cases, case["seed"])
        elif case["kind"] == "columnar":
            outcome = columnar_case(columnar, columnar_warnings, cases, case["seed"])
        else:
            outcome = json_case(base, cases, case["seed"])
        left = sorted(os.listdir(tmp)) + sorted(os.listdir(cases))
        if left and not outcome.failed:  # a file made outside gapscope's cache and the case's own
            outcome = Outcome("new file", f"left behind: {left[:5]}", outcome.mutations, outcome.classes)
        for name in left:
            subprocess.run(["rm", "-rf", "--", str(tmp / name), str(cases / name)], check=False)
        out.write(RESULT + json.dumps({**describe(outcome), "seconds": time.perf_counter() - t}) + "\n")


class Worker:
    """The one worker process, restarted after a hang or a crash."""

    def __init__(self, workdir: Path, memory_gib: float, recycle: int) -> None:
        self.workdir = workdir
        self.memory_gib = memory_gib
        self.recycle = recycle
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.cases = 0  # answered by the running worker

    def _start(self) -> None:
        # The caches (issue 18) stay on, so their paths are fuzzed too, but in the scratch folder
        # (never the user's) and bounded small: thousands of cases make thousands of entries.
        # Temporary files go to a folder of the campaign's own, which every case must leave empty.
        for scratch in ("tmp", "cases"):  # what a worker that died left there is the campaign's own
            shutil.rmtree(self.workdir / scratch, ignore_errors=True)
            (self.workdir / scratch).mkdir()
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "XDG_CACHE_HOME": str(self.workdir / "cache"), "GAPSCOPE_CACHE_SIZE": "32M",
               "TMPDIR": str(self.workdir / "tmp")}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(self.workdir), "--memory", str(self.memory_gib)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1, env=env,
            start_new_session=True)
        self.starts += 1
        self.cases = 0
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
        self.cases = 0
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
            return {"kind": "hang", "detail": f"no answer in {timeout:.0f} s", "mutations": [], "classes": [],
                    "seconds": timeout}
        if not line:  # the worker died: a crash gapscope could not turn into a line
            code = self.proc.wait()
            self.proc = None
            return {"kind": "traceback", "detail": f"worker died (exit {code})", "mutations": [], "classes": [],
                    "seconds": 0}
        got = json.loads(line[len(RESULT):])
        self.cases += 1
        if got["kind"] == "traceback" or self.cases >= self.recycle:
            # A fresh process after a traceback (a MemoryError inside a C extension may leave it
            # unsound) and every --recycle cases (the address space one process takes grows over
            # thousands of analyses; each command of a user's runs in a process of its own).
            self.stop()
        return got


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=int, default=5000, help="mutated traces")
    ap.add_argument("--jsons", type=int, default=1000, help="mutated result JSONs (two threshold specs each)")
    ap.add_argument("--kineto", type=int, default=2000, help="mutated PyTorch profiler traces (.json, .json.gz)")
    ap.add_argument("--columnar", type=int, default=1000, help="mutated parquetdir and arrowdir exports")
    ap.add_argument("--memory", type=float, default=2.0, help="GiB of address space for the worker (0: no limit)")
    ap.add_argument("--recycle", type=int, default=500, help="cases per worker process before a fresh one")
    ap.add_argument("--seed", type=int, default=10_000,
                    help="first seed; case i uses seed + i (tests/test_fuzz.py uses 0-239)")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per case before it counts as a hang")
    ap.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a new temporary one)")
    ap.add_argument("--failures", type=Path, default=None, help="write the failed cases here (JSON)")
    ap.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        return worker(args.worker, args.memory)

    sys.path.insert(0, str(TESTS))
    sys.path.insert(0, str(ROOT))
    from damage import small_trace
    from mutations import FAILURES

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gapscope-fuzz-"))
    (workdir / "seed").mkdir(parents=True, exist_ok=True)
    seed_trace = small_trace(workdir / "seed")
    shipped = [ROOT / "traces" / "torch_decode.sqlite", ROOT / "traces" / "torch_decode_steps.pt.trace.json.gz",
               *sorted((ROOT / "traces" / "torch_decode_small_parquet").iterdir()),
               *sorted((ROOT / "traces" / "torch_decode_small_arrow").iterdir())]
    seed_digest, shipped_digest = digest(seed_trace), [digest(p) for p in shipped]
    kinds_run = ("trace", "json", "kineto", "columnar")
    cases = [{"kind": kind, "seed": args.seed + i} for kind in kinds_run for i in range(getattr(args, f"{kind}s"
             if kind in ("trace", "json") else kind))]
    print(f"fuzz campaign: {args.traces:,} mutated traces, {args.jsons:,} mutated result JSONs "
          f"({2 * args.jsons:,} threshold specs), {args.kineto:,} mutated PyTorch profiler traces, "
          f"{args.columnar:,} mutated column exports; {args.timeout:.0f} s bound per case, one worker "
          f"limited to {args.memory:g} GiB of address space; {os.cpu_count()} CPUs; seed {args.seed}; in {workdir}",
          flush=True)
    w = Worker(workdir, args.memory, args.recycle)
    outcomes: dict[str, list[dict]] = {kind: [] for kind in kinds_run}
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
    if digest(seed_trace) != seed_digest or [digest(p) for p in shipped] != shipped_digest:
        failed.append({"kind": "changed input", "detail": "the fuzz seed or a shipped trace changed"})
        outcomes["trace"].append({"kind": "changed input", "seconds": 0})
    strays = sorted(p.name for p in workdir.iterdir() if p.name not in ("seed", "cases", "cache", "tmp"))
    strays += [f"cases/{p}" for p in os.listdir(workdir / "cases")] + [f"tmp/{p}" for p in os.listdir(workdir / "tmp")]
    if strays:  # a file made outside gapscope's cache and the cases' own folders
        failed.append({"kind": "new file", "detail": f"left in the campaign's folder: {strays[:10]}"})
        outcomes["trace"].append({"kind": "new file", "seconds": 0})

    kinds = ("traceback", "hang", "changed input", "new file", "bad error", "wrong figures", "unwarned damage",
             "should have refused", "unverifiable", "correct", "warned", "refused")
    print()
    heads = {"trace": "traces", "json": "jsons", "kineto": "kineto", "columnar": "columnar"}
    print(f"{'outcome':<22}" + "".join(f"{heads[k]:>10}" for k in kinds_run))
    for kind in kinds:
        row = [sum(o["kind"] == kind for o in outcomes[k]) for k in kinds_run]
        print(f"{kind:<22}" + "".join(f"{n:>10,}" for n in row))
    by_class: dict[tuple[str, str, str], int] = {}
    for f in failed:
        where = f.get("detail", "").rsplit(" at gapscope/", 1)[-1].split(";")[0] if " at gapscope/" in \
            f.get("detail", "") else "-"
        key = (f.get("kind", "?"), ",".join(sorted(set(f.get("classes") or ["-"]))), where)
        by_class[key] = by_class.get(key, 0) + 1
    if by_class:
        print()
        print("failures by kind, mutation class and where (the file a traceback's line names):")
        for (kind, cls, where), n in sorted(by_class.items(), key=lambda kv: -kv[1]):
            print(f"  {n:>6,}  {kind:<16}{cls:<28}{where}")
    for k in kinds_run:
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
