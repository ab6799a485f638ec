"""Benchmark: the memory estimate (gapscope.analysis.memory) against the peak resident memory of
whole processes, every trace format and every path, and the fit of the estimate's lines.

Builds (once, cached in --workdir) SYNTHETIC traces by tiling real ones (benchmarks/tile_trace.py,
benchmarks/tile_kineto.py): four mixes of GPU activities, CUDA calls and NVTX ranges, each as an
nsys SQLite, parquetdir and arrowdir export, and two PyTorch profiler traces:

* ``decode``: traces/torch_decode_small (its own SQLite, parquetdir, arrowdir and Kineto exports
  of one report; 2.2 CUDA API rows an activity);
* ``compile``: traces/torch_compile_graphs.sqlite (4.2 API rows an activity, 0.5 stream waits);
* ``instantiate``: traces/case_instantiate.sqlite (0.6 API rows an activity);
* ``emit_nvtx``: traces/torch_emit_nvtx.sqlite (5.2 NVTX ranges an activity);
* ``mi210``: traces/thirdparty/tracelens/mi210_gpu_only_trace.json.gz (the Kineto trace with the
  fewest bytes of JSON per event kept).

The parquetdir and arrowdir exports of ``compile``, ``instantiate`` and ``emit_nvtx`` are their
SQLite exports rewritten (SYNTHETIC, ``tile_trace.to_columnar``: the same rows, nsys's own column
types), then tiled; ``emit_nvtx`` is tiled to --nvtx-kernels (1M kernels would be 5.6M ranges).
Kineto tilings are written as plain JSON (gzip at 17 GB takes long), ``decode_gz`` as the same
tiling gzipped (its JSON bytes counted from the gzip file: gapscope.trace.kineto_json.json_size).
Each path runs in a fresh process whose peak is read with ``wait4`` (``ru_maxrss``, this child
alone; this process imports nothing of gapscope, so that no child starts from its size):

* ``levels``: ``gapscope analyze T -f json -o FILE --no-cache``;
* ``merge``: ``gapscope.fleet.ranks.analyze_rank_file(T)``, what each worker of several traces runs;
* ``gaps``: ``gapscope analyze T --plot DIR --no-cache``;
* ``all_calls``: ``gapscope analyze T --gaps-csv FILE --no-cache`` and ``gapscope export T
  --perfetto FILE`` (the larger peak is the path's).

The estimate of each is computed in another child, from the counts the trace gives before it
is read. Rows are saved to --save (JSON, merged by trace and path, with the counts), so that a
later run can measure more sizes, and ``--table`` prints them again with the checkout's estimate
of the saved counts (the tilings need not be there any more).

    flock /work/notes/bench.lock python benchmarks/bench_memory.py [--kernels 1000000] \\
        [--big 10000000 --big-formats nsys-sqlite,nsys-parquet --big-kinds levels]

docs/performance.md's table: ``--real`` (every source, format and path at 1M kernels, emit_nvtx
at 200,000, and the real traces for the bases); ``--sources emit_nvtx --nvtx-kernels 50000``;
``--big 10000000 --big-formats nsys-sqlite,nsys-parquet,nsys-arrow --big-kinds levels,merge,gaps``
then ``--kinds all_calls`` at 10M on those three; ``--sources decode,mi210 --formats kineto
--kernels 10000000 --kinds levels``; ``--sources decode_gz --formats kineto --kinds levels,merge``.
    python benchmarks/bench_memory.py --table        # the saved rows, today's estimate
    python benchmarks/bench_memory.py --fit          # lines fitted to the saved rows
    python benchmarks/bench_memory.py --markdown     # docs/performance.md's table

The check: every estimate at least its peak (a row says BELOW otherwise), and for peaks of 500 MB
or more at most 1.5x it (a PyTorch profiler trace's is bounded by its bytes, so a trace with more
bytes per event than the densest reads higher; of the two ``all_calls`` commands the larger peak
sets the line).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from harness import CHILD_ENV  # noqa: E402

TRACES = ROOT / "traces"
#: The sources: name -> format -> the real trace tiled (a SQLite export to rewrite as a columnar
#: one where the report's own columnar exports are not shipped: ("convert", SQLITE)).
SOURCES: dict[str, dict[str, object]] = {
    "decode": {"nsys-sqlite": TRACES / "torch_decode_small.sqlite",
               "nsys-parquet": TRACES / "torch_decode_small_parquet",
               "nsys-arrow": TRACES / "torch_decode_small_arrow",
               "kineto": TRACES / "torch_decode_small.pt.trace.json.gz"},
    **{name: {"nsys-sqlite": TRACES / f"{stem}.sqlite",
              "nsys-parquet": ("convert", TRACES / f"{stem}.sqlite"),
              "nsys-arrow": ("convert", TRACES / f"{stem}.sqlite")}
       for name, stem in (("compile", "torch_compile_graphs"), ("instantiate", "case_instantiate"),
                          ("emit_nvtx", "torch_emit_nvtx"))},
    "mi210": {"kineto": TRACES / "thirdparty" / "tracelens" / "mi210_gpu_only_trace.json.gz"},
    "decode_gz": {"kineto": TRACES / "torch_decode_small.pt.trace.json.gz"},
}
#: Kineto tilings are plain JSON (quick to write), but those of these sources, gzipped.
GZIPPED = ("decode_gz",)
FORMATS = ("nsys-sqlite", "nsys-parquet", "nsys-arrow", "kineto")
KINDS = ("levels", "merge", "gaps", "all_calls")

MERGE = "import sys; from gapscope.fleet.ranks import analyze_rank_file; analyze_rank_file(sys.argv[1])"

ESTIMATE = r"""
import dataclasses, json, sys
from gapscope.analysis import memory
from gapscope.trace.handle import open_trace
with open_trace(sys.argv[1]) as trace:
    counts = trace.row_counts()
