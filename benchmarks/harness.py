"""What the benchmarks share: one step run in a fresh Python process (so its time and peak
memory are its own), and the options and cached tiling of a large SYNTHETIC trace."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


#: What every benchmark's child process runs with: this checkout, and the column cache off (a
#: benchmark times the read, never the user's cache; bench_scale.py times the cache itself).
CHILD_ENV = {"PYTHONPATH": str(ROOT), "GAPSCOPE_NO_CACHE": "1"}


def run_child(code: str, *args: str, what: str) -> dict:
    """Run ``code`` with ``args`` in a fresh interpreter on this checkout; the JSON object its
    last line prints. SystemExit naming ``what`` when it fails."""
    env = {**os.environ, **CHILD_ENV}
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def big_trace(doc: str) -> tuple[argparse.Namespace, Path]:
    """The command line of a benchmark on a tiled trace (--source, --kernels, --workdir,
    --repeat) and the tiling it names, built once and cached."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=ROOT / "traces" / "cupy_paths_node.sqlite")
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "gapscope-bench")
    ap.add_argument("--repeat", type=int, default=3, help="runs per step; the best is shown")
    args = ap.parse_args()
    from tile_trace import cached_tiling

    big = cached_tiling(args.source, args.kernels, args.workdir)
    print(f"trace: {big} ({big.stat().st_size / 1e6:.0f} MB, SYNTHETIC tiling of {args.source.name}); "
          f"{os.cpu_count()} CPUs; best of {args.repeat}")
    return args, big


def best(fn: Callable[[], object], repeat: int) -> float:
    """The shortest of ``repeat`` timed calls of ``fn``, in seconds (in this process)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)
