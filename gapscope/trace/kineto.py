"""Reading a PyTorch profiler trace (Kineto's Chrome trace JSON, ``export_chrome_trace`` or
TensorBoard's ``*.pt.trace.json[.gz]``) into typed frames (gapscope.trace.frames).

The file is streamed (gapscope.trace.kineto_json: msgspec, a piece of events at a time, gzip or
plain) and only the events the analysis reads are kept as columns, so a trace of several GB
needs memory for its GPU and CUDA events, not for its JSON. Times are microseconds, Kineto writing
integer nanoseconds as ``{ns / 1000}.{ns % 1000:03}`` (relative to a base time rounded down to
three months; before ``baseTimeNanoseconds`` existed, since 1970), parsed exactly from their
decimal text into integer nanoseconds; a clock past the time limit is rebased by whole seconds.

What each event becomes (docs/formats.md says what differs from an nsys trace):

=================================  =============================================================
event (``ph`` X, by ``cat``)       frame
=================================  =============================================================
``kernel``                         activities, ActivityKind.KERNEL: ``args.device``,
                                   ``args.stream``, ``args.correlation``
``gpu_memcpy``, ``gpu_memset``     activities, MEMCPY / MEMSET
``cuda_runtime``, ``cuda_driver``  api: ``args.correlation``, thread ``(pid << 24) | tid``
``user_annotation``                nvtx, as push/pop ranges of their CPU thread, no domain
                                   (``record_function`` ranges and ``ProfilerStep#N``)
``cuda_sync`` "Stream Wait Event"  syncs (recorded only with Kineto's cuda sync events on)
=================================  =============================================================

GPU events carry the device as their ``pid``, not the process: every activity belongs to the
process that made the trace's CUDA calls. Kernel names are Kineto's demangled signatures; the
name a report shows is the function's own name, as nsys's ``shortName`` is.
"""

from __future__ import annotations

import decimal
import gc
import operator
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import compress, repeat
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gapscope import heap
from gapscope.errors import GapscopeError
from gapscope.trace.cuda_api import GRAPH_LAUNCH_CALLS, KERNEL_LAUNCH_CALLS, QUIET_CALLS, base_name
from gapscope.trace.frames import (
    ACTIVITY_COLUMNS,
    NVTX_PUSH_POP,
    SYNC_COLUMNS,
    ActivityKind,
    ClosedTraceError,
    RowCounts,
    TraceFrames,
    TraceMeta,
    build_frames,
    id_dtype,
    narrow_ids,
)
from gapscope.trace.kineto_json import (
    INFLATE_ERRORS,
    MAX_DEPTH,
    Event,
    Stream,
    TooLarge,
    check_not_sparse,
    exact_ns,
    json_size,
    open_source,
    tagged_decoder,
)
from gapscope.trace.validation import TIME_LIMIT_NS, Cell

FORMAT = "kineto"
#: Kineto's Chrome trace schema versions this reader was checked against.
KNOWN_SCHEMA_VERSIONS = (1,)

#: GPU activity categories and what they are (libkineto's names since 2023, and its names of
#: 2022: ``Kernel``, ``Memcpy``, ``Memset``).
GPU_CATEGORIES = {"kernel": ActivityKind.KERNEL, "gpu_memcpy": ActivityKind.MEMCPY,
                  "gpu_memset": ActivityKind.MEMSET, "Kernel": ActivityKind.KERNEL,
                  "Memcpy": ActivityKind.MEMCPY, "Memset": ActivityKind.MEMSET}
#: Host-side CUDA (and HIP) call categories, with libkineto's 2022 names.
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver", "Runtime", "Driver")
#: The framework's operators (aten::add_, ...), with libkineto's 2022 name: counted, not kept (the
#: prediction's torch.profiler cost is per recorded operator, docs/metrics.md).
OPERATOR_CATEGORIES = ("cpu_op", "Operator")
#: The profiler's Python tracer (with_stack=True): counted, for a warning on the tracer's cost.
PYTHON_CATEGORY = "python_function"
#: Operators whose args are looked at for shapes (record_shapes=True), for the same warning.
_SHAPES_SAMPLE = 1000
#: Range categories: record_function and the profiler's own ProfilerStep#N.
RANGE_CATEGORIES = ("user_annotation",)
#: Kernels the CUDA driver runs for the memcpy nodes of a CUDA graph: Kineto records them as
#: ``kernel`` events, nsys (from the same CUPTI records) as memcpys; they are read as memcpys.
GRAPH_COPY_KERNEL = re.compile(r"memcpy\d+_post")
#: The kernels torch.compile generates (Inductor's Triton kernels: triton_poi_fused_*, _per_,
#: _red_, _tem_, ...), whose launches the profiler records through a record function of
#: Inductor's own: counted for the tracer's cost (catalog.Tracer.per_inductor_launch_ns).
INDUCTOR_KERNEL = re.compile(r"triton_[a-z]{3}_fused")
#: Synchronization records, and the one kind the analysis reads (a cudaStreamWaitEvent's).
SYNC_CATEGORY = "cuda_sync"
STREAM_WAIT = "Stream Wait Event"
#: The kind of GPU work of each GPU category.
_KIND = {c: int(k) for c, k in GPU_CATEGORIES.items()}
#: Every category read.
_READ_CATS = frozenset({*GPU_CATEGORIES, *CALL_CATEGORIES, *RANGE_CATEGORIES, SYNC_CATEGORY})
#: The other categories of libkineto (its ActivityType names) and of its Chrome trace (flows,
#: ``fwdbwd``, the ``Trace`` span): read past without their fields (kineto_json.tagged_decoder), the
#: operators and Python events counted. A category in neither list sends its piece of events
#: through the full decode, which reads it the same way, slower.
SKIPPED_CATEGORIES = (*OPERATOR_CATEGORIES, PYTHON_CATEGORY, "gpu_user_annotation", "external_correlation",
                      "cpu_instant_event", "overhead", "ac2g", "fwdbwd", "Trace", "glow_runtime",
                      "cuda_profiler_range", "collective_comm", "xpu_runtime", "mtia_runtime", "mtia_ccp_events",
                      "privateuse1_runtime", "privateuse1_driver", "hpu_op")
