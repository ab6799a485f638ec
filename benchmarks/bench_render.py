"""Benchmark: drawing the report of a trace with 20,000 NVTX ranges (per-op ranges, as
PyTorch's emit_nvtx writes them), against writing its JSON (every row once: the floor for any
renderer that looks at every row).

Builds (once, cached in --workdir) a SYNTHETIC export by tiling traces/torch_emit_nvtx.sqlite
(3,675 ranges a tile; benchmarks/tile_trace.py) to at least --ranges ranges, in two versions:
``grouped`` (the tiles repeat the op names, which group into 115 names) and ``distinct`` (every
tile's names made unique, analyzed with --no-normalize: one by-name row per distinct name, the
worst case for the tables). Then, per version, analyzes once and times each renderer writing
the whole report to memory, best of --repeat:

    python benchmarks/bench_render.py [--ranges 20000]

Target (issue 12): the table of 20,000 ranges in under 2 s on this 2-core machine.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SOURCE = ROOT / "traces" / "torch_emit_nvtx.sqlite"
SOURCE_RANGES, SOURCE_KERNELS = 3_675, 650


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranges", type=int, default=20_000)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "gapscope-bench")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from harness import CHILD_ENV, best

    os.environ.update(CHILD_ENV)  # the analysis below runs in this process
    from tile_trace import cached_tiling
    from gapscope.analysis import analyze
    from gapscope.render import render

    tiles = -(-args.ranges // SOURCE_RANGES)
    versions = {v: cached_tiling(SOURCE, tiles * SOURCE_KERNELS, args.workdir, distinct_names=d)
                for v, d in (("grouped", False), ("distinct", True))}
    print(f"{os.cpu_count()} CPUs; SYNTHETIC tilings of {SOURCE.name} x{tiles}; best of {args.repeat}")
    print(f"{'version':<10}{'ranges':>8}{'names':>8}{'analyze s':>11}{'json s (floor)':>16}{'table s':>9}"
          f"{'markdown s':>12}{'table lines':>13}")
    for version, big in versions.items():
        distinct = version == "distinct"
        t = time.perf_counter()
        result = analyze(big, normalize=not distinct)
        t_analyze = time.perf_counter() - t
        out = {}

        def write(fmt: str) -> None:
            buf = io.StringIO()
            render(result, fmt, buf)
            out[fmt] = buf.getvalue()

        t_json = best(lambda: write("json"), args.repeat)
        t_table = best(lambda: write("table"), args.repeat)
        t_md = best(lambda: write("markdown"), args.repeat)
        print(f"{version:<10}{len(result.ranges):>8,}{len(result.by_name):>8,}{t_analyze:>11.2f}{t_json:>16.2f}"
              f"{t_table:>9.2f}{t_md:>12.2f}{out['table'].count(chr(10)):>13,}")


if __name__ == "__main__":
    main()
