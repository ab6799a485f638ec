"""Benchmark: many traces at once, on 1 and 2 local workers.

Builds (once, cached in --workdir) a SYNTHETIC export of at least --kernels kernels by tiling a
real trace (benchmarks/tile_trace.py) and copies it --copies times (rank0.sqlite ...), then times
the whole multi-file analysis (every file analyzed with attribution, then merged) in a fresh
process per run:

* ``pool``: gapscope.fleet.executors.ProcessPool with N worker processes (pool start-up included);
* ``dask``: a dask.distributed LocalCluster of N single-threaded worker processes (cluster
  start-up excluded: a cluster outlives one analysis), when dask is installed, configured as
  docs/fleet.md advises (no ``MALLOC_TRIM_THRESHOLD_`` in the workers);
* ``dask-default``: the same with Dask's defaults (``MALLOC_TRIM_THRESHOLD_=65536``).

    python benchmarks/bench_fleet.py [--source traces/torch_decode.sqlite] [--kernels 200000]

Speedup = time with 1 worker / time with N workers, per executor. The merged reports of every
run are checked to be identical.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CHILD = r"""
import hashlib, json, sys, time
from gapscope.fleet.executors import DaskCluster, ProcessPool
from gapscope.fleet.merge import analyze_fleet
kind, n, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
if kind == "pool":
    t = time.perf_counter()
    fleet = analyze_fleet(paths, ProcessPool(n, ["gapscope.fleet"]))
    seconds = time.perf_counter() - t
else:
    import dask
    from distributed import LocalCluster
    if kind == "dask":  # docs/fleet.md: keep glibc's own malloc trimming in the workers
        dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None})
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        t = time.perf_counter()
        fleet = analyze_fleet(paths, DaskCluster(c.scheduler_address))
        seconds = time.perf_counter() - t
d = fleet.to_dict()
for f in d["files"] + d["devices"]:  # the digest covers the figures, not where the copies lie
    f.pop("path", None); f.pop("file", None)
print(json.dumps({"seconds": seconds, "failed": len(fleet.failed), "ranks": len(fleet.devices),
                  "kernels": sum(r["kernels"] for r in fleet.devices),
                  "digest": hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()}))
"""


def run(kind: str, workers: int, paths: list[Path]) -> dict:
    from harness import CHILD_ENV

    env = {**os.environ, **CHILD_ENV}
    proc = subprocess.run([sys.executable, "-c", CHILD, kind, str(workers), *map(str, paths)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} x{workers} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=ROOT / "traces" / "torch_decode.sqlite")
    ap.add_argument("--kernels", type=int, default=200_000, help="kernels per copy")
    ap.add_argument("--copies", type=int, default=16)
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    ap.add_argument("--executors", default="pool,dask,dask-default", help="pool, dask, dask-default")
    ap.add_argument("--repeat", type=int, default=2, help="runs per configuration; the best is shown")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "gapscope-bench")
    args = ap.parse_args()

    from tile_trace import cached_tiling

    big = cached_tiling(args.source, args.kernels, args.workdir)
    fleet_dir = args.workdir / f"fleet-{args.source.stem}-x{args.kernels}"
    fleet_dir.mkdir(exist_ok=True)
    paths = []
    for i in range(args.copies):
        p = fleet_dir / f"rank{i}.sqlite"
        if not p.exists() or p.stat().st_size != big.stat().st_size:
            shutil.copyfile(big, p)
        paths.append(p)

    executors = [e for e in args.executors.split(",") if e]
    if importlib.util.find_spec("distributed") is None:
        print("dask.distributed not installed: pool only (pip install -e '.[dask]')")
        executors = [e for e in executors if not e.startswith("dask")]
    workers = [int(w) for w in args.workers.split(",")]
    cores = os.cpu_count()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    print(f"{args.copies} copies of {big.name} ({big.stat().st_size / 1e6:.0f} MB, SYNTHETIC tiling of "
          f"{args.source.name}); {cores} CPUs ({usable} usable); best of {args.repeat}; "
          f"load average {os.getloadavg()[0]:.2f} before")
    print(f"{'executor':<14}{'workers':>8}{'files':>7}{'kernels':>12}{'seconds':>10}{'files/s':>9}{'speedup':>9}")
    digests = set()
    for kind in executors:
        base = None
        for n in workers:
            runs = [run(kind, n, paths) for _ in range(args.repeat)]
            best = min(runs, key=lambda r: r["seconds"])
            assert all(r["failed"] == 0 and r["ranks"] == args.copies for r in runs), runs
            digests |= {r["digest"] for r in runs}
            base = base or best["seconds"]
            print(f"{kind:<14}{n:>8}{args.copies:>7}{best['kernels']:>12,}{best['seconds']:>10.2f}"
                  f"{args.copies / best['seconds']:>9.2f}{base / best['seconds']:>8.2f}x", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} after (other processes on the machine slow every row)")
    print("merged reports identical across runs" if len(digests) == 1 else f"DIFFERENT merged reports: {digests}")


if __name__ == "__main__":
    main()
