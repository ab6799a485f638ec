"""NVTX ranges and the GPU work each one launched.

A range's GPU work is every kernel, memcpy, memset or graph execution whose launching CUDA
runtime/driver call started inside the range (``range.start <= call.start <= range.end``) on
the range's own thread (``threads="same"``), or on any thread of the range's process
(``threads="process"``: for programs that launch from worker threads). Calls and GPU work are
matched on (process, correlationId); a ``cudaGraphLaunch`` carries the correlation id of every
kernel of that graph launch, so a graph launched inside a range brings all of its kernels.

Every range keeps its NVTX domain (None for the default domain) and, for grouping by name, a
*group* name: its name with PyTorch's ``emit_nvtx`` suffixes (``, seq = N``, ``, op_id = N``,
``, sizes = [...]``, ``, input_op_ids = [...]``) taken off (:data:`OP_SUFFIX`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gapscope.analysis.domains import LIBRARY_DOMAINS, is_library_domain  # noqa: F401  (numpy-free, for renderers)
from gapscope.analysis.intervals import gathered_slices
from gapscope.analysis.range_names import OP_SUFFIX, STEP_GROUP, STEP_MARKER
from gapscope.analysis.keys import TimeKeys, call_key, index_dtype, narrowed
from gapscope.catalog import pid_of, process_of, thread_of
from gapscope.errors import GapscopeError
from gapscope.trace.frames import NVTX_DOMAIN_CREATE, TraceFrames


#: How ranges get their GPU work (docs/metrics.md, "A range's GPU work").
THREAD_MODES = ("same", "process")
#: The name ``--domain`` gives the default domain.
DEFAULT_DOMAIN = "default"


def group_names(names: np.ndarray) -> np.ndarray:
    """Names as their instances are grouped (range_names.group_name): PyTorch's emit_nvtx
    suffixes taken off (OP_SUFFIX), a step marker's number made ``*`` (STEP_MARKER), as an
    object array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(names) == 0:
        return np.asarray(names, dtype=object)
    stripped = pc.replace_substring_regex(pa.array(names, type=pa.string()), pattern=OP_SUFFIX,
                                          replacement="", max_replacements=1)
    stepped = pc.replace_substring_regex(stripped, pattern=STEP_MARKER, replacement=STEP_GROUP, max_replacements=1)
    return stepped.to_numpy(zero_copy_only=False).astype(object)


@dataclass(frozen=True)
class RangeTable:
    """NVTX range instances in start order, with their nesting depth."""

    frame: pd.DataFrame  # id, name, group, domain, pid, thread, tid (globalTid), start_ns, end_ns, depth


#: Activities :meth:`CallIndex.find` looks up at a time: its keys and positions are 64-bit, so
#: they are made for one block, not for every activity (some 33 bytes an activity at once).
FIND_BLOCK = 1 << 20


class CallIndex:
    """Finds CUDA API calls by (process, correlationId), the key that ties GPU work and
    synchronization records to the call that issued them."""

    def __init__(self, api: pd.DataFrame) -> None:
        codes, self._procs = pd.factorize(api["proc"].to_numpy())
        corr = api["corr"].to_numpy()
        key = np.where(corr > 0, call_key(codes, corr), -1)
        del codes
        # Held while the activities are looked up: 12 bytes a call (a 32-bit order), not 16.
        self._order = narrowed(np.argsort(key, kind="stable"), key.size)
        self._keys = key[self._order]
        self._proc_index = pd.Index(self._procs)

    def find(self, proc: np.ndarray, corr: np.ndarray) -> np.ndarray:
        """Index of the call with each (proc, corr), -1 where there is none (32-bit where the
        calls allow), FIND_BLOCK at a time."""
        proc, corr = np.asarray(proc), np.asarray(corr)
        out = np.full(proc.size, -1, dtype=index_dtype(self._keys.size))
        if self._keys.size == 0:
            return out
        for a in range(0, proc.size, FIND_BLOCK):
            p = self._proc_index.get_indexer(proc[a:a + FIND_BLOCK]).astype(np.int64)
            c = corr[a:a + FIND_BLOCK]
            key = call_key(p, c)
            pos = np.minimum(np.searchsorted(self._keys, key), self._keys.size - 1)
            hit = (p >= 0) & (c > 0) & (self._keys[pos] == key)
            out[a:a + FIND_BLOCK][hit] = self._order[pos[hit]]
        return out