flags = {"levels": {"gaps": False}, "merge": {"merge": True}, "gaps": {"gaps": True}, "all_calls": {"all_calls": True}}
print(json.dumps({"counts": dataclasses.asdict(counts),
                  "estimate": {k: memory.needed_bytes(counts, **f) for k, f in flags.items()}}))
"""

#: The checkout's estimate of each path for counts saved before (a JSON list on stdin).
ESTIMATES = r"""
import json, sys
from gapscope.analysis import memory
from gapscope.trace.frames import RowCounts
flags = {"levels": {"gaps": False}, "merge": {"merge": True}, "gaps": {"gaps": True}, "all_calls": {"all_calls": True}}
print(json.dumps([{k: memory.needed_bytes(RowCounts(**c), **f) for k, f in flags.items()}
                  for c in json.loads(sys.stdin.read())]))
"""


def commands(kind: str, trace: Path, scratch: Path) -> list[tuple[str, list[str]]]:
    """(label, argv) of each process measured for ``kind``."""
    gs = [sys.executable, "-m", "gapscope"]
    if kind == "levels":
        return [("analyze -f json", [*gs, "analyze", str(trace), "-f", "json", "-o", str(scratch / "r.json"),
                                     "--no-cache"])]
    if kind == "merge":
        return [("analyze_rank_file", [sys.executable, "-c", MERGE, str(trace)])]
    if kind == "gaps":
        return [("analyze --plot", [*gs, "analyze", str(trace), "-f", "json", "-o", str(scratch / "r.json"),
                                    "--plot", str(scratch / "plots"), "--no-cache"])]
    return [("analyze --gaps-csv", [*gs, "analyze", str(trace), "-f", "json", "-o", str(scratch / "r.json"),
                                    "--gaps-csv", str(scratch / "gaps.csv"), "--no-cache"]),
            ("export --perfetto", [*gs, "export", str(trace), "--perfetto", str(scratch / "t.json")])]


def run_one(argv: list[str]) -> tuple[int, float, float]:
    """(peak resident bytes, wall seconds, CPU seconds) of one process (wait4 on it alone);
    SystemExit when it fails. The memory check is off: the estimate is what is measured."""
    env = {**os.environ, **CHILD_ENV, "GAPSCOPE_MEMORY_CHECK": "0"}
    with tempfile.TemporaryFile() as errors:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errors, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        if os.waitstatus_to_exitcode(status) != 0:
            errors.seek(0)
            raise SystemExit(f"{' '.join(argv)} failed:\n{errors.read().decode(errors='replace')[-2000:]}")
    return usage.ru_maxrss * 1024, wall, usage.ru_utime + usage.ru_stime


def estimate(trace: Path) -> dict:
    """The trace's counts and the checkout's estimate of each path, from a child process."""
    env = {**os.environ, **CHILD_ENV}
    out = subprocess.run([sys.executable, "-c", ESTIMATE, str(trace)], capture_output=True, text=True, env=env,
                         cwd=ROOT, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def tiled(name: str, fmt: str, kernels: int, workdir: Path) -> Path:
    """The SYNTHETIC tiling of source ``name`` in format ``fmt`` to ``kernels`` kernels (0: the
    real trace itself), made once."""
    from tile_trace import cached_tiling, to_columnar

    source = SOURCES[name][fmt]
    if isinstance(source, tuple):  # a SQLite export rewritten as a columnar one, then tiled
        suffix = ".parquet" if fmt == "nsys-parquet" else ".arrow"
        source = source[1]
        converted = workdir / f"{source.stem}_{suffix[1:]}.converted.synthetic"
        if not converted.exists():
            to_columnar(source, converted, suffix)
        source = converted
    if kernels == 0:
        return source
    if fmt != "kineto":
        return cached_tiling(source, kernels, workdir)
    from tile_kineto import tile

    suffix = ".json.gz" if name in GZIPPED else ".json"
    out = workdir / f"{source.name.split('.')[0]}-x{kernels}.synthetic.pt.trace{suffix}"
    if not out.exists():
        print(f"tiling {source} to {kernels:,} kernels -> {out} ...", flush=True)
        part = out.with_name("part-" + out.name)  # gzipped or not by its suffix, as out
        tile(source, part, kernels)
        part.rename(out)
    return out


def tiled_in_child(name: str, fmt: str, kernels: int, workdir: Path) -> Path:
    """:func:`tiled` in a child process: this one stays small, since a child's peak as wait4
    reports it is at least this process's size when it was forked (pyarrow's pool keeps what a
    tiling took)."""
    argv = [sys.executable, __file__, "--workdir", str(workdir), "--make", name, fmt, str(kernels)]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **CHILD_ENV})
    if out.returncode != 0:
        raise SystemExit(f"tiling {name} {fmt} to {kernels:,} failed:\n{out.stderr}")
    *said, path = out.stdout.strip().splitlines()
    for line in said:  # what the tiling said (its progress)
        print(line, flush=True)
    return Path(path)


def measure(name: str, fmt: str, kernels: int, kinds: list[str], workdir: Path, saved: dict) -> None:
    trace = tiled_in_child(name, fmt, kernels, workdir)
    est = estimate(trace)
    scratch = workdir / "out"
    scratch.mkdir(exist_ok=True)
    for kind in kinds:
        for label, argv in commands(kind, trace, scratch):
            peak, wall, cpu = run_one(argv)
            key = f"{name} {fmt} {kernels} {kind} {label}"
            saved[key] = {"source": name, "format": fmt, "kernels": kernels, "kind": kind, "command": label,
                          "trace": str(trace), "counts": est["counts"], "estimate": est["estimate"][kind],
                          "peak": peak, "wall": wall, "cpu": cpu, "load": os.getloadavg()[0],
                          "when": time.strftime("%Y-%m-%d %H:%M")}
            print_row(saved[key])


#: Peaks from which the estimate should be within 1.5x (under it, the base of a bare process is
#: most of the peak and of the estimate).
WHERE_RATIO = 500e6

HEADER = (f"{'source':<12}{'format':<13}{'kernels':>11}{'activities':>12}{'API rows':>12}{'NVTX':>10}"
          f"  {'path':<10}{'command':<20}{'estimate MB':>12}{'peak MB':>9}{'est/peak':>9}{'CPU s':>7}{'load':>6}")


def print_row(r: dict) -> None:
    c = r["counts"]
    act = "" if c["activities"] is None else f"{c['activities']:,}"
    api = f"{c['json_bytes'] / 1e6:,.0f} MB json" if c["activities"] is None else f"{c['api']:,}"
    nvtx = "" if c["nvtx"] is None else f"{c['nvtx']:,}"
    ratio = r["estimate"] / r["peak"]
    flag = "  BELOW" if ratio < 1 else "  over 1.5x" if ratio > 1.5 and r["peak"] >= WHERE_RATIO else ""
    print(f"{r['source']:<12}{r['format']:<13}{r['kernels']:>11,}{act:>12}{api:>12}{nvtx:>10}  {r['kind']:<10}"
          f"{r['command']:<20}{r['estimate'] / 1e6:>12,.0f}{r['peak'] / 1e6:>9,.0f}{ratio:>9.2f}{r['cpu']:>7.1f}"
          f"{r['load']:>6.1f}{flag}", flush=True)


def with_todays_estimate(saved: dict) -> list[dict]:
    """The saved rows, each estimate made again from its saved counts by the checkout's
    gapscope.analysis.memory (in a child process)."""
    rows = [dict(r) for r in saved.values()]
    env = {**os.environ, **CHILD_ENV}
    out = subprocess.run([sys.executable, "-c", ESTIMATES], input=json.dumps([r["counts"] for r in rows]),
                         capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout
    for r, est in zip(rows, json.loads(out)):
        r["estimate"] = est[r["kind"]]
    return rows


def table(saved: dict) -> None:
    """The saved rows, with the checkout's estimate."""
    print(HEADER)
    rows = with_todays_estimate(saved)
    for r in sorted(rows, key=lambda r: (r["format"], r["source"], r["kernels"], KINDS.index(r["kind"]))):
        print_row(r)