_TAGGED = tagged_decoder(sorted(_READ_CATS), SKIPPED_CATEGORIES)
#: Every category read, and which of gpu, call, range, sync it is.
_CLASS = {**{c: 0 for c in GPU_CATEGORIES}, **{c: 1 for c in CALL_CATEGORIES},
          **{c: 2 for c in RANGE_CATEGORIES}, SYNC_CATEGORY: 3}

_THREAD_BITS = 24
_NS = 1000  # nanoseconds per microsecond
#: The unit times are rebased by when a trace's clock is past the time limit: a million whole
#: seconds (11.6 days), so that the ranks of one run, each file read on its own, get the same base
#: (unless their first events straddle a multiple of it) and every time stays exact.
_SECOND = 1_000_000_000
REBASE_NS = 1_000_000 * _SECOND

_READ_ERRORS = (OSError, EOFError, *INFLATE_ERRORS, UnicodeDecodeError, ValueError, decimal.InvalidOperation)


def short_kernel_name(name: str) -> str:
    """A kernel's own name from its demangled signature, as nsys's ``shortName``:
    ``void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>(int, float)``
    gives ``vectorized_layer_norm_kernel``; a plain name (``nvjet_sm90_...``) is kept."""
    s = name.strip()
    pairs = {")": "(", ">": "<"}
    while s and s[-1] in pairs:  # trailing parameter list, then template arguments
        close, opening, depth = s[-1], pairs[s[-1]], 0
        for i in range(len(s) - 1, -1, -1):
            if s[i] == close:
                depth += 1
            elif s[i] == opening:
                depth -= 1
                if depth == 0:
                    break
        if depth != 0 or i == 0:
            return name
        s = s[:i].rstrip()
    depth, start = 0, 0
    for i, c in enumerate(s):  # after the last "::" or space outside brackets
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        elif depth == 0 and (c == " " or (c == ":" and s[i - 1 : i + 1] == "::")):
            start = i + 1
    return s[start:] or name


@dataclass
class _Events:
    """The events the analysis reads, as columns (times in integer ns), the string table their
    name ids point into, and per column where a value could not be read (``bad``)."""

    gpu: dict[str, np.ndarray]  # kind, start, end, device, stream, corr, name_id
    calls: dict[str, np.ndarray]  # start, end, pid, tid, corr, name_id
    ranges: dict[str, Any]  # start, end, pid, tid, name (object)
    waits: dict[str, np.ndarray]  # start, device, stream
    bad: dict[str, dict[str, np.ndarray]]  # per frame and column: values not read as integers
    strings: list[str]
    syncs_seen: int
    copy_kernels: int  # graph memcpy-node kernels read as memcpys
    cut_names: int  # names longer than MAX_NAME, cut
    operators: int  # cpu_op events (the framework's operators), counted, not kept
    python_functions: int  # python_function events (the profiler's Python tracer), counted
    shapes_recorded: bool  # operators carry their argument shapes (record_shapes=True)
    skipped: Counter
    head: dict[str, Any]
    rebased_ns: int = 0  # whole seconds taken off every time (a clock past the time limit)
    short: np.ndarray | None = None  # per string id, the id of its short kernel name
    whole: bool = True  # False: only what name lookups read is left (:meth:`named_only`)

    def named_only(self) -> "_Events":
        """These events with only what name lookups read after the frames are built (the
        strings, the GPU events' kinds and name ids): the other columns let go, so that an
        analysis does not hold the trace twice; a later load reads the file again."""
        empty: dict[str, Any] = {}
        return replace(self, gpu={"kind": self.gpu["kind"], "name_id": self.gpu["name_id"]}, calls=empty,
                       ranges=empty, waits=empty, bad={}, whole=False)


