"""Packing several small integers into one int64, so that numpy can sort, search and factorize
them as one key. Every packed key of the analysis is made here.

Bit layouts and limits (a value outside its field's limit would collide with another key; the
packers check the ones the data can reach and raise GapscopeError):

``stream_key``  ``pid << 40 | device_code << 32 | stream``
    pid: 24 bits (nsys's globalPid keeps the process id in bits 24-47, so it fits by
    construction; a pid of 2**23 or more sets the sign bit, which still unpacks and groups
    right but sorts that process's streams first); device_code: 8 bits (an index into the trace's sorted device ids, < 256
    devices per trace); stream: 32 bits (CUDA stream ids are 32-bit).
``pid_stream_key``  ``pid << 32 | stream``
    the same process and stream fields without the device (nsys 2025.3 files a cross-device
    stream wait under device 0, so waits match streams on these two only).
``call_key``  ``proc_code << 40 | corr``
    proc_code: an index into the trace's processes (< 2**23); corr: CUPTI correlation id, kept
    to its low 40 bits (ids are 32-bit counters in practice).
``TimeKeys``  ``group * width + (t - lo)``
    a time ``t`` inside a group (a thread, a stream, a device): ``lo`` is the earliest time
    and ``width`` the span of all times plus 2, so keys of one group sort by time and keys of
    different groups never interleave; needs ``groups * width < 2**63`` (about 292 years of
    nanoseconds for one group, or a 1 s trace with 9.2e9 groups).
``pair_code``  ``row * n_devices + device_code``
    one (range, device) pair; needs ``rows * n_devices < 2**63``.

Codes and indices that are not packed (launch links, memberships, orders, device and stream
codes) are held in 32 bits where every value is below 2**31: :func:`index_dtype`, :func:`narrowed`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gapscope.errors import GapscopeError

PID_BITS = 24
DEVICE_BITS = 8
STREAM_BITS = 32
CORR_BITS = 40

_PID_MASK = (1 << PID_BITS) - 1
_DEVICE_MASK = (1 << DEVICE_BITS) - 1
_STREAM_MASK = (1 << STREAM_BITS) - 1
_CORR_MASK = (1 << CORR_BITS) - 1
_LIMIT = 2**62  # headroom below 2**63 for the +1/+2 the callers add


def stream_key(pid: np.ndarray, device_code: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """One integer per (process, device, stream)."""
    device_code = np.asarray(device_code, dtype=np.int64)
    if device_code.size and int(device_code.max()) > _DEVICE_MASK:
        raise GapscopeError(f"the trace has more than {_DEVICE_MASK + 1} GPUs: gapscope counts at most 256")
    return ((np.asarray(pid, dtype=np.int64) & _PID_MASK) << 40) | (device_code << 32) | \
        (np.asarray(stream, dtype=np.int64) & _STREAM_MASK)


def unpack_stream_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pid, device_code, stream) of packed stream keys."""
    keys = np.asarray(keys, dtype=np.int64)
    return (keys >> 40) & _PID_MASK, (keys >> 32) & _DEVICE_MASK, keys & _STREAM_MASK