def markdown(saved: dict) -> None:
    """The tilings' rows as docs/performance.md shows them: one row per trace, per path the
    checkout's estimate over the peak (MB, the larger peak of a path's two commands) and their
    ratio."""
    best: dict[tuple, dict[str, dict]] = {}
    for r in with_todays_estimate(saved):
        if not r["kernels"]:
            continue
        paths = best.setdefault((FORMATS.index(r["format"]), r["kernels"], r["source"]), {})
        if r["kind"] not in paths or r["peak"] > paths[r["kind"]]["peak"]:
            paths[r["kind"]] = r
    print("| format | trace | kernels | activities | CUDA calls | NVTX rows | " + " | ".join(KINDS) + " |")
    print("| --- | --- | ---: | ---: | ---: | ---: | " + " | ".join("---:" for _ in KINDS) + " |")
    for (f, kernels, source), paths in sorted(best.items()):
        c = next(iter(paths.values()))["counts"]
        if c["activities"] is None:
            rows = f"| | {c['json_bytes'] / 1e6:,.0f} MB of JSON | |"
        else:
            rows = f"| {c['activities']:,} | {c['api'] + c['syncs']:,} | {c['nvtx']:,} |"
        cells = [f"{p['estimate'] / 1e6:,.0f} / {p['peak'] / 1e6:,.0f} ({p['estimate'] / p['peak']:.2f})"
                 if (p := paths.get(k)) else "" for k in KINDS]
        print(f"| {FORMATS[f]} | {source} | {kernels:,} {rows} " + " | ".join(cells) + " |")


