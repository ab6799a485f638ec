"""Damaged rows: the rule for every value the analysis reads, applied to any format's frames.

A reader (one module per trace format) fills the frames of gapscope.trace.frames and says, per
integer cell it could not read as an integer, what it found (:class:`Cell`: NULL, or not an
integer at all: text, a blob, a real number). :func:`validate` then applies one rule per column
(:data:`RULES`, documented in docs/robustness.md), vectorized over whole columns:

* a value the analysis cannot do without (a start, an end, a device, a stream, a thread) that
  is NULL, not an integer or out of its range, or an end before its start: the row is left out;
* a value that only ties rows together or names them (a correlation id, a process, a name id):
  it is read as unknown (-1), so the row is kept but tied to nothing;
* either way the result carries one warning per frame that says how many rows and why;
* text that is not UTF-8 (a name) is kept with U+FFFD in place of the bad bytes, and warned;
* when more than :data:`REFUSE_SHARE` of a frame's rows are damaged (left out, or a value read
  as unknown) the trace is refused (GapscopeError, exit 2): figures computed from what is left
  would not describe the run.

Times must lie in ``[0, time limit]``: twice the session's end when the trace records one
(``TraceMeta.session_end_ns``), and :data:`TIME_LIMIT_NS` in any case. Keys are values like any
other: a thread (``tid``, nsys's globalTid layout) outside ``[0, 2**63)`` or a call's process
outside ``[0, 2**40)`` leaves its row out, counted in the warning; a reader whose format records
a process or thread id that does not fit that layout hands -1 for the thread, which is counted
the same way, rather than a packed value that belongs to another thread.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from gapscope.errors import GapscopeError
from gapscope.trace.frames import TraceFrames


class Cell(enum.IntEnum):
    """What a reader found in one cell that should hold an integer (or, for ``name``, text)."""

    OK = 0
    NULL = 1
    NOT_INTEGER = 2  # text, a blob or a real number where an integer belongs
    NOT_TEXT = 3  # bytes that are not UTF-8 where text belongs (kept, with U+FFFD)


#: The latest time a trace may hold, in ns from its session start: 2**53 - 1 (104 days, the
#: largest integer a float64 holds exactly, so every figure computed in floats stays exact).
TIME_LIMIT_NS = 2**53 - 1
#: A trace with more than this share of one frame's rows damaged is refused.
REFUSE_SHARE = 0.10

DROP = "drop"  # leave the row out
UNKNOWN = "unknown"  # keep the row, the value read as -1 (tied to nothing), warned
NONE = "none"  # a NULL that means "none" (an open NVTX range's end): -1, not damage
KEEP = "keep"  # text kept as the reader decoded it, warned

_TIME = -1  # a Rule.hi that stands for the trace's time limit
_I63 = 2**63 - 1


@dataclass(frozen=True)
class Rule:
    """How one column is checked: its range ``[lo, hi]`` (``hi`` -1: the time limit), what a NULL
    means (``null``) and what becomes of a value that is not an integer or out of range
    (``bad``). For UNKNOWN columns -1 is the reader's own "none" and is not damage."""

    column: str
    lo: int
    hi: int
    null: str
    bad: str
    #: A value a reader may compute from a column checked before it (a call's process from its
    #: thread): counted only on rows that column did not leave out already.
    derived: bool = False


_START = Rule("start", 0, _TIME, DROP, DROP)
_END = Rule("end", 0, _TIME, DROP, DROP)
_DEVICE = Rule("device", 0, 2**31 - 1, DROP, DROP)
_STREAM = Rule("stream", 0, 2**32 - 1, DROP, DROP)
_THREAD = Rule("tid", 0, _I63, DROP, DROP)
_PROCESS = Rule("proc", 0, 2**40 - 1, UNKNOWN, UNKNOWN)  # the process part of a global id
#: A call's process (the process part of its thread, or the process a format records beside it):
#: the key its launches are found by; a call of no process the trace can hold is no call of it.
_CALL_PROCESS = Rule("proc", 0, 2**40 - 1, DROP, DROP, derived=True)
_CORRELATION = Rule("corr", 0, 2**40 - 1, UNKNOWN, UNKNOWN)  # gapscope.analysis.keys.call_key's field
_NAME_ID = Rule("name_id", 0, _I63, UNKNOWN, UNKNOWN)
#: An activity's name id (a StringIds id, a graph id) is packed in 40 bits beside its kind
#: (TraceFrames.activity_labels); real ids are small.
_ACTIVITY_NAME_ID = Rule("name_id", 0, 2**40 - 2, UNKNOWN, UNKNOWN)

