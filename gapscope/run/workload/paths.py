"""The three launch paths of the same N kernels, each under its own NVTX range.

- `eager`: N launches one by one on one non-blocking stream;
- `multistream`: the same N kernels over S non-blocking streams; each step forks (an event
  recorded on stream 0 that the other streams wait on), launches one kernel per stream, then
  joins (an event per side stream that stream 0 waits on): a fork/join DAG a step;
- `graph`: the eager sequence captured once by stream capture, instantiated once, then replayed
  with one cudaGraphLaunch per range.

Every range ends with a stream synchronize, so the range on the timeline covers its GPU work.
Warm-up (compilation, graph capture, one run of each path) happens before, outside any range.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

from gapscope.errors import GapscopeError
from gapscope.run.workload import CASES, PATHS, range_name
from gapscope.run.workload.kernels import KernelPlan, KernelSet


def steps_for(n_kernels: int, n_streams: int) -> int:
    """Fork/join steps of the multistream path: N kernels over S streams, one per stream a step."""
    if n_streams < 1:
        raise GapscopeError(f"--streams must be at least 1, got {n_streams}")
    return -(-n_kernels // n_streams)


def check_paths(paths: Sequence[str]) -> list[str]:
    """Validate path and case names; returns them as a list in the given order."""
    bad = [p for p in paths if p not in PATHS and p not in CASES]
    if bad or not paths:
        raise GapscopeError(
            f"unknown path(s) {', '.join(bad) or '(none)'}: choose from {', '.join(PATHS + CASES)}")
    if len(set(paths)) != len(paths):
        raise GapscopeError(f"--paths names a path twice: {','.join(paths)}")
    return list(paths)


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """Push/pop an NVTX range with the `nvtx` package, else CuPy's own NVTX bindings."""
    push, pop = _nvtx_functions()
    push(name)
    try:
        yield
    finally:
        pop()


_NVTX: tuple[Callable[[str], Any], Callable[[], Any]] | None = None


def _nvtx_functions() -> tuple[Callable[[str], Any], Callable[[], Any]]:
    global _NVTX
    if _NVTX is None:
        try:
            import nvtx

            _NVTX = (lambda n: nvtx.push_range(n), nvtx.pop_range)
        except ImportError:
            from cupy.cuda import nvtx as cupy_nvtx

            _NVTX = (lambda n: cupy_nvtx.RangePush(n), cupy_nvtx.RangePop)
    return _NVTX


class Workload:
    """N kernels of one plan, ready to run down each path on one device."""

    def __init__(self, kernels: KernelSet, plan: KernelPlan, n_kernels: int, n_streams: int) -> None:
        if n_kernels < 1:
            raise GapscopeError(f"--kernels must be at least 1, got {n_kernels}")
        cp = kernels.cp
        self.cp = cp
        self.plan = plan
        self.n_kernels = n_kernels
        self.n_streams = n_streams
        self.steps = steps_for(n_kernels, n_streams)
        self.launch, _, _ = kernels.launcher(plan.kind, plan.work)
        self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(n_streams)]
        self.stream = self.streams[0]
        self.fork = cp.cuda.Event(disable_timing=True)
        self.joins = [cp.cuda.Event(disable_timing=True) for _ in range(n_streams)]
        self._graph: Any = None

    # ---- the paths (launch only; the caller synchronizes)

    def eager(self) -> None:
        launch, s = self.launch, self.stream
        for _ in range(self.n_kernels):
            launch(s)

    def multistream(self) -> None:
        launch, s0, side = self.launch, self.stream, self.streams[1:]
        fork, joins = self.fork, self.joins[1:]
        left = self.n_kernels
        for _ in range(self.steps):
            fork.record(s0)
            for s in side:
                s.wait_event(fork)
            width = min(left, self.n_streams)
            for s in self.streams[:width]:
                launch(s)
            left -= width
            for s, ev in zip(side, joins):
                ev.record(s)
                s0.wait_event(ev)

    def graph(self) -> None:
        self.capture().launch(self.stream)

    def capture(self) -> Any:
        """Capture the eager sequence once (stream capture) and instantiate it; cached."""
        if self._graph is None:
            s = self.stream
            s.synchronize()
            s.begin_capture()
            try:
                self.eager()
            finally:
                self._graph = s.end_capture()
        return self._graph

    def run(self, path: str) -> None:
        """Launch one path's N kernels (no synchronize)."""
        getattr(self, path)()

    def synchronize(self) -> None:
        for s in self.streams:
            s.synchronize()

    def warm_up(self, paths: Sequence[str]) -> None:
        """Capture the graph and run each path once, outside any NVTX range."""
        for path in paths:
            self.run(path)
            self.synchronize()


def run_traced(workloads: Sequence[tuple[float | None, Workload]], paths: Sequence[str],
               repeat: int = 1, progress: Callable[[str], None] | None = None) -> list[str]:
    """Run every (duration, workload) down every path `repeat` times, each under its NVTX range.

    Returns the range names in the order they were pushed.
    """
    say = progress or (lambda _msg: None)
    names: list[str] = []
    for _, wl in workloads:
        wl.warm_up(paths)
    for r in range(repeat):
        for us, wl in workloads:
            for path in paths:
                name = range_name(path, us)
                say(f"{name} ({r + 1}/{repeat})")
                with nvtx_range(name):
                    wl.run(path)
                    wl.synchronize()
                names.append(name)
    return names
