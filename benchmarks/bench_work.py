"""Benchmark: what the fields `gapscope compare` reads to tell units of work and host work cost
the analysis (issue 40): each range's CUDA calls (``api_calls``, ``api_ns``:
gapscope.analysis.ranges.range_calls) and every by-name and device row's kernels counted by name
(``kernel_counts``: gapscope.analysis.metrics.kernel_counts and the name lookup before it), and
cutting the frames to a time window (``--window``: gapscope.analysis.time_window.cut),
timed on a large export beside the whole analysis of it (with attribution, the default), the
floor they add to, in the same run and process.

    python benchmarks/bench_work.py [--source traces/cupy_paths_node.sqlite] [--kernels 1000000]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import best, big_trace  # noqa: E402


def main() -> None:
    args, big = big_trace(__doc__)
    import numpy as np

    from gapscope.analysis.attribution import api_names
    from gapscope.analysis.metrics import kernel_counts
    from gapscope.analysis.pipeline import analysis_of, opened_analysis
    from gapscope.analysis.ranges import range_calls
    from gapscope.trace.cuda_api import QUIET_CALLS

    whole = best(lambda: analysis_of(big, gaps=False), args.repeat)
    with opened_analysis(big, gaps=True, all_calls=False) as a:
        frames, acts = a.frames, a.acts
        names = api_names(frames)
        quiet = np.isin(names[1], sorted(QUIET_CALLS))
        counted = ~quiet[names[0]] if quiet.any() else None
        calls = best(lambda: range_calls(frames, a.ranges, counted), args.repeat)

        def counts() -> None:
            kernels = np.flatnonzero(acts.is_kernel)
            codes, labels, _ = frames.activity_labels(kernels)
            uniq, text_code = np.unique(np.asarray(labels, dtype=str), return_inverse=True)
            label = np.full(acts.start.size, -1, dtype=np.int64)
            label[kernels] = text_code.reshape(-1)[codes]
            n_names = int(a.name_of_range.max()) + 1 if a.name_of_range.size else 0
            kernel_counts(label, uniq.tolist(), a.member_act, a.name_of_range[a.member_range], n_names)
            kernel_counts(label, uniq.tolist(), None, acts.device_code, acts.device_ids.size)

        mix = best(counts, args.repeat)
        from gapscope.analysis.time_window import cut

        first, last = int(frames.activities["start"].min()), int(frames.activities["end"].max())
        half = (last - first) // 4, 3 * (last - first) // 4  # the middle half of the trace
        window = best(lambda: cut(frames, half), args.repeat)
        n_ranges, n_members = len(a.ranges.frame), a.member_act.size
    print(f"{n_ranges:,} ranges, {n_members:,} range memberships, {acts.start.size:,} activities")
    print(f"{'step':42} {'seconds':>8} {'of the analysis':>16}")
    for what, t in (("whole analysis (the floor, attribution on)", whole),
                    ("range_calls: api_calls, api_ns", calls), ("kernel_counts: names looked up, counted", mix),
                    ("--window: the frames cut to the middle half", window)):
        print(f"{what:42} {t:8.3f} {t / whole:16.1%}")


if __name__ == "__main__":
    main()
