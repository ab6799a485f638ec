"""Launch shapes of the trace's kernels: grid, block and dynamic shared memory per kernel row.

The analysis frames carry no launch configuration; the case figures need it (the graph pool's
padded token counts, the piecewise attention's changing grid). This reads the columns from
CUPTI_ACTIVITY_KIND_KERNEL read-only and lines them up with the analysis's activity rows: the
kernels come first there, in the table's rowid order, which is checked on (start, end, device,
stream); if that ever fails, rows are matched on those four columns instead.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from pathlib import Path

import numpy as np
import pandas as pd

from gapscope.errors import GapscopeError
from gapscope.trace import KERNEL_TABLE, ActivityKind, TraceFrames

SHAPE_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "shared_bytes")
_SOURCE = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "dynamicSharedMemory")
_KEYS = ("start", "end", "device", "stream")


def kernel_shapes(frames: TraceFrames) -> pd.DataFrame:
    """One row per activity row of ``frames`` with SHAPE_COLUMNS; -1 for rows that are not
    kernels or columns the export lacks."""
    n = len(frames.activities)
    out = pd.DataFrame({c: np.full(n, -1, dtype=np.int64) for c in SHAPE_COLUMNS})
    if KERNEL_TABLE not in frames.meta.tables:
        return out
    uri = "file:" + urllib.parse.quote(str(Path(frames.meta.path).resolve())) + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            cols = {r[1] for r in conn.execute(f"PRAGMA table_info({KERNEL_TABLE})")}
            exprs = [c if c in cols else "-1" for c in _SOURCE]
            rows = conn.execute(
                f"SELECT start, end, deviceId, streamId, {', '.join(exprs)} "
                f"FROM {KERNEL_TABLE} ORDER BY rowid").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise GapscopeError(f"{frames.meta.path}: cannot read kernel launch shapes ({exc})") from None
    shapes = pd.DataFrame(rows, columns=[*_KEYS, *SHAPE_COLUMNS]).fillna(-1).astype(np.int64)
    acts = frames.activities
    kern = np.flatnonzero(acts["kind"].to_numpy() == ActivityKind.KERNEL)
    mine = acts.iloc[kern]
    if len(shapes) == kern.size and all(
            np.array_equal(shapes[k].to_numpy(), mine[k].to_numpy()) for k in _KEYS):
        picked = shapes[list(SHAPE_COLUMNS)].to_numpy()
    else:  # pragma: no cover - a reader that reorders rows
        keyed = mine[list(_KEYS)].reset_index(drop=True).merge(
            shapes.drop_duplicates(list(_KEYS)), on=list(_KEYS), how="left")
        picked = keyed[list(SHAPE_COLUMNS)].fillna(-1).astype(np.int64).to_numpy()
    out.iloc[kern, :] = picked
    return out
