"""A stand-in for the small part of CuPy the workload uses, to test launch logic on a CPU.

It records every launch, event record, stream wait and graph launch in `LOG`, and pretends each
kernel takes `KERNEL_US` of GPU time so that event timings are exact and hand-checkable.
Install it with `install(monkeypatch)`.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np

LOG: list[tuple] = []
KERNEL_US = {"gapscope_spin": lambda args: 1.0 + 0.001 * int(args[2]),
             "gapscope_memory": lambda args: 2.0 + 1e-5 * int(args[2]) * int(args[3]),
             "gapscope_empty": lambda args: 1.0}


class _Clock:
    """A per-stream GPU clock in microseconds: kernels advance it."""

    now: dict[int, float] = {}


class Stream:
    _next = 1

    def __init__(self, non_blocking: bool = False) -> None:
        self.ptr = Stream._next
        Stream._next += 1
        self.non_blocking = non_blocking
        self.capturing: list | None = None
        _Clock.now[self.ptr] = 0.0

    def synchronize(self) -> None:
        LOG.append(("sync", self.ptr))

    def wait_event(self, event: "Event") -> None:
        LOG.append(("wait", self.ptr, event.id))
        _Clock.now[self.ptr] = max(_Clock.now[self.ptr], event.time)

    def begin_capture(self) -> None:
        self.capturing = []

    def end_capture(self) -> "Graph":
        g = Graph(self.capturing or [])
        self.capturing = None
        return g


class Event:
    _next = 1

    def __init__(self, block: bool = False, disable_timing: bool = False) -> None:
        self.id = Event._next
        Event._next += 1
        self.time = 0.0
        self.disable_timing = disable_timing

    def record(self, stream: Stream | None = None) -> None:
        LOG.append(("record", stream.ptr if stream else 0, self.id))
        self.time = _Clock.now[stream.ptr] if stream else 0.0

    def synchronize(self) -> None:
        pass


class Graph:
    def __init__(self, launches: list) -> None:
        self.launches = launches

    def launch(self, stream: Stream) -> None:
        LOG.append(("graph_launch", stream.ptr, len(self.launches)))
        for name, args in self.launches:
            _Clock.now[stream.ptr] += KERNEL_US[name](args)


class Function:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, grid: tuple, block: tuple, args: tuple, stream: Stream | None = None) -> None:
        assert stream is not None, "the workload must name the stream of every launch"
        if stream.capturing is not None:
            stream.capturing.append((self.name, args))
            return
        LOG.append(("launch", stream.ptr, self.name, grid[0], block[0]))
        _Clock.now[stream.ptr] += KERNEL_US[self.name](args)


class RawModule:
    def __init__(self, code: str) -> None:
        self.code = code

    def get_function(self, name: str) -> Function:
        assert f"void {name}(" in self.code
        return Function(name)


class _Rng:
    def random(self, n: int, dtype: Any = np.float32) -> np.ndarray:
        # no GPU behind it: a few values stand for buffers of any size
        return np.random.default_rng(0).random(min(n, 1024), dtype=dtype)


def install(monkeypatch: Any, devices: int = 1) -> types.ModuleType:
    """Put a fake `cupy` into sys.modules (undone by monkeypatch) and clear the log."""
    LOG.clear()
    _Clock.now.clear()
    cp = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: devices,
        getDeviceProperties=lambda d: {"name": b"Fake GPU", "multiProcessorCount": 4},
    )
    cuda.runtime = runtime
    cuda.Stream = Stream
    cuda.Event = Event
    cuda.Device = lambda d: types.SimpleNamespace(use=lambda: None)
    cuda.get_elapsed_time = lambda a, b: (b.time - a.time) / 1000.0  # ms
    nvtx = types.ModuleType("cupy.cuda.nvtx")
    nvtx.RangePush = lambda name: LOG.append(("push", name))
    nvtx.RangePop = lambda: LOG.append(("pop",))
    cuda.nvtx = nvtx
    cp.cuda = cuda
    cp.RawModule = RawModule
    cp.random = types.SimpleNamespace(default_rng=lambda seed=None: _Rng())
    cp.float32 = np.float32
    cp.int64 = np.int64
    cp.int32 = np.int32
    cp.empty_like = np.empty_like
    cp.__version__ = "0.0-fake"
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nvtx", nvtx)
    monkeypatch.setitem(sys.modules, "nvtx", None)  # force the CuPy NVTX fallback
    return cp
