"""The memory one analysis needs, estimated before the trace is read, against what the machine
has: a trace too large for the machine is refused at once, in one line, instead of the process
being killed by the kernel minutes later without a word (docs/performance.md, "Memory one
analysis needs"); and several traces analyzed side by side run only as many at once as fit.

The estimate is a straight line per trace format and per path (what the caller keeps), over the
counts a trace gives before it is read (gapscope.trace.frames.RowCounts): a base, plus bytes per
GPU activity row, per CUDA call row (the API table and the synchronization records) and per NVTX
row. The lines are fitted, with a margin, to the peak resident memory of whole processes
(`benchmarks/bench_memory.py`: SYNTHETIC tilings of real traces of four mixes of activities,
calls and ranges, 1M and 10M kernels; the table is in docs/performance.md), so that the estimate
is never below a measured peak. A PyTorch profiler trace says only its bytes of JSON: its events
are bounded by those bytes over fewer bytes than any shipped Kineto trace takes per event kept
(:data:`KINETO_BYTES_PER_EVENT`). ``GAPSCOPE_MEMORY_CHECK=0`` turns the check and the lowering of
the job count off (the estimate is an estimate; swap or a lighter trace may get through).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gapscope.errors import GapscopeError

if TYPE_CHECKING:  # the counts' type only: this module stays numpy-only to import
    from gapscope.trace.frames import RowCounts


@dataclass(frozen=True)
class Line:
    """Peak resident bytes = ``base`` + ``per_activity`` * GPU activity rows + ``per_call`` *
    (CUDA API rows + synchronization rows) + ``per_range`` * NVTX rows."""

    base: int
    per_activity: int
    per_call: int
    per_range: int


#: What the caller keeps, by path: ``levels``: the levels measured window by window and no gap
#: list (`gapscope analyze`); ``merge``: also the range pairs and device gaps of each file of
#: several; ``gaps``: every gap list (plots, `gapscope report`, the Python API without tables);
#: ``all_calls``: also every CUDA call and activity name (the per-gap tables, the timeline export).
KINDS = ("levels", "merge", "gaps", "all_calls")

#: The fitted lines by trace format (gapscope.catalog.FORMATS; a report is estimated as its
#: export) and path: `benchmarks/bench_memory.py --fit` on the 2-core development box, the
#: measurements and the margin in docs/performance.md ("Memory one analysis needs", "Memory after
#: the heap change"). Measured under gapscope.heap's settings: the heap keeps what each step frees
#: until the result is built, so a path's peak is its peak step's arrays on top of the blocks the
#: steps before it freed that it cannot reuse (the timeline export and the NVTX-heavy traces most).
#: The parquetdir `levels` line was fitted with at least the SQLite `levels` line's 40 bytes per
#: activity (the activity columns are held whatever the calls; fitted freely, the calls stood in
#: for them: 10 bytes, a trace without calls read as little more than the base). The parquetdir
#: and arrowdir lines were refitted after their readers went batch at a time (issue 42;
#: docs/performance.md, "Columnar readers batch at a time").
LINES: dict[str, dict[str, Line]] = {
    "nsys-sqlite": {
        "levels": Line(220_000_000, 40, 60, 2200),
        "merge": Line(250_000_000, 180, 60, 2060),
        "gaps": Line(320_000_000, 440, 40, 2580),
        "all_calls": Line(220_000_000, 1050, 90, 2560),
    },
    "nsys-parquet": {
        "levels": Line(290_000_000, 50, 50, 2290),
        "merge": Line(320_000_000, 230, 40, 2110),
        "gaps": Line(340_000_000, 460, 40, 2610),
        "all_calls": Line(290_000_000, 1040, 80, 2510),
    },
    "nsys-arrow": {
        "levels": Line(210_000_000, 50, 50, 2160),
        "merge": Line(250_000_000, 250, 30, 2190),
        "gaps": Line(320_000_000, 460, 30, 2690),
        "all_calls": Line(310_000_000, 980, 120, 2460),
    },
    "kineto": {
        # levels and merge refitted after the reader's narrow pieces and the hand-backs (issue 42,
        # docs/performance.md "Fourth pass: the trace's memory in narrow columns"), on 1M and 10M
        # tilings of both mixes; gaps and all_calls, measured at 1M only since, keep their older,
        # higher lines.
        "levels": Line(290_000_000, 70, 0, 0),
        "merge": Line(240_000_000, 100, 0, 0),
        "gaps": Line(220_000_000, 280, 0, 0),
        "all_calls": Line(200_000_000, 610, 0, 0),
    },
}
#: A PyTorch profiler trace's events that the reader keeps (GPU work, CUDA calls, annotations)
#: are at most its JSON bytes over this: the fewest bytes of JSON per kept event of the shipped
#: Kineto traces (622, traces/thirdparty/tracelens/mi210_gpu_only_trace.json.gz), less a margin.
#: Its line's ``per_activity`` is per such event.
KINETO_BYTES_PER_EVENT = 550
#: The environment variable that turns the check off ("0").
CHECK_ENV = "GAPSCOPE_MEMORY_CHECK"


def kind_of(*, gaps: bool = False, all_calls: bool = False, merge: bool = False) -> str:
    """The path (a name of :data:`KINDS`) of an analysis that keeps every gap list (``gaps``),
    reads every CUDA call (``all_calls``: the largest, whatever the others say) or keeps what the
    many-trace merge reads (``merge``, without ``gaps``)."""
    return "all_calls" if all_calls else "gaps" if gaps else "merge" if merge else "levels"


def kineto_events(json_bytes: int) -> int:
    """The most events a PyTorch profiler trace of ``json_bytes`` bytes of JSON keeps."""
    return math.ceil(max(int(json_bytes), 0) / KINETO_BYTES_PER_EVENT)


def needed_bytes(counts: RowCounts, *, gaps: bool = False, all_calls: bool = False, merge: bool = False) -> int:
    """The estimated peak resident bytes of analyzing a trace holding ``counts`` (``gaps``,
    ``all_calls``, ``merge``: :func:`kind_of`): the largest of its path's line and the lines of
    the paths before it in :data:`KINDS` (each keeps what those keep, and more); a format without
    lines is estimated as an nsys SQLite export."""
    lines = LINES.get(counts.format, LINES["nsys-sqlite"])
    kind = kind_of(gaps=gaps, all_calls=all_calls, merge=merge)
    return max(_on_line(lines[k], counts) for k in KINDS[: KINDS.index(kind) + 1])


def _on_line(line: Line, counts: RowCounts) -> int:
    """One line's bytes for ``counts``."""
    if counts.activities is None and counts.json_bytes is not None:  # a PyTorch profiler trace
        return line.base + line.per_activity * kineto_events(counts.json_bytes)

    def n(rows: int | None) -> int:
        return max(int(rows or 0), 0)

    return (line.base + line.per_activity * n(counts.activities) + line.per_call * (n(counts.api) + n(counts.syncs))
            + line.per_range * n(counts.nvtx))


