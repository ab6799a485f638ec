"""Build a large SYNTHETIC export by tiling a real one: every tile is a copy of the source's
kernels, memcpy/memset, runtime calls, synchronizations and NVTX ranges, shifted in time by one
source span and in correlation id by the source's largest id. Only the tables gapscope reads are
copied. The output is synthetic (named so in its META_DATA_EXPORT) and never goes in traces/.
With ``--distinct-names`` every tile after the first appends `` #<tile>`` to its inline NVTX range
names, so that no two tiles share a name.

    python benchmarks/tile_trace.py SOURCE.sqlite OUT.sqlite --kernels 1000000
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import time
from pathlib import Path

TIME_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
)
COPY_TABLES = ("StringIds", "TARGET_INFO_GPU", "ThreadNames")


def tile(source: Path, out: Path, kernels: int, distinct_names: bool = False) -> int:
    """Write ``out`` with at least ``kernels`` kernel rows; returns the number of tiles."""
    if out.exists():
        out.unlink()
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    tables = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    n_kernels = src.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    t0, t1 = src.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    r0, r1 = src.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    shift = max(t1, r1) - min(t0, r0) + 1_000_000
    corr_shift = src.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 1
    n_tiles = math.ceil(kernels / n_kernels)
    meta_table = "META_DATA_EXPORT" if "META_DATA_EXPORT" in tables else "EXPORT_META_DATA"
    schemas = dict(src.execute("SELECT name, sql FROM sqlite_master WHERE type='table'"))
    src.close()

    dst = sqlite3.connect(out)
    dst.execute("PRAGMA journal_mode=OFF")
    dst.execute("PRAGMA synchronous=OFF")
    dst.execute(f"ATTACH DATABASE 'file:{source}?mode=ro' AS src")
    dst.execute(f"CREATE TABLE META_DATA_EXPORT AS SELECT * FROM src.{meta_table}")
    dst.execute("UPDATE META_DATA_EXPORT SET value = value || ' (SYNTHETIC tiled x' || ? || ')' "
                "WHERE name = 'EXPORT_PRODUCT_VERSION'", (n_tiles,))
    dst.execute("CREATE TABLE tiles (k INTEGER)")
    dst.executemany("INSERT INTO tiles VALUES (?)", [(k,) for k in range(n_tiles)])
    for table in COPY_TABLES:
        if table in tables:
            dst.execute(schemas[table])
            dst.execute(f"INSERT INTO {table} SELECT * FROM src.{table}")
    for table in TIME_TABLES:
        if table not in tables:
            continue
        dst.execute(schemas[table])
        cols = [r[1] for r in dst.execute(f"PRAGMA src.table_info({table})")]
        exprs = []
        for c in cols:
            if c in ("start", "end"):
                exprs.append(f"s.{c} + t.k * {shift}")
            elif c == "correlationId":
                exprs.append(f"s.{c} + t.k * {corr_shift}")
            elif c == "text" and table == "NVTX_EVENTS" and distinct_names:
                exprs.append(f"CASE WHEN t.k = 0 OR s.{c} IS NULL THEN s.{c} ELSE s.{c} || ' #' || t.k END")
            else:
                exprs.append(f"s.{c}")
        dst.execute(f"INSERT INTO {table} SELECT {', '.join(exprs)} FROM tiles t, src.{table} s "
                    f"ORDER BY t.k, s.start")
    dst.execute("DROP TABLE tiles")
    dst.commit()
    dst.execute("DETACH DATABASE src")
    dst.close()
    return n_tiles


def cached_tiling(source: Path, kernels: int, workdir: Path, distinct_names: bool = False) -> Path:
    """A tiling of ``source`` to ``kernels`` kernels in ``workdir``, made once and reused."""
    workdir.mkdir(parents=True, exist_ok=True)
    big = workdir / f"{source.stem}-x{kernels}{'-distinct' if distinct_names else ''}.synthetic.sqlite"
    if not big.exists():
        print(f"tiling {source} to {kernels:,} kernels -> {big} ...", flush=True)
        tile(source, big, kernels, distinct_names)
    return big


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--distinct-names", action="store_true", help="no two tiles share an NVTX range name")
    args = ap.parse_args()
    t = time.perf_counter()
    n = tile(args.source, args.out, args.kernels, args.distinct_names)
    print(f"wrote {args.out} ({n} tiles of {args.source.name}, "
          f"{args.out.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