#: The rule of every column, per frame (docs/robustness.md, "Values: one rule per column").
RULES: dict[str, tuple[Rule, ...]] = {
    "activities": (_START, _END, _DEVICE, _STREAM, _PROCESS, _CORRELATION, _ACTIVITY_NAME_ID),
    "api": (_START, _END, _THREAD, _CORRELATION, _NAME_ID, _CALL_PROCESS),
    "nvtx": (_START, Rule("end", 0, _TIME, NONE, DROP), _THREAD, Rule("event_type", 0, 2**31 - 1, DROP, DROP),
             Rule("domain_id", 0, _I63, NONE, UNKNOWN), Rule("name", 0, 0, NONE, KEEP)),
    "syncs": (_START, _DEVICE, _STREAM, _PROCESS),
    "streams": (_PROCESS, _DEVICE, _STREAM, Rule("kind", 0, 2**31 - 1, UNKNOWN, UNKNOWN)),
}
#: Frames of facts about the trace's streams, not of its events: their damaged rows are left out
#: (or their values read as unknown) with a warning, but never make the trace refused.
NEVER_REFUSED = ("streams",)
#: Frames whose rows must not end before they start (an NVTX end only when it is present).
ORDERED = ("activities", "api", "nvtx")

#: How warnings name a frame's rows, and what an unknown value means for the row.
ROW_WORDS = {"activities": "GPU activity rows", "api": "CUDA API call rows", "nvtx": "NVTX rows",
             "syncs": "stream-wait rows", "streams": "stream-kind rows"}
UNKNOWN_MEANS = {"proc": "tied to no API call", "corr": "tied to no API call",
                 "name_id": "named [unknown]", "domain_id": "in no NVTX domain",
                 "name": "shown with U+FFFD in place of the bytes that were not UTF-8",
                 "api corr": "tied to no GPU work", "syncs proc": "matched to no stream",
                 "streams proc": "matched to no stream", "streams kind": "the stream's kind read as unknown"}

CellCodes = Mapping[str, Mapping[str, np.ndarray]]
_KEPT = frozenset(r.column for rules in RULES.values() for r in rules if r.bad == KEEP)


def time_limit(session_end_ns: int | None) -> int:
    """The latest valid time: twice the session's recorded end, at most TIME_LIMIT_NS."""
    if session_end_ns is None or session_end_ns <= 0:
        return TIME_LIMIT_NS
    return min(2 * int(session_end_ns), TIME_LIMIT_NS)


@dataclass
class _Findings:
    """Per frame: which rows go, which values become unknown, and the reasons counted."""

    n: int
    drop: np.ndarray
    unknown: dict[str, np.ndarray]
    reasons: dict[str, int]  # "column reason" -> rows, for the rows left out
    unknown_reasons: dict[str, dict[str, int]]  # column -> reason -> rows

    @property
    def damaged(self) -> int:
        """Rows left out or with a value read as unknown (text kept as decoded is not counted:
        a name is not a figure)."""
        hit = self.drop.copy()
        for column, mask in self.unknown.items():
            if column not in _KEPT:
                hit |= mask
        return int(hit.sum())

    @property
    def touched(self) -> bool:
        """Whether anything at all was found (kept text included)."""
        return bool(self.drop.any() or self.unknown)


def _out_of_range(values: np.ndarray, lo: int, hi: int, none_ok: bool) -> np.ndarray | None:
    """Rows whose value lies outside [lo, hi] (-1 allowed when ``none_ok``); None when none do."""
    if values.size == 0:
        return None
    vmin, vmax = int(values.min()), int(values.max())
    if vmin >= lo and vmax <= hi:
        return None
    if none_ok and vmin >= -1 and vmax <= hi:  # only the reader's "none" (-1) below the range
        return None
    bad = (values < lo) | (values > hi)
    if none_ok:
        bad &= values != -1
    return bad if bad.any() else None


