"""The CUDA Graph cases of docs/cases.md as launch paths of `gapscope run`, each under its own NVTX ranges.

- `default-stream`: kernel + host-to-device copy pairs meant to overlap, three ways: the
  kernel on the legacy default stream and the copy on a blocking user stream (`legacy`), both on
  blocking user streams (`user-streams`), both on non-blocking streams (`nonblocking`);
- `graph-pool`: a `layers`-kernel forward whose token kernel's work and launch
  shape follow the batch size; `steps` requests of varying size run `eager`, from a graph
  captured for their `exact` size, and `padded` to the pool's ladder (ranges `capture`, `eager`,
  `exact`, `padded`);
- `graph-update`: a `layers`-kernel graph whose kernels' iteration count alternates
  between replays, changed by re-capture and re-instantiation (`recapture`), cudaGraphExecUpdate
  from a fresh capture (`exec-update`) or cudaGraphExecKernelNodeSetParams (`set-params`), beside
  plain `eager` launches; each update sits in a nested `<method>/update` range;
- `piecewise` (vLLM V1): `layers` layers of 2 kernels, an attention kernel whose grid grows every
  step, 2 kernels; run all `eager`, as graph `pieces` between eager attention launches, and as one
  `full` graph with the attention's shape fixed; each step in a nested `<variant>/step` range;
- `instantiate`: an N-kernel stream captured, instantiated, launched for the
  first time and replayed (ranges `capture`, `instantiate`, `first-launch`, `replay`), three
  times over, beside the same N kernels launched `eager`;
- `multi-gpu`: `layers` kernels a step on each of two GPUs, GPU 1 waiting on an event
  recorded on GPU 0 (`one-way`), and GPU 0 also waiting on GPU 1's previous step (`ping-pong`).

Everything that must not count (compilation, fixture captures, one run of every variant) happens
in `warm_up()`, outside the ranges. `run()` returns host timers (perf_counter_ns) of what the
trace shows only as API calls or not at all: update, capture and instantiation costs.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from gapscope.errors import GapscopeError
from gapscope.run.workload import CASES, case_range, range_name
from gapscope.run.workload.graphs import SPIN_ARG_TYPES, GraphApi
from gapscope.run.workload.kernels import (SPIN_BLOCK, KernelPlan, KernelSet, blocker_work, fit_line,
                                      solve_work)
from gapscope.run.workload.ladder import pad, request_sizes, vllm_ladder
from gapscope.run.workload.paths import nvtx_range

CASE_SOURCE = r"""
extern "C" __global__ void gapscope_tokens(float* __restrict__ out,
                                           const float* __restrict__ in,
                                           long long iters, int tokens) {
    extern __shared__ float scale[];
    for (int t = threadIdx.x; t < tokens; t += blockDim.x) {
        scale[t] = 1.0f + 1.0e-7f * in[t];
    }
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float x = in[i] * scale[i % tokens];
    const long long n = iters * tokens;
    for (long long k = 0; k < n; ++k) {
        x = fmaf(x, 1.0000001f, 1.0e-7f);
    }
    out[i] = x;
}