def _counted(counts: RowCounts | None) -> bool:
    """Whether ``counts`` say anything to estimate from (rows, or a PyTorch profiler trace's bytes)."""
    return counts is not None and (counts.activities is not None or counts.json_bytes is not None)


def _what(counts: RowCounts) -> str:
    """What the estimate counted, in words."""
    if counts.activities is None:
        size = counts.json_bytes or 0
        return f"{size / 1e9:.1f} GB of trace JSON" if size >= 1e9 else f"{size / 1e6:.1f} MB of trace JSON"
    return f"{counts.activities:,} GPU activities and {counts.api or 0:,} CUDA calls"


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


def check(path: str, counts: RowCounts | None, *, gaps: bool = False, all_calls: bool = False,
          merge: bool = False, available: int | None = None, environ: Mapping[str, str] | None = None) -> None:
    """Raise GapscopeError (exit 2) when analyzing a trace holding ``counts`` (``gaps``,
    ``all_calls``, ``merge``: as :func:`needed_bytes`) needs more memory than is ``available``
    (default: what the machine has now). Nothing is checked when the counts are unknown (None),
    the machine does not say, or the check is turned off."""
    if not _counted(counts) or _off(environ):
        return
    have = available_bytes() if available is None else available
    need = needed_bytes(counts, gaps=gaps, all_calls=all_calls, merge=merge)
    if have is None or need <= have:
        return
    raise GapscopeError(
        f"{path}: analyzing its {_what(counts)} needs about {_gb(need)} of memory, more "
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
    kept, as each file's worker does), from its counts; None when the file cannot be opened (its
    worker reports why), its format cannot count, or it is an Nsight Systems report (opening one
    exports it, which is the worker's job)."""
    from gapscope.inputs import resolve
    from gapscope.trace.handle import open_trace

    try:
        found = resolve(path)
        if found.kind != "trace" or found.format == "nsys-rep":
            return None
        with open_trace(found.path, found.format) as trace:
            counts = trace.row_counts()
    except Exception:  # anything wrong with the file: its worker says what, in its own line
        return None
    if not _counted(counts):
        return None
    return needed_bytes(counts, merge=True)


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
