"""Streaming a PyTorch profiler trace's JSON: its top-level fields and its ``traceEvents``, a
piece at a time, in bounded memory (gapscope.trace.kineto makes the frames).

The decompressed bytes are read :data:`CHUNK` at a time. Inside ``traceEvents`` a piece is the
run of whole events up to the last ``}``, ``,``, ``{`` seen (a guess at where one event ends and
the next begins) and is decoded by msgspec into typed :class:`Event` structs in one call; the
guess is proved by the decode itself: a piece that is not a run of whole array elements is not
valid JSON once wrapped in ``[`` ``]``. When the guess fails (an event holding ``}, {`` in a
nested array, or damage) the bytes are scanned structurally (:class:`Scanner`: quotes, escapes,
brackets outside strings, vectorized with numpy) to find the true boundary. Everything outside
``traceEvents`` (before or after it) goes through the scanner, so the top-level fields gapscope
reads (``schemaVersion``, ``deviceProperties``, ...) are found wherever they are, in one pass.

Bounds, each refused in one line (GapscopeError, exit 2): nesting deeper than
:data:`MAX_DEPTH`, a string or one event longer than :data:`MAX_ITEM` bytes, a top-level field
gapscope reads longer than :data:`MAX_ITEM`.
"""

from __future__ import annotations

import decimal
import operator
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from itertools import repeat
from pathlib import Path
from typing import IO, Any, ClassVar, Union

import msgspec
import numpy as np

from gapscope.errors import GapscopeError

#: Decompressed bytes read at a time: small enough that a chunk, the piece copied from it and
#: the structs decoded from that stay in the heap's reused blocks rather than mappings faulted in
#: anew each time (512 KiB: 8.3-8.9 CPU s at 1M kernels where 2 MiB took 10.1-10.5, with half
#: the page faults; docs/performance.md).
CHUNK = 512 << 10
#: The longest event, string or top-level field value read, in bytes.
MAX_ITEM = 64 << 20
#: Bytes scanned at a time outside traceEvents.
WINDOW = 1 << 16
#: The deepest nesting of arrays and objects read (Kineto's events nest 5 deep).
MAX_DEPTH = 200
GZIP_MAGIC = b"\x1f\x8b"
#: Top-level fields kept (their values decoded as plain JSON).
HEAD_FIELDS = frozenset({
    "schemaVersion", "deviceProperties", "baseTimeNanoseconds", "displayTimeUnit", "traceName",
    "distributedInfo", "cuda_runtime_version", "cuda_driver_version", "cupti_version",
    "hip_runtime_version", "hip_driver_version", "roctracer_version", "rocprofiler_version",
})


class Args(msgspec.Struct, gc=False):
    """The ``args`` fields of a GPU event or call that gapscope reads (absent: None). A stream
    may be text: ROCm's Kineto writes a HIP call's as ``"0x0"`` (read only for GPU events, whose
    text streams the reader treats as damaged values)."""

    device: int | None = None
    stream: int | str | None = None
    correlation: int | None = None
    #: an operator's argument shapes (recorded with record_shapes=True) as their JSON text (empty:
    #: none recorded)
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")


class Event(msgspec.Struct, gc=False):
    """One trace event, the fields gapscope reads (absent: their default); ``ts`` and ``dur``
    stay as their JSON text, parsed exactly later (:func:`exact_ns`)."""

    ph: str | None = None
    cat: str | None = None
    name: Any = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = None  # type: ignore[assignment]
    dur: msgspec.Raw = None  # type: ignore[assignment]
    args: Args | None = None


class _Loose(msgspec.Struct, gc=False):
    cat: Any = None


class _Tagged(msgspec.Struct, tag_field="cat", gc=False):
    """An event told by its ``cat`` (msgspec's tagged union): the categories skipped decode into
    subclasses without fields, read past without making anything; those read, into subclasses
    with :class:`Event`'s fields. ``cat`` is each subclass's class attribute, so a reader takes
    it from either kind of struct alike."""

    cat: ClassVar[str | None] = None


#: Event's fields but ``cat`` (the tag), for the categories read.
_READ_FIELDS = [(f.name, f.type, f.default) for f in msgspec.structs.fields(Event) if f.name != "cat"]


