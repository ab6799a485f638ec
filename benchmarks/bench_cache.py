"""Benchmark: what one cache write costs with its bookkeeping, by the number of entries kept.

For each size (100, 1,000, 10,000 result entries of 1 KiB already in a fresh cache folder, a
bound far above them: the common case, nothing to evict), times one result entry kept:

* ``keep``: ``Ledger.keep`` and ``Ledger.bound``: the running total in ``index`` updated under
  its lock, no listing;
* ``at bound``: the same with a bound the cache is already at, so every write evicts one entry
  (the one case that lists the folders).

Each figure is the median of --writes writes, in milliseconds; ``floor`` is the same bytes
written with no bookkeeping at all (a private file renamed into place), measured in the same run.

    python benchmarks/bench_cache.py [--writes 50] [--workdir /tmp]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gapscope import cache  # noqa: E402

BODY = b"r" * 1020  # 1 KiB with its CRC-32


def filled(root: Path, n: int) -> None:
    """``n`` result entries under ``root``, counted in its index (one listing, not timed)."""
    folder = root / "results"
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"{i:064x}.result").write_bytes(BODY)
        os.utime(folder / f"{i:064x}.result", (1000 + i, 1000 + i))
    cache.Ledger(root).bound(1 << 62)  # the index, made from a listing


def median_ms(write: Callable[[Path], object], root: Path, writes: int) -> float:
    times = []
    for i in range(writes):
        path = root / "results" / f"{i + (1 << 200):064x}.result"
        t = time.perf_counter()
        write(path)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writes", type=int, default=50)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args()
    big = 1 << 40
    print(f"{os.cpu_count()} CPUs; median of {args.writes} writes of a 1 KiB result entry; ms per write")
    print(f"{'entries':>8} {'floor':>8} {'keep':>8} {'at bound':>9}")
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="gapscope-bench-cache-") as tmp:
        for n in (100, 1_000, 10_000):
            row = {}
            for way in ("floor", "keep", "at bound"):
                root = Path(tmp) / f"{n}-{way.replace(' ', '-')}"
                filled(root, n)
                ledger = cache.Ledger(root)
                if way == "floor":
                    def write(path: Path) -> None:
                        tmp_path = path.with_name(".part-floor")
                        tmp_path.write_bytes(BODY)
                        os.replace(tmp_path, path)
                else:
                    limit = big if way == "keep" else n * len(BODY) + 4 * len(BODY) // 1024

                    def write(path: Path, ledger: cache.Ledger = ledger, limit: int = limit) -> None:
                        ledger.keep(path, BODY)
                        ledger.bound(limit)
                row[way] = median_ms(write, root, args.writes)
            print(f"{n:>8,} {row['floor']:>8.2f} {row['keep']:>8.2f} {row['at bound']:>9.2f}")


if __name__ == "__main__":
    main()
