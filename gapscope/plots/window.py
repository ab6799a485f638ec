"""The time window a timeline draws: ``--window START:END`` parsed, then placed on the trace.

Times in a window are offsets from the *origin*: the start of the first GPU activity launched
inside the NVTX ranges drawn (all ranges, or those of ``--range``), or of the trace's first GPU
activity when no range launched any. A bare number is nanoseconds; ``ns``, ``us``, ``ms`` and
``s`` suffixes are accepted (``0:200us``, ``1.5ms:2ms``); an empty side means the edge of the
ranges' work (``:500us``, ``2ms:``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from gapscope.errors import GapscopeError
from gapscope.trace.validation import TIME_LIMIT_NS

UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
#: The largest offset a window accepts: the latest time a trace may hold (docs/robustness.md).
MAX_WINDOW_NS = TIME_LIMIT_NS
_TIME = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(ns|us|µs|ms|s)?\s*$")


def parse_time(text: str, option: str = "--window") -> int:
    """'1.5ms' -> 1_500_000; a bare number is nanoseconds (``option`` names it in an error)."""
    m = _TIME.match(text)
    if not m:
        raise GapscopeError(f"{option}: {text.strip()!r} is not a time (a number with ns, us, ms or s)")
    ns = float(m.group(1)) * UNITS[m.group(2) or "ns"]
    if not math.isfinite(ns) or abs(ns) > MAX_WINDOW_NS:
        raise GapscopeError(f"{option}: {text.strip()!r} is out of range (at most {MAX_WINDOW_NS:.2e} ns either way)")
    return int(round(ns))


def parse_window(text: str | None) -> tuple[int | None, int | None]:
    """'START:END' -> (start, end) in ns from the origin; None for an empty side."""
    if text is None or not text.strip():
        return None, None
    if text.count(":") != 1:
        raise GapscopeError(f"--window wants START:END (e.g. 0:200us), got {text!r}")
    a, b = text.split(":")
    start = parse_time(a) if a.strip() else None
    end = parse_time(b) if b.strip() else None
    if start is not None and end is not None and end <= start:
        raise GapscopeError(f"--window {text!r}: the end must come after the start")
    return start, end


@dataclass(frozen=True)
class Window:
    """``[start, end)`` in trace nanoseconds, and the origin the axis counts from."""

    start: int
    end: int
    origin: int

    @property
    def length(self) -> int:
        return self.end - self.start


def place_window(
    act_start: np.ndarray, act_end: np.ndarray, range_work: np.ndarray, spec: tuple[int | None, int | None]
) -> Window:
    """The window of ``spec`` on a trace: ``range_work`` indexes the activities launched inside
    the ranges drawn (empty: the whole trace's activities are the default extent)."""
    idx = range_work if range_work.size else np.arange(act_start.size)
    if idx.size == 0:
        raise GapscopeError("the trace holds no GPU activity to draw")
    lo = int(act_start[idx].min())
    hi = int(act_end[idx].max())
    a, b = spec
    start = lo if a is None else lo + a
    end = hi if b is None else lo + b
    if end <= start:
        raise GapscopeError(
            f"--window: the window is empty (the ranges' GPU work lasts {hi - lo} ns from its start)")
    if act_start.size and not ((act_start < end) & (act_end > start)).any():
        raise GapscopeError(
            f"--window holds no GPU work (the ranges' GPU work lasts {hi - lo:,} ns from its start)")
    return Window(start=start, end=end, origin=lo)