def link_launches(frames: TraceFrames, calls: CallIndex) -> np.ndarray:
    """Index into ``frames.api`` of the call that launched each activity, -1 where none (32-bit
    where the calls allow: the analysis holds it throughout, 4 bytes an activity)."""
    acts = frames.activities
    return narrowed(calls.find(acts["proc"].to_numpy(), acts["corr"].to_numpy()), len(frames.api))


def _depth(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of each range among the ranges of its thread (0 = outermost)."""
    n = tid.size
    depth = np.zeros(n, dtype=np.int64)
    if n == 0:
        return depth
    order = np.lexsort((-end, start, tid))
    t, s = tid[order], start[order]
    heads = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
    bounds = np.r_[heads, n]
    for a, b in zip(bounds[:-1], bounds[1:]):  # one step per thread, not per range
        ends = np.sort(end[order[a:b]])
        rank = np.arange(b - a)
        ended = np.searchsorted(ends, s[a:b], side="right")
        depth[order[a:b]] = np.maximum(rank - ended, 0)
    return depth


def _domain_names(nvtx: pd.DataFrame) -> dict[int, str]:
    """Domain id -> name from the domain-creation events; a domain without one (a trace cut
    after it was registered) is called ``domain N``."""
    domains = nvtx[nvtx["event_type"] == NVTX_DOMAIN_CREATE]
    named = dict(zip(domains["domain_id"].tolist(), domains["name"].tolist()))
    ids = pd.unique(nvtx["domain_id"].to_numpy())
    return {int(i): named.get(int(i)) or f"domain {int(i)}" for i in ids if i > 0}


def _select_domains(domain: np.ndarray, wanted: Sequence[str]) -> np.ndarray:
    """Mask of ranges in the wanted domains (names compared case-insensitively; ``default`` is
    the default domain); GapscopeError naming the trace's domains when one is not there."""
    labels = np.where(pd.isna(domain), DEFAULT_DOMAIN, domain).astype(str)
    lower = np.char.lower(labels.astype("U")) if labels.size else labels
    present = sorted(set(labels.tolist()))
    missing = [w for w in wanted if w.lower() not in set(np.asarray(lower).tolist())]
    if missing:
        raise GapscopeError(f"no NVTX range in domain {', '.join(repr(m) for m in missing)}; "
                            f"domains in this trace: {', '.join(present) or 'none'}")
    return np.isin(lower, [w.lower() for w in wanted])


def range_table(frames: TraceFrames, patterns: Sequence[str] = (), *, domains: Sequence[str] = (),
                normalize: bool = True) -> RangeTable:
    """The trace's NVTX ranges (push/pop and start/end), filtered by name globs (matched against
    the full name and the group name) and by domains if given. ``normalize``: group names
    without emit_nvtx suffixes and step markers' numbers (else a range's group is its full
    name). Each range's ``id`` is its place among all the trace's ranges in start order, the
    same whatever the filters (a report of ``--range decode*`` names the instances as the whole
    trace's report does); its ``depth`` is its nesting among the ranges kept."""
    nvtx = frames.nvtx
    domain_names = _domain_names(nvtx)
    rng = nvtx[(nvtx["event_type"] != NVTX_DOMAIN_CREATE) & (nvtx["end"] >= nvtx["start"])]
    names = rng["name"].fillna("[unnamed]").astype(str).to_numpy(dtype=object)
    dom = pd.Series(rng["domain_id"].to_numpy()).map(domain_names).to_numpy(dtype=object)
    dom = np.where(pd.isna(dom), None, dom)
    tid = rng["tid"].to_numpy()
    start = rng["start"].to_numpy()
    end = rng["end"].to_numpy()
    depth = _depth(tid, start, end)
    # The whole trace's start order numbers the ranges, before any filter.
    order = np.lexsort((depth, start))
    names, dom, tid, start, end, depth = names[order], dom[order], tid[order], start[order], end[order], depth[order]
    ids = np.arange(order.size, dtype=np.int64)
    keep = np.ones(order.size, dtype=bool)
    if domains:
        keep &= _select_domains(dom, domains)
    groups = group_names(names) if normalize else names
    if patterns:
        keep &= _matching(names, groups, keep, patterns)
    if not keep.all():
        names, groups, dom, tid, start, end, ids = (a[keep] for a in (names, groups, dom, tid, start, end, ids))
        depth = _depth(tid, start, end)
    frame = pd.DataFrame(
        {
            "id": ids,
            "name": names,
            "group": groups,
            "domain": dom,
            "pid": pid_of(tid),
            "thread": thread_of(tid),
            "tid": tid,
            "start_ns": start,
            "end_ns": end,
            "depth": depth,
        }
    )
    return RangeTable(frame)


def _matching(names: np.ndarray, groups: np.ndarray, kept: np.ndarray, patterns: Sequence[str]) -> np.ndarray:
    """Mask of the ranges whose full or group name matches one of ``patterns`` (exact or glob);
    GapscopeError naming the range names there are (among those ``kept`` by the domains) when
    none of those does."""
    def matches(u: str) -> bool:
        return any(u == p or fnmatch.fnmatchcase(u, p) for p in patterns)

    uniq = pd.unique(np.concatenate([names, groups]))
    hit = {u for u in uniq if matches(u)}
    sel = pd.Series(names).isin(hit).to_numpy() | pd.Series(groups).isin(hit).to_numpy()
    if (sel & kept).any():
        return sel
    if not kept.any():
        raise GapscopeError(
            f"no NVTX range matches {', '.join(repr(p) for p in patterns)}: this trace has no NVTX ranges"
        )
    shown_names = pd.unique(groups[kept])
    shown = ", ".join(sorted(map(str, shown_names))[:8]) or "none"
    more = f" (and {len(shown_names) - 8} more)" if len(shown_names) > 8 else ""
    raise GapscopeError(
        f"no NVTX range matches {', '.join(repr(p) for p in patterns)}; "
        f"range names in this trace: {shown}{more}"
    )


def _launch_slices(frames: TraceFrames, launch: np.ndarray, ranges: RangeTable, threads: str
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(linked activity indices sorted by (owner, call start), lo, hi): range i's activities are
    ``sorted[lo[i]:hi[i]]``, the owner being the launching thread (``same``) or its process."""
    rf = ranges.frame
    linked = narrowed(np.flatnonzero(launch >= 0), launch.size)
    api = frames.api
    call = launch[linked]
    if threads == "process":
        call_owner, rng_owner = api["proc"].to_numpy()[call], process_of(rf["tid"].to_numpy())
    else:
        call_owner, rng_owner = api["tid"].to_numpy()[call], rf["tid"].to_numpy()
    # Sort launches by (owner, call start); a range is then one slice of that order. Each
    # temporary over every launch is let go once the next is made (they were 68 bytes a launch).
    # Owners numbered in order of appearance, the calls' first, then those only ranges have
    # (what factorizing both at once gives, without a 64-bit code for every launch).
    t_call, owners = pd.factorize(call_owner)
    del call_owner
    t_call = narrowed(t_call, owners.size)
    call_start = api["start"].to_numpy()[call]  # (taken after the owners' codes: not beside them)
    del call
    t_rng = pd.Index(owners).get_indexer(rng_owner).astype(np.int64)
    alone = t_rng < 0
    extra, _ = pd.factorize(rng_owner[alone])
    t_rng[alone] = owners.size + extra
    n_owners = owners.size + (int(extra.max()) + 1 if extra.size else 0)
    tk = TimeKeys([call_start, rf["start_ns"].to_numpy(), rf["end_ns"].to_numpy()], n_owners)
    key_call = tk.key(t_call, call_start)
    del t_call, call_start
    order = narrowed(np.argsort(key_call, kind="stable"), key_call.size)
    key_call = key_call[order]  # sorted
    lo = np.searchsorted(key_call, tk.key(t_rng, rf["start_ns"].to_numpy()), "left")
    hi = np.searchsorted(key_call, tk.key(t_rng, rf["end_ns"].to_numpy()), "right")
    del key_call
    return linked[order], lo, hi


def range_members(
    frames: TraceFrames, launch: np.ndarray, ranges: RangeTable, threads: str = "same",
) -> tuple[np.ndarray, np.ndarray]:
    """(range index, activity index) for every activity launched inside every range, by calls
    of the range's thread (``threads="same"``) or of any thread of its process (``"process"``)
    but those inside a range of the same name of their own (:func:`_own_instance`): each
    thread's work is counted once per name."""
    if threads not in THREAD_MODES:
        raise GapscopeError(f"--threads must be one of {', '.join(THREAD_MODES)}, not {threads!r}")
    if len(ranges.frame) == 0 or not (launch >= 0).any():
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    acts, lo, hi = _launch_slices(frames, launch, ranges, threads)
    # 32-bit: 8 bytes a membership, not 16 (an activity is often inside several nested ranges).
    member_range, member_act = gathered_slices(acts, lo, hi)
    if threads == "process":
        keep = ~_own_instance(frames, launch, ranges, member_range, member_act)
        if not keep.all():
            member_range, member_act = member_range[keep], member_act[keep]
    return member_range, member_act


def _own_instance(frames: TraceFrames, launch: np.ndarray, ranges: RangeTable, member_range: np.ndarray,
                  member_act: np.ndarray) -> np.ndarray:
    """Mask of the memberships whose activity another thread launched while inside a range of the
    member range's (domain, group) name of its own: that work is its own instance's, not also
    every concurrent instance's (two workers each in its own ``step`` keep their own kernels)."""
    rf = ranges.frame
    api = frames.api
    call = launch[member_act]
    call_tid = api["tid"].to_numpy()[call]
    call_start = api["start"].to_numpy()[call]
    del call
    rng_tid = rf["tid"].to_numpy()
    other = call_tid != rng_tid[member_range]
    out = np.zeros(member_range.size, dtype=bool)
    if not other.any():
        return out
    name = rf.groupby(["domain", "group"], sort=False, dropna=False).ngroup().to_numpy(np.int64)
    # One interval list per (thread, name): the ranges' starts in order, with the latest end so
    # far (nested ranges of one name on one thread are one stretch).
    held = pd.MultiIndex.from_arrays([rng_tid, name])
    kcode, keys = pd.factorize(held)
    start, end = rf["start_ns"].to_numpy(), rf["end_ns"].to_numpy()
    order = np.lexsort((start, kcode))
    k_sorted, s_sorted = kcode[order], start[order]
    reach = pd.Series(end[order]).groupby(k_sorted).cummax().to_numpy(np.int64)
    q_code = pd.Index(keys).get_indexer(pd.MultiIndex.from_arrays([call_tid[other], name[member_range[other]]]))
    q_time = call_start[other]
    found = q_code >= 0
    tk = TimeKeys([s_sorted, q_time], len(keys))
    pos = np.searchsorted(tk.key(k_sorted, s_sorted), tk.key(np.maximum(q_code, 0), q_time), "right") - 1
    ok = pos >= 0
    posc = np.maximum(pos, 0)
    inside = found & ok & (k_sorted[posc] == q_code) & (reach[posc] >= q_time)
    out[np.flatnonzero(other)] = inside
    return out


def process_work_counts(frames: TraceFrames, launch: np.ndarray, ranges: RangeTable) -> np.ndarray:
    """Per range, the activities ``threads="process"`` would give it (counted, not listed)."""
    member_range, _ = range_members(frames, launch, ranges, "process")
    return np.bincount(member_range, minlength=len(ranges.frame)).astype(np.int64)


#: CUDA calls :func:`range_calls` counts into the ranges at a time.
CALL_BLOCK = 1 << 20


def range_calls(frames: TraceFrames, ranges: RangeTable, counted: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(calls, their summed duration in ns) per range: the CUDA calls its own thread started
    inside it (``range.start <= call.start <= range.end``), the host's own CUDA work in the range
    (docs/metrics.md, "Host work"). ``counted``: the calls that count (QUIET_CALLS left out when
    every call was read, so the figures do not depend on how many were read).

    With keys (thread, time), a range's calls are those of keys from its start's key to its
    end's. Doubled, a call's key as 2k + 1, a start's as 2s and an end's as 2e + 2, so that a
    call lies before a start (k < s) or not after an end (k <= e) exactly when its doubled key is
    below the other's, and no two are equal: one sorted array of the ranges' doubled keys, the
    calls binned into it CALL_BLOCK at a time (their counts and durations), and each range's
    calls are those below its end less those below its start (no sort of the calls, nothing held
    per call)."""
    n = len(ranges.frame)
    api = frames.api
    if n == 0 or len(api) == 0:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    tid = api["tid"].to_numpy()
    start = api["start"].to_numpy()
    end = api["end"].to_numpy()
    rf = ranges.frame
    r_tid = rf["tid"].to_numpy()
    threads = np.unique(r_tid)  # only the ranges' own threads' calls can be inside one
    r_code = np.searchsorted(threads, r_tid)
    tk = TimeKeys([start, rf["start_ns"].to_numpy(), rf["end_ns"].to_numpy()], threads.size + 1)
    q_start = 2 * tk.key(r_code, rf["start_ns"].to_numpy())  # keys below 2**62: doubled, still int64
    q_end = 2 * tk.key(r_code, rf["end_ns"].to_numpy()) + 2
    bounds = np.sort(np.concatenate((q_start, q_end)))
    below_calls = np.zeros(bounds.size + 1, dtype=np.int64)  # by how many bounds lie below a call
    below_ns = np.zeros(bounds.size + 1, dtype=np.int64)
    for a in range(0, tid.size, CALL_BLOCK):
        b = min(tid.size, a + CALL_BLOCK)
        t, s = tid[a:b], start[a:b]
        d = np.maximum(end[a:b] - s, 0)
        if counted is not None:
            keep = counted[a:b]
            t, s, d = t[keep], s[keep], d[keep]
        code = np.minimum(np.searchsorted(threads, t), threads.size - 1)
        mine = threads[code] == t
        key = tk.key(code[mine], s[mine])
        key *= 2
        key += 1
        bins = np.searchsorted(bounds, key)
        below_calls += np.bincount(bins, minlength=bounds.size + 1)
        # float sums of whole ns: exact below 2**53 ns (104 days) a bin and block
        below_ns += np.bincount(bins, weights=d[mine], minlength=bounds.size + 1).astype(np.int64)
    # The calls below a bound: those with no more bounds below them than lie below it.
    calls_before, ns_before = np.cumsum(below_calls), np.cumsum(below_ns)
    lo = np.searchsorted(bounds, q_start)
    hi = np.searchsorted(bounds, q_end)
    return (calls_before[hi] - calls_before[lo]).astype(np.int64), (ns_before[hi] - ns_before[lo]).astype(np.int64)