extern "C" __global__ void gapscope_attend(float* __restrict__ out,
                                           const float* __restrict__ in,
                                           long long iters, int n) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) % n;
    float x = in[i];
    for (long long k = 0; k < iters; ++k) {
        x = fmaf(x, 1.0000001f, 1.0e-7f);
    }
    out[i] = x;
}
"""

PRE_KERNELS = 2  # piecewise: kernels of a layer before its attention (norm, qkv)
POST_KERNELS = 2  # and after it (output projection, MLP)
INSTANTIATE_CYCLES = 3
COPY_MAX_BYTES = 256 << 20


@dataclass
class CaseConfig:
    """Sizes of the cases; `gapscope run --steps/--layers/--pool-sizes/--seed/--kernels`."""

    steps: int = 32
    layers: int = 8
    kernels: int = 1000  # instantiate: kernels in the graph
    pool_sizes: list[int] = field(default_factory=vllm_ladder)
    seed: int = 0

    def validate(self) -> None:
        for name, value in (("--steps", self.steps), ("--layers", self.layers),
                            ("--kernels", self.kernels)):
            if value < 1:
                raise GapscopeError(f"{name} must be at least 1, got {value}")
        if not self.pool_sizes:
            raise GapscopeError("--pool-sizes needs at least one size")

    @property
    def replays(self) -> int:
        """instantiate: steady replays per cycle, and eager runs."""
        return max(3, self.steps // 4)


# --------------------------------------------------------------------------- pure helpers


def summarize_ns(values_ns: Sequence[int]) -> dict[str, Any]:
    """Host-timer statistics in microseconds: count, median, p90 (nearest rank), mean, min,
    max and every value, for the run's JSON."""
    if not values_ns:
        return {"count": 0}
    us = sorted(v / 1000.0 for v in values_ns)
    p90 = us[min(len(us) - 1, max(0, -(-9 * len(us) // 10) - 1))]
    return {"count": len(us), "median_us": statistics.median(us), "p90_us": p90,
            "mean_us": statistics.fmean(us), "min_us": us[0], "max_us": us[-1],
            "values_us": [v / 1000.0 for v in values_ns]}


def spin_slope(plan: KernelPlan) -> float:
    """Microseconds per spin iteration from a spin plan (its fitted slope, else time / work)."""
    if plan.slope_us and plan.slope_us > 0:
        return plan.slope_us
    return (plan.measured_us or plan.target_us or 10.0) / max(plan.work, 1)


def token_iters(plan: KernelPlan, largest: int) -> int:
    """First guess of the spin iterations per token that make a `largest`-token kernel take
    the plan's time, from the spin slope (the token loop's own overhead makes it slower)."""
    target = plan.target_us or plan.measured_us or 10.0
    return max(1, round(target / largest / spin_slope(plan)))


def alternate_iters(work: int) -> int:
    """graph-update's second iteration count: twice the plan's (at least 1000 iterations)."""
    return max(2 * work, 1000)


def piece_layout(layers: int) -> list[tuple[int, int]]:
    """(post-attention kernels, pre-attention kernels) of each graph piece between attentions:
    piece 0 opens layer 0, piece i closes layer i-1 and opens layer i, the last closes the last."""
    return [(0 if i == 0 else POST_KERNELS, PRE_KERNELS if i < layers else 0)
            for i in range(layers + 1)]


def copy_bytes(target_us: float, points: Sequence[tuple[int, float]]) -> int:
    """Bytes of a copy that takes target_us, from (bytes, us) measurements on a line."""
    intercept, slope = fit_line([p[0] for p in points], [p[1] for p in points])
    if slope <= 0:
        raise GapscopeError(f"copy calibration failed: {points}")
    return int(min(COPY_MAX_BYTES, max(4096, round((target_us - intercept) / slope))))


class HostTimer:
    """Named lists of host durations in nanoseconds (time.perf_counter_ns)."""

    def __init__(self) -> None:
        self.values: dict[str, list[int]] = {}

    def add(self, name: str, ns: int) -> None:
        self.values.setdefault(name, []).append(int(ns))

    def summary(self) -> dict[str, dict[str, Any]]:
        return {k: summarize_ns(v) for k, v in self.values.items()}


# --------------------------------------------------------------------------- kernels


class CaseKernels:
    """The token and attention kernels (CASE_SOURCE) on a KernelSet's device and buffers."""

    def __init__(self, ks: KernelSet) -> None:
        cp = ks.cp
        self.ks = ks
        self.cp = cp
        module = cp.RawModule(code=CASE_SOURCE)
        self._tokens = module.get_function("gapscope_tokens")
        self._attend = module.get_function("gapscope_attend")
        self._cache: dict[tuple, Callable[[Any], None]] = {}

    def tokens(self, n: int, iters: int) -> Callable[[Any], None]:
        """launch(stream) of the token kernel for n tokens: one float of shared memory per
        token (staged per-token scales) and a chain of `iters * n` dependent FMAs per thread,
        so both its time and its launch shape follow n."""
        key = ("tokens", n, iters)
        if key not in self._cache:
            cp, ks, fn = self.cp, self.ks, self._tokens
            g, b, smem = (ks.sm_count,), (SPIN_BLOCK,), 4 * n
            args = (ks.spin_out, ks.spin_in, cp.int64(iters), cp.int32(n))
            self._cache[key] = lambda s: fn(g, b, args, stream=s, shared_mem=smem)
        return self._cache[key]

    def attend(self, grid: int, iters: int) -> Callable[[Any], None]:
        """launch(stream) of the attention stand-in on `grid` blocks of SPIN_BLOCK threads."""
        key = ("attend", grid, iters)
        if key not in self._cache:
            cp, ks, fn = self.cp, self.ks, self._attend
            g, b = (grid,), (SPIN_BLOCK,)
            args = (ks.spin_out, ks.spin_in, cp.int64(iters), cp.int32(int(ks.spin_in.size)))
            self._cache[key] = lambda s: fn(g, b, args, stream=s)
        return self._cache[key]


def _now() -> int:
    return time.perf_counter_ns()


# --------------------------------------------------------------------------- the cases


class Case:
    """One case: `warm_up()` outside ranges, then `run(kernel_us, timer)` under its ranges."""

    name = ""

    def warm_up(self) -> None:  # pragma: no cover - every case overrides it
        raise NotImplementedError

    def run(self, kernel_us: float | None, timer: HostTimer) -> None:  # pragma: no cover
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        """What the case ran (sizes, iteration counts), for the run's JSON."""
        return {}

    def warnings(self) -> list[str]:
        """Lines for the run's warnings (a kernel that missed its calibration target)."""
        return []


class VariantCase(Case):
    """A case that runs the same work a few ways (its VARIANTS), each under its own range:
    ``once(variant, n)`` does n iterations of one way; ``iterations`` is n under the ranges."""

    VARIANTS: tuple[str, ...] = ()
    iterations = 0

    def once(self, variant: str, n: int) -> None:  # pragma: no cover - every case overrides it
        raise NotImplementedError

    def warm_up(self) -> None:
        for v in self.VARIANTS:
            self.once(v, 2)

    def run(self, kernel_us: float | None, timer: HostTimer) -> None:
        for v in self.VARIANTS:
            with nvtx_range(case_range(self.name, v, kernel_us)):
                t0 = _now()
                self.once(v, self.iterations)
                timer.add(v, _now() - t0)


class DefaultStreamCase(VariantCase):
    name = "default-stream"
    VARIANTS = ("legacy", "user-streams", "nonblocking")

    def __init__(self, ks: KernelSet, plan: KernelPlan, cfg: CaseConfig) -> None:
        cp = ks.cp
        self.cp = cp
        self.pairs = self.iterations = cfg.steps
        self.launch = ks.launcher("spin", plan.work)[0]
        self.blocking = [cp.cuda.Stream(non_blocking=False) for _ in range(2)]
        self.nonblocking = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
        target = plan.measured_us or plan.target_us or 10.0
        self._alloc(8 << 20)
        points = [(n, self._copy_us(n)) for n in (1 << 20, 8 << 20)]
        self.nbytes = copy_bytes(target, points)
        if self.nbytes > 8 << 20:
            self._alloc(self.nbytes)

    def _alloc(self, nbytes: int) -> None:
        cp = self.cp
        self.host = cp.cuda.alloc_pinned_memory(nbytes)
        self.dev = cp.empty(nbytes, dtype=cp.uint8)

    def _copy(self, stream: Any, nbytes: int | None = None) -> None:
        rt = self.cp.cuda.runtime
        rt.memcpyAsync(self.dev.data.ptr, self.host.ptr, nbytes or self.nbytes,
                       rt.memcpyHostToDevice, stream.ptr)

    def _copy_us(self, nbytes: int, reps: int = 5) -> float:
        """Median event time of one host-to-device copy of nbytes from pinned memory."""
        cp, s = self.cp, self.nonblocking[0]
        times = []
        for _ in range(reps):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record(s)
            self._copy(s, nbytes)
            b.record(s)
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b) * 1000.0)
        return statistics.median(times)

    def streams(self, variant: str) -> tuple[Any, Any]:
        """(kernel stream, copy stream) of a variant."""
        if variant == "legacy":
            return self.cp.cuda.Stream.null, self.blocking[0]
        if variant == "user-streams":
            return self.blocking[0], self.blocking[1]
        return self.nonblocking[0], self.nonblocking[1]

    def once(self, variant: str, pairs: int) -> None:
        ks_, cs = self.streams(variant)
        for _ in range(pairs):
            self.launch(ks_)
            self._copy(cs)
        ks_.synchronize()
        cs.synchronize()

    def info(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "copy_bytes": self.nbytes}


class GraphPoolCase(Case):
    name = "graph-pool"
    VARIANTS = ("eager", "exact", "padded")

    def __init__(self, ks: KernelSet, plan: KernelPlan, cfg: CaseConfig) -> None:
        cp = ks.cp
        self.kern = CaseKernels(ks)
        self.ladder = sorted(cfg.pool_sizes)
        self.layers = cfg.layers
        self.requests = request_sizes(cfg.steps, self.ladder[-1], cfg.seed)
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.exact: dict[int, Any] = {}
        self.pool: dict[int, Any] = {}
        self.iters, self.largest_us = self._calibrate(ks, plan)

    def _calibrate(self, ks: KernelSet, plan: KernelPlan) -> tuple[int, float]:
        """(iterations per token, measured back-to-back us) that make the token kernel of the
        largest pool size take the plan's time: a line through two measurements, solved."""
        largest, target = self.ladder[-1], plan.target_us or plan.measured_us or 10.0
        self.target_us = target
        blocker = blocker_work(spin_slope(plan), 20)

        def b2b(iters: int) -> float:
            return ks.back_to_back_us(self.kern.tokens(largest, iters), self.stream, blocker, 20)

        lo = token_iters(plan, largest)
        hi = 4 * lo
        self.kern.tokens(largest, lo)(self.stream)  # compile and load outside the timing
        self.stream.synchronize()
        intercept, slope = fit_line([lo, hi], [b2b(lo), b2b(hi)])
        if slope <= 0:
            return lo, b2b(lo)
        iters = max(1, solve_work(intercept, slope, target))
        return iters, b2b(iters)

    def forward(self, n: int, stream: Any) -> None:
        launch = self.kern.tokens(n, self.iters)
        for _ in range(self.layers):
            launch(stream)

    def capture(self, n: int) -> Any:
        s = self.stream
        s.begin_capture()
        try:
            self.forward(n, s)
        finally:
            graph = s.end_capture()
        return graph

    def warm_up(self) -> None:
        s = self.stream
        for n in sorted(set(self.requests)):
            self.forward(n, s)
            self.exact[n] = self.capture(n)
            self.exact[n].launch(s)
        s.synchronize()

    def run(self, kernel_us: float | None, timer: HostTimer) -> None:
        s = self.stream
        with nvtx_range(case_range(self.name, "capture", kernel_us)):
            t0 = _now()
            self.pool = {n: self.capture(n) for n in self.ladder}
            timer.add("capture", _now() - t0)
        for n in sorted({pad(r, self.ladder) for r in self.requests} - {None}):
            self.pool[n].launch(s)  # first launches (uploads) outside the ranges
        s.synchronize()
        for v in self.VARIANTS:
            with nvtx_range(case_range(self.name, v, kernel_us)):
                t0 = _now()
                for n in self.requests:
                    if v == "eager":
                        self.forward(n, s)
                    elif v == "exact":
                        self.exact[n].launch(s)
                    else:
                        p = pad(n, self.ladder)
                        if p is None:
                            self.forward(n, s)  # above the ladder: eager, as vLLM does
                        else:
                            self.pool[p].launch(s)
                s.synchronize()
                timer.add(v, _now() - t0)

    def info(self) -> dict[str, Any]:
        return {"ladder": self.ladder, "requests": self.requests,
                "padded": [pad(r, self.ladder) for r in self.requests],
                "layers": self.layers, "iters_per_token": self.iters,
                "largest_kernel_us": self.largest_us, "target_us": self.target_us}

    def warnings(self) -> list[str]:
        if abs(self.largest_us - self.target_us) <= 0.1 * self.target_us:
            return []
        return [f"graph-pool: the {self.ladder[-1]}-token kernel runs {self.largest_us:.2f} us "
                f"back to back, not the {self.target_us:g} us asked"]


class GraphUpdateCase(Case):
    name = "graph-update"
    METHODS = ("eager", "recapture", "exec-update", "set-params")

    def __init__(self, ks: KernelSet, plan: KernelPlan, cfg: CaseConfig) -> None:
        cp = ks.cp
        self.ks = ks
        self.api = GraphApi()
        self.layers = cfg.layers
        self.updates = cfg.steps
        self.iters = (plan.work, alternate_iters(plan.work))
        self.launchers = {i: ks.launcher("spin", i)[0] for i in self.iters}
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.args_ptr = (ks.spin_out.data.ptr, ks.spin_in.data.ptr)
        self.state: dict[str, Any] = {}

    def iters_at(self, u: int) -> int:
        """Iteration count after update u: the other value than the graph was captured with,
        then back, and so on; every replay differs from the one before it."""
        return self.iters[1 - u % 2]

    def sequence(self, iters: int) -> None:
        launch, s = self.launchers[iters], self.stream
        for _ in range(self.layers):
            launch(s)

    def capture(self, iters: int) -> Any:
        ptr = self.stream.ptr
        self.api.begin_capture(ptr)
        try:
            self.sequence(iters)
        finally:
            graph = self.api.end_capture(ptr)
        return graph

    def _fresh(self) -> None:
        """Graphs captured with the first iteration count: one per method that replays."""
        api, st = self.api, self.state
        for method in self.METHODS[1:]:
            graph = self.capture(self.iters[0])
            st[method] = (graph, api.instantiate(graph))
        graph = st["set-params"][0]
        nodes = api.kernel_nodes(graph)
        st["nodes"] = [(n, api.node_params(n)) for n in nodes]

    def _drop(self) -> None:
        for method in self.METHODS[1:]:
            if method in self.state:
                graph, graph_exec = self.state.pop(method)
                self.api.destroy(graph, graph_exec)
        for graph, graph_exec in self.state.pop("retired", []):
            self.api.destroy(graph, graph_exec)

    def warm_up(self) -> None:
        self.sequence(self.iters[0])
        self._fresh()
        for u in range(2):
            for method in self.METHODS[1:]:
                self.update(method, u)
                self.api.launch(self.state[method][1], self.stream.ptr)
        self.stream.synchronize()
        self._drop()

    def update(self, method: str, u: int) -> None:
        """Change the iteration argument of every kernel of `method`'s executable graph."""
        api, iters = self.api, self.iters_at(u)
        graph, graph_exec = self.state[method]
        if method == "recapture":
            new = self.capture(iters)
            self.state[method] = (new, api.instantiate(new))
            self.state.setdefault("retired", []).append((graph, graph_exec))
        elif method == "exec-update":
            new = self.capture(iters)
            api.exec_update(graph_exec, new)
            self.state.setdefault("retired", []).append((new, None))
        else:
            values = (*self.args_ptr, iters)
            for node, params in self.state["nodes"]:
                api.set_kernel_args(graph_exec, node, params, values, SPIN_ARG_TYPES)

    def run(self, kernel_us: float | None, timer: HostTimer) -> None:
        s = self.stream
        self._fresh()
        for method in self.METHODS[1:]:
            self.api.launch(self.state[method][1], s.ptr)  # first launches outside the ranges
        s.synchronize()
        for method in self.METHODS:
            with nvtx_range(case_range(self.name, method, kernel_us)):
                for u in range(self.updates):
                    t0 = _now()
                    if method == "eager":
                        self.sequence(self.iters_at(u))
                    else:
                        with nvtx_range(case_range(self.name, f"{method}/update", kernel_us)):
                            self.update(method, u)
                            t1 = _now()
                        timer.add(f"{method}/update", t1 - t0)
                        self.api.launch(self.state[method][1], s.ptr)
                    s.synchronize()
                    timer.add(f"{method}/step", _now() - t0)
            for graph, graph_exec in self.state.pop("retired", []):  # cleanup outside the timers
                self.api.destroy(graph, graph_exec)
        self._drop()

    def info(self) -> dict[str, Any]:
        return {"layers": self.layers, "updates": self.updates, "iters": list(self.iters),
                "params_api": self.api.params_api}


class PiecewiseCase(Case):
    name = "piecewise"
    VARIANTS = ("eager", "pieces", "full")

    def __init__(self, ks: KernelSet, plan: KernelPlan, cfg: CaseConfig) -> None:
        cp = ks.cp
        self.kern = CaseKernels(ks)
        self.sm_count = ks.sm_count
        self.layers = cfg.layers
        self.steps = cfg.steps
        self.work = plan.work
        self.spin = ks.launcher("spin", plan.work)[0]
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.pieces: list[Any] = []
        self.full: Any = None

    def grid(self, step: int) -> int:
        """The attention's grid at a step: one block more each step, as its KV length grows."""
        return self.sm_count + step

    def _spins(self, count: int, s: Any) -> None:
        for _ in range(count):
            self.spin(s)

    def eager_step(self, step: int, s: Any) -> None:
        attend = self.kern.attend(self.grid(step), self.work)
        for _ in range(self.layers):
            self._spins(PRE_KERNELS, s)
            attend(s)
            self._spins(POST_KERNELS, s)

    def pieces_step(self, step: int, s: Any) -> None:
        attend = self.kern.attend(self.grid(step), self.work)
        for piece in self.pieces[:-1]:
            piece.launch(s)
            attend(s)
        self.pieces[-1].launch(s)

    def _capture(self, body: Callable[[Any], None]) -> Any:
        s = self.stream
        s.begin_capture()
        try:
            body(s)
        finally:
            graph = s.end_capture()
        return graph

    def warm_up(self) -> None:
        s = self.stream
        self.pieces = [self._capture(lambda st, a=a, b=b: self._spins(a + b, st))
                       for a, b in piece_layout(self.layers)]
        self.full = self._capture(lambda st: self.eager_step(self.steps - 1, st))
        for step in range(self.steps):  # every step's attention launcher, made here
            self.kern.attend(self.grid(step), self.work)
        for step in (0, self.steps - 1):
            self.eager_step(step, s)
            self.pieces_step(step, s)
        self.full.launch(s)
        s.synchronize()

    def run(self, kernel_us: float | None, timer: HostTimer) -> None:
        s = self.stream
        for v in self.VARIANTS:
            with nvtx_range(case_range(self.name, v, kernel_us)):
                t0 = _now()
                for step in range(self.steps):
                    with nvtx_range(case_range(self.name, f"{v}/step", kernel_us)):
                        if v == "eager":
                            self.eager_step(step, s)
                        elif v == "pieces":
                            self.pieces_step(step, s)
                        else:
                            self.full.launch(s)
                s.synchronize()
                timer.add(v, _now() - t0)

    def info(self) -> dict[str, Any]:
        return {"layers": self.layers, "steps": self.steps, "pre": PRE_KERNELS,
                "post": POST_KERNELS, "attention_grids": [self.grid(0), self.grid(self.steps - 1)],
                "pieces": len(piece_layout(self.layers))}


class InstantiateCase(Case):
    name = "instantiate"

    def __init__(self, ks: KernelSet, plan: KernelPlan, cfg: CaseConfig) -> None:
        cp = ks.cp
        self.api = GraphApi()
        self.n = cfg.kernels
        self.replays = cfg.replays
        self.launch = ks.launcher("spin", plan.work)[0]
        self.stream = cp.cuda.Stream(non_blocking=True)

    def eager(self) -> None:
        launch, s = self.launch, self.stream
        for _ in range(self.n):
            launch(s)

    def cycle(self, kernel_us: float | None, timer: HostTimer | None, replays: int) -> None:
        """Capture, instantiate, first launch and `replays` replays of a fresh graph."""
        api, s = self.api, self.stream
        ptr = s.ptr

        def phase(name: str, body: Callable[[], Any]) -> Any:
            if timer is None:
                return body()
            with nvtx_range(case_range(self.name, name, kernel_us)):
                t0 = _now()
                out = body()
                timer.add(name, _now() - t0)
            return out

        def capture() -> Any:
            api.begin_capture(ptr)
            try:
                self.eager()
            finally:
                graph = api.end_capture(ptr)
            return graph

        def launch_and_wait(graph_exec: Any) -> None:
            api.launch(graph_exec, ptr)
            s.synchronize()

        graph = phase("capture", capture)
        graph_exec = phase("instantiate", lambda: api.instantiate(graph))
        phase("first-launch", lambda: launch_and_wait(graph_exec))
        for _ in range(replays):
            phase("replay", lambda: launch_and_wait(graph_exec))
        api.destroy(graph, graph_exec)

    def warm_up(self) -> None:
        self.eager()
        self.stream.synchronize()
        self.cycle(None, None, 1)

    def run(self, kernel_us: float | None, timer: HostTimer) -> None:
        for _ in range(INSTANTIATE_CYCLES):
            self.cycle(kernel_us, timer, self.replays)
        for _ in range(self.replays):
            with nvtx_range(case_range(self.name, "eager", kernel_us)):
                t0 = _now()
                self.eager()
                self.stream.synchronize()
                timer.add("eager", _now() - t0)

    def info(self) -> dict[str, Any]:
        return {"kernels": self.n, "cycles": INSTANTIATE_CYCLES, "replays": self.replays}


def require_two_gpus(cp: Any, device: int) -> tuple[int, int]:
    """(device, the next one) when the machine has both, else a GapscopeError (exit 2)."""
    count = int(cp.cuda.runtime.getDeviceCount())
    if count < 2 or device + 1 >= count:
        raise GapscopeError(
            f"multi-gpu needs two GPUs (devices {device} and {device + 1}); "
            f"this machine has {count}")
    return device, device + 1


class MultiGpuCase(VariantCase):
    name = "multi-gpu"
    VARIANTS = ("one-way", "ping-pong")

    def __init__(self, ks: KernelSet, plan: KernelPlan, cfg: CaseConfig) -> None:
        cp = ks.cp
        self.cp = cp
        self.devices = require_two_gpus(cp, ks.device)
        self.layers = cfg.layers
        self.steps = self.iterations = cfg.steps
        other = KernelSet(self.devices[1])
        self.kernelsets = (ks, other)
        self.streams, self.events, self.launchers = [], [], []
        for d, k in zip(self.devices, self.kernelsets):
            with cp.cuda.Device(d):
                self.streams.append(cp.cuda.Stream(non_blocking=True))
                self.events.append(cp.cuda.Event(disable_timing=True))
                self.launchers.append(k.launcher("spin", plan.work)[0])
        cp.cuda.Device(self.devices[0]).use()

    def step(self, variant: str, j: int) -> None:
        cp, (d0, d1) = self.cp, self.devices
        (s0, s1), (e0, e1), (l0, l1) = self.streams, self.events, self.launchers
        with cp.cuda.Device(d0):
            if variant == "ping-pong" and j > 0:
                s0.wait_event(e1)
            for _ in range(self.layers):
                l0(s0)
            e0.record(s0)
        with cp.cuda.Device(d1):
            s1.wait_event(e0)
            for _ in range(self.layers):
                l1(s1)
            if variant == "ping-pong":
                e1.record(s1)

    def once(self, variant: str, steps: int) -> None:
        for j in range(steps):
            self.step(variant, j)
        for d, s in zip(self.devices, self.streams):
            with self.cp.cuda.Device(d):
                s.synchronize()

    def info(self) -> dict[str, Any]:
        return {"devices": list(self.devices), "layers": self.layers, "steps": self.steps}


CASE_CLASSES: dict[str, type[Case]] = {
    c.name: c for c in (DefaultStreamCase, GraphPoolCase, GraphUpdateCase, PiecewiseCase,
                        InstantiateCase, MultiGpuCase)
}
assert tuple(CASE_CLASSES) == CASES


def run_cases(ks: KernelSet, plans: Sequence[KernelPlan], cases: Sequence[str], cfg: CaseConfig,
              repeat: int = 1, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every case at every plan's kernel time, `repeat` times, under their ranges.

    Returns {`<case>` or `<case>/k=<us>us`: {"info": ..., "host": {timer: stats}}}.
    """
    say = progress or (lambda _msg: None)
    if any(p.kind != "spin" for p in plans):
        raise GapscopeError("the cases run spin kernels: use --kind spin with them")
    sweep = len(plans) > 1
    out: dict[str, Any] = {}
    for plan in plans:
        us = plan.target_us if sweep else None
        for name in cases:
            key = range_name(name, us)
            say(f"case {key}")
            case = CASE_CLASSES[name](ks, plan, cfg)
            case.warm_up()
            timer = HostTimer()
            for _ in range(repeat):
                case.run(us, timer)
            out[key] = {"info": case.info(), "host": timer.summary(), "warnings": case.warnings()}
            del case
    ks.cp.cuda.Device(ks.device).use()
    return out
