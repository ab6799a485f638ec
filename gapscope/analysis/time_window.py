"""A time window of a trace: ``--window START:END`` of `gapscope analyze` and `gapscope compare`,
applied as a filter of the frames before the analysis (docs/metrics.md, "A time window").

The syntax is `gapscope plot`'s (gapscope.plots.window): offsets in ns or with a unit, an empty
side meaning the edge (``2s:`` skips the first 2 s, ``:300ms`` keeps the first 300 ms). Here
they count from the trace's first GPU activity (its *origin*), and a window ``[S, E)`` cuts
the frames so:

* GPU activities (kernels, copies, memsets, graph executions) that overlap it are kept, their
  start and end clipped to it; the others go;
* CUDA calls are kept when they launched a kept activity or overlap the host-side window
  ``[S', E)``, where ``S'`` is the earlier of ``S`` and the start of the first call that
  launched kept work (queued work is launched before it runs); each thread also keeps its last
  call before ``S'`` and its first call from ``E`` on, so that the host stretches crossing the
  window's edges keep their length, and with it their category (docs/metrics.md, "Gap
  attribution");
* NVTX ranges are kept when they overlap ``[S', E)``, cut to it; domain creations are kept;
* stream waits are kept (a wait issued before the window can hold work inside it).

So every gap inside the window is measured and attributed as in the whole trace; the gaps
before the first and after the last kept activity are outside the window's span.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from gapscope.errors import GapscopeError
from gapscope.trace.frames import NVTX_DOMAIN_CREATE, TraceFrames

__all__ = ["Cut", "cut", "parse"]


def parse(text: str | None) -> tuple[int | None, int | None] | None:
    """``START:END`` as (start, end) offsets in ns from the trace's first GPU activity (None: the
    edge), or None for no window; GapscopeError (exit 2) for a malformed or negative one."""
    if text is None:
        return None
    from gapscope.plots.window import parse_window

    if not text.strip() or text.strip() == ":":
        raise GapscopeError(f"--window wants START:END (e.g. 0:300ms, or 2s: to skip the first 2 s), got {text!r}")
    start, end = parse_window(text)
    for side in (start, end):
        if side is not None and side < 0:
            raise GapscopeError(f"--window {text!r}: times count from the trace's first GPU activity and "
                                "cannot be negative")
    if end == 0:
        raise GapscopeError(f"--window {text!r}: the window is empty")
    return start, end


@dataclass(frozen=True)
class Cut:
    """Where a window lies in the trace: the offsets asked for (None: the edge), the origin
    (the first GPU activity's start) and the window ``[from_ns, to_ns)`` on the trace's clock."""

    start_ns: int | None
    end_ns: int | None
    origin_ns: int
    from_ns: int
    to_ns: int

    def to_dict(self) -> dict[str, Any]:
        """The result's ``options.window`` (docs/schema.md)."""
        return {"start_ns": self.start_ns, "end_ns": self.end_ns, "origin_ns": self.origin_ns,
                "from_ns": self.from_ns, "to_ns": self.to_ns}


def cut(frames: TraceFrames, spec: tuple[int | None, int | None]) -> tuple[TraceFrames, Cut]:
    """The frames inside the window ``spec`` (offsets from the first GPU activity), as the module
    docstring says, and where it lies; GapscopeError when it holds no kernel."""
    acts = frames.activities
    a_start, a_end = acts["start"].to_numpy(), acts["end"].to_numpy()
    origin = int(a_start.min())
    last = int(a_end.max())
    lo = origin if spec[0] is None else origin + int(spec[0])
    hi = last + 1 if spec[1] is None else origin + int(spec[1])
    span = f"the trace's GPU work lasts {last - origin:,} ns from its first activity"
    if hi <= lo:
        raise GapscopeError(f"--window: the window is empty ({span})")
    inside = ((a_start < hi) & (a_end > lo)) | ((a_start >= lo) & (a_start < hi))
    from gapscope.trace.frames import ActivityKind

    kind = acts["kind"].to_numpy()
    if not (inside & ((kind == ActivityKind.KERNEL) | (kind == ActivityKind.GRAPH))).any():
        raise GapscopeError(f"--window holds no kernel ({span})")
    kept = acts[inside].reset_index(drop=True)
    kept["start"] = np.clip(kept["start"].to_numpy(), lo, hi)
    kept["end"] = np.clip(kept["end"].to_numpy(), lo, hi)
    api, host_from = _calls(frames, kept, lo, hi)
    nvtx = _ranges(frames.nvtx, host_from, hi)
    window = Cut(spec[0], spec[1], origin, lo, min(hi, last))
    out = replace(frames, activities=kept, api=api, nvtx=nvtx, warnings=list(frames.warnings))
    return out, window


def _calls(frames: TraceFrames, kept: pd.DataFrame, lo: int, hi: int) -> tuple[pd.DataFrame, int]:
    """The calls the window keeps (module docstring) and the host-side window's start ``S'``."""
    from gapscope.analysis.ranges import CallIndex, link_launches

    api = frames.api
    if len(api) == 0:
        return api, lo
    probe = replace(frames, activities=kept)
    launch = link_launches(probe, CallIndex(api))
    launching = np.zeros(len(api), dtype=bool)
    launching[launch[launch >= 0]] = True
    start, end = api["start"].to_numpy(), api["end"].to_numpy()
    host_from = min(lo, int(start[launching].min())) if launching.any() else lo
    keep = launching | ((start < hi) & (end >= host_from))
    # each thread's nearest call on either side of the host-side window
    tid = api["tid"].to_numpy()
    order = np.lexsort((start, tid))
    s_tid, s_start = tid[order], start[order]
    first = np.r_[True, s_tid[1:] != s_tid[:-1]]
    group = np.cumsum(first) - 1
    group_lo = np.flatnonzero(first)
    # last call starting before host_from, per thread: the one before the first at or after it
    before = s_start < host_from
    n_before = np.bincount(group, weights=before, minlength=group_lo.size).astype(np.int64)
    has = n_before > 0
    keep[order[group_lo[has] + n_before[has] - 1]] = True
    # first call starting at or after hi, per thread
    n_until = np.bincount(group, weights=s_start < hi, minlength=group_lo.size).astype(np.int64)
    sizes = np.diff(np.r_[group_lo, s_tid.size])
    has = n_until < sizes
    keep[order[group_lo[has] + n_until[has]]] = True
    return api[keep].reset_index(drop=True), host_from


def _ranges(nvtx: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """The NVTX events the window keeps: domain creations, and ranges overlapping ``[lo, hi)``
    cut to it (a range left open at the trace's end is kept when it starts before ``hi``)."""
    if len(nvtx) == 0:
        return nvtx
    start, end = nvtx["start"].to_numpy(), nvtx["end"].to_numpy()
    domain = nvtx["event_type"].to_numpy() == NVTX_DOMAIN_CREATE
    closed = end >= start
    keep = domain | ((start < hi) & ((end > lo) | ~closed)) | (closed & (start == end) & (start >= lo) & (start < hi))
    out = nvtx[keep].copy()
    rng = ~domain[keep] & closed[keep]
    s, e = out["start"].to_numpy().copy(), out["end"].to_numpy().copy()
    s[rng] = np.clip(s[rng], lo, hi)
    e[rng] = np.clip(e[rng], lo, hi)
    out["start"], out["end"] = s, e
    return out.reset_index(drop=True)
