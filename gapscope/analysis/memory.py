"""The memory one analysis needs, estimated before the trace is read, against what the machine
has: a trace too large for the machine is refused at once, in one line, instead of the process
being killed by the kernel minutes later without a word (docs/performance.md, "Memory one
analysis needs"); and several traces analyzed side by side run only as many at once as fit.

The estimate is a straight line per path, fitted to measured peak resident bytes (SYNTHETIC
tilings of a real PyTorch decode trace, 0.11 to 32.3 million GPU activity rows; the table is in
docs/performance.md): 300 MB plus, per GPU activity row (kernels, copies, memsets), 200 bytes
when the levels are measured window by window and no gap list is kept (`gapscope analyze`), 440
for each file of several (the range pairs and the device gaps kept for the merge), 800 when every
gap list is kept (plots, `gapscope report`, the Python API), 1,350 when every CUDA call and
activity name is read too (the per-gap tables, the timeline export). The CUDA API rows that come
with the activities are in the per-row figures. ``GAPSCOPE_MEMORY_CHECK=0`` turns the check and
the lowering of the job count off (the estimate is an estimate; swap or a lighter trace may get
through).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from gapscope.errors import GapscopeError

#: The fitted lines: resident bytes of an analysis = BASE_BYTES + bytes per row * rows, the
#: bytes per row by what the analysis keeps.
BASE_BYTES = 300 * 10**6
BYTES_PER_ACTIVITY = 200  # the levels in windows, no gap list kept (gapscope analyze without --plot)
BYTES_PER_ACTIVITY_MERGE = 440  # the range pairs and device gaps kept (each file of several: merge=True)
BYTES_PER_ACTIVITY_GAPS = 800  # every level's gap lists kept (run_analysis(gaps=True))
BYTES_PER_ACTIVITY_ALL_CALLS = 1350  # and every CUDA call and activity name read (all_calls=True)
#: The environment variable that turns the check off ("0").
CHECK_ENV = "GAPSCOPE_MEMORY_CHECK"


def needed_bytes(activity_rows: int, *, gaps: bool = False, all_calls: bool = False, merge: bool = False) -> int:
    """The estimated peak resident bytes of analyzing a trace of ``activity_rows`` GPU activities;
    ``gaps``: every gap list kept, ``merge``: (without ``gaps``) what the many-trace merge reads
    kept, ``all_calls``: every CUDA call read as well (the tables, the timeline export: the
    largest figure, whatever the others say)."""
    per_row = (BYTES_PER_ACTIVITY_ALL_CALLS if all_calls else BYTES_PER_ACTIVITY_GAPS if gaps else
               BYTES_PER_ACTIVITY_MERGE if merge else BYTES_PER_ACTIVITY)
    return BASE_BYTES + per_row * max(int(activity_rows), 0)


def available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Memory a new allocation can still get: MemAvailable plus free swap (Linux), None where
    the machine does not say."""
    try:
        fields = dict(line.split(":", 1) for line in meminfo.read_text().splitlines() if ":" in line)
        kib = int(fields["MemAvailable"].split()[0]) + int(fields.get("SwapFree", "0 kB").split()[0])
    except (OSError, KeyError, ValueError, IndexError):
        return None
    return kib * 1024


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def _off(environ: Mapping[str, str] | None) -> bool:
    return (os.environ if environ is None else environ).get(CHECK_ENV, "").strip() == "0"


def check(path: str, activity_rows: int | None, *, gaps: bool = False, all_calls: bool = False,
          merge: bool = False, available: int | None = None, environ: Mapping[str, str] | None = None) -> None:
    """Raise GapscopeError (exit 2) when analyzing ``activity_rows`` GPU activities (``gaps``,
    ``all_calls``, ``merge``: as :func:`needed_bytes`) needs more memory than is ``available`` (default:
    what the machine has now). Nothing is checked when the rows are unknown (None), the machine
    does not say, or the check is turned off."""
    if activity_rows is None or _off(environ):
        return
    have = available_bytes() if available is None else available
    need = needed_bytes(activity_rows, gaps=gaps, all_calls=all_calls, merge=merge)
    if have is None or need <= have:
        return
    raise GapscopeError(
        f"{path}: analyzing its {activity_rows:,} GPU activities needs about {_gb(need)} of memory, more "
        f"than the {_gb(have)} this machine has free; record a shorter capture (`nsys profile "
        f"--capture-range`, `--duration`) or analyze it on a larger machine ({CHECK_ENV}=0 tries anyway)")


def _fitting(needs: Sequence[int | None], available: int) -> np.ndarray:
    """The known estimates that fit alone, largest first."""
    return np.sort(np.array([n for n in needs if n is not None and n <= available], dtype=np.int64))[::-1]


def concurrent_jobs(needs: Sequence[int | None], jobs: int, available: int) -> int:
    """How many of these analyses (their estimated peak bytes) may run at once, at most ``jobs``:
    the most whose largest estimates together fit in ``available``, at least 1. An unknown
    estimate (None) and one too large alone (its own check refuses it) count for nothing."""
    together = np.cumsum(_fitting(needs, available)[:jobs])
    fit = int(np.searchsorted(together, available, side="right"))
    return jobs if fit == together.size else max(fit, 1)


def estimated_bytes(path: str) -> int | None:
    """The estimated peak of analyzing one file of several (the range pairs and the device gaps
    kept, as each file's worker does), from its row count; None when the file cannot be opened (its worker reports
    why), its format cannot count rows, or it is an Nsight Systems report (opening one exports it,
    which is the worker's job)."""
    from gapscope.inputs import resolve
    from gapscope.trace.handle import open_trace

    try:
        found = resolve(path)
        if found.kind != "trace" or found.format == "nsys-rep":
            return None
        with open_trace(found.path, found.format) as trace:
            rows = trace.activity_rows()
    except Exception:  # anything wrong with the file: its worker says what, in its own line
        return None
    return None if rows is None else needed_bytes(rows, merge=True)


def side_by_side(paths: Sequence[str], jobs: int, *, available: int | None = None,
                 environ: Mapping[str, str] | None = None) -> tuple[int, str | None]:
    """(the job count, a line saying why when it is lower than ``jobs``) for analyzing ``paths``
    ``jobs`` at a time in local worker processes, each needing :func:`estimated_bytes`, against
    ``available`` (default: what the machine has now). ``jobs`` unchanged when the check is off or
    the machine does not say."""
    if jobs <= 1 or _off(environ):
        return jobs, None
    have = available_bytes() if available is None else available
    if have is None:
        return jobs, None
    needs = [estimated_bytes(p) for p in paths]
    fit = concurrent_jobs(needs, jobs, have)
    if fit >= jobs:
        return jobs, None
    together = int(_fitting(needs, have)[:jobs].sum())
    return fit, (f"running {fit} trace{'s' if fit > 1 else ''} at a time, not {jobs}: {jobs} at once would "
                 f"need about {_gb(together)}, {_gb(have)} is free")
