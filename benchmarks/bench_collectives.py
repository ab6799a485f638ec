"""Benchmark: pairing collectives across ranks (gapscope.fleet.collectives.pair) against a floor.

Builds SYNTHETIC per-rank communication kernels in memory (no trace: what the fleet's workers
send back, gapscope.analysis.communication.INSTANCE_COLUMNS), RANKS ranks x COLLECTIVES
collectives on one sequence, arrivals and ends spread at random, one file per rank on clocks
that differ, then times, best of --repeat:

* ``floor``: concatenating the same frames, sorting them by (sequence, occurrence, rank) and one
  group-wise max of the starts: the least any pairing by order can do;
* ``pair``: the whole pairing: clock offsets, waits, transfers, the gaps before, per-rank totals.

    python benchmarks/bench_collectives.py [--ranks 8,64,256] [--collectives 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from gapscope.fleet.collectives import pair  # noqa: E402
from harness import best  # noqa: E402


def parts(ranks: int, collectives: int, seed: int = 0) -> list[pd.DataFrame]:
    """One frame per rank (and file): collective i arrives at i * 1 ms plus up to 200 us, ends
    together on every rank (plus up to 5 us), on a clock shifted by the rank's own offset."""
    rng = np.random.default_rng(seed)
    out = []
    occurrence = np.arange(collectives, dtype=np.int64)
    base = occurrence * 1_000_000
    end = base + 300_000 + rng.integers(0, 5_000, collectives)
    for r in range(ranks):
        shift = int(rng.integers(0, 10**9))
        start = base + rng.integers(0, 200_000, collectives)
        out.append(pd.DataFrame({
            "device": np.zeros(collectives, dtype=np.int64), "sequence": np.zeros(collectives, dtype=np.int64),
            "occurrence": occurrence, "name": np.full(collectives, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
            "start": start + shift, "end": end + rng.integers(0, 5_000, collectives) + shift,
            "before_gap_ns": rng.integers(0, 100_000, collectives), "rank": np.full(collectives, r),
            "file": np.full(collectives, r)}))
    return out


def floor(frames: list[pd.DataFrame]) -> None:
    c = pd.concat(frames, ignore_index=True).sort_values(["sequence", "occurrence", "rank"], kind="stable")
    c.groupby(["sequence", "occurrence"], sort=False)["start"].max()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="8,64,256")
    ap.add_argument("--collectives", type=int, default=2000, help="per rank")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"SYNTHETIC communication kernels, one sequence, one file per rank; best of {args.repeat}")
    print(f"{'ranks':>6}{'collectives':>12}{'kernels':>10}{'floor s':>9}{'pair s':>8}{'x floor':>8}")
    for ranks in (int(r) for r in args.ranks.split(",")):
        frames = parts(ranks, args.collectives)
        labels = [f"rank{r}" for r in range(ranks)]
        f = best(lambda: floor(frames), args.repeat)
        p = best(lambda: pair(frames, labels), args.repeat)
        print(f"{ranks:>6}{args.collectives:>12,}{ranks * args.collectives:>10,}{f:>9.3f}{p:>8.3f}{p / f:>7.1f}x",
              flush=True)


if __name__ == "__main__":
    main()