def _ints(values: list[Any], none: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """JSON values as int64 (None: ``none``), where one is not an integer of int64's range (its
    value 0), and where one is None."""
    n = len(values)
    try:  # ints only (msgspec gave ints, text or None): the common case, in one pass
        return np.fromiter(values, dtype=np.int64, count=n), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    except (TypeError, ValueError, OverflowError):
        pass
    present = _present(values)
    try:  # ints and None (a column of some classes of events only): the None filled in
        out = np.full(n, none, dtype=np.int64)
        out[present] = np.fromiter(compress(values, present.tolist()), dtype=np.int64, count=int(present.sum()))
        return out, np.zeros(n, dtype=bool), ~present
    except (TypeError, ValueError, OverflowError):
        pass
    # only odd pieces come here: text (numbers written as text count, as numpy reads
    # them above), ints past int64
    values = [none if v is None else int(v) if type(v) is str and v.isascii() and v.isdigit() else v
              for v in values]
    ok = [type(v) is int and -(2**63) <= v < 2**63 for v in values]
    good = np.array(ok, dtype=bool)
    return np.fromiter((v if k else 0 for v, k in zip(values, ok)), dtype=np.int64, count=n), ~good, ~present


def _present(values: list[Any]) -> np.ndarray:
    return np.fromiter(map(operator.is_not, values, repeat(None)), dtype=bool, count=len(values))


class _Names(dict):
    """Name ids: a name gets the next id when first seen (:meth:`__missing__`, once per distinct
    name), its text in :attr:`strings`; the ids of CUDA graph memcpy-node kernel names
    (GRAPH_COPY_KERNEL) in :attr:`copies`."""

    def __init__(self) -> None:
        super().__init__()
        self.strings: list[str] = []
        self.copies: list[int] = []
        self._copy_mask = np.zeros(0, dtype=bool)

    def copy_mask(self) -> np.ndarray:
        """Per name id so far, whether it names a graph memcpy-node kernel (made again only
        when names were added)."""
        if self._copy_mask.size != len(self.strings):
            self._copy_mask = np.zeros(len(self.strings), dtype=bool)
            self._copy_mask[self.copies] = True
        return self._copy_mask

    def __missing__(self, name: str) -> int:
        i = self[name] = len(self.strings)
        self.strings.append(name)
        if name.startswith("memcpy") and GRAPH_COPY_KERNEL.fullmatch(name):
            self.copies.append(i)
        return i


class _Reader:
    """The columns of the events kept, piece by piece (each piece's columns are arrays; they
    are joined once, at the end)."""

    def __init__(self) -> None:
        self.ids = _Names()
        self.parts: dict[int, list[dict[str, np.ndarray]]] = {0: [], 1: [], 2: [], 3: []}
        self.syncs_seen = self.copy_kernels = self.cut_names = self.operators = self.python_functions = 0
        self.shapes_checked, self.shapes_recorded = 0, False
        self.skipped: Counter = Counter()

    def wants_op_args(self) -> bool:
        """Whether the operators' args are still looked at (a sample of them, for record_shapes):
        until then every event is decoded with its fields."""
        return not self.shapes_recorded and self.shapes_checked < _SHAPES_SAMPLE

    def add(self, piece: list[Event]) -> None:
        """Keep the events of one piece that the frames read (``ph`` X of a category read), as
        columns: times and names taken once for all of them, the other fields for each class
        (GPU work, calls, ranges, syncs) from its own events, then split by class."""
        cats = list(map(_CAT, piece))
        self.operators += cats.count(OPERATOR_CATEGORIES[0]) + cats.count(OPERATOR_CATEGORIES[1])
        self.python_functions += cats.count(PYTHON_CATEGORY)
        if self.wants_op_args() and OPERATOR_CATEGORIES[0] in cats:
            # record_shapes is one setting for the whole session: a sample of operators tells it
            ops = list(compress(piece, map(operator.eq, cats, repeat(OPERATOR_CATEGORIES[0]))))[:_SHAPES_SAMPLE]
            self.shapes_checked += len(ops)
            # (an operator whose fields are damaged is a struct without them: it records no shapes)
            self.shapes_recorded |= any(a is not None and len(a.input_dims) > 0
                                        for a in (getattr(e, "args", None) for e in ops))
        kept = list(compress(piece, map(_READ_CATS.__contains__, cats)))
        if not kept:
            return
        phs = list(map(_PH, kept))
        if phs.count("X") != len(phs):
            kept = list(compress(kept, map(operator.eq, phs, repeat("X"))))
            if not kept:
                return
        n = len(kept)
        cats = list(map(_CAT, kept))
        cls = np.fromiter(map(_CLASS.__getitem__, cats), dtype=np.int8, count=n)
        times, times_bad, times_missing = exact_ns(list(map(_TS, kept)) + list(map(_DUR, kept)))
        start, start_bad, dur_ns, dur_bad = times[:n], times_bad[:n], times[n:], times_bad[n:]
        dur_bad &= ~times_missing[n:]  # no dur: 0
        huge = (np.abs(start) > _TIME_SPAN) | (np.abs(dur_ns) > _TIME_SPAN)
        end = np.where(huge, 0, start + np.where(huge, 0, dur_ns))
        times_of = {"start": start, "start!": start_bad, "end": end, "end!": start_bad | dur_bad | huge}
        required = ~times_missing[:n]
        names = list(map(_NAME, kept))
        if not set(map(type, names)) <= {str}:
            names = [("[unnamed]" if k == 2 else "?") if v is None else v if type(v) is str else str(v)
                     for v, k in zip(names, cls.tolist())]
        if max(map(len, names)) > MAX_NAME:  # no real name is that long: cut, and say so
            self.cut_names += sum(len(v) > MAX_NAME for v in names)
            names = [v if len(v) <= MAX_NAME else v[:MAX_NAME] + "…" for v in names]
        counts = np.bincount(cls, minlength=4)
        fields: dict[int, tuple[np.ndarray | None, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]] = {}
        for c in np.flatnonzero(counts).tolist():  # a class's fields are present on all its events, mostly
            where = None if counts[c] == n else np.flatnonzero(cls == c)
            events = kept if where is None else list(map(kept.__getitem__, where.tolist()))
            got = {}
            if c != 2:
                args = list(map(_ARGS, events))
                for key, none in _ARG_FIELDS[c]:
                    try:
                        values = list(map(_ARG_GETTERS[key], args))
                    except AttributeError:  # an event without args
                        values = list(map(getattr, args, repeat(key), repeat(None)))
                    got[key] = _ints(values, none)
            if c in (1, 2):
                got["pid"] = _ints(list(map(_PID, events)), 0)
                got["tid"] = _ints(list(map(_TID, events)), 0)
            a, b = ("device", "stream") if c in (0, 3) else ("pid", "tid")
            lacking = got[a][2] | got[b][2]
            if lacking.any():
                required[lacking if where is None else where[lacking]] = False
            fields[c] = (where, got)
        if counts[3]:
            self.syncs_seen += int(counts[3])
            wait = np.fromiter(map(operator.eq, names, repeat(STREAM_WAIT)), dtype=bool, count=n)
            cls[(cls == 3) & ~wait] = -1
        if not required.all():
            for cat, k in Counter(compress(cats, (~required & (cls >= 0)).tolist())).items():
                self.skipped[cat] += k
            cls[~required] = -1
        named = (cls == 0) | (cls == 1)
        if named.all():
            name_id = np.fromiter(map(self.ids.__getitem__, names), dtype=np.int64, count=n)
        else:
            name_id = np.full(n, -1, dtype=np.int64)
            name_id[named] = np.fromiter(map(self.ids.__getitem__, compress(names, named.tolist())),
                                         dtype=np.int64, count=int(named.sum()))
        for c, (where, got) in fields.items():
            mask = cls == c
            if not mask.any():
                continue
            sub = mask if where is None else mask[where]
            part = {k: _flagged(v[mask]) if k.endswith("!") else v[mask] for k, v in times_of.items()} \
                if c != 3 else {"start": start[mask], "start!": _flagged(start_bad[mask])}
            for key, (values, bad, _) in got.items():
                col = "corr" if key == "correlation" else key
                part[col], part[col + "!"] = values[sub], _flagged(bad[sub])
                if c != 3:  # ids and threads in 32 bits where they fit (the joined column too)
                    part[col] = narrow_ids(part[col])
            if c in (0, 1):
                part["name_id"] = narrow_ids(name_id[mask])
            if c == 0:
                kind = np.fromiter(map(_KIND.__getitem__, compress(cats, mask.tolist())), dtype=np.int8,
                                   count=part["start"].size)
                if self.ids.copies:  # graph memcpy-node kernels: memcpys
                    copies = (kind == ActivityKind.KERNEL) & self.ids.copy_mask()[part["name_id"]]
                    kind[copies] = ActivityKind.MEMCPY
                    self.copy_kernels += int(copies.sum())
                part["kind"] = kind
            if c == 2:
                part["name"] = np.array(list(compress(names, mask.tolist())), dtype=object)
            self.parts[c].append(part)

    def finish(self, head: dict[str, Any], damaged: list[str]) -> _Events:
        self.skipped.update(damaged)
        big = sum(len(p["start"]) for parts in self.parts.values() for p in parts) >= heap.TRIM_ROWS
        cols = {}
        for c, parts in self.parts.items():
            # (big: the pieces' pages handed back as they are let go: their many small arrays
            # would sit in the heap, where the joined columns and the frames' could not reuse them)
            cols[c] = _join(parts, _PART_COLUMNS[c], trim=big)
        rebased = _rebase(cols)
        g, k, r, w = cols[0], cols[1], cols[2], cols[3]
        bad = {
            "activities": {"start": g.pop("start!"), "end": g.pop("end!"), "device": g.pop("device!"),
                           "stream": g.pop("stream!"), "corr": g.pop("corr!")},
            "api": {"start": k.pop("start!"), "end": k.pop("end!"), "tid": k.pop("pid!") | k.pop("tid!"),
                    "corr": k.pop("corr!")},
            "nvtx": {"start": r.pop("start!"), "end": r.pop("end!"), "tid": r.pop("pid!") | r.pop("tid!")},
            "syncs": {"start": w.pop("start!"), "device": w.pop("device!"), "stream": w.pop("stream!")},
        }
        return _Events(gpu=g, calls=k, ranges=r, waits=w, bad=bad, strings=self.ids.strings,
                       syncs_seen=self.syncs_seen, copy_kernels=self.copy_kernels, cut_names=self.cut_names,
                       operators=self.operators, python_functions=self.python_functions,
                       shapes_recorded=self.shapes_recorded, skipped=self.skipped,
                       head=head, rebased_ns=rebased)


_CAT, _PH, _NAME, _ARGS, _TS, _DUR, _PID, _TID = (operator.attrgetter(f) for f in (
    "cat", "ph", "name", "args", "ts", "dur", "pid", "tid"))
_ARG_GETTERS = {k: operator.attrgetter(k) for k in ("device", "stream", "correlation")}
#: The ``args`` fields read of each class (GPU work, calls, -, syncs), and the value of one absent.
_ARG_FIELDS = {0: (("device", 0), ("stream", 0), ("correlation", -1)), 1: (("correlation", -1),),
               3: (("device", 0), ("stream", 0))}
#: The longest name kept whole (a C++ kernel signature runs to some 10,000 characters); a longer
#: one is cut, with a warning, so that no table of names grows with a damaged trace's strings.
MAX_NAME = 1 << 16
#: Times past this many ns (either way) are damage whatever else they are: end = start + dur
#: stays inside int64.
_TIME_SPAN = 2**62
_TIMES = ("start", "start!", "end", "end!")
_PART_COLUMNS = {
    0: (*_TIMES, "device", "device!", "stream", "stream!", "corr", "corr!", "name_id", "kind"),
    1: (*_TIMES, "pid", "pid!", "tid", "tid!", "corr", "corr!", "name_id"),
    2: (*_TIMES, "pid", "pid!", "tid", "tid!", "name"),
    3: ("start", "start!", "device", "device!", "stream", "stream!"),
}


def _flagged(bad: np.ndarray) -> np.ndarray | None:
    """A piece's column of damaged values (``!``), or None when it has none (most pieces)."""
    return bad if bad.any() else None


def _join(parts: list[dict[str, np.ndarray | None]], names: tuple[str, ...], trim: bool = False
          ) -> dict[str, np.ndarray]:
    """The pieces' columns joined, each piece's column let go once joined (so that the joined
    trace never sits beside all of its pieces); with ``trim``, the heap's freed pages handed
    back after each column (the pieces' small arrays leave holes the joined columns cannot
    reuse). A column of damage flags is False where a piece had none (None); an id column is
    as wide as its widest piece's (int32 where every piece's fitted, gapscope.trace.frames)."""
    sizes = [p["start"].size for p in parts]
    n_rows = sum(sizes)
    out: dict[str, np.ndarray] = {}
    for n in names:
        cols = [p.pop(n) for p in parts]
        if n.endswith("!"):
            if all(c is None for c in cols):
                out[n] = np.zeros(n_rows, dtype=bool)
            else:
                out[n] = np.concatenate([np.zeros(k, dtype=bool) if c is None else c for c, k in zip(cols, sizes)])
        elif cols:
            out[n] = np.concatenate(cols)
        else:
            out[n] = np.zeros(0, dtype=object if n == "name" else np.int8 if n == "kind" else np.int64)
        del cols
        if trim:
            heap.give_back_freed_pages()
    parts.clear()
    return out


def _rebase(cols: dict[int, dict[str, np.ndarray]]) -> int:
    """Take whole seconds off every time when the trace's clock runs past the time limit
    (Kineto before ``baseTimeNanoseconds`` counted from 1970): the earliest time rounded down to
    REBASE_NS, so every time stays exact to the nanosecond. Returns what was taken off."""
    lo, hi = None, None
    for col in cols.values():
        for t in ("start", "end") if "end" in col else ("start",):
            ok = ~col[t + "!"] & (col[t] >= 0)
            if ok.any():
                v = col[t][ok]
                lo = int(v.min()) if lo is None else min(lo, int(v.min()))
                hi = int(v.max()) if hi is None else max(hi, int(v.max()))
    if hi is None or hi <= TIME_LIMIT_NS:
        return 0
    base = lo // REBASE_NS * REBASE_NS
    for col in cols.values():
        for t in ("start", "end") if "end" in col else ("start",):
            ok = ~col[t + "!"]
            col[t] = np.where(ok, col[t] - base, col[t])
    return base


def _read(path: Path, head_only: bool = False) -> tuple[dict[str, Any], _Events | None]:
    """The trace's top-level fields, and (unless ``head_only``) its events; one clear line for
    a file that cannot be read."""
    check_not_sparse(path)
    collecting = gc.isenabled()
    gc.disable()  # the read makes millions of objects and no cycles: collections only cost time
    try:
        fh, read = open_source(path)
        with fh:
            reader = _Reader()
            stream = Stream(path, read, _TAGGED, reader.wants_op_args)
            if not stream.top():
                return stream.head, None
            if head_only:
                return stream.head, None
            for piece in stream.pieces():
                reader.add(piece)
            return stream.head, reader.finish(stream.head, stream.damaged)
    except TooLarge as exc:
        raise GapscopeError(f"{path}: {exc}: not a PyTorch profiler trace gapscope reads") from None
    except (*_READ_ERRORS, RecursionError) as exc:
        if isinstance(exc, RecursionError):
            raise GapscopeError(f"{path}: JSON nested more than {MAX_DEPTH} levels deep: not a PyTorch "
                                "profiler trace gapscope reads") from None
        raise _unreadable(path, exc) from None
    finally:
        if collecting:
            gc.enable()


def _unreadable(path: Path, exc: BaseException) -> GapscopeError:
    """One line for a trace that cannot be parsed, with the parser's own first line."""
    from gapscope.inputs import READS

    first = (str(exc).splitlines() or [type(exc).__name__])[0] or type(exc).__name__
    return GapscopeError(f"{path}: cannot read the PyTorch profiler trace ({first}): the file is "
                         f"truncated, or not a JSON (or gzipped JSON) trace (gapscope reads {READS})")


def _inductor_launches(ev: _Events, launch_ids: list[int]) -> int:
    """The eager launches of torch.compile's Triton code among the events: kernels of Inductor's
    names (:data:`INDUCTOR_KERNEL`, one match per distinct name) that a kernel launch call of
    ``launch_ids`` launched (a graph replay's kernels run inside no record function of Inductor's)."""
    ids = [i for i, name in enumerate(ev.strings) if INDUCTOR_KERNEL.match(name)]
    if not ids:
        return 0
    kernels = np.isin(ev.gpu["name_id"], ids) & (ev.gpu["kind"] == ActivityKind.KERNEL)
    launches = ev.calls["corr"][np.isin(ev.calls["name_id"], launch_ids)]
    return int(np.isin(ev.gpu["corr"][kernels], launches).sum())


#: Words that already name a GPU's vendor (or a line of it) in a model name.
_VENDOR_WORDS = re.compile(r"\b(NVIDIA|AMD|Intel|Tesla|Quadro|GeForce|TITAN|Radeon|Instinct)\b", re.IGNORECASE)


def _gpu_names(head: dict[str, Any], devices: np.ndarray, call_names: Iterable[str]) -> dict[int, str]:
    """GPU names by device id, from every place the trace records them: ``deviceProperties``
    (the model), the runtime versions it records (``hip_runtime_version``, ``roctracer_version``:
    AMD; ``cuda_runtime_version``, ``cupti_version``: NVIDIA) or, failing those, its API calls
    (``hip*``: AMD, ``cuda*``/``cu*``: NVIDIA); the vendor is put before a model that lacks it."""
    vendor = None
    if any(k in head for k in ("hip_runtime_version", "hip_driver_version", "roctracer_version",
                               "rocprofiler_version")):
        vendor = "AMD"
    elif any(k in head for k in ("cuda_runtime_version", "cuda_driver_version", "cupti_version")):
        vendor = "NVIDIA"
    else:
        for n in call_names:
            if n.startswith("hip"):
                vendor = "AMD"
                break
            if n.startswith("cu"):
                vendor = "NVIDIA"
                break
    out: dict[int, str] = {}
    props = head.get("deviceProperties")
    for d in props if isinstance(props, list) else ():
        if isinstance(d, dict) and type(d.get("id")) is int and 0 <= d["id"] < 2**31:
            name = str(d.get("name", "")).strip()
            if not name:  # ROCm's Kineto may record no name: its compute capability stands in
                cc = (d.get("computeMajor"), d.get("computeMinor"))
                name = (f"GPU (compute {cc[0]}.{cc[1]}, model not recorded)" if all(type(c) is int for c in cc)
                        else "GPU (model not recorded)")
            if vendor and not _VENDOR_WORDS.search(name):
                name = f"{vendor} {name}"
            out[d["id"]] = name
    if not out and vendor:
        for d in np.unique(devices).tolist():
            if 0 <= d < 2**31:
                out[int(d)] = f"{vendor} GPU (model not recorded)"
    return out


class Kineto:
    """An open PyTorch profiler trace: its meta data, its frames on demand (the events are parsed
    on a load; once its frames are built only what name lookups read is kept, so that an
    analysis does not hold the trace twice, and a later load parses them again), and name
    lookups that answer until :meth:`close`."""

    format = FORMAT

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._events: _Events | None = None
        self._closed = False
        head, _ = _read(self.path, head_only=True)
        self.meta = self._meta(head, {})

    def _meta(self, head: dict[str, Any], gpus: dict[int, str], operators: int | None = None,
              launch_calls: int | None = None, other_calls: int | None = None,
              inductor_launches: int | None = None) -> TraceMeta:
        schema = head.get("schemaVersion")
        schema = schema if isinstance(schema, (int, str)) and not isinstance(schema, bool) else None
        return TraceMeta(path=str(self.path), format=FORMAT, nsys_version=None,
                         export_schema=None if schema is None else str(schema),
                         tables=frozenset({"traceEvents"}), gpu_names=gpus, operators=operators,
                         launch_calls=launch_calls, other_calls=other_calls, inductor_launches=inductor_launches)

    # -- the file ---------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed, self._events = True, None  # the parsed events go with the trace

    def _live(self) -> _Events:
        """The events, read (again, after a load let most of them go) when not held whole."""
        if self._closed:
            raise ClosedTraceError(f"{self.path}: the trace is closed; read it inside its `with` block")
        if self._events is None or not self._events.whole:
            head, events = _read(self.path)
            if events is None:
                from gapscope.inputs import READS

                raise GapscopeError(f"{self.path}: a JSON object without traceEvents: not a PyTorch "
                                    f"profiler trace (gapscope reads {READS})")
            self._events = events
            ids, calls = np.unique(events.calls["name_id"], return_counts=True)
            names = [events.strings[i] for i in ids.tolist()]
            by_base = list(zip(map(base_name, names), calls.tolist()))
            launch_calls = sum(n for b, n in by_base if b in KERNEL_LAUNCH_CALLS)
            launch_ids = [i for i, (b, _) in zip(ids.tolist(), by_base) if b in KERNEL_LAUNCH_CALLS]
            graph_calls = sum(n for b, n in by_base if b in GRAPH_LAUNCH_CALLS)
            self.meta = self._meta(head, _gpu_names(head, events.gpu["device"], names), events.operators,
                                   launch_calls, int(calls.sum()) - launch_calls - graph_calls,
                                   _inductor_launches(events, launch_ids))
        return self._events

    def _named(self) -> _Events:
        """The events as name lookups read them: those held (whole or not), else read."""
        if self._events is not None and not self._closed:
            return self._events
        return self._live()

    def row_counts(self) -> RowCounts:
        """How many bytes of JSON the trace holds (gapscope.trace.kineto_json.json_size), its
        only count known before the stream is read."""
        try:
            return RowCounts(FORMAT, json_bytes=json_size(self.path))
        except OSError as exc:
            raise _unreadable(self.path, exc) from None

    # -- frames -----------------------------------------------------------------------------
    def load(self, *, syncs: bool = False, all_calls: bool = False) -> TraceFrames:
        """The frames an analysis needs (``syncs``: also the stream-wait records; ``all_calls``:
        every CUDA call, not only those that can launch or synchronize); every activity's name
        id either way."""
        ev = self._live()
        g, c, r = ev.gpu, ev.calls, ev.ranges
        if not (g["kind"] == ActivityKind.KERNEL).any():
            what = ("its GPU work has no kernel" if g["kind"].size else
                    "none of its events is a PyTorch profiler (Kineto) kernel, gpu_memcpy or gpu_memset")
            raise GapscopeError(f"{self.path}: a trace (traceEvents) without GPU kernels: {what}; profile "
                                "with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
        warnings = self._warnings(ev)
        ok_pid = ~ev.bad["api"]["tid"]
        pids, counts = np.unique(c["pid"][ok_pid & (c["pid"] >= 0)], return_counts=True)
        host = int(pids[np.argmax(counts)]) if pids.size else 0
        if pids.size > 1:
            warnings.append(f"CUDA calls from {pids.size} processes in one PyTorch profiler trace: "
                            f"its GPU events do not say which process launched them, so they are "
                            f"matched to calls by correlation id alone (as process {host})")
        rows = g["kind"].size + c["start"].size
        try:
            return self._frames(ev, host, pids.size > 1, ok_pid, warnings, syncs, all_calls)
        finally:  # (its columns were taken as the frames were made: a later load reads the file again)
            self._events = ev.named_only()
            if rows >= heap.TRIM_ROWS:  # the events' columns, let go: the analysis starts from what it holds
                heap.give_back_freed_pages()

    def _frames(self, ev: _Events, host: int, several: bool, ok_pid: np.ndarray, warnings: list[str],
                syncs: bool, all_calls: bool) -> TraceFrames:
        """:meth:`load`'s frames, each of the events' columns let go as its frame column is made
        and the frames holding the arrays made for them (``copy=False``: a block per column, not
        one copy of them all), so that the trace is not held twice while the frames are built."""
        g, c, r, bad = ev.gpu, ev.calls, ev.ranges, ev.bad
        # GPU work, stacked like nsys's tables: kernels, then copies, then memsets.
        # (the ids made here in 32 bits where they fit, as the frames keep them: gapscope.trace.frames)
        order = np.argsort(g["kind"], kind="stable")
        kind = g["kind"][order]
        narrow = id_dtype(0, kind.size - 1)
        cuts = np.flatnonzero(kind[1:] != kind[:-1]) + 1  # where each kind's rows begin, counted from 0
        row = np.concatenate([np.arange(k, dtype=narrow) for k in np.diff(np.r_[0, cuts, kind.size]).tolist()])
        activities = pd.DataFrame({
            "row": row, "start": g.pop("start")[order], "end": g.pop("end")[order],
            "device": g.pop("device")[order], "stream": g.pop("stream")[order],
            "proc": np.full(kind.size, host, dtype=id_dtype(host, host)),
            "corr": g.pop("corr")[order], "kind": kind.astype(np.int8, copy=False)},
            copy=False)[[*ACTIVITY_COLUMNS, "kind"]]
        del row, kind
        activities["name_id"] = self._short_ids(ev)[g["name_id"][order]]
        cells = {"activities": {k: _cells(v[order]) for k, v in bad.pop("activities").items()}}
        del order
        keep = np.ones(c["start"].size, dtype=bool)
        if not all_calls:
            quiet = [i for i, s in enumerate(ev.strings) if base_name(s) in QUIET_CALLS]
            keep = ~np.isin(c["name_id"], quiet)
        pid = c.pop("pid")
        proc = np.full(pid.size, host, dtype=np.int64) if several else np.where(ok_pid & (pid >= 0), pid, -1)
        tid = _thread(pid, c.pop("tid"))
        del pid
        every = bool(keep.all())
        calls = {"start": c.pop("start"), "end": c.pop("end"), "tid": tid, "corr": c.pop("corr"),
                 "name_id": c.pop("name_id"), "proc": proc}
        del tid, proc
        if not every:  # the quiet calls left out a column at a time (not a second frame of them all)
            for k in calls:
                calls[k] = calls[k][keep]
        api = pd.DataFrame(calls, copy=False)
        del calls
        cells["api"] = {k: _cells(v if every else v[keep]) for k, v in bad.pop("api").items()}
        nvtx = pd.DataFrame({"start": r["start"], "end": r["end"], "tid": _thread(r["pid"], r["tid"]),
                             "event_type": np.full(r["start"].size, NVTX_PUSH_POP, dtype=np.int64),
                             "domain_id": np.zeros(r["start"].size, dtype=np.int64), "name": r["name"]})
        w = ev.waits if syncs else {k: v[:0] for k, v in ev.waits.items()}
        sync_frame = pd.DataFrame({**w, "proc": np.full(w["start"].size, host, dtype=np.int64)})[list(SYNC_COLUMNS)]
        cells["nvtx"] = {k: _cells(v) for k, v in bad["nvtx"].items()}
        cells["syncs"] = {k: _cells(v if syncs else v[:0]) for k, v in bad["syncs"].items()}
        return build_frames(self.meta, activities=activities, api=api, nvtx=nvtx, syncs=sync_frame,
                            names=self, warnings=warnings, cells=cells)

    def _warnings(self, ev: _Events) -> list[str]:
        out = ["read from a PyTorch profiler trace: ranges are its user_annotation events "
               "(record_function, ProfilerStep#N) on their CPU threads, without NVTX domains; "
               "see docs/formats.md"]
        schema = self.meta.export_schema
        if schema is not None and schema not in {str(v) for v in KNOWN_SCHEMA_VERSIONS}:
            checked = ", ".join(map(str, KNOWN_SCHEMA_VERSIONS))
            out.append(f"PyTorch profiler trace schema {schema} is not one gapscope was checked on ({checked})")
        if ev.rebased_ns:
            out.append(f"the trace's clock runs past {TIME_LIMIT_NS:,} ns (Kineto before "
                       f"baseTimeNanoseconds counted from 1970): every time is taken "
                       f"{ev.rebased_ns // _SECOND:,} s earlier (whole seconds; see docs/formats.md)")
        if ev.syncs_seen == 0:
            out.append("no cuda_sync events in this PyTorch profiler trace: waits on other streams "
                       "are not seen, so the gaps they cause count as pipeline, not dependency "
                       "(record them with experimental_config=_ExperimentalConfig("
                       "enable_cuda_sync_events=True))")
        if ev.python_functions:
            out.append(f"{ev.python_functions:,} python_function events: the profiler traced Python "
                       "(with_stack=True), whose cost (0.1-0.9 us an event, measured) the predicted "
                       "untraced time does not take off (its torch.profiler calibration is without it), "
                       "so the predicted graph speedups may be high; see docs/metrics.md")
        if ev.shapes_recorded:
            out.append("the profiler recorded operator shapes (record_shapes=True: cpu_op events carry "
                       "Input Dims), which adds to its cost (0.1-0.7 us an operator, measured) beyond "
                       "what the predicted untraced time takes off (its torch.profiler calibration is "
                       "without them), so the predicted graph speedups may be high; see docs/metrics.md")
        n = self.meta.inductor_launches
        if n:
            out.append(f"{n:,} eager launches of torch.compile's Triton code (Inductor's triton_*_fused "
                       "kernels): under the profiler Inductor wraps each in a record function, whose cost "
                       "the predicted untraced time takes off as measured on two compiled programs (5.0-6.4 "
                       "us a launch on one host); see docs/metrics.md")
        if ev.cut_names:
            out.append(f"{ev.cut_names} event names longer than {MAX_NAME:,} characters were cut to that length")
        if ev.copy_kernels:
            out.append(f"{ev.copy_kernels} kernel events named memcpyNN_post (the CUDA driver's kernels "
                       "for the memcpy nodes of CUDA graphs, which nsys records as memcpys) are "
                       "counted as memcpys")
        for cat, n in sorted(ev.skipped.items()):
            out.append(f"{n} {cat} events without the fields gapscope reads (ts, dur, args.device, "
                       "args.stream, pid, tid) were left out")
        ok = ~ev.bad["api"]["tid"]
        okr = ~ev.bad["nvtx"]["tid"]
        if (ev.calls["pid"][ok] >= 1 << _THREAD_BITS).any() or (ev.calls["tid"][ok] >= 1 << _THREAD_BITS).any() \
                or (ev.ranges["tid"][okr] >= 1 << _THREAD_BITS).any():
            out.append("process or thread ids of 2**24 and above are shown modulo 2**24")
        return out

    def _short_ids(self, ev: _Events) -> np.ndarray:
        """For every string id, the id of its short kernel name (added to the string table);
        computed once per distinct kernel name, on first use."""
        if ev.short is not None:
            return ev.short
        out = np.arange(len(ev.strings), dtype=np.int64)  # (in 32 bits below, as the frames keep ids)
        kernel_ids = np.unique(ev.gpu["name_id"][ev.gpu["kind"] == ActivityKind.KERNEL])
        index = {s: i for i, s in enumerate(ev.strings)}
        for i in kernel_ids.tolist():
            short = short_kernel_name(ev.strings[i])
            if short not in index:
                index[short] = len(ev.strings)
                ev.strings.append(short)
            out[i] = index[short]
        ev.short = narrow_ids(np.concatenate([out, np.arange(out.size, len(ev.strings), dtype=np.int64)]))
        return ev.short

    # -- names (gapscope.trace.frames.Names) --------------------------------------------------
    def lookup(self, ids: Iterable[int]) -> dict[int, str]:
        """Map each string id to its text ('[unknown]' where there is none)."""
        strings = self._named().strings
        return {int(i): strings[int(i)] if 0 <= int(i) < len(strings) else "[unknown]" for i in ids}

    def activity_name_ids(self, kind: ActivityKind, rows: np.ndarray) -> np.ndarray:
        """The short-name id of kernels by their row among the trace's kernels (-1 otherwise)."""
        ev = self._named()
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(rows.size, -1, dtype=np.int64)
        if kind is not ActivityKind.KERNEL:
            return out
        mine = np.flatnonzero(ev.gpu["kind"] == ActivityKind.KERNEL)  # file order = row order
        inside = (rows >= 0) & (rows < mine.size)
        out[inside] = self._short_ids(ev)[ev.gpu["name_id"][mine[rows[inside]]]]
        return out


def _cells(bad: np.ndarray) -> np.ndarray:
    """Cell codes (gapscope.trace.validation.Cell) of one column: NOT_INTEGER where ``bad``, OK
    (0) elsewhere; made in 8 bits (no wider temporary a row)."""
    out = bad.astype(np.int8)
    out *= int(Cell.NOT_INTEGER) - int(Cell.OK)
    out += int(Cell.OK)
    return out


def _thread(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """nsys's globalTid layout: the process above bit 24, the thread below; -1 (out of range:
    the row is damage) where either is negative. Made in place (one 64-bit temporary a row)."""
    mask = (1 << _THREAD_BITS) - 1
    out = pid.astype(np.int64)  # (pid and tid read in 32 bits where they fit)
    out &= mask
    out <<= _THREAD_BITS
    low = tid.astype(np.int64)
    low &= mask
    out |= low
    del low
    out[(pid < 0) | (tid < 0)] = -1
    return out
