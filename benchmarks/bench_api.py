"""Benchmark: the Python API on a large trace against the analysis it wraps.

Builds (once, cached in --workdir) a SYNTHETIC export of at least --kernels kernels by tiling a
real trace (benchmarks/tile_trace.py), then times, each in a fresh process so peak memory is
the step's own:

* ``floor: analysis``: gapscope.analysis.pipeline.analysis_of, what `gapscope analyze -f json`
  runs (the API cannot be faster than this);
* ``gapscope.analyze(tables=False)``: the API with the result's DataFrames only (``by_name`` and
  ``ranges`` asked for, so they are built);
* ``gapscope.analyze``: the API with every gap and every activity (``gaps``, ``kernels``); the
  tables' own share is timed inside it;
* ``... + write_tables``: and gaps.parquet and kernels.parquet written (what `gapscope analyze
  --format parquet` adds).

    python benchmarks/bench_api.py [--source traces/cupy_paths_node.sqlite] [--kernels 1000000]

Target (issue 15): the tables cost well under the analysis itself; import gapscope stays cheap
(timed here too, and held by tests/test_api.py: no pandas until an analysis runs).
"""

from __future__ import annotations

from harness import big_trace, run_child  # this script's folder is first on the module path

CHILD = r"""
import json, resource, sys, time
path, step, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
t = time.perf_counter()
res = {}
if step == "import gapscope":
    import gapscope
    res["heavy"] = [m for m in ("pandas", "numpy", "pyarrow") if m in sys.modules]
elif step == "floor: analysis":
    from gapscope.analysis.pipeline import analysis_of
    a = analysis_of(path)
    res["gaps"] = int(a.device_gaps.length.size)
else:
    import gapscope
    if step == "gapscope.analyze(tables=False)":
        a = gapscope.analyze(path, tables=False)
        a.by_name, a.ranges
        res["gaps"] = 0
    else:
        import gapscope.analysis.tables as tables
        made = tables.tables_of
        spent = []
        def timed(arrays):
            t0 = time.perf_counter()
            out = made(arrays)
            spent.append(time.perf_counter() - t0)
            return out
        tables.tables_of = timed
        a = gapscope.analyze(path)
        res["gaps"] = len(a.gaps)
        res["kernels"] = len(a.kernels)
        res["tables"] = spent[0]
        if step.endswith("write_tables"):
            t0 = time.perf_counter()
            files = a.write_tables(out_dir)
            res["write"] = time.perf_counter() - t0
            res["mb"] = sum(f.stat().st_size for f in files) / 1e6
res["seconds"] = time.perf_counter() - t
res["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(res))
"""

STEPS = ("import gapscope", "floor: analysis", "gapscope.analyze(tables=False)", "gapscope.analyze",
         "gapscope.analyze + write_tables")


def main() -> None:
    args, big = big_trace(__doc__)
    out_dir = args.workdir / "bench-api-tables"
    print(f"{'step':<34}{'gaps':>11}{'s':>8}{'tables s':>10}{'write s':>9}{'peak MiB':>9}")
    for step in STEPS:
        runs = [run_child(CHILD, str(big), step, str(out_dir), what=step) for _ in range(args.repeat)]
        best = min(runs, key=lambda r: r["seconds"])
        tables = f"{min(r['tables'] for r in runs):.2f}" if "tables" in best else ""
        write = f"{min(r['write'] for r in runs):.2f}" if "write" in best else ""
        gaps = f"{best['gaps']:,}" if "gaps" in best else ""
        print(f"{step:<34}{gaps:>11}{best['seconds']:>8.2f}{tables:>10}{write:>9}"
              f"{max(r['peak_mb'] for r in runs):>9.0f}")
        if step == "import gapscope":
            print(f"{'  (loads: ' + (', '.join(best['heavy']) or 'no pandas, numpy or pyarrow') + ')':<34}")
        if "mb" in best:
            print(f"{'  (the two Parquet files: ' + format(best['mb'], '.0f') + ' MB)':<34}")


if __name__ == "__main__":
    main()
