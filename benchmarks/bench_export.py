"""Benchmark: the Perfetto export of a large trace against the floors of writing that file.

Builds (once, cached in --workdir) a SYNTHETIC export of at least --kernels kernels by tiling a
real trace (benchmarks/tile_trace.py), then times, each in a fresh process:

* ``export``: what `gapscope export TRACE --perfetto OUT.json` does (imports, reading, analysis,
  writing), and inside it the renderer alone (gapscope.render.perfetto.render);
* ``write floor``: writing as many bytes as the export wrote (the disk's floor);
* ``json.dump floor``: json.dump of as many event dicts as the export holds, with no analysis
  and no names to look up (what a plain Python writer of the same events costs).

    python benchmarks/bench_export.py [--source traces/cupy_paths_node.sqlite] [--kernels 1000000]

Target (issue 16): the export of 1,000,000 kernels writes in under 5 s on the 2-core machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import big_trace, run_child  # noqa: E402

CHILD = r"""
import json, os, sys, time
step, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
t = time.perf_counter()
res = {}
if step == "export":
    from gapscope.analysis.pipeline import opened_analysis
    from gapscope.render import render
    with opened_analysis(path, all_calls=True) as analysis:
        t_render = time.perf_counter()
        with open(out, "w", encoding="utf-8", newline="") as fh:
            render(analysis, "perfetto", fh)
        res["render"] = time.perf_counter() - t_render
    with open(out) as fh:
        res["events"] = sum(1 for line in fh if line.startswith('{"ph":'))
elif step == "write floor":
    size = int(sys.argv[4])
    block = b"x" * (1 << 20)
    with open(out, "wb") as fh:
        for _ in range(size >> 20):
            fh.write(block)
        fh.write(b"x" * (size % (1 << 20)))
elif step == "json.dump floor":
    n = int(sys.argv[4])
    events = [{"ph": "X", "cat": "kernel", "pid": 1, "tid": 2, "name": "gapscope_spin", "ts": i * 2.5,
               "dur": 1.25, "args": {"correlation": i}} for i in range(n)]
    t = time.perf_counter()  # the dicts are given: time the writing only
    with open(out, "w") as fh:
        json.dump({"traceEvents": events}, fh)
res["seconds"] = time.perf_counter() - t
res["bytes"] = os.path.getsize(out)
os.unlink(out)
print(json.dumps(res))
"""


def run_step(step: str, path: Path, out: Path, *extra: str) -> dict:
    return run_child(CHILD, step, str(path), str(out), *extra, what=step)


def main() -> None:
    args, big = big_trace(__doc__)
    out = args.workdir / "bench-export.json"
    runs = [run_step("export", big, out) for _ in range(args.repeat)]
    best = min(runs, key=lambda r: r["seconds"])
    size, events = best["bytes"], best["events"]
    write = min((run_step("write floor", big, out, str(size)) for _ in range(args.repeat)),
                key=lambda r: r["seconds"])
    dump = min((run_step("json.dump floor", big, out, str(events)) for _ in range(args.repeat)),
               key=lambda r: r["seconds"])
    print(f"{'step':<34}{'events':>12}{'MB':>8}{'s':>8}")
    print(f"{'export (read, analyze, write)':<34}{events:>12,}{size / 1e6:>8.0f}{best['seconds']:>8.2f}")
    print(f"{'  of which the renderer':<34}{events:>12,}{size / 1e6:>8.0f}{min(r['render'] for r in runs):>8.2f}")
    print(f"{'write floor (the same bytes)':<34}{'':>12}{write['bytes'] / 1e6:>8.0f}{write['seconds']:>8.2f}")
    print(f"{'json.dump floor (as many dicts)':<34}{events:>12,}{dump['bytes'] / 1e6:>8.0f}{dump['seconds']:>8.2f}")


if __name__ == "__main__":
    main()
