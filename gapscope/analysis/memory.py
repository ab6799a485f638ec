"""The memory one analysis needs, estimated before the trace is read, against what the machine
has: a trace too large for the machine is refused at once, in one line, instead of the process
being killed by the kernel minutes later without a word (docs/performance.md, "Memory").

The estimate is a straight line fitted to measured peaks (``bench_scale.py``, 2026-12-01,
SQLite tilings of a real PyTorch decode trace, the analysis without gap lists kept): 300 MB
plus 550 bytes per GPU activity row (kernels, copies, memsets); measured 919 MB at 1.08 million
rows, 6.0 GB at 10.8 million and 18.1 GB at 32.3 million (the line: 0.89, 6.2 and 18.1 GB). The
CUDA API rows that come with the activities are in the per-row figure. ``GAPSCOPE_MEMORY_CHECK=0``
analyzes without the check (the estimate is an estimate; swap or a lighter trace may get
through).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gapscope.errors import GapscopeError

#: The fitted line: resident bytes of an analysis = BASE_BYTES + BYTES_PER_ACTIVITY * rows.
BASE_BYTES = 300 * 10**6
BYTES_PER_ACTIVITY = 550
#: The environment variable that turns the check off ("0").
CHECK_ENV = "GAPSCOPE_MEMORY_CHECK"


def needed_bytes(activity_rows: int) -> int:
    """The estimated peak resident bytes of analyzing a trace of ``activity_rows`` GPU activities."""
    return BASE_BYTES + BYTES_PER_ACTIVITY * max(int(activity_rows), 0)


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


def check(path: str, activity_rows: int | None, *, available: int | None = None,
          environ: Mapping[str, str] | None = None) -> None:
    """Raise GapscopeError (exit 2) when analyzing ``activity_rows`` GPU activities needs more
    memory than is ``available`` (default: what the machine has now). Nothing is checked when
    the rows are unknown (None), the machine does not say, or the check is turned off."""
    env = os.environ if environ is None else environ
    if activity_rows is None or env.get(CHECK_ENV, "").strip() == "0":
        return
    have = available_bytes() if available is None else available
    need = needed_bytes(activity_rows)
    if have is None or need <= have:
        return
    raise GapscopeError(
        f"{path}: analyzing its {activity_rows:,} GPU activities needs about {_gb(need)} of memory, more "
        f"than the {_gb(have)} this machine has free; record a shorter capture (`nsys profile "
        f"--capture-range`, `--duration`) or analyze it on a larger machine ({CHECK_ENV}=0 tries anyway)")
