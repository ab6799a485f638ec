"""Benchmark: read plus analysis of one report's exports at 1,000,000 kernels, each format beside
the others, against a bare pyarrow read of the same columns (the floor).

Tiles (once, cached in --workdir) the real exports of traces/torch_decode_small.nsys-rep (its
SQLite, parquetdir and arrowdir exports, recorded on the H200) into SYNTHETIC exports of at least
--kernels kernels (benchmarks/tile_trace.py: the same tiles, times and correlation ids shifted,
so all three hold the same data and give the same analysis: checked here), then times, each in a
fresh process (best of --repeat):

* ``floor parquet`` / ``floor arrow``: a bare pyarrow read, into Arrow tables, of the columns
  gapscope reads (kernels, copies, runtime calls, NVTX, stream waits): the least any reader of
  the file pays;
* ``read <format>``: gapscope's reader alone (open the trace, its frames);
* ``analyze <format>``: read plus ``gapscope.analysis.analyze(path, attribution=False)``;
* ``analyze+attribution <format>``: read plus the default ``analyze`` (gap categories, launch
  statistics, payoff, longest gaps).

    python benchmarks/bench_formats.py [--kernels 1000000] [--repeat 5]

Target (issue 13): reading a 1,000,000-kernel parquetdir export plus analysis under 0.8 s on the
2-core development machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import ROOT, run_child  # noqa: E402

SOURCES = {"sqlite": ROOT / "traces" / "torch_decode_small.sqlite",
           "parquet": ROOT / "traces" / "torch_decode_small_parquet",
           "arrow": ROOT / "traces" / "torch_decode_small_arrow"}

CHILD = r"""
import json, resource, sys, time
path, step = sys.argv[1], sys.argv[2]
t = time.perf_counter()
if step == "floor":
    from pathlib import Path
    import pyarrow as pa, pyarrow.parquet as pq
    wanted = {"CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "streamId", "globalPid", "correlationId"],
              "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "deviceId", "streamId", "globalPid", "correlationId"],
              "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "eventClass", "globalTid", "correlationId", "nameId"],
              "NVTX_EVENTS": ["start", "end", "globalTid", "eventType", "domainId", "text", "textId"],
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ["start", "deviceId", "streamId", "globalPid", "syncType"]}
    t_call = time.perf_counter()
    rows = 0
    for table, cols in wanted.items():
        p = Path(path) / (table + ".parquet")
        if p.exists():
            got = pq.read_table(p, columns=cols, memory_map=True)
        else:
            got = pa.ipc.open_stream(pa.memory_map(str(Path(path) / (table + ".arrow")))).read_all().select(cols)
        rows += got.num_rows
    out = {"rows": rows, "call": time.perf_counter() - t_call}
elif step == "digest":  # the analysis without what names the file: equal for equal data
    import hashlib
    from gapscope.analysis import analyze
    data = analyze(path).to_dict()
    data["trace"] = {k: v for k, v in data["trace"].items() if k not in ("path", "name", "format")}
    out = {"rows": 0, "call": 0.0, "digest": hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()}
elif step == "read":
    from gapscope.trace import open_trace
    t_call = time.perf_counter()
    with open_trace(path) as trace:
        f = trace.frames()
    out = {"rows": len(f.activities) + len(f.api) + len(f.nvtx) + len(f.syncs), "call": time.perf_counter() - t_call}
else:
    from gapscope.analysis import analyze
    t_call = time.perf_counter()
    r = analyze(path, attribution=(step == "analyze+attribution"))
    out = {"rows": sum(d["kernels"] for d in r.devices), "call": time.perf_counter() - t_call}
out["seconds"] = time.perf_counter() - t
out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def run_step(path: Path, step: str) -> dict:
    """One step on one tiled export, in a fresh process (benchmarks/harness.py)."""
    return run_child(CHILD, str(path), step, what=f"{step} {path.name}")


def same_analysis(paths: list[Path]) -> bool:
    """Whether every tiled export gives the same result, number for number (each analyzed in a
    child process, so this process stays small: children inherit its peak memory)."""
    return len({run_step(p, "digest")["digest"] for p in paths}) == 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "gapscope-bench")
    ap.add_argument("--repeat", type=int, default=5, help="runs per step; the best is shown")
    args = ap.parse_args()

    from tile_trace import cached_tiling

    big = {fmt: cached_tiling(src, args.kernels, args.workdir) for fmt, src in SOURCES.items()}
    sizes = {fmt: (sum(q.stat().st_size for q in p.iterdir()) if p.is_dir() else p.stat().st_size) / 1e6
             for fmt, p in big.items()}
    print(f"SYNTHETIC tilings of the exports of traces/torch_decode_small.nsys-rep in {args.workdir}: "
          + ", ".join(f"{fmt} {mb:.0f} MB" for fmt, mb in sizes.items())
          + f"; {os.cpu_count()} CPUs; best of {args.repeat}")
    print(f"the three give the same analysis: {same_analysis(list(big.values()))}")
    print("call: the library call alone; +imports: also importing gapscope (numpy, pandas, pyarrow)")
    print(f"{'step':<30}{'rows':>12}{'call s':>9}{'+imports s':>12}{'peak MiB':>10}")
    steps = [("floor", "parquet"), ("floor", "arrow")]
    steps += [(s, fmt) for s in ("read", "analyze", "analyze+attribution") for fmt in SOURCES]
    for step, fmt in steps:
        runs = [run_step(big[fmt], step) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["call"])
        print(f"{step + ' ' + fmt:<30}{best['rows']:>12,}{best['call']:>9.2f}"
              f"{min(r['seconds'] for r in runs):>12.2f}{max(r['peak_mb'] for r in runs):>10.0f}")


if __name__ == "__main__":
    main()