def pid_stream_key(pid: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """One integer per (process, stream), the device left out."""
    return ((np.asarray(pid, dtype=np.int64) & _PID_MASK) << 32) | (np.asarray(stream, dtype=np.int64) & _STREAM_MASK)


def stream_key_without_device(keys: np.ndarray) -> np.ndarray:
    """The ``pid_stream_key`` of packed stream keys."""
    pid, _, stream = unpack_stream_key(keys)
    return pid_stream_key(pid, stream)


def call_key(proc_code: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """One integer per (process code, correlation id)."""
    return (np.asarray(proc_code, dtype=np.int64) << CORR_BITS) | (np.asarray(corr, dtype=np.int64) & _CORR_MASK)


def index_dtype(bound: int) -> type[np.signedinteger]:
    """np.int32 when every value to hold is below ``bound`` (a code, an index, a length), else
    np.int64: an array kept over every activity then takes 4 bytes a value, not 8."""
    return np.int32 if bound < 2**31 else np.int64


def narrowed(values: np.ndarray, bound: int) -> np.ndarray:
    """``values`` (each below ``bound``, none below -2**31) as :func:`index_dtype` of ``bound``;
    no copy when they are that already."""
    return np.asarray(values).astype(index_dtype(bound), copy=False)


def code_dtype(n_codes: int) -> type[np.signedinteger]:
    """The narrowest signed dtype that holds the codes ``-1 .. n_codes - 1`` (8, 16, then
    :func:`index_dtype`'s 32 or 64 bits): for codes over every activity or call with few
    distinct values (devices, streams, threads, call names). Arithmetic on such codes casts
    them to int64 first (as :func:`pair_code`, :func:`stream_key` and TimeKeys.key do)."""
    if n_codes <= np.iinfo(np.int8).max:
        return np.int8
    if n_codes <= np.iinfo(np.int16).max:
        return np.int16
    return index_dtype(n_codes)


def small_codes(codes: np.ndarray, n_codes: int) -> np.ndarray:
    """``codes`` (each in ``-1 .. n_codes - 1``) as :func:`code_dtype` of ``n_codes``."""
    return np.asarray(codes).astype(code_dtype(n_codes), copy=False)


def narrowed_to_fit(values: np.ndarray) -> np.ndarray:
    """:func:`narrowed` with the bound its own largest value gives (none below -2**31): 32 bits
    when every value is below 2**31 (a duration under 2.1 s, a row), else as they are."""
    return narrowed(values, int(np.asarray(values).max(initial=0)) + 1)


def narrowed_blocks(n: int, block: int, values: Callable[[int, int], np.ndarray]) -> np.ndarray:
    """The ``n`` values ``values(lo, hi)`` gives ``block`` at a time (a duration, a length), in
    32 bits while every one fits (from -2**31 to below 2**31 - 1, as :func:`narrowed_to_fit`
    keeps them), widened to 64 bits once one does not: no 64-bit array of them all is made
    while they fit."""
    out = np.empty(n, dtype=np.int32)
    for lo in range(0, n, block):
        part = values(lo, min(lo + block, n))
        if out.dtype == np.int32 and part.size and (
                int(part.min()) < np.iinfo(np.int32).min or index_dtype(int(part.max()) + 1) is np.int64):
            out = out.astype(np.int64)
        out[lo:lo + part.size] = part
    return out


def pair_code(row: np.ndarray, device_code: np.ndarray, n_devices: int) -> np.ndarray:
    """One integer per (row, device): ``row * n_devices + device_code``."""
    return np.asarray(row, dtype=np.int64) * n_devices + np.asarray(device_code, dtype=np.int64)


class TimeKeys:
    """Keys ``group * width + (t - lo)`` for times inside groups, from the bounds of the times
    they will be built from; GapscopeError when the groups and span cannot fit in an int64."""

    def __init__(self, times: list[np.ndarray], n_groups: int) -> None:
        present = [np.asarray(t) for t in times if np.asarray(t).size]
        self.lo = int(min(int(t.min()) for t in present)) if present else 0
        hi = int(max(int(t.max()) for t in present)) if present else 0
        self.width = hi - self.lo + 2
        self.check(n_groups)

    def check(self, n_groups: int) -> None:
        """GapscopeError unless ``n_groups`` groups of this span fit in an int64 key."""
        if self.width * max(int(n_groups), 1) >= _LIMIT:
            raise GapscopeError("timestamps span too wide a range to analyze "
                                f"({(self.width - 2) / 1e9:.3g} s across {n_groups} groups)")

    def key(self, groups: np.ndarray, times: np.ndarray) -> np.ndarray:
        """The key of each (group, time)."""
        key = np.asarray(groups, dtype=np.int64) * self.width  # one array, the rest added in place
        key += np.asarray(times, dtype=np.int64)  # below 2**63: width * groups < 2**62, times < 2**53
        key -= self.lo
        return key
