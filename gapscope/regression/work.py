"""Whether two runs' entries did the same work, told from their kernels counted by kernel name
(the result's ``kernel_counts``; docs/ci.md, "Kernel counts and units of work").

Per entry and side, the *mix* is each kernel name's count per unit of work: per range instance
with GPU work for a range name, per device (a unit of one) for a device; over several runs, the
counts and units are summed. Then:

``same``
    every kernel name is on both sides with the same count per unit (within half a kernel or
    2 %);
``scaled``
    every kernel name is on both sides and every count scaled by one factor ``f`` (each within
    half a kernel or 2 % of ``f`` times the baseline's, and the baseline's of the current's
    divided by ``f``): the entry did ``f`` times the work (a
    loop run for 64 steps instead of 32), and its totals are compared per unit of work, the
    current side's divided by ``f``;
``changed``
    the mix changed: kernel names appeared or went, or some counts rose or fell more than the
    others (a fusion lost, a kernel split in two);
``unknown``
    a run holds no kernel counts (a result of an older gapscope), or one side no kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gapscope.render.units import fmt_count
from gapscope.text import name as display_name

__all__ = ["Work", "unit_of_work"]

#: A count per unit within this share of the factor's (or half a kernel) still scales by it.
SCALE_TOLERANCE = 0.02
#: Factors within this share of 1 are the same work.
SAME_TOLERANCE = 0.01
#: Kernel names named in words, at most.
NAMED = 3


@dataclass(frozen=True)
class Work:
    """How the current side's work compares with the baseline's for one entry (module docstring):
    ``kind``, the ``factor`` (current kernels per unit over the baseline's), and for a changed mix
    the kernel names that ``appeared`` and ``went`` and those whose count per unit ``rose`` or
    ``fell`` beyond the factor (name, baseline, current per unit, the largest change first)."""

    kind: str
    factor: float = 1.0
    appeared: list[tuple[str, float]] = field(default_factory=list)
    went: list[tuple[str, float]] = field(default_factory=list)
    rose: list[tuple[str, float, float]] = field(default_factory=list)
    fell: list[tuple[str, float, float]] = field(default_factory=list)

    @property
    def scales(self) -> bool:
        """Whether the totals are compared per unit of work (the current side's divided by
        :attr:`factor`)."""
        return self.kind == "scaled"

    @property
    def comparable(self) -> bool:
        """Whether the two sides' totals are one unit of work (the same, or scaled by one
        factor): a device's totals are judged only then."""
        return self.kind in ("same", "scaled")

    def factor_words(self) -> str:
        """``2x the work (every kernel's count x2)``."""
        return f"{_times(self.factor)} the work (every kernel's count x{_number(self.factor)})"

    def mix_words(self, per: str = "") -> str:
        """What changed in the kernel mix: ``new: reduce_kernel (12 per step); more:
        vectorized_elementwise_kernel 17 -> 51 per step; gone: layer_norm_kernel``."""
        parts = []
        if self.appeared:
            parts.append("new: " + _listed([f"{display_name(n)} ({_count(c)}{per})" for n, c in self.appeared]))
        if self.rose:
            parts.append("more: " + _listed([f"{display_name(n)} {_count(b)} -> {_count(c)}{per}"
                                             for n, b, c in self.rose]))
        if self.went:
            parts.append("gone: " + _listed([display_name(n) for n, _ in self.went]))
        if self.fell:
            parts.append("fewer: " + _listed([f"{display_name(n)} {_count(b)} -> {_count(c)}{per}"
                                              for n, b, c in self.fell]))
        return "; ".join(parts)


def _listed(items: list[str]) -> str:
    return ", ".join(items[:NAMED]) + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def _number(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 0.005 else f"{x:.2f}".rstrip("0")


def _times(x: float) -> str:
    return f"{_number(x)}x"


def _count(x: float) -> str:
    return fmt_count(x) if float(x).is_integer() else f"{x:,.1f}"


def _pooled(mixes: Sequence[tuple[dict[str, int], float]]) -> tuple[dict[str, float], float] | None:
    """Counts per unit over several runs (summed counts over summed units)."""
    units = sum(u for _, u in mixes)
    if not mixes or units <= 0:
        return None
    total: dict[str, float] = {}
    for counts, _ in mixes:
        for n, c in counts.items():
            total[n] = total.get(n, 0) + c
    return {n: c / units for n, c in total.items()}, units


def unit_of_work(base: Sequence[tuple[dict[str, int], float] | None],
                 current: Sequence[tuple[dict[str, int], float] | None]) -> Work:
    """The :class:`Work` of one entry from each side's runs' mixes (None: a run without kernel
    counts)."""
    if not base or not current or any(m is None for m in (*base, *current)):
        return Work("unknown")
    b, c = _pooled(base), _pooled(current)  # type: ignore[arg-type]
    if b is None or c is None:
        return Work("unknown")
    b_mix, c_mix = b[0], c[0]
    b_total, c_total = sum(b_mix.values()), sum(c_mix.values())
    if b_total <= 0 or c_total <= 0:
        return Work("unknown")
    f = c_total / b_total
    names = sorted(set(b_mix) | set(c_mix))

    def scales_by(x: float) -> bool:  # both ways: a count that stays put does not scale by 0.5 or by 2
        return all(n in b_mix and n in c_mix and
                   abs(c_mix[n] - x * b_mix[n]) <= max(0.5, SCALE_TOLERANCE * x * b_mix[n]) and
                   abs(b_mix[n] - c_mix[n] / x) <= max(0.5, SCALE_TOLERANCE * b_mix[n]) for n in names)

    if abs(f - 1) <= SAME_TOLERANCE or scales_by(1.0):  # the same counts, within half a kernel each
        if scales_by(1.0):
            return Work("same", 1.0)
    elif scales_by(f):
        return Work("scaled", f)
    appeared = sorted(((n, c_mix[n]) for n in names if n not in b_mix), key=lambda x: (-x[1], x[0]))
    went = sorted(((n, b_mix[n]) for n in names if n not in c_mix), key=lambda x: (-x[1], x[0]))
    both = [n for n in names if n in b_mix and n in c_mix]
    # against the same count per unit: what a split or a fusion changes in one instance
    rose = sorted(((n, b_mix[n], c_mix[n]) for n in both if c_mix[n] - b_mix[n] > max(0.5, SCALE_TOLERANCE * b_mix[n])),
                  key=lambda x: (-(x[2] - x[1]), x[0]))
    fell = sorted(((n, b_mix[n], c_mix[n]) for n in both if b_mix[n] - c_mix[n] > max(0.5, SCALE_TOLERANCE * b_mix[n])),
                  key=lambda x: (-(x[1] - x[2]), x[0]))
    return Work("changed", f, appeared, went, rose, fell)
