"""Benchmark: assembling the result rows of one analysis (issue 18), the list-of-dicts way (the
code at --base, by default b85bc89, the last that built a dict per row in the pipeline) against
this checkout's columns (gapscope.analysis.rows), for 12,000 and 100,000 rows.

What the pipeline does once it has its per-row arrays, step by step, on SYNTHETIC rows (random
figures from a fixed seed, a third of them graph replays, some without GPU work):

* ``rows``: the key and stats frames into a section (the dicts, or the columns: pipeline._rows
  or pipeline._columns);
* ``replays``: the graph replay figures (made once, outside the timing) added;
* ``categories``: ``gap_by_category_ns`` and the graph ceiling added (_with_categories);
* ``verdicts``: ``verdict`` and ``reading`` added (_with_verdicts);
* ``read out``: this checkout only, every row made a dict (what a renderer pays, a slice at a
  time, and the base paid in the steps above);
* ``sums``: GapSplit.sums of 1,000,000 gaps into the rows, half of them split over states.

The base's code of gapscope/analysis/{pipeline,verdicts,attribution,result}.py is read with
`git show` and run on the same inputs in this process; the two must give equal rows, in the same
key order, which the script checks before it prints. Best of --repeat:

    python benchmarks/bench_rows.py [--base b85bc89] [--repeat 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gapscope.analysis import attribution, pipeline, replays  # noqa: E402
from gapscope.analysis.rows import RowTable  # noqa: E402
from gapscope.schema import STATS_FIELDS  # noqa: E402

STEPS = ("rows", "replays", "categories", "verdicts", "read out")
N_GAPS = 1_000_000


def module_at(base: str, path: str, workdir: Path) -> ModuleType:
    """The module of ``path`` as it is at git revision ``base``, loaded under a name of its own."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{base}:{path}"], capture_output=True, text=True)
    if source.returncode != 0:
        raise SystemExit(f"cannot read {path} at {base}: {source.stderr.strip()}")
    name = f"base_{Path(path).stem}"
    file = workdir / f"{name}.py"
    file.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def base_way(base: str, workdir: Path) -> tuple[ModuleType, type]:
    """The base's row helpers (its pipeline calling its own verdict, as_dicts, frame_records and
    ceiling) and its GapSplit."""
    verdicts = module_at(base, "gapscope/analysis/verdicts.py", workdir)
    attr = module_at(base, "gapscope/analysis/attribution.py", workdir)
    result = module_at(base, "gapscope/analysis/result.py", workdir)
    payoff = module_at(base, "gapscope/analysis/payoff.py", workdir)
    # The base pipeline imports its own ceiling() and frame_records(), gone from this checkout.
    theirs = {"gapscope.analysis.payoff": payoff, "gapscope.analysis.result": result}
    here = {name: sys.modules[name] for name in theirs}
    sys.modules.update(theirs)
    try:
        pipe = module_at(base, "gapscope/analysis/pipeline.py", workdir)
    finally:
        sys.modules.update(here)
    pipe.verdict, pipe.as_dicts, pipe.frame_records = verdicts.verdict, attr.as_dicts, result.frame_records
    return pipe, attr.GapSplit