def tagged_decoder(read: Iterable[str], skipped: Iterable[str]) -> msgspec.json.Decoder:
    """A decoder of a piece of events (a JSON array) whose every event has a ``cat`` among
    ``read`` (decoded with :class:`Event`'s fields) or ``skipped`` (decoded into structs without
    fields); it raises msgspec.ValidationError on any other event (no ``cat``, another one, a
    field of another type than Event's), which :class:`Stream` then decodes the full way."""
    types = [msgspec.defstruct(f"_Read_{i}", _READ_FIELDS, bases=(_Tagged,), namespace={"cat": c}, tag=c,
                               gc=False) for i, c in enumerate(read)]
    types += [type(f"_Skipped_{i}", (_Tagged,), {"cat": c}, tag=c) for i, c in enumerate(skipped)]
    return msgspec.json.Decoder(list[Union[tuple(types)]])  # type: ignore[valid-type]


_PIECE = msgspec.json.Decoder(list[Event])
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_ONE = msgspec.json.Decoder(Event)
_LOOSE = msgspec.json.Decoder(_Loose)
_ANY = msgspec.json.Decoder()
_WS = b" \t\r\n"
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, OverflowError, ValueError)


try:
    from isal import isal_zlib
except ImportError:  # pragma: no cover - isal is a dependency
    isal_zlib = None
#: What an inflater raises on damaged gzip data.
INFLATE_ERRORS: tuple[type[BaseException], ...] = (zlib.error,) + ((isal_zlib.error,) if isal_zlib else ())


def _inflater() -> Callable[[], Any]:
    """The fastest gzip inflater installed: ISA-L's (python-isal, 2-3x zlib's speed) or zlib."""
    if isal_zlib is not None:
        return lambda: isal_zlib.decompressobj(31)
    return lambda: zlib.decompressobj(31)  # pragma: no cover - isal is a dependency


