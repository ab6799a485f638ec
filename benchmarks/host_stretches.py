"""What the stall threshold separates: the stretches in which a launching process made no CUDA
call, inside the ranges of the shipped traces, and the stall share of their gap time at several
thresholds (docs/metrics.md, "The stall threshold", quotes this script's output).

    python benchmarks/host_stretches.py

First table: per trace and range name, the process's no-CUDA-call stretches that lie inside
the range's instances (calls of any of its threads; QUIET_CALLS left out, as gap attribution
does): their count, median, 99th percentile and maximum, and how many (and how much time) are
over 1 ms. Second table: the share of each row's gap time that gap attribution calls ``stall``
at each threshold.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: (trace, range name or None for the device row, what the row is).
ROWS = (
    ("torch_decode", "eager", "eager decode loop"),
    ("cupy_paths_node", "eager/k=2us", "CuPy eager launches"),
    ("hf_generate_compile", "generate_compiled", "HF generate(), compiled, per token"),
    ("hf_generate_compile", "generate_eager", "HF generate(), eager, first call"),
    ("torch_compile_graphs", "decode", "graph-tree replays"),
    ("torch_dataload", "compute", "training step (--threads process)"),
    ("torch_emit_nvtx", "train_step", "per-op profiled step (--threads process)"),
    ("hf_generate_compile", "compile_warmup", "torch.compile warm-up"),
    ("torch_compile_graphs", "warmup", "reduce-overhead compile"),
    ("jax_train", "train_step", "JAX steps (first compiles)"),
    ("torch_dataload", None, "data loading between steps (device)"),
)
THRESHOLDS_MS = (0.1, 0.25, 0.5, 1, 2, 5, 10)
PROCESS = {"torch_dataload", "torch_emit_nvtx"}  # launches from PyTorch's autograd thread too


def stretches(frames, rf, name: str | None) -> np.ndarray:
    """Lengths of the no-call stretches of the ranges' processes inside the ranges' instances
    (the whole trace for ``name`` None)."""
    from gapscope.analysis.intervals import union_blocks

    api = frames.api
    proc, start, end = api["proc"].to_numpy(), api["start"].to_numpy(), api["end"].to_numpy()
    codes, inverse = np.unique(proc, return_inverse=True)
    key, b_start, b_end = union_blocks(inverse, start, np.maximum(end, start))
    same = key[1:] == key[:-1]
    s0, s1, owner = b_end[:-1][same], b_start[1:][same], codes[key[:-1][same]]
    if name is None:
        return s1 - s0
    inst = rf[rf["name"] == name]
    out = []
    for p, lo, hi in zip((inst["tid"].to_numpy() >> 24).tolist(), inst["start_ns"].tolist(), inst["end_ns"].tolist()):
        sel = (owner == p) & (s0 >= lo) & (s1 <= hi)
        out.append(s1[sel] - s0[sel])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def main() -> None:
    from gapscope.analysis.pipeline import run_analysis
    from gapscope.analysis.ranges import range_table
    from gapscope.trace.handle import open_trace

    print(f"{'trace':<21}{'range':<19}{'stretches':>10}{'p50 us':>9}{'p99 us':>10}{'max ms':>10}"
          f"{'> 1 ms':>8}{'their ms':>10}  what")
    shares = []
    for trace, name, what in ROWS:
        with open_trace(ROOT / "traces" / f"{trace}.sqlite") as tr:
            frames = tr.frames()
            s = stretches(frames, range_table(frames).frame, name)
            over = s[s > 1_000_000]
            q = np.percentile(s, [50, 99]) if s.size else (np.nan, np.nan)
            print(f"{trace:<21}{name or '(device)':<19}{s.size:>10,}{q[0] / 1e3:>9.1f}{q[1] / 1e3:>10.1f}"
                  f"{(s.max() if s.size else 0) / 1e6:>10.3f}{over.size:>8,}{over.sum() / 1e6:>10.1f}  {what}")
            row = []
            for ms in THRESHOLDS_MS:
                r = run_analysis(frames, stall_threshold_ns=int(ms * 1e6),
                                 threads="process" if trace in PROCESS else "same").result
                x = r.devices[0] if name is None else next(b for b in r.by_name if b["name"] == name)
                row.append(x["gap_by_category_ns"]["stall"] / x["gap_ns"] if x["gap_ns"] else 0.0)
            shares.append((trace, name, row))
    print()
    print(f"{'stall share of gap time at':<40}" + "".join(f"{f'{ms:g} ms':>9}" for ms in THRESHOLDS_MS))
    for trace, name, row in shares:
        print(f"{trace + ' ' + (name or '(device)'):<40}" + "".join(f"{100 * v:>8.1f}%" for v in row))


if __name__ == "__main__":
    main()