def _examine(name: str, frame: pd.DataFrame, cells: Mapping[str, np.ndarray], limit: int) -> _Findings:
    n = len(frame)
    drop = np.zeros(n, dtype=bool)
    reasons: dict[str, int] = {}
    unknown: dict[str, np.ndarray] = {}
    unknown_reasons: dict[str, dict[str, int]] = {}

    def note(rule: Rule, mask: np.ndarray, reason: str, policy: str) -> None:
        count = int(mask.sum())
        if not count:
            return
        if policy == DROP:
            drop[mask] = True
            key = f"{rule.column} {reason}"
            reasons[key] = reasons.get(key, 0) + count
        elif policy in (UNKNOWN, KEEP):
            unknown[rule.column] = unknown.get(rule.column, np.zeros(n, dtype=bool)) | mask
            by = unknown_reasons.setdefault(rule.column, {})
            by[reason] = by.get(reason, 0) + count

    for rule in RULES[name]:
        if rule.column not in frame:
            continue
        code = cells.get(rule.column)
        if code is not None and code.any():
            note(rule, code == Cell.NULL, "NULL", rule.null)
            note(rule, code == Cell.NOT_INTEGER, "not an integer", rule.bad)
            note(rule, code == Cell.NOT_TEXT, "not UTF-8 text", rule.bad)
            readable = code == Cell.OK
        else:
            readable = None
        if rule.bad == KEEP:
            continue
        values = frame[rule.column].to_numpy()
        hi = limit if rule.hi == _TIME else rule.hi
        bad = _out_of_range(values, rule.lo, hi, rule.bad == UNKNOWN or rule.null == NONE)
        if bad is not None:
            if readable is not None:
                bad &= readable
            if rule.derived:
                bad &= ~drop
            note(rule, bad, "out of range", rule.bad)
    if name in ORDERED and {"start", "end"} <= set(frame.columns) and n:
        start, end = frame["start"].to_numpy(), frame["end"].to_numpy()
        before = end < start
        if name == "nvtx":
            before &= end != -1  # an open range has no end
        if before.any():
            note(Rule("end", 0, 0, DROP, DROP), before & ~drop, "before start", DROP)
    return _Findings(n, drop, unknown, reasons, unknown_reasons)


def _listing(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{reason}: {count:,}" for reason, count in counts.items())


def _warnings(name: str, f: _Findings) -> list[str]:
    rows = ROW_WORDS[name]
    out = []
    dropped = int(f.drop.sum())
    if dropped:
        out.append(f"left out {dropped:,} of {f.n:,} {rows} as damaged ({_listing(f.reasons)}); "
                   "every figure covers the other rows")
    for column, by in f.unknown_reasons.items():
        count = int((f.unknown[column] & ~f.drop).sum())
        if count:
            out.append(f"{count:,} of {f.n:,} {rows} had a damaged {column} ({_listing(by)}): "
                       f"kept, {UNKNOWN_MEANS.get(f'{name} {column}', UNKNOWN_MEANS.get(column))}")
    return out


def validate(frames: TraceFrames, cells: CellCodes | None = None) -> TraceFrames:
    """``frames`` with damaged rows left out and damaged links read as unknown, and one warning
    per frame and kind of damage added to ``frames.warnings``; GapscopeError when more than
    REFUSE_SHARE of a frame's rows are damaged. ``cells[frame][column]`` holds the reader's
    :class:`Cell` code per row (absent: every cell was read as it should be)."""
    cells = cells or {}
    limit = time_limit(frames.meta.session_end_ns)
    cleaned: dict[str, pd.DataFrame] = {}
    warnings: list[str] = []
    for name in RULES:
        frame = getattr(frames, name)
        f = _examine(name, frame, cells.get(name, {}), limit)
        if not f.touched:
            continue
        damaged = f.damaged
        if damaged > REFUSE_SHARE * f.n and name not in NEVER_REFUSED:
            why = _listing({**f.reasons, **{f"{c} {r}": k for c, by in f.unknown_reasons.items()
                                            for r, k in by.items() if c not in _KEPT}})
            raise GapscopeError(
                f"{frames.meta.path}: {damaged:,} of {f.n:,} {ROW_WORDS[name]} are damaged ({why}): "
                f"more than {REFUSE_SHARE:.0%}, too many to analyze the rest; re-export the trace"
            )
        frame = frame.copy()
        for column, mask in f.unknown.items():
            if column != "name":
                values = frame[column].to_numpy().copy()
                values[mask] = -1
                frame[column] = values
        if f.drop.any():
            frame = frame[~f.drop].reset_index(drop=True)
        cleaned[name] = frame
        warnings += _warnings(name, f)
    if not cleaned:
        return frames
    return replace(frames, **cleaned, warnings=[*frames.warnings, *warnings])
