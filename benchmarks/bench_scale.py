"""Benchmark: issue 18's table, every figure beside its floor measured in the same run.

Builds (once, cached in --workdir) SYNTHETIC exports by tiling a real trace
(traces/torch_decode.sqlite by default; benchmarks/tile_trace.py), then runs each step as a
whole process (``python -m gapscope ...``, fresh interpreter, imports included), timing it and
reading its peak resident memory from the kernel (``wait4``):

* ``read floor``: a bare ADBC read, on one thread, of exactly the SELECTs gapscope runs on that
  export (recorded from gapscope's reader beforehand: the same columns, filters and rowid
  chunks), into Arrow, in a process that imports nothing else;
* ``analyze``: ``gapscope analyze T -f json -o FILE --no-cache``, the whole process;
* ``cache miss`` / ``column cache hit``: the same with the caches on (a fresh cache folder): the
  first run keeps the columns, the next ones read them (gapscope.trace.column_cache), the result cache
  emptied before each (so each one analyzes);
* ``result cache hit``: the same repeated, the result kept (gapscope.cache.ResultCache): JSON, and
  the table (``-o FILE.txt``), beside two floors: ``python -c pass``, and a process that reads
  what the key needs and the entry's bytes: the export's digest as the cache keeps it
  (gapscope.cache.content_digest), or, when none was kept (an export changed within
  cache.SETTLED_NS of its analysis), every byte of the export hashed (SHA-1);
* ``json`` / ``table``: the report of a trace with 20,000 NVTX ranges of distinct names
  (traces/torch_emit_nvtx.sqlite tiled, ``--no-normalize``), written in one process after one
  analysis: compact JSON, the old indented JSON, CSV and the table, beside ``result.to_dict()``
  alone: every row as a dict, what the table and the indented JSON walk (the compact JSON and
  the CSV write the result's columns without making them: gapscope.render.json_rows, so they
  can take less than this floor);
* ``--jobs``: eight copies of a 200,000-kernel export analyzed together with --jobs 1 (beside
  one file's whole process times eight) and 2, beside the floor for two workers (half the
  --jobs 1 time: both cores busy, nothing lost).

Every row prints the load average before it. Times are the best of --repeat, with the spread
(worst - best); memory the largest peak.

    flock /work/notes/bench.lock python benchmarks/bench_scale.py [--kernels 100000,1000000] [--quick]

``--quick`` (CI: ``.ci/run``): 20,000 kernels, 4,000 ranges, four 20,000-kernel files, one run
each. The script fails when the JSON of a cache hit (column or result) differs from the uncached
one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from harness import CHILD_ENV  # noqa: E402  (every child: this checkout, the column cache off)

RANGES_SOURCE = ROOT / "traces" / "torch_emit_nvtx.sqlite"
SOURCE_RANGES, SOURCE_KERNELS = 3_675, 650

READ_FLOOR = r"""
import json, sys
import adbc_driver_sqlite.dbapi as adbc
path, queries = sys.argv[1], json.loads(open(sys.argv[2]).read())
conn = adbc.connect("file:" + path + "?mode=ro&immutable=1")
cur = conn.cursor(); cur.execute("PRAGMA mmap_size = 4294967296"); cur.fetchall(); cur.close()
rows = 0
for q in queries:
    cur = conn.cursor(); cur.execute(q); rows += cur.fetch_arrow_table().num_rows; cur.close()
conn.close()
print(rows)
"""

RESULT_FLOOR = r"""
import hashlib, sys
if sys.argv[3]:  # the digest kept
    open(sys.argv[3], "rb").read()