class _Gunzip:
    """A gzip file's decompressed bytes, at most ``n`` a call (a bomb never fills memory);
    several gzip members are read one after the other, as gzip.open does."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh, self.make = fh, _inflater()
        self.d, self.pending, self.done = self.make(), b"", False

    def read(self, n: int) -> bytes:
        out = b""
        while n > 0 and not out and not self.done:  # (zlib's max_length 0 means no bound)
            if self.d.eof:
                rest = self.d.unused_data
                if not rest.strip(b"\x00"):
                    rest = self.fh.read(1 << 20)
                    if not rest.strip(b"\x00"):
                        self.done = True
                        break
                self.d = self.make()
                self.pending = rest
            data = self.d.unconsumed_tail or self.pending
            self.pending = b""
            if not data:
                data = self.fh.read(1 << 20)
                if not data:
                    raise EOFError("the gzip stream ends before its end marker (truncated)")
            out = self.d.decompress(data, n)
        return out


def open_source(path: Path) -> tuple[IO[bytes], Callable[[int], bytes]]:
    """The open file and a read(n) of its (decompressed) bytes."""
    fh = open(path, "rb")
    if fh.read(2) == GZIP_MAGIC:
        fh.seek(0)
        return fh, _Gunzip(fh).read
    fh.seek(0)
    return fh, fh.read


#: Compressed bytes inflated to learn a gzip file's compression ratio (:func:`json_size`), and
#: the most decompressed bytes made from them.
RATIO_SAMPLE = 1 << 20
RATIO_SAMPLE_OUT = 64 << 20


def json_size(path: Path) -> int:
    """How many bytes of JSON the trace holds, without reading it all: a plain file's size; a
    gzip file within :data:`RATIO_SAMPLE` bytes, what its first member inflates to (up to where a
    truncated or damaged one stops); a larger one, its ISIZE (its last 4 bytes: the decompressed
    size modulo 2**32, of its last member) raised by whole 2**32 to the value nearest the file's
    size times the compression ratio of its first :data:`RATIO_SAMPLE` bytes (exact for one
    member whose sampled ratio is within 2 GiB of the whole file's). OSError when the file
    cannot be read."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        if fh.read(2) != GZIP_MAGIC:
            return size
        fh.seek(max(size - 4, 0))
        isize = int.from_bytes(fh.read(4), "little")
        fh.seek(0)
        sample = fh.read(RATIO_SAMPLE)
    made, rest, d = 0, sample, None
    try:
        while rest.strip(b"\x00") and made < RATIO_SAMPLE_OUT:  # member after member, as the read goes
            d = _inflater()()
            made += len(d.decompress(rest, RATIO_SAMPLE_OUT - made))
            rest = d.unused_data if d.eof else b""
    except INFLATE_ERRORS:
        if len(sample) == size:
            return made  # damaged: the read says how; nothing more to count
    if d is None or (len(sample) == size and not d.unconsumed_tail):
        return made  # the whole file inflated (or all of it that can be)
    used = len(sample) - len(d.unconsumed_tail) - len(rest)
    guess = size * made / max(used, 1)
    return isize + (1 << 32) * max(round((guess - isize) / (1 << 32)), 0)


def check_not_sparse(path: Path) -> None:
    """Refuse a sparse file (gapscope.inputs.regular_file) before reading a byte of it."""
    from gapscope.inputs import regular_file

    if os.path.exists(path):  # else opening it says why
        regular_file(path)


# -- the structural scanner -----------------------------------------------------------------

_LUT = np.zeros(256, dtype=np.int8)
for _c in b"{[":
    _LUT[_c] = 1
for _c in b"}]":
    _LUT[_c] = -1
_STRUCT = np.zeros(256, dtype=bool)
for _c in b"{}[],:":
    _STRUCT[_c] = True


class TooLarge(Exception):
    """Bytes beyond a bound (:data:`MAX_DEPTH`, :data:`MAX_ITEM`); the message says which."""


class Scanner:
    """JSON structure over bytes given in order: where the brackets, commas and colons outside
    strings are and how deep each leaves the nesting. State carried between calls: depth,
    inside a string or not, an odd run of backslashes at the end, an open string's length."""

    def __init__(self, depth: int = 0) -> None:
        self.depth, self.in_string, self.odd_tail, self.open_len = depth, False, False, 0

    def scan(self, data: bytes | bytearray | memoryview) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions, characters, depth after each) of the structural characters of ``data``
        outside strings; TooLarge past MAX_DEPTH or MAX_ITEM; ValueError for a close without
        its open."""
        b = np.frombuffer(data, dtype=np.uint8)
        n = b.size
        quotes = np.flatnonzero(b == 34)
        slash = b == 92
        if quotes.size and (self.odd_tail or slash.any()):
            runs = np.flatnonzero(slash)
            if runs.size:
                cut = np.flatnonzero(np.diff(runs) != 1)
                starts = runs[np.r_[0, cut + 1]]
                ends = runs[np.r_[cut, runs.size - 1]]
                k = np.searchsorted(ends, quotes - 1)
                k = np.minimum(k, ends.size - 1)
                hit = ends[k] == quotes - 1
                length = ends[k] - starts[k] + 1 + np.where(starts[k] == 0, int(self.odd_tail), 0)
                escaped = hit & (length % 2 == 1)
            else:
                escaped = np.zeros(quotes.size, dtype=bool)
            if self.odd_tail:
                escaped |= (quotes == 0) & ~(slash[0] if n else False)
            quotes = quotes[~escaped]
        # the open string's length and the longest string closed here
        s0 = int(self.in_string)
        if quotes.size:
            opens = quotes[1 - s0::2] if s0 else quotes[0::2]
            closes = quotes[0::2] if s0 else quotes[1::2]
            first = int(closes[0]) + self.open_len if s0 and closes.size else 0
            inner = (closes[s0:] - opens[: closes.size - s0]) if closes.size > s0 else np.zeros(0, np.int64)
            longest = max(first, int(inner.max()) if inner.size else 0)
            end_in = (s0 + quotes.size) % 2 == 1
            self.open_len = (n - int(quotes[-1])) if end_in else 0
        else:
            longest, end_in = 0, bool(s0)
            self.open_len = self.open_len + n if s0 else 0
        if max(longest, self.open_len) > MAX_ITEM:
            raise TooLarge(f"a JSON string longer than {MAX_ITEM >> 20} MiB")
        self.in_string = end_in
        run = 0
        if n and b[-1] == 92:
            tail = np.flatnonzero(b != 92)
            run = n - 1 - int(tail[-1]) if tail.size else n + int(self.odd_tail)
        self.odd_tail = run % 2 == 1
        pos = np.flatnonzero(_STRUCT[b])
        if quotes.size and pos.size:
            inside = (np.searchsorted(quotes, pos) + s0) & 1
            pos = pos[inside == 0]
        elif s0:
            pos = pos[:0]
        chars = b[pos]
        depth = self.depth + np.cumsum(_LUT[chars], dtype=np.int64)
        if depth.size:
            if int(depth.min()) < 0:
                raise ValueError("a closing bracket without its opening one")
            if int(depth.max()) > MAX_DEPTH:
                raise TooLarge(f"JSON nested more than {MAX_DEPTH} levels deep")
            self.depth = int(depth[-1])
        return pos, chars, depth


# -- exact decimal times --------------------------------------------------------------------

_I64 = 2**63 - 1


def exact_ns(raws: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """JSON numbers (their text: msgspec.Raw or bytes) of microseconds as integer nanoseconds,
    exactly (rounded half to even below the nanosecond), as int64; where a value is none
    (None), not a number or outside int64 (``bad``, its value 0); and where it is none
    (``missing``). Written as Kineto writes them (or as plain integers) they are read in bulk
    (:func:`_kineto_ns`); otherwise column-wise by numpy's string functions, and exponents,
    signs and more decimals one by one."""
    n = len(raws)
    out = np.zeros(n, dtype=np.int64)
    if not n:
        return out, np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
    try:
        kineto = _kineto_ns(raws)  # (a None among them: TypeError from the join)
        if kineto is not None:
            return kineto, np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        missing = np.zeros(n, dtype=bool)
    except TypeError:
        missing = ~np.fromiter(map(operator.is_not, raws, repeat(None)), dtype=bool, count=n)
        raws = [b"x" if r is None else r for r in raws]
    a = np.array(b"\x00".join(raws).split(b"\x00"), dtype="S")
    length = np.strings.str_len(a)
    dot = np.strings.find(a, b".")
    frac = np.where(dot >= 0, length - dot - 1, 0)
    digits = np.strings.replace(a, b".", b"", 1)
    ndig = length - (dot >= 0) + (3 - frac)  # digits of the value in nanoseconds
    lead = a.view(np.uint8).reshape(n, -1)[:, 0] if a.itemsize else np.zeros(n, np.uint8)
    fast = (np.strings.isdigit(digits) & (frac <= 3) & ((dot != 0) & (dot != length - 1))
            & ((ndig <= 18) | ((ndig == 19) & (lead < ord("9")))) & ~missing)
    if fast.any():
        out[fast] = digits[fast].astype(np.int64) * (10 ** (3 - frac[fast]))
    bad = missing.copy()
    for i in np.flatnonzero(~fast & ~missing).tolist():  # exponents, signs, more decimals, damage
        value = _slow(bytes(raws[i]), 1000)
        if value is None:
            bad[i] = True
        else:
            out[i] = value
    return out, bad, missing


_INTS = msgspec.json.Decoder(list[int])


def _kineto_ns(raws: list[Any]) -> np.ndarray | None:
    """Nanoseconds of numbers all written as Kineto writes them (``123.456``: digits, a dot,
    three digits; at most :data:`_KINETO_DIGITS` before the dot) or all as plain non-negative
    integers of microseconds, in bulk: numpy reads the digits of every value at once (the
    integers: msgspec, as one JSON array). None when any value is written otherwise (exact_ns
    reads them column-wise then)."""
    n = len(raws)
    joined = b",".join(raws)
    if b"-" in joined or b"e" in joined or b"E" in joined or b"+" in joined:
        return None
    dots = joined.count(b".")
    if dots == 0:
        try:
            whole = np.array(_INTS.decode(b"[" + joined + b"]"), dtype=np.int64)
        except (msgspec.DecodeError, msgspec.ValidationError, OverflowError, ValueError):
            return None
        return whole * 1000 if whole.size == n and int(whole.max()) < 9_000_000_000_000_000 else None
    if dots != n:
        return None
    b = np.frombuffer(joined, dtype=np.uint8)
    at = np.flatnonzero(b == 46)
    if int(at[-1]) + 3 != b.size - 1:
        return None
    frac = b[at[:, None] + np.arange(1, 4)]
    after = b[np.minimum(at + 4, b.size - 1)]
    if not (((frac >= 48) & (frac <= 57)).all() and ((after[:-1] == 44).all())):
        return None
    first = np.empty(n, dtype=np.int64)  # where each value's whole part begins: after the comma
    first[0] = 0
    first[1:] = at[:-1] + 5
    length = at - first
    width = int(length.max())
    if int(length.min()) < 1 or width > _KINETO_DIGITS:
        return None
    at_digit = at[:, None] - np.arange(width, 0, -1)  # the width bytes before each dot
    digits = b[np.maximum(at_digit, 0)].astype(np.int64) - 48
    digits[at_digit < first[:, None]] = 0  # bytes of the value before
    if not ((digits >= 0) & (digits <= 9)).all():
        return None
    whole = digits @ 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return whole * 1000 + (frac.astype(np.int64) - 48) @ np.array([100, 10, 1], dtype=np.int64)


#: The most digits before the dot :func:`_kineto_ns` reads (microseconds below 10**15: the
#: nanoseconds stay inside int64); a longer number is read column-wise.
_KINETO_DIGITS = 15


def _slow(text: bytes, scale: int) -> int | None:
    """One JSON number's text times ``scale``, rounded half to even; None when it is not a
    number or its result leaves int64."""
    try:
        d = decimal.Decimal(text.decode("ascii"))
    except (decimal.InvalidOperation, UnicodeDecodeError, ValueError):
        return None
    if not d.is_finite() or d.adjusted() > 22:
        return None
    value = int((d * scale).to_integral_value(decimal.ROUND_HALF_EVEN))
    return value if -_I64 - 1 <= value <= _I64 else None


# -- the stream -----------------------------------------------------------------------------


class Stream:
    """One pass over a trace's JSON: :meth:`top` reads the top-level fields up to
    ``traceEvents``, :meth:`pieces` yields its events a list at a time and then reads the
    fields after it; those gapscope reads are in :attr:`head`."""

    def __init__(self, path: Path, read: Callable[[int], bytes], tagged: msgspec.json.Decoder | None = None,
                 detailed: Callable[[], bool] = lambda: True) -> None:
        self.path, self._read = path, read
        #: a :func:`tagged_decoder`, tried first on each piece unless ``detailed()`` says the
        #: reader still wants every event's fields (a sample of the skipped categories' args)
        self._tagged, self._detailed = tagged, detailed
        self.head: dict[str, Any] = {}
        self.saw_events = False
        self.damaged: list[str] = []  # the category of each event that could not be decoded
        self._buf = bytearray()
        self._eof = self._done = self._started = False
        self._scanner = Scanner(0)
        self._key: str | None = None  # the top-level key whose value is being read
        self._value: bytearray | None = None  # that value's bytes, for a field kept
        self._value_start = 0
        self._sep = -1  # the top-level "{" or "," before the key being read, while one is

    def _more(self) -> bool:
        if self._eof:
            return False
        data = self._read(CHUNK)
        if not data:
            self._eof = True
            return False
        self._buf += data
        return True

    # -- outside traceEvents --------------------------------------------------------------
    def top(self) -> bool:
        """Read top-level fields up to the start of ``traceEvents`` (True) or the object's end
        (False)."""
        while True:
            if not self._started:
                while not bytes(self._buf[:1]).strip() and self._more():
                    del self._buf[: len(self._buf) - len(bytes(self._buf).lstrip(_WS))]
                lead = bytes(self._buf[:1])
                if lead != b"{":
                    what = ("an array" if lead == b"[" else "empty" if not lead else "a JSON value")
                    raise GapscopeError(f"{self.path}: {what}, not a PyTorch profiler trace (an object "
                                        "with traceEvents)")
                self._started = True
            found = self._top_step()
            if found is not None:
                return found
            if not self._buf and not self._more():
                raise EOFError("the JSON ends before its top-level object closes (truncated)")

    def _top_step(self) -> bool | None:
        """Scan the next window of the buffer (WINDOW bytes: the fields before traceEvents are
        small, the chunk read with them is not)."""
        buf, sc = self._buf, self._scanner
        depth0 = sc.depth
        window = len(buf) if len(buf) <= WINDOW or self._sep >= 0 else WINDOW
        with memoryview(buf) as mv:
            pos, chars, depth = sc.scan(mv[:window])
        before = np.r_[depth0, depth[:-1]] if depth.size else depth
        for i in np.flatnonzero(before <= 1).tolist():
            p, c = int(pos[i]), int(chars[i])
            if before[i] == 0:
                if c != 0x7B or self._sep != -1 or self._key is not None:
                    raise ValueError("the top level is not one object")
                self._sep = p
            elif c == 0x3A:  # ":" after a key
                self._key = _key_before(buf, p)
                self._sep = -1
                self._value_start = p + 1
                self._value = bytearray() if self._key in HEAD_FIELDS else None
                if self._key == "traceEvents":
                    rest = bytes(buf[p + 1 : p + 65]).lstrip(_WS)
                    if not rest and not self._eof:  # its first byte is not read yet
                        self._sep = _sep_before(buf, p)
                        break
                    if rest[:1] == b"[":
                        start = buf.index(b"[", p + 1)
                        del buf[:start]  # the "[" stays: the placeholder before the first event
                        self._key, self.saw_events = None, True
                        self._scanner = Scanner(2)
                        return True
            elif c in (0x2C, 0x7D):  # "," or "}" closing a value
                self._close_value(buf, p)
                if c == 0x7D:
                    self._done = True
                    del buf[:]
                    return False
                self._sep = p
        if self._sep >= 0:  # a key is being read: keep it, scan it again with what follows
            whole = window == len(buf)
            del buf[: self._sep + 1]
            self._sep = 0
            buf[0:0] = b","
            self._scanner = Scanner(1)
            if len(buf) > MAX_ITEM:
                raise TooLarge(f"a top-level key longer than {MAX_ITEM >> 20} MiB")
            if whole and not self._more():
                raise EOFError("the JSON ends before its top-level object closes (truncated)")
            return None
        if self._value is not None:
            self._value += buf[self._value_start:window]
            if len(self._value) > MAX_ITEM:
                raise TooLarge(f"the top-level field {self._key} is longer than {MAX_ITEM >> 20} MiB")
        self._value_start = 0
        del buf[:window]
        return None

    def _close_value(self, buf: bytearray, p: int) -> None:
        if self._value is not None and self._key is not None:
            self._value += buf[self._value_start:p]
            try:
                self.head[self._key] = _ANY.decode(bytes(self._value))
            except _DECODE_ERRORS:
                pass  # a damaged field gapscope reads is as good as none
        self._key, self._value = None, None

    # -- traceEvents ----------------------------------------------------------------------
    # Inside the array buf[0] is a placeholder (the "[" or a separator before the next event),
    # which becomes "[" while a piece is decoded in place.
    def pieces(self) -> Iterator[list[Event]]:
        """The events of ``traceEvents`` a list at a time, then the rest of the object read
        (another ``traceEvents`` array's events too)."""
        while not self._array_end():
            piece = self._next_piece()
            if piece is not None:
                yield piece
        self._scanner = Scanner(1)
        if self.top():
            yield from self.pieces()

    def _array_end(self) -> bool:
        """True (and the array's "]" consumed) when the array ends next; else the buffer is
        left with the next event at buf[1]."""
        buf = self._buf
        while True:
            i, n = 1, len(buf)
            while i < n and buf[i] in _WS:
                i += 1
            if i < n:
                if buf[i] == 0x5D:
                    if buf[0] == 0x2C:  # the placeholder is the comma after the last event
                        raise ValueError("a comma before the end of traceEvents")
                    del buf[: i + 1]
                    return True
                del buf[: i - 1]
                return False
            del buf[1:]
            if not self._more():
                raise EOFError("the JSON ends inside traceEvents (truncated)")

    def _next_piece(self) -> list[Event] | None:
        buf = self._buf
        searched = 1
        while True:
            cut = _last_boundary(buf, searched)
            if cut is not None:
                end, nxt = cut
                events = self._decode(end)
                if events is not None:
                    self._drop(nxt - 1)
                    return events
                return self._scan_piece()
            if self._eof or len(buf) > MAX_ITEM:
                return self._scan_piece()
            searched = max(1, len(buf) - 8)
            if not self._more():
                return self._scan_piece()

    def _decode(self, end: int) -> list[Event] | None:
        """The events of ``buf[1:end]`` (whole events and the commas between), or None when
        those bytes are not that."""
        buf = self._buf
        keep = buf[0], buf[end]
        buf[0], buf[end] = 0x5B, 0x5D
        try:  # decoded in place: the events' ts and dur (msgspec.Raw) point into buf, which
            # _drop then leaves as it is (a new buffer takes the bytes after the piece)
            view = memoryview(buf)[: end + 1]
            if self._tagged is not None and not self._detailed():
                try:
                    return self._tagged.decode(view)
                except msgspec.ValidationError:
                    pass  # an event of another category, without one, or of other types: the full decode
            return _PIECE.decode(view)
        except msgspec.ValidationError:
            return self._one_by_one(bytes(view))
        except _DECODE_ERRORS:
            return None
        finally:
            buf[0], buf[end] = keep  # (in place: no resize, which the views would forbid)

    def _drop(self, upto: int) -> None:
        """Let the buffer start at ``upto``: a new buffer with the bytes from there (the old one
        may be held by the events decoded from it)."""
        self._buf = self._buf[upto:]

    def _one_by_one(self, piece: bytes) -> list[Event] | None:
        """A piece whose events do not all have the types gapscope reads: each event decoded
        on its own, those that fail counted (by category) and left out; but an event of a
        category skipped (the tagged decoder's structs without fields), whose fields are never
        read, is kept as that struct, as the tagged decode of its piece would have kept it."""
        try:
            raws = _RAWS.decode(piece)
        except _DECODE_ERRORS:
            return None
        out = []
        for raw in raws:  # only a piece holding an event of the wrong types comes here
            try:
                out.append(_ONE.decode(raw))
                continue
            except _DECODE_ERRORS:
                pass
            if self._tagged is not None:
                try:
                    out.append(self._tagged.decode(b"[" + bytes(raw) + b"]")[0])
                    continue  # (a category read whose fields fail here fails there too)
                except _DECODE_ERRORS:
                    pass
            try:
                cat = _LOOSE.decode(raw).cat
            except _DECODE_ERRORS:
                cat = None
            self.damaged.append(cat if isinstance(cat, str) else "?")
        return out

    def _scan_piece(self) -> list[Event] | None:
        """Find the true end of the whole events at the buffer's start by scanning, and decode
        them; ValueError when the bytes are not JSON values."""
        buf = self._buf
        while True:
            with memoryview(buf) as mv:
                pos, chars, depth = Scanner(2).scan(mv[1:])
            pos = pos + 1
            before = np.r_[2, depth[:-1]] if depth.size else depth
            level = before == 2
            close = np.flatnonzero(level & (chars == 0x5D))
            commas = np.flatnonzero(level & (chars == 0x2C))
            if close.size:
                commas = commas[commas < close[0]]
            if commas.size:
                stop = int(pos[commas[-1]])
                keep_from = stop
            elif close.size:
                stop = int(pos[close[0]])
                keep_from = stop - 1
            else:
                if len(buf) > MAX_ITEM:
                    raise TooLarge(f"an event of traceEvents longer than {MAX_ITEM >> 20} MiB")
                if not self._more():
                    raise EOFError("the JSON ends inside traceEvents (truncated)")
                continue
            end = _rstrip(buf, stop)
            if end <= 1:
                if commas.size:
                    raise ValueError("an empty element in traceEvents")
                self._drop(keep_from)
                return None
            events = self._decode(end)
            if events is None:
                raise ValueError("traceEvents holds something that is not JSON")
            self._drop(keep_from)
            return events


def _rstrip(buf: bytearray, end: int) -> int:
    while end > 0 and buf[end - 1] in _WS:
        end -= 1
    return end


def _last_boundary(buf: bytearray, lo: int) -> tuple[int, int] | None:
    """The last place in ``buf[lo:]`` that looks like the boundary between two events of an
    array: ``}``, ``,``, ``{`` with only whitespace between. (end of the first, start of the
    second); None when there is none."""
    hi = len(buf)
    for _ in range(64):
        j = buf.rfind(b"{", lo, hi)
        if j <= 0:
            return None
        i = j - 1
        while i >= 0 and buf[i] in _WS:
            i -= 1
        if i >= 1 and buf[i] == 0x2C:
            k = i - 1
            while k >= 0 and buf[k] in _WS:
                k -= 1
            if k >= 0 and buf[k] == 0x7D:
                return k + 1, j
        hi = j
    return None


def _key_before(buf: bytearray, colon: int) -> str | None:
    """The object key whose closing quote is the last one before ``colon`` (None when it is
    not one of at most 256 bytes)."""
    q = buf.rfind(b'"', 0, colon)
    s = q
    while q > 0:
        s = buf.rfind(b'"', max(0, q - 257), s)
        if s < 0:
            return None
        k = s
        while k > 0 and buf[k - 1] == 0x5C:
            k -= 1
        if (s - k) % 2 == 0:
            try:
                key = _ANY.decode(bytes(buf[s : q + 1]))
            except _DECODE_ERRORS:
                return None
            return key if isinstance(key, str) else None
    return None


def _sep_before(buf: bytearray, colon: int) -> int:
    """The top-level "," or "{" before the key that ends at ``colon``."""
    return max(buf.rfind(b",", 0, colon), buf.rfind(b"{", 0, colon))
