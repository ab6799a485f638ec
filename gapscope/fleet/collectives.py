"""Collectives paired across ranks: who waited for whom inside each collective, and whether the
late rank was late because of its own launch gaps.

Every rank's communication kernels (gapscope.analysis.communication.instances: one entry per
kernel with its sequence, occurrence and the gap time before it) are paired across ranks by
(sequence, occurrence): the i-th kernel of a rank's n-th communication stream meets the i-th of
every other rank's n-th, as NCCL runs a communicator's collectives in the same order on every
rank. docs/metrics.md ("Collectives across ranks") defines every figure; all of it is sorts and
group-wise reductions, with no loop over collectives or ranks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

#: Per-rank fields of the ``waits`` section, in JSON order.
WAIT_FIELDS = ("rank", "label", "clock_offset_ns", "collectives", "comm_ns", "wait_ns", "wait_fraction",
               "transfer_ns", "wait_from_gaps_ns", "waited_for", "waited_for_label", "waited_for_ns",
               "late_count", "caused_wait_ns", "caused_from_gaps_ns", "late_gap_ns")
#: Per-instance fields of the ``collectives`` section, in JSON order.
COLLECTIVE_FIELDS = ("sequence", "occurrence", "name", "ranks", "arrival_ns", "lateness_ns", "late_rank",
                     "late_label", "wait_ns", "transfer_ns", "late_gap_ns", "wait_from_gaps_ns")


def _sum(groups: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, groups, values)
    return out


def _clock_offsets(c: pd.DataFrame) -> tuple[dict[int, int], list[str]]:
    """Per file, the nanoseconds added to its times to put them on the clock of the file of the
    lowest rank: the median, over the instances both files ran, of the difference between the
    ends of their lowest ranks' kernels (a collective ends at nearly the same moment on every
    rank). Ranks of one file share its clock; a file that shares no instance keeps its own."""
    files = pd.unique(c["file"])
    ref = int(c.loc[c["rank"].idxmin(), "file"])
    if files.size == 1:
        return {ref: 0}, []
    ends = c.groupby(["inst", "file"], sort=False)["end"].first().reset_index()
    both = ends.merge(ends[ends["file"] == ref][["inst", "end"]], on="inst", suffixes=("", "_ref"))
    both["diff"] = both["end_ref"] - both["end"]  # integers: no float for the timestamps themselves
    medians = both.groupby("file")["diff"].median()
    offsets = {int(f): int(round(m)) for f, m in medians.items()}
    lonely = [int(f) for f in files if int(f) not in offsets]
    offsets.update({f: 0 for f in lonely})
    warnings = [f"{len(lonely)} traces share no collective with the first trace's ranks: their clocks are "
                "taken as they are, so their waits assume the clocks agree"] if lonely else []
    return offsets, warnings


#: JSON rows.
Rows = list[dict[str, Any]]


def pair(parts: list[pd.DataFrame], label_of: list[str]) -> tuple[Rows, Rows, list[str]]:
    """(collectives, waits, warnings) from per-file frames of communication kernels (the columns
    of gapscope.analysis.communication.INSTANCE_COLUMNS plus ``rank`` and ``file``, the file's
    index); empty when no collective has two ranks."""
    if not parts:
        return [], [], []
    c = pd.concat(parts, ignore_index=True).sort_values(["sequence", "occurrence", "rank"], kind="stable")
    c = c.reset_index(drop=True)
    c["inst"] = c.groupby(["sequence", "occurrence"], sort=False).ngroup()
    warnings = _count_warnings(c, label_of)
    c = c[c.groupby("inst")["rank"].transform("size") >= 2].reset_index(drop=True)
    if c.empty:
        return [], [], warnings
    c["inst"] = pd.factorize(c["inst"])[0]
    offsets, clock_warnings = _clock_offsets(c)
    shift = c["file"].map(offsets).to_numpy(np.int64)
    t0, t1 = c["start"].to_numpy(np.int64) + shift, c["end"].to_numpy(np.int64) + shift
    inst = c["inst"].to_numpy()
    n = int(inst.max()) + 1
    c["t0"] = t0
    g = c.groupby("inst", sort=True)
    late_row = g["t0"].idxmax().to_numpy()  # rows are in rank order: the lowest rank on a tie
    first_row = g["t0"].idxmin().to_numpy()
    last, first = t0[late_row], t0[first_row]
    late_rank = c["rank"].to_numpy()[late_row]
    gap = c["before_gap_ns"].to_numpy(np.int64)
    late_gap = gap[late_row]
    wait = np.minimum(last[inst], t1) - t0
    duration = t1 - t0
    transfer = duration - wait
    from_gaps = np.clip(late_gap[inst] - gap, 0, wait)
    ranks = np.bincount(inst, minlength=n)
    wait_sum, gaps_sum = _sum(inst, wait, n), _sum(inst, from_gaps, n)
    head = g.head(1)  # the lowest rank's row of each instance
    collectives = [dict(zip(COLLECTIVE_FIELDS, values)) for values in zip(
        head["sequence"].tolist(), head["occurrence"].tolist(), head["name"].tolist(), ranks.tolist(),
        first.tolist(), (last - first).tolist(), late_rank.tolist(), [label_of[r] for r in late_rank.tolist()],
        wait_sum.tolist(), transfer[late_row].tolist(), late_gap.tolist(), gaps_sum.tolist())]
    waits = _waits(c, label_of, offsets, inst, wait, duration, transfer, from_gaps, late_rank, last - first,
                   wait_sum, gaps_sum, late_gap)
    warnings += clock_warnings + _pairing_warnings(c, inst, last, t1, n)
    return collectives, waits, warnings


def _waits(c: pd.DataFrame, label_of: list[str], offsets: dict[int, int], inst: np.ndarray, wait: np.ndarray,
           duration: np.ndarray, transfer: np.ndarray, from_gaps: np.ndarray, late_rank: np.ndarray,
           lateness: np.ndarray, wait_sum: np.ndarray, gaps_sum: np.ndarray, late_gap: np.ndarray) -> list[dict]:
    """One row per rank: its waits, whom it waited for, and the waits it caused."""
    rank = c["rank"].to_numpy()
    d = pd.DataFrame({"rank": rank, "late": late_rank[inst], "wait": wait, "comm": duration, "transfer": transfer,
                      "from_gaps": from_gaps, "file": c["file"].to_numpy()})
    per = d.groupby("rank", sort=True).agg(collectives=("wait", "size"), comm_ns=("comm", "sum"),
                                           wait_ns=("wait", "sum"), transfer_ns=("transfer", "sum"),
                                           wait_from_gaps_ns=("from_gaps", "sum"), file=("file", "first"))
    on = d.groupby(["rank", "late"], sort=True)["wait"].sum().reset_index()
    on = on.sort_values(["rank", "wait", "late"], ascending=[True, False, True], kind="stable").groupby("rank").head(1)
    on = on.set_index("rank")
    was_late = lateness > 0
    caused = pd.DataFrame({"rank": late_rank[was_late], "n": 1, "wait": wait_sum[was_late],
                           "gaps": gaps_sum[was_late], "late_gap": late_gap[was_late]}).groupby("rank").sum()
    out = []
    for r, row in zip(per.index.tolist(), per.to_dict("records")):
        waited = int(row["wait_ns"])
        target = int(on.loc[r, "late"]) if waited > 0 else None
        k = caused.loc[r] if r in caused.index else None
        out.append(dict(zip(WAIT_FIELDS, (
            r, label_of[r], offsets[int(row["file"])], int(row["collectives"]), int(row["comm_ns"]), waited,
            waited / row["comm_ns"] if row["comm_ns"] > 0 else None, int(row["transfer_ns"]),
            int(row["wait_from_gaps_ns"]), target, label_of[target] if target is not None else None,
            int(on.loc[r, "wait"]) if target is not None else 0,
            int(k["n"]) if k is not None else 0, int(k["wait"]) if k is not None else 0,
            int(k["gaps"]) if k is not None else 0, int(k["late_gap"]) if k is not None else 0))))
    return out


def _count_warnings(c: pd.DataFrame, label_of: list[str]) -> list[str]:
    """Sequences whose ranks ran different numbers of communication kernels."""
    counts = c.groupby(["sequence", "rank"]).size().groupby("sequence").agg(["min", "max", "size"])
    out = []
    for seq, row in counts[(counts["min"] != counts["max"])].iterrows():  # one row per sequence
        out.append(f"collective sequence {seq}: {row['min']} to {row['max']} kernels per rank; the later ones "
                   "are paired among fewer ranks")
    return out


def _pairing_warnings(c: pd.DataFrame, inst: np.ndarray, last: np.ndarray, t1: np.ndarray, n: int) -> list[str]:
    """Paired kernels of different names, or that do not meet in time: the ranks' sequences may
    not line up."""
    out = []
    names = c.groupby("inst")["name"].nunique()
    differ = names[names > 1]
    if len(differ):
        first = c[c["inst"] == differ.index[0]]
        out.append(f"{len(differ)} of {n} collectives paired across ranks differ in kernel name (sequence "
                   f"{first['sequence'].iloc[0]} #{first['occurrence'].iloc[0]}: "
                   f"{', '.join(pd.unique(first['name']))}): the ranks' sequences may not line up")
    apart = np.bincount(inst[t1 < last[inst]], minlength=n) > 0
    if apart.any():
        out.append(f"{int(apart.sum())} of {n} collectives paired across ranks do not meet in time (a rank's "
                   "kernel ended before the last rank's began): point-to-point transfers between some of the "
                   "ranks, sequences that do not line up, or clocks that differ")
    return out


def reading(row: dict[str, Any]) -> str:
    """What one rank's waits say, for the tables: whether the late ranks' own gaps before the
    collectives explain most of its waiting (launch gaps on the late rank), or not (it had more
    or slower work)."""
    if not row["wait_ns"]:
        return "never waited for a peer"
    if 2 * row["wait_from_gaps_ns"] >= row["wait_ns"]:
        return f"waits on {row['waited_for_label']}'s gaps"
    return f"waits on {row['waited_for_label']}'s longer work"
