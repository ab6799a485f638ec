"""CUDA Graph replays in a timeline: which work a graph launch issued, how many replays a row
holds, and its gap time between replays against inside them (docs/metrics.md, "Graph replays").

* graph work: kernels launched by ``cudaGraphLaunch``/``cuGraphLaunch`` (node-level tracing),
  and graph-level executions (CUPTI_ACTIVITY_KIND_GRAPH_TRACE rows);
* replays: the distinct graph launch calls that issued a row's work;
* a gap is *inside* a replay when the activities on its two sides were launched by the same
  graph launch call, and *between* launches otherwise (for eager work, every gap).
"""

from __future__ import annotations

import numpy as np

from gapscope.analysis.metrics import GapList
from gapscope.trace.frames import ActivityKind

#: The fields this module adds to range, name and device rows (docs/schema.md).
REPLAY_FIELDS = ("graph_kernels", "graph_replays", "gap_between_replays_ns", "gap_inside_replays_ns")
#: Members :meth:`Replays.counts` reads at a time.
COUNT_BLOCK = 1 << 20


class Replays:
    """Graph-replay facts per activity, computed once; :meth:`figures` rolls them up per row."""

    def __init__(self, kind: np.ndarray, launch: np.ndarray, graph_call: np.ndarray) -> None:
        """``kind``: ActivityKind per activity; ``launch``: its launching call (-1 for none);
        ``graph_call``: per API call, whether it is a graph launch."""
        self.launch = launch
        by_graph_call = (launch >= 0) & graph_call[np.maximum(launch, 0)] if graph_call.size else \
            np.zeros(launch.size, dtype=bool)
        is_kernel = kind == ActivityKind.KERNEL
        #: per activity: issued by a graph launch call (a kernel of a replay, or a graph execution)
        self.graph_work = (is_kernel & by_graph_call) | (kind == ActivityKind.GRAPH)
        self.n_calls = int(graph_call.size)

    def replay_call(self, act: np.ndarray | slice) -> np.ndarray:
        """The graph launch call that issued each of the activities ``act`` (indices or a
        slice of them), -1 for any other work."""
        call = self.launch[act]
        return np.where(self.graph_work[act] & (call >= 0), call, -1)

    def counts(self, member_act: np.ndarray | None, member_row: np.ndarray,
               n_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """(graph kernels, distinct graph launch calls) per row of a membership (``member_act``
        None: every activity, in row ``member_row[activity]``), COUNT_BLOCK members at a time
        (a membership can hold several rows per activity)."""
        kernels = np.zeros(n_rows, dtype=np.int64)
        keys = []  # each block's distinct (row, graph launch call) keys
        width = self.n_calls + 1
        for lo in range(0, member_row.size, COUNT_BLOCK):
            rows = member_row[lo:lo + COUNT_BLOCK]
            act = slice(lo, lo + rows.size) if member_act is None else member_act[lo:lo + COUNT_BLOCK]
            kernels += np.bincount(rows[self.graph_work[act]], minlength=n_rows)
            call = self.replay_call(act)
            has = call >= 0
            if has.any():
                keys.append(np.unique(rows[has].astype(np.int64) * width + call[has]))
        replayed = np.unique(np.concatenate(keys)) // width if keys else np.zeros(0, dtype=np.int64)
        return kernels, np.bincount(replayed, minlength=n_rows).astype(np.int64)

    def inside_ns(self, gaps: GapList, n_rows: int) -> np.ndarray:
        """Gap time per row whose two sides were issued by one graph launch call."""
        return self.add_inside(np.zeros(n_rows, dtype=np.int64), gaps, gaps.row)

    def add_inside(self, out: np.ndarray, gaps: GapList, rows: np.ndarray) -> np.ndarray:
        """``out`` with each gap's time inside a replay added at its row (``rows``, one per gap)."""
        prev = self.replay_call(gaps.prev_act)
        inside = (prev >= 0) & (prev == self.replay_call(gaps.next_act))  # both sides from one launch call
        np.add.at(out, rows[inside], gaps.length[inside])
        return out


def figures(kernels: np.ndarray, replays: np.ndarray, gap_ns: np.ndarray, inside: np.ndarray) -> dict[str, np.ndarray]:
    """The REPLAY_FIELDS' columns, one value per row: between = gap - inside."""
    gap_ns, inside = np.asarray(gap_ns, dtype=np.int64), np.asarray(inside, dtype=np.int64)
    columns = (kernels, replays, gap_ns - inside, inside)
    return dict(zip(REPLAY_FIELDS, (np.asarray(c, dtype=np.int64) for c in columns)))