def nonnegative_fit(x, y):
    """Least squares of ``x @ coef = y`` with every coefficient >= 0: the columns whose
    coefficient comes out negative are dropped (held at 0) and the rest fitted again."""
    import numpy as np

    keep = np.ones(x.shape[1], dtype=bool)
    while True:
        coef = np.zeros(x.shape[1])
        coef[keep] = np.linalg.lstsq(x[:, keep], y, rcond=None)[0]
        if (coef >= 0).all() or not keep.any():
            return np.maximum(coef, 0)
        keep &= coef > 0


def fit(saved: dict, margin: float) -> None:
    """Lines for gapscope.analysis.memory.LINES: per format and path, the largest peak of the
    path's commands over (1, activities, calls, NVTX rows) by non-negative least squares of the
    ratio to the peak (each row divided by its peak, so that no size outweighs the others), the
    base at least the largest of the real traces' own peaks (and that peak where no source was
    measured at two sizes); then the whole line raised until it
    is ``margin`` times every peak or more, rounded up (10 MB, 10 bytes). For a PyTorch profiler
    trace the rows are its kept events as its JSON bytes bound them (memory.kineto_events)."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from gapscope.analysis.memory import kineto_events

    points: dict[tuple[str, str], dict[tuple[str, int], tuple[dict, int]]] = {}
    for r in saved.values():
        pts = points.setdefault((r["format"], r["kind"]), {})
        k = (r["source"], r["kernels"])
        if k not in pts or r["peak"] > pts[k][1]:
            pts[k] = (r["counts"], r["peak"])
    for (fmt, kind), pts in sorted(points.items(), key=lambda kv: (FORMATS.index(kv[0][0]), KINDS.index(kv[0][1]))):
        least = max((peak for (_, kernels), (_, peak) in pts.items() if kernels == 0), default=0)
        rows = [(c, peak) for (_, kernels), (c, peak) in pts.items() if kernels > 0]
        if not rows:
            continue
        if fmt == "kineto":
            x = np.array([[1, kineto_events(c["json_bytes"]), 0, 0] for c, _ in rows], dtype=float)
        else:
            x = np.array([[1, c["activities"], c["api"] + c["syncs"], c["nvtx"]] for c, _ in rows], dtype=float)
        peak = np.array([p for _, p in rows], dtype=float)
        w = x / peak[:, None]
        coef = nonnegative_fit(w, np.ones(len(rows)))
        sizes = {}
        for source, kernels in pts:
            sizes.setdefault(source, set()).add(kernels)
        if coef[0] < least or not any(len(k - {0}) > 1 for k in sizes.values()):
            # the base below a real trace's whole peak, or no source measured at two sizes to
            # tell it from the slope: held at that peak
            coef[1:] = nonnegative_fit(w[:, 1:], 1 - least / peak)
            coef[0] = least
        coef *= max(1.0, float(np.max(margin * peak / (x @ coef))))
        line = np.ceil(coef / [1e7, 10, 10, 10]) * [1e7, 10, 10, 10]
        ratios = (x @ line) / peak
        print(f"{fmt:<13}{kind:<10} Line({int(line[0]):_}, {int(line[1])}, {int(line[2])}, {int(line[3])})"
              f"  est/peak {ratios.min():.2f}-{ratios.max():.2f} over {len(rows)} tilings")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=1_000_000, help="the size of every source, format and path")
    ap.add_argument("--nvtx-kernels", type=int, default=200_000,
                    help="the size of emit_nvtx (5.2 NVTX ranges a kernel: 1M kernels are 5.6M ranges)")
    ap.add_argument("--sources", default=",".join(SOURCES))
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--real", action="store_true", help="also the real traces themselves (the base)")
    ap.add_argument("--big", type=int, default=0, help="also this size, for the decode source")
    ap.add_argument("--big-formats", default="nsys-sqlite,nsys-parquet")
    ap.add_argument("--big-kinds", default="levels")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "gapscope-bench")
    ap.add_argument("--save", type=Path, default=None, help="the rows' JSON (default: WORKDIR/memory.json)")
    ap.add_argument("--table", action="store_true", help="print the saved rows with today's estimate")
    ap.add_argument("--fit", action="store_true", help="print lines fitted to the saved rows")
    ap.add_argument("--markdown", action="store_true", help="the saved tilings as docs/performance.md's table")
    ap.add_argument("--margin", type=float, default=1.05, help="--fit: how far over every peak")
    ap.add_argument("--make", nargs=3, metavar=("SOURCE", "FORMAT", "KERNELS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.make:  # a child of tiled_in_child
        args.workdir.mkdir(parents=True, exist_ok=True)
        print(tiled(args.make[0], args.make[1], int(args.make[2]), args.workdir))
        return None
    save = args.save or args.workdir / "memory.json"
    saved = json.loads(save.read_text()) if save.exists() else {}
    if args.table:
        return table(saved)
    if args.fit:
        return fit(saved, args.margin)
    if args.markdown:
        return markdown(saved)
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"SYNTHETIC tilings in {args.workdir}; {os.cpu_count()} CPUs; peaks of whole processes (wait4)")
    print(HEADER)
    plan = []
    for name in args.sources.split(","):
        for fmt in args.formats.split(","):
            if fmt in SOURCES[name]:
                if args.real:
                    plan.append((name, fmt, 0, args.kinds.split(",")))
                size = args.nvtx_kernels if name == "emit_nvtx" else args.kernels
                plan.append((name, fmt, size, args.kinds.split(",")))
    if args.big:
        plan += [("decode", fmt, args.big, args.big_kinds.split(",")) for fmt in args.big_formats.split(",")]
    for name, fmt, kernels, kinds in plan:
        measure(name, fmt, kernels, kinds, args.workdir, saved)
        save.write_text(json.dumps(saved, indent=1))


if __name__ == "__main__":
    main()
