"""Benchmark: whole analysis of a large export against a bare SELECT of the same columns.

Builds (once, cached in --workdir) a SYNTHETIC export of at least --kernels kernels by tiling a
real trace (benchmarks/tile_trace.py), then times, each in a fresh process so peak memory is
the step's own:

* ``select``: a single-threaded ADBC SELECT of the kernel, runtime and NVTX columns gapscope
  reads (every runtime row), into Arrow;
* ``analyze``: gapscope.analysis.analyze (load, link, ranges, metrics, result);
* ``analyze+attribution``: the same with gap attribution, launch statistics and payoff;
* ``read``: reading the frames alone (``Trace.frames()``, damage checks included), and beside it
  ``validate``: the damage checks alone (gapscope.trace.validation.validate) on those frames, in
  the same process, with their share of the read.

Then the whole process, timed from its start to its exit (interpreter, imports, read, analysis,
report): ``floor process``, a fresh interpreter running the ``select`` above, against
``gapscope analyze`` (the table report, to /dev/null), each with its peak resident memory and the
ratio of its time to the floor's, measured in the same run.

    python benchmarks/bench_analyze.py [--source traces/cupy_paths_node.sqlite] [--kernels 1000000]

Targets: issue 2, analyze within 2 s and 1.5 GB on a 2-core machine at 1,000,000 kernels; issue
18, the whole process within 1.3x the floor process and under 400 MB.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import big_trace, run_child  # noqa: E402

import os  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from harness import ROOT  # noqa: E402

CHILD = r"""
import json, resource, sys, time
path, step = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if step == "select":
    import adbc_driver_sqlite.dbapi as adbc
    conn = adbc.connect(f"file:{path}?mode=ro")
    rows = 0
    for q in ("SELECT start, end, deviceId, streamId, globalPid, correlationId, shortName, graphNodeId FROM CUPTI_ACTIVITY_KIND_KERNEL",
              "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME",
              "SELECT start, end, globalTid, eventType, domainId, textId FROM NVTX_EVENTS"):
        cur = conn.cursor(); cur.execute(q); rows += cur.fetch_arrow_table().num_rows; cur.close()
    conn.close()
    out = {"rows": rows}
elif step == "read":
    from gapscope.trace import open_trace
    from gapscope.trace.validation import validate
    t_call = time.perf_counter()
    with open_trace(path) as trace:
        frames = trace.frames()
        out = {"call": time.perf_counter() - t_call, "rows": len(frames.activities) + len(frames.api)}
        t_check = time.perf_counter()
        validate(frames)
        out["validate"] = time.perf_counter() - t_check
else:
    from gapscope.analysis import analyze
    t_call = time.perf_counter()
    r = analyze(path, attribution=(step == "analyze+attribution"))
    out = {"rows": sum(d["kernels"] for d in r.devices), "ranges": len(r.ranges)}
    out["call"] = time.perf_counter() - t_call
out["seconds"] = time.perf_counter() - t
out.setdefault("call", out["seconds"])
out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def run_step(path: Path, step: str) -> dict:
    return run_child(CHILD, str(path), step, what=step)


def run_process(argv: list[str]) -> tuple[float, float]:
    """(seconds from start to exit, peak resident MB) of one fresh process running ``argv``
    with this checkout first on its path, its output thrown away."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{err}")
    return seconds, usage.ru_maxrss / 1024


def whole_processes(big: Path, repeat: int) -> None:
    """The floor process against the whole ``gapscope analyze``, alternated, best of ``repeat``."""
    floor = [sys.executable, "-c", CHILD, str(big), "select"]
    # --no-cache: a repeat would otherwise be a result cache hit (0.45 s), not an analysis.
    analyze = [sys.executable, "-m", "gapscope", "analyze", str(big), "--no-cache"]
    runs: dict[str, list[tuple[float, float]]] = {"floor process": [], "gapscope analyze": []}
    for _ in range(repeat):
        runs["floor process"].append(run_process(floor))
        runs["gapscope analyze"].append(run_process(analyze))
    base = min(t for t, _ in runs["floor process"])
    print(f"{'whole process':<22}{'min s':>9}{'max s':>9}{'peak MiB':>10}{'x floor':>9}   load {os.getloadavg()[0]:.2f}")
    for step, got in runs.items():
        times = [t for t, _ in got]
        print(f"{step:<22}{min(times):>9.2f}{max(times):>9.2f}{max(m for _, m in got):>10.0f}"
              f"{min(times) / base:>9.2f}")


def main() -> None:
    args, big = big_trace(__doc__)
    print(f"load average {os.getloadavg()[0]:.2f}")
    whole_processes(big, args.repeat)
    print("call: the library call alone; +imports: also importing gapscope (numpy, pandas, pyarrow)")
    print(f"{'step':<22}{'rows':>12}{'call s':>9}{'+imports s':>12}{'peak MiB':>10}")
    for step in ("select", "read", "analyze", "analyze+attribution"):
        runs = [run_step(big, step) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["seconds"])
        print(f"{step:<22}{best['rows']:>12,}{min(r['call'] for r in runs):>9.2f}{best['seconds']:>12.2f}"
              f"{max(r['peak_mb'] for r in runs):>10.0f}")
        if step == "read":
            check = min(r["validate"] for r in runs)
            print(f"{'  validate (in read)':<22}{best['rows']:>12,}{check:>9.3f}{'':>12}{'':>10}"
                  f"   {100 * check / min(r['call'] for r in runs):.1f}% of the read")


if __name__ == "__main__":
    main()
