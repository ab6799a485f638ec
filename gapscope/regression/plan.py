"""What compare checks for each entry of a scope, decided from both sides at once (docs/ci.md,
"Modes" and "Kernel counts and units of work"):

* **Modes.** A range name whose instances ran in more than one mode (gapscope.regression.entries
  MODES: replayed or eager, steady or one-off) on either side is compared mode by mode: each
  mode both sides have becomes an entry of its own (``decode_step (replayed)``), its median
  against the same mode's; the name's own entry keeps the checks of the whole name (its eager
  fallback). A mode one side lacks is not compared: the change of the mix is the eager fallback
  check's, never a jump of a median. A name whose two sides share no mode (a range replayed in
  the baseline, eager now) is compared whole, as one entry.
* **Units of work.** Each entry's kernel mix on both sides (gapscope.regression.work): an entry
  that did ``f`` times the work has its current totals divided by ``f`` (compared per unit of
  work); a device or stream whose two sides did not do one unit of work has its totals reported,
  not judged.
* **Coverage.** Per range name, each run's eager and replayed instances, for the eager fallback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from gapscope.regression.entries import MODES, Entries
from gapscope.regression.metrics import METRICS
from gapscope.regression.work import Work, unit_of_work

__all__ = ["Plan"]

#: The metrics a unit of work divides: totals over the entry's work.
SUMMED = tuple(m.name for m in METRICS.values() if m.summed and m.kind in ("row", "category"))
#: Roles of an entry: ``whole`` (every check), ``name`` (a name compared mode by mode: only the
#: checks of the whole name), ``mode`` (one mode of a name: every check but those).
ROLES = ("whole", "name", "mode")


@dataclass
class Plan:
    """The entries of one scope as compare checks them: each side's runs (with mode entries added
    and totals per unit of work), and per entry its role, its parent name's identity, its
    :class:`~gapscope.regression.work.Work` and its coverage."""

    base: list[Entries]
    cur: list[Entries]
    roles: dict[str, str]
    parent: dict[str, str]
    works: dict[str, Work]
    #: per range name's identity: each side's runs' (eager, replayed) instances
    coverage: dict[str, tuple[list[tuple[int, int]], list[tuple[int, int]]]]

    def role(self, ident: str) -> str:
        return self.roles.get(ident, "whole")

    def work(self, ident: str) -> Work:
        """The unit of work of an entry (a mode's: its name's)."""
        return self.works.get(self.parent.get(ident, ident), Work("unknown"))

    def replayed_somewhere(self, ident: str) -> bool:
        """Whether some run of either side replayed an instance of this range name."""
        b, c = self.coverage.get(ident, ([], []))
        return any(r > 0 for _, r in (*b, *c))

    @classmethod
    def of(cls, scope: str, base: list[Entries], cur: list[Entries]) -> "Plan":
        roles: dict[str, str] = {}
        parent: dict[str, str] = {}
        coverage: dict[str, tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}
        if scope == "range":
            coverage = _coverage(base, cur)
            base, cur, roles, parent = _by_mode(base, cur)
        works = _works(scope, base, cur) if scope in ("range", "device") else {}
        cur = [_per_unit(e, works, parent) for e in cur]
        return cls(base, cur, roles, parent, works, coverage)


def _modes(runs: list[Entries], ident: str) -> set[str]:
    return {m for e in runs if e.modes is not None and ident in e.modes.index
            for m in e.modes.loc[[ident], "mode"]}


def _coverage(base: list[Entries], cur: list[Entries]) -> dict[str, tuple[list[tuple[int, int]], list[tuple[int, int]]]]:
    """Per range name: each run's (eager, replayed) instances with GPU work, for the runs that
    hold instance rows of it."""
    out: dict[str, tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}
    for k, runs in enumerate((base, cur)):
        for e in runs:
            if e.modes is None or e.modes.empty:
                continue
            n = e.modes["n"].groupby([e.modes.index, e.modes["replay"]]).sum()
            for ident in dict.fromkeys(e.modes.index):
                eager = int(n.get((ident, False), 0))
                replayed = int(n.get((ident, True), 0))
                out.setdefault(ident, ([], []))[k].append((eager, replayed))
    return out


def _by_mode(base: list[Entries], cur: list[Entries]) -> tuple[list[Entries], list[Entries], dict[str, str],
                                                               dict[str, str]]:
    """The runs with a mode entry added for each mode both sides have of each range name that
    is compared mode by mode (module docstring), and the roles and parents of the entries."""
    roles: dict[str, str] = {}
    parent: dict[str, str] = {}
    idents = dict.fromkeys(i for e in (*base, *cur) if e.modes is not None for i in e.modes.index)
    split: dict[str, list[str]] = {}
    for ident in idents:
        b, c = _modes(base, ident), _modes(cur, ident)
        shared = [m for m in MODES if m in b and m in c]
        if shared and (b != c or len(shared) > 1):
            split[ident] = shared
            roles[ident] = "name"
    if not split:
        return base, cur, roles, parent
    for ident, modes in split.items():
        for mode in modes:
            child = _child_ident(ident, mode)
            roles[child] = "mode"
            parent[child] = ident
    return [_with_modes(e, split) for e in base], [_with_modes(e, split) for e in cur], roles, parent


def _child_ident(ident: str, mode: str) -> str:
    return json.dumps({**json.loads(ident), "mode": mode}, sort_keys=True)


def _with_modes(e: Entries, split: dict[str, list[str]]) -> Entries:
    """One run's entries with a row per mode of the split names it holds (after its name's row)."""
    if e.modes is None or e.modes.empty or e.frame.empty:
        return e
    rows = []
    for ident in e.frame.index:
        rows.append(e.frame.loc[[ident]])
        if ident not in split or ident not in e.modes.index:
            continue
        mine = e.modes.loc[[ident]]
        name_row = e.frame.loc[ident]
        for mode in split[ident]:
            hit = mine[mine["mode"] == mode]
            if hit.empty:
                continue
            m = hit.iloc[0]
            row = e.frame.loc[[ident]].copy()
            row.index = pd.Index([_child_ident(ident, mode)], name=e.frame.index.name)
            row["key"] = f"{name_row['key']} ({mode})"
            row["match"] = [{**name_row["match"], "mode": mode}]
            row["count"] = float(m["n"])
            row["per_instance"] = "median"
            row["verdict"] = m["verdict"] if isinstance(m["verdict"], str) else name_row["verdict"]
            row["replay"] = bool(m["replay"])
            for column in mine.columns:
                if column in row.columns and column not in ("verdict", "replay"):
                    row[column] = m[column]
            rows.append(row)
    return replace(e, frame=pd.concat(rows))


def _works(scope: str, base: list[Entries], cur: list[Entries]) -> dict[str, Work]:
    """Per entry both sides have: its unit of work from the runs holding it."""
    def mixes(runs: list[Entries], ident: str) -> list[Any]:
        return [None if e.mix is None else e.mix.get(ident) for e in runs
                if not e.frame.empty and ident in e.frame.index and (e.mix is None or ident in e.mix)]

    idents = dict.fromkeys(i for e in (*base, *cur) if e.mix is not None for i in e.mix)
    out = {}
    for ident in idents:
        b, c = mixes(base, ident), mixes(cur, ident)
        if b and c:
            out[ident] = unit_of_work(b, c)
    return out


def _per_unit(e: Entries, works: dict[str, Work], parent: dict[str, str]) -> Entries:
    """A current run's totals divided by the factor of each entry that did more (or less) of
    the same work."""
    if e.frame.empty:
        return e
    factor = np.array([works[parent.get(i, i)].factor if parent.get(i, i) in works and works[parent.get(i, i)].scales
                       else 1.0 for i in e.frame.index])
    if (factor == 1.0).all():
        return e
    frame = e.frame.copy()
    columns = [c for c in SUMMED if c in frame.columns]
    frame[columns] = frame[columns].div(factor, axis=0)
    return replace(e, frame=frame)