def inputs(n: int, seed: int = 18) -> dict:
    """SYNTHETIC per-row arrays of ``n`` rows, as the pipeline has them before it builds rows."""
    rng = np.random.default_rng(seed)
    kernels = rng.integers(0, 2_000, n)
    span = np.where(kernels > 0, rng.integers(10_000, 10**9, n), 0)
    gap = (span * rng.random(n)).astype(np.int64)
    stats = pd.DataFrame({f: rng.integers(0, 10**6, n) for f in STATS_FIELDS})
    stats["kernels"], stats["gpu_span_ns"], stats["gap_ns"] = kernels, span, gap
    stats["gap_fraction"] = np.where(span > 0, gap / np.maximum(span, 1), np.nan)
    for f in ("gap_p50_ns", "gap_p90_ns", "gap_p99_ns", "kernel_median_ns"):
        stats[f] = np.where(kernels > 1, rng.random(n) * 2e5, np.nan)
    keys = pd.DataFrame({"id": np.arange(n), "name": [f"range{i % 97}" for i in range(n)], "domain": None,
                         "pid": 4476, "thread": 4476, "start_ns": np.arange(n) * 10**6, "end_ns": np.arange(n) * 10**6 + 10,
                         "depth": rng.integers(0, 3, n)})
    graph = np.where(rng.random(n) < 1 / 3, kernels, kernels // 4)
    inside = (gap * rng.random(n)).astype(np.int64)
    weights = rng.random((n, attribution.N_CATEGORIES)) ** 4  # a few categories dominate
    cats = np.floor(weights / weights.sum(axis=1, keepdims=True) * gap[:, None]).astype(np.int64)
    cats[:, 0] += gap - cats.sum(axis=1)
    figures = replays.figures(graph, rng.integers(0, 50, n), gap, inside)
    return {"keys": keys, "stats": stats, "figures": figures, "cats": cats}


def gap_split(split_type: type, n_rows: int, seed: int = 18) -> tuple:
    """A SYNTHETIC GapSplit of N_GAPS gaps in row order (half split over states) with its rows
    and lengths."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.integers(0, n_rows, N_GAPS))
    length = rng.integers(1, 10**6, N_GAPS)
    whole = np.where(rng.random(N_GAPS) < 0.5, -1, rng.integers(0, attribution.N_CATEGORIES, N_GAPS)).astype(np.int8)
    state_row = np.full(N_GAPS, -1, dtype=np.int64)
    state_row[whole < 0] = np.arange(int((whole < 0).sum()))
    states = rng.integers(0, 10**5, (int((whole < 0).sum()), 5))
    return split_type(whole, state_row, states, whole.astype(np.int64)), rows, length, n_rows


def assemble_dicts(pipe: ModuleType, data: dict, times: dict[str, list[float]]) -> list[dict]:
    """The base's rows through every step (a dict per row from the first), each step's time
    appended to ``times``."""
    figures = [dict(zip(data["figures"], values)) for values in zip(*(c.tolist() for c in data["figures"].values()))]
    t = time.perf_counter()
    rows = pipe._rows(data["keys"], data["stats"])
    times["rows"].append(time.perf_counter() - t)
    t = time.perf_counter()
    rows = pipe._with_replays(rows, figures)
    times["replays"].append(time.perf_counter() - t)
    t = time.perf_counter()
    rows = pipe._with_categories(rows, data["cats"], True)
    times["categories"].append(time.perf_counter() - t)
    t = time.perf_counter()
    rows = pipe._with_verdicts(rows)
    times["verdicts"].append(time.perf_counter() - t)
    times["read out"].append(0.0)
    return rows


def assemble_columns(pipe: ModuleType, data: dict, times: dict[str, list[float]]) -> list[dict]:
    """This checkout's section through every step as columns, then read out as dicts."""
    t = time.perf_counter()
    columns = pipe._columns(data["keys"], data["stats"])
    times["rows"].append(time.perf_counter() - t)
    t = time.perf_counter()
    columns.update(data["figures"])
    times["replays"].append(time.perf_counter() - t)
    t = time.perf_counter()
    pipe._with_categories(columns, data["cats"], True)
    times["categories"].append(time.perf_counter() - t)
    t = time.perf_counter()
    pipe._with_verdicts(columns)
    times["verdicts"].append(time.perf_counter() - t)
    t = time.perf_counter()
    rows = list(RowTable(columns))
    times["read out"].append(time.perf_counter() - t)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="b85bc89", help="the git revision of the list-of-dicts way")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        base_pipe, base_split = base_way(args.base, Path(workdir))
    ways = {args.base: (base_pipe, base_split, assemble_dicts),
            "this checkout": (pipeline, attribution.GapSplit, assemble_columns)}
    print(f"{os.cpu_count()} CPUs; SYNTHETIC rows; best of {args.repeat}; seconds")
    print(f"{'rows':>8}  {'way':<14}" + "".join(f"{s:>11}" for s in (*STEPS, "all rows", "sums")))
    for n in (12_000, 100_000):
        data = inputs(n)
        outputs = {}
        for way, (pipe, split_type, assemble) in ways.items():
            times: dict[str, list[float]] = {s: [] for s in STEPS}
            totals, sums_times = [], []
            for _ in range(args.repeat):
                t = time.perf_counter()
                rows = assemble(pipe, data, times)
                totals.append(time.perf_counter() - t)
            split, *sums_args = gap_split(split_type, n)
            for _ in range(args.repeat):
                t = time.perf_counter()
                sums = split.sums(*sums_args)
                sums_times.append(time.perf_counter() - t)
            outputs[way] = (rows, sums)
            print(f"{n:>8,}  {way:<14}" + "".join(f"{min(times[s]):>11.4f}" for s in STEPS)
                  + f"{min(totals):>11.4f}{min(sums_times):>11.4f}")
        (base_rows, base_sums), (rows, sums) = outputs.values()
        if base_rows != rows or list(base_rows[0]) != list(rows[0]) or not np.array_equal(base_sums, sums):
            raise SystemExit(f"{n} rows: this checkout's rows differ from {args.base}'s")


if __name__ == "__main__":
    main()
