"""The one way every report writes a duration, a share and a speedup."""

from __future__ import annotations


def fmt_ns(ns: float | int | None) -> str:
    """A duration in the unit that keeps 3 significant digits: ``850 ns``, ``2.31 ms``,
    ``107 ms``, ``1.5 s``; ``-`` for None."""
    if ns is None:
        return "-"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if abs(ns) < 100 * scale else f"{ns / scale:.0f} {unit}"
    return f"{ns:.0f} ns"


def fmt_pct(f: float | None, digits: int = 1) -> str:
    """A fraction as a percentage (``93.4%``); ``-`` for None."""
    return "-" if f is None else f"{100 * f:.{digits}f}%"


def fmt_share(part: float, whole: float) -> str:
    """``part`` as a whole percentage of ``whole`` (``16%``); ``-`` when ``whole`` is 0."""
    return f"{100 * part / whole:.0f}%" if whole else "-"


def fmt_speedup(x: float | None) -> str:
    """A speedup factor (``12.08x``); ``-`` for None or 0."""
    return f"{x:.2f}x" if x else "-"


def fmt_count(n: float | int | None) -> str:
    """A count with thousands separators (``2,496``); ``-`` for None."""
    if n is None:
        return "-"
    return f"{int(n):,}" if float(n).is_integer() else f"{n:,.1f}"