else:
    digest = hashlib.sha1()
    with open(sys.argv[1], "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
open(sys.argv[2], "rb").read()
"""

OUTPUT = r"""
import io, json, sys, time
from gapscope.analysis import analyze
from gapscope.render import render
result = analyze(sys.argv[1], normalize=False)
repeat = int(sys.argv[2])
def best(fn):
    times = []
    for _ in range(repeat):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    return [min(times), max(times)]
def write(fmt, **options):
    buf = io.StringIO(); render(result, fmt, buf, **options); return buf.getvalue()
out = {"ranges": len(result.ranges), "names": len(result.by_name),
       "to_dict": best(result.to_dict),
       "json": best(lambda: write("json")), "json_indent": best(lambda: write("json", indent=2)),
       "table": best(lambda: write("table")), "csv": best(lambda: write("csv")),
       "csv_bytes": len(write("csv")),
       "json_bytes": len(write("json")), "json_indent_bytes": len(write("json", indent=2)),
       "table_lines": write("table").count("\n")}
print(json.dumps(out))
"""


def child_output(argv: list[str]) -> str:
    """The stdout of one process run to its end (SystemExit when it fails)."""
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **CHILD_ENV})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr}")
    return proc.stdout


def timed(argv: list[str], repeat: int, env: dict[str, str] | None = None,
          before: Callable[[], object] | None = None) -> dict:
    """Best and worst seconds, the CPU seconds (user + system) of the best run and the largest
    peak MiB (ru_maxrss / 1024) of ``repeat`` runs (``before`` each)."""
    runs = []
    for _ in range(repeat):
        if before is not None:
            before()
        runs.append(run_one(argv, env))
    best = min(runs)
    return {"best": best[0], "worst": max(r[0] for r in runs), "mb": max(r[1] for r in runs), "cpu": best[2]}


def run_one(argv: list[str], env: dict[str, str] | None) -> tuple[float, float, float]:
    """One run: its seconds, its own peak MiB and its CPU seconds, user + system (wait4 on
    this child alone)."""
    with tempfile.TemporaryFile() as errors:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errors,
                                env={**os.environ, **CHILD_ENV, **(env or {})}, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        err = errors.read().decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{err}")
    return seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


QUERIES = r"""
import json, os, sys
from gapscope.analysis.pipeline import analyze
from gapscope.trace import sqlite_reads
ran = []
real = sqlite_reads.BulkReader._query
sqlite_reads.BulkReader._query = lambda self, q: (ran.append(q), real(self, q))[1]
analyze(sys.argv[1])
print(json.dumps(ran))
"""


def recorded_queries(path: Path) -> list[str]:
    """The bulk SELECTs gapscope's SQLite reader runs on ``path`` (default analysis), recorded in
    a child process: this one stays small, since a child's peak memory as wait4 reports it is at
    least this process's size when it was started (Linux counts the memory it forked from)."""
    return json.loads(child_output([sys.executable, "-c", QUERIES, str(path)]).strip().splitlines()[-1])


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def row(what: str, n: str, r: dict, floor: float | None = None, note: str = "") -> None:
    ratio = f"{r['best'] / floor:.2f}x" if floor else ""
    mb = f"{r['mb']:.0f}" if r["mb"] == r["mb"] else ""
    cpu = f"{r['cpu']:.2f}" if r.get("cpu") is not None else ""
    print(f"{what:<24}{n:>16}{r['best']:>9.2f}{r['worst'] - r['best']:>8.2f}{ratio:>9}{mb:>9}{cpu:>8}  "
          f"{load()}{'  ' + note if note else ''}", flush=True)


def scale_rows(source: Path, kernels: int, workdir: Path, repeat: int, plain: bool = False) -> None:
    """The read floor and the whole analysis of a ``kernels``-kernel tiling, then (unless
    ``plain``: the section ``floor``, for sizes where each run takes minutes) the cached runs."""
    from tile_trace import cached_tiling

    big = cached_tiling(source, kernels, workdir)
    qfile = workdir / f"{big.stem}.queries.json"
    qfile.write_text(json.dumps(recorded_queries(big)))
    out = workdir / "out.json"
    n = f"{kernels:,}"
    floor = timed([sys.executable, "-c", READ_FLOOR, str(big), str(qfile)], repeat)
    row("read floor", n, floor, note=f"{big.stat().st_size / 1e6:.0f} MB export")
    gs = [sys.executable, "-m", "gapscope", "analyze", str(big), "-f", "json", "-o", str(out)]
    plain_only, plain = plain, timed([*gs, "--no-cache"], repeat)
    uncached = out.read_bytes()
    row("analyze (no cache)", n, plain, floor["best"])
    if plain_only:
        out.unlink(missing_ok=True)
        return
    xdg = workdir / "xdg"
    env = {"XDG_CACHE_HOME": str(xdg), "GAPSCOPE_NO_CACHE": ""}
    results = xdg / "gapscope" / "results"
    miss = timed(gs, repeat, env, before=lambda: shutil.rmtree(xdg, ignore_errors=True))
    row("analyze, cache miss", n, miss, floor["best"])
    hit = timed(gs, repeat, env, before=lambda: shutil.rmtree(results, ignore_errors=True))
    if out.read_bytes() != uncached:
        raise SystemExit(f"{big}: the analysis read from the column cache differs from the uncached one")
    kept = sum(p.stat().st_size for p in xdg.rglob("*") if p.is_file() and results not in p.parents) / 1e6
    row("column cache hit", n, hit, floor["best"],
        note=f"{hit['best'] / plain['best']:.2f}x the uncached run; {kept:.0f} MB kept")
    result_rows(gs, big, n, repeat, env, results, uncached, out)
    shutil.rmtree(xdg, ignore_errors=True)
    out.unlink(missing_ok=True)


def result_rows(gs: list[str], big: Path, n: str, repeat: int, env: dict[str, str], results: Path,
                uncached: bytes, out: Path) -> None:
    """The result cache's hits (the entry the column cache hit above kept) beside their floors;
    none for an export larger than the cache's bound, which is not hashed (gapscope.cache)."""
    entries = list(results.glob("*.result"))
    if not entries:
        print(f"{'result cache':<24}{n:>16}  nothing kept: a {big.stat().st_size / 1e6:.0f} MB export is over "
              "the cache's bound (GAPSCOPE_CACHE_SIZE), so it is not hashed", flush=True)
        return
    [entry] = entries
    bare = timed([sys.executable, "-c", "pass"], repeat)
    row("python -c pass", n, bare)
    memos = sorted((results.parent / "digests").glob("*"))
    memo = str(memos[0]) if len(memos) == 1 else ""
    floor = timed([sys.executable, "-c", RESULT_FLOOR, str(big), str(entry), memo], repeat)
    row("read digest + entry" if memo else "hash export + read entry", n, floor,
        note=f"{entry.stat().st_size / 1e6:.1f} MB entry")
    hit = timed(gs, repeat, env)
    if out.read_bytes() != uncached:
        raise SystemExit(f"{big}: the JSON of a result cache hit differs from the uncached one")
    row("result cache hit, json", n, hit, floor["best"])
    text = out.with_suffix(".txt")
    table = timed([*gs[:-4], "-o", str(text)], repeat, env)
    if "cached result" not in text.read_text().splitlines()[0]:
        raise SystemExit(f"{big}: the table was not read from the result cache")
    row("result cache hit, table", n, table, floor["best"])
    text.unlink()


def output_rows(workdir: Path, ranges: int, repeat: int) -> None:
    from tile_trace import cached_tiling

    tiles = -(-ranges // SOURCE_RANGES)
    big = cached_tiling(RANGES_SOURCE, tiles * SOURCE_KERNELS, workdir, distinct_names=True)
    text = child_output([sys.executable, "-c", OUTPUT, str(big), str(repeat)])
    o = json.loads(text.strip().splitlines()[-1])
    floor = o["to_dict"][0]
    n = f"{o['ranges']:,} ranges"
    for key, what, note in (("to_dict", "result.to_dict (rows)", ""),
                            ("json", "json (compact)", f"{o['json_bytes'] / 1e6:.1f} MB"),
                            ("json_indent", "json --indent 2", f"{o['json_indent_bytes'] / 1e6:.1f} MB"),
                            ("csv", "csv", f"{o['csv_bytes'] / 1e6:.1f} MB"),
                            ("table", "table", f"{o['table_lines']} lines")):
        best, worst = o[key]
        row(what, n, {"best": best, "worst": worst, "mb": float("nan")}, None if key == "to_dict" else floor, note)


def jobs_rows(source: Path, kernels: int, copies: int, workdir: Path, repeat: int) -> None:
    from tile_trace import cached_tiling

    big = cached_tiling(source, kernels, workdir)
    folder = workdir / f"jobs-{big.stem}"
    folder.mkdir(exist_ok=True)
    paths = []
    for i in range(copies):
        p = folder / f"rank{i}.sqlite"
        if not p.exists() or p.stat().st_size != big.stat().st_size:
            shutil.copyfile(big, p)
        paths.append(str(p))
    out = workdir / "fleet.json"
    n = f"{copies}x{kernels:,}"
    single = timed([sys.executable, "-m", "gapscope", "analyze", paths[0], "-f", "json", "-o", str(out),
                    "--no-cache"], repeat)
    row("one file", f"{kernels:,}", single)
    gs = [sys.executable, "-m", "gapscope", "analyze", *paths, "-f", "json", "-o", str(out), "--no-cache"]
    one = timed([*gs, "--jobs", "1"], repeat)
    row("--jobs 1", n, one, single["best"] * copies, note="ratio to the files analyzed one process each")
    two = timed([*gs, "--jobs", "2"], repeat)
    row("--jobs 2", n, two, one["best"] / 2,
        note=f"floor: half of --jobs 1; speed-up {one['best'] / two['best']:.2f}x")
    out.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=ROOT / "traces" / "torch_decode.sqlite")
    ap.add_argument("--kernels", default="100000,1000000", help="kernel counts, comma-separated")
    ap.add_argument("--ranges", type=int, default=20_000)
    ap.add_argument("--jobs-kernels", type=int, default=200_000)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="scale,output,jobs",
                    help="sections: scale, output, jobs; floor: scale's read floor and uncached analysis alone")
    ap.add_argument("--quick", action="store_true", help="CI-sized: small traces, one run each")
    ap.add_argument("--workdir", type=Path,
                    default=Path(tempfile.gettempdir()) / f"gapscope-bench-{os.environ.get('GAPSCOPE_BENCH_TAG', 'scale')}")
    args = ap.parse_args()
    if args.quick:
        args.kernels, args.ranges, args.jobs_kernels, args.copies, args.repeat = "20000", 4_000, 20_000, 4, 1
    args.workdir.mkdir(parents=True, exist_ok=True)
    sections = set(args.only.split(","))
    print(f"{os.cpu_count()} CPUs; SYNTHETIC tilings of {args.source.name} (and {RANGES_SOURCE.name}); "
          f"best of {args.repeat}; spread = worst - best; ratio = best / the floor above it; "
          f"CPU s = user + system seconds of the best run")
    print(f"{'step':<24}{'size':>16}{'best s':>9}{'spread':>8}{'ratio':>9}{'peak MiB':>9}{'CPU s':>8}")
    if sections & {"scale", "floor"}:
        for k in (int(x) for x in args.kernels.split(",") if x):
            scale_rows(args.source, k, args.workdir, args.repeat, plain="scale" not in sections)
    if "output" in sections:
        output_rows(args.workdir, args.ranges, args.repeat)
    if "jobs" in sections:
        jobs_rows(args.source, args.jobs_kernels, args.copies, args.workdir, args.repeat)


if __name__ == "__main__":
    main()
