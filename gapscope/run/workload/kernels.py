"""Micro-kernels with a duration set in microseconds, and their calibration on the device.

Three CuPy RawKernels:
- `spin`: compute-bound, a dependent chain of `iters` FMAs per thread on one block per SM;
- `memory`: memory-bound, `passes` sweeps of y = 0.999 * x + y over `elements` floats;
- `empty`: does nothing; back to back it shows the launch floor of the GPU.

A kernel's *time* here is its back-to-back time: the stream time one kernel takes when the
launch queue never runs dry (measured with CUDA events behind a long blocker kernel, so the
CPU's launch cost is hidden). It is linear in the work parameter, t = intercept + slope * work,
so calibration fits that line on the device and solves it for the target. The solving and
fitting are plain functions, tested without a GPU.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from gapscope.errors import GapscopeError

SOURCE = r"""
extern "C" __global__ void gapscope_spin(float* __restrict__ out,
                                         const float* __restrict__ in,
                                         long long iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float x = in[i];
    const float a = 1.0000001f, b = 1.0e-7f;
    for (long long k = 0; k < iters; ++k) {
        x = fmaf(x, a, b);
    }
    out[i] = x;
}

extern "C" __global__ void gapscope_memory(float* __restrict__ y,
                                           const float* __restrict__ x,
                                           long long n, int passes) {
    long long stride = (long long)gridDim.x * blockDim.x;
    long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (int p = 0; p < passes; ++p) {
        for (long long i = start; i < n; i += stride) {
            y[i] = fmaf(x[i], 0.999f, y[i]);
        }
    }
}

extern "C" __global__ void gapscope_empty() {}
"""

SPIN_BLOCK = 128
MEMORY_BLOCK = 256
MEMORY_CAPACITY = 1 << 26  # floats per buffer (256 MiB): several times the H200's 60 MB L2


def require_cupy() -> Any:
    """Import CuPy and check that a CUDA GPU is visible; raise a GapscopeError if not."""
    try:
        import cupy
    except ImportError as exc:
        raise GapscopeError(
            "CuPy is not installed: the workload needs it "
            "(pip install cupy-cuda12x nvtx, or cupy-cuda13x; in a gapscope checkout "
            "pip install -e '.[cuda12]' or -e '.[cuda13]'); "
            f"import failed with: {exc}"
        ) from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError: no driver, no device
        raise GapscopeError(f"no usable CUDA GPU: {exc}") from exc
    if count < 1:
        raise GapscopeError("no CUDA GPU found")
    return cupy


# --------------------------------------------------------------------------- pure math


def fit_line(work: Sequence[float], times_us: Sequence[float]) -> tuple[float, float]:
    """Least-squares line t = intercept + slope * work; returns (intercept, slope)."""
    if len(work) != len(times_us) or len(work) < 2:
        raise ValueError("fit_line needs at least two (work, time) points of equal count")
    mean_w = sum(work) / len(work)
    mean_t = sum(times_us) / len(times_us)
    sxx = sum((w - mean_w) ** 2 for w in work)
    if sxx == 0:
        raise ValueError("fit_line needs at least two distinct work values")
    sxy = sum((w - mean_w) * (t - mean_t) for w, t in zip(work, times_us))
    slope = sxy / sxx
    return mean_t - slope * mean_w, slope


def solve_work(intercept_us: float, slope_us: float, target_us: float) -> int:
    """Work parameter whose predicted time is target_us: round((target - intercept) / slope), >= 0."""
    if slope_us <= 0:
        raise ValueError(f"calibration slope must be positive, got {slope_us}")
    return max(0, round((target_us - intercept_us) / slope_us))


def split_elements(total: int, capacity: int = MEMORY_CAPACITY) -> tuple[int, int]:
    """Split a memory-kernel element count into (elements per pass, passes) within capacity."""
    total = max(1, int(total))
    passes = math.ceil(total / capacity)
    return math.ceil(total / passes), passes


def blocker_work(slope_us: float, queued: int, per_launch_us: float = 20.0,
                 margin_us: float = 2000.0) -> int:
    """Spin iterations of a blocker kernel that outlasts `queued` launches from the CPU."""
    return math.ceil((queued * per_launch_us + margin_us) / slope_us)


# --------------------------------------------------------------------------- plans


@dataclass
class KernelPlan:
    """One calibrated kernel: what to launch for a target time, and what it measured."""

    kind: str
    target_us: float | None
    work: int  # spin: FMA iterations per thread; memory: total elements; empty: 0
    grid: int
    block: int
    measured_us: float | None = None  # back-to-back time per kernel after calibration
    intercept_us: float | None = None
    slope_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KernelPlan":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass
class Calibration:
    """All plans of one run plus the device's floors, as written to plan.json."""

    device: int
    gpu: str
    sm_count: int
    floor_us: float  # back-to-back time per empty kernel: the GPU-side launch floor
    launch_us: float  # CPU wall time per empty-kernel launch from Python (eager)
    plans: list[KernelPlan] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["plans"] = [p.to_dict() for p in self.plans]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Calibration":
        plans = [KernelPlan.from_dict(p) for p in data.get("plans", [])]
        fields = {k: data[k] for k in ("device", "gpu", "sm_count", "floor_us", "launch_us")}
        return cls(plans=plans, **fields)


def calibration_warnings(calib: Calibration, tolerance: float = 0.1) -> list[str]:
    """One line per plan whose measured time is off its target by more than `tolerance`."""
    out = []
    for p in calib.plans:
        if not p.target_us or p.measured_us is None:
            continue
        if p.work == 0 and p.measured_us > (1 + tolerance) * p.target_us:
            out.append(f"k={p.target_us:g}us is below the {p.kind} kernel's back-to-back floor: "
                       f"it runs at {p.measured_us:.2f} us")
        elif p.work and abs(p.measured_us - p.target_us) > tolerance * p.target_us:
            out.append(f"k={p.target_us:g}us: the {p.kind} kernel's calibration reached "
                       f"{p.measured_us:.2f} us")
    return out


# --------------------------------------------------------------------------- device side


class KernelSet:
    """The compiled kernels and their random input buffers on one device."""

    def __init__(self, device: int = 0, seed: int = 1234) -> None:
        cp = require_cupy()
        self.cp = cp
        self.device = device
        try:
            cp.cuda.Device(device).use()
        except Exception as exc:
            raise GapscopeError(f"cannot use CUDA device {device}: {exc}") from exc
        props = cp.cuda.runtime.getDeviceProperties(device)
        name = props["name"]
        self.gpu = name.decode() if isinstance(name, bytes) else str(name)
        self.sm_count = int(props["multiProcessorCount"])
        module = cp.RawModule(code=SOURCE)
        self.spin = module.get_function("gapscope_spin")
        self.memory = module.get_function("gapscope_memory")
        self.empty = module.get_function("gapscope_empty")
        rng = cp.random.default_rng(seed)
        n_spin = self.sm_count * SPIN_BLOCK
        # Random inputs, never zeros: values in [0.5, 1.5).
        self.spin_in = rng.random(n_spin, dtype=cp.float32) + 0.5
        self.spin_out = cp.empty_like(self.spin_in)
        self._mem_x = None
        self._mem_y = None

    def _memory_buffers(self) -> tuple[Any, Any]:
        if self._mem_x is None:
            rng = self.cp.random.default_rng(4321)
            self._mem_x = rng.random(MEMORY_CAPACITY, dtype=self.cp.float32) + 0.5
            self._mem_y = rng.random(MEMORY_CAPACITY, dtype=self.cp.float32) + 0.5
        return self._mem_x, self._mem_y

    def launcher(self, kind: str, work: int) -> tuple[Callable[[Any], None], int, int]:
        """A function launch(stream) for one kernel of `kind` with `work`, and its grid, block."""
        cp = self.cp
        if kind == "spin":
            grid, block = self.sm_count, SPIN_BLOCK
            fn, args = self.spin, (self.spin_out, self.spin_in, cp.int64(work))
        elif kind == "memory":
            x, y = self._memory_buffers()
            n, passes = split_elements(work)
            grid, block = self.sm_count * 4, MEMORY_BLOCK
            fn, args = self.memory, (y, x, cp.int64(n), cp.int32(passes))
        elif kind == "empty":
            grid, block = 1, 32
            fn, args = self.empty, ()
        else:
            raise GapscopeError(f"unknown kernel kind {kind!r} (spin, memory or empty)")
        g, b = (grid,), (block,)

        def launch(stream: Any) -> None:
            fn(g, b, args, stream=stream)

        return launch, grid, block

    # ---- measurements

    def single_us(self, launch: Callable[[Any], None], stream: Any, reps: int = 5) -> float:
        """Median event time of one launch, in microseconds (includes ~1 us event overhead)."""
        cp = self.cp
        times = []
        for _ in range(reps):
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            launch(stream)
            stop.record(stream)
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) * 1000.0)
        return statistics.median(times)

    def back_to_back_us(self, launch: Callable[[Any], None], stream: Any, blocker: int,
                        count: int = 200) -> float:
        """Stream time per kernel of `count` launches queued behind a blocker spin kernel."""
        cp = self.cp
        block_launch, _, _ = self.launcher("spin", blocker)
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        block_launch(stream)
        start.record(stream)
        for _ in range(count):
            launch(stream)
        stop.record(stream)
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) * 1000.0 / count

    def launch_wall_us(self, launch: Callable[[Any], None], stream: Any, count: int = 2000) -> float:
        """CPU wall time per launch from Python, in microseconds."""
        import time

        stream.synchronize()
        t0 = time.perf_counter()
        for _ in range(count):
            launch(stream)
        t1 = time.perf_counter()
        stream.synchronize()
        return (t1 - t0) * 1e6 / count


def calibrate(targets_us: Sequence[float], kind: str = "spin", device: int = 0,
              progress: Callable[[str], None] | None = None,
              kernels: KernelSet | None = None) -> Calibration:
    """Calibrate one kernel per target time on the device; returns the plans and floors."""
    ks = kernels or KernelSet(device)
    cp = ks.cp
    say = progress or (lambda _msg: None)
    stream = cp.cuda.Stream(non_blocking=True)

    # Warm-up: compile and load every kernel once.
    for k in ("spin", "empty"):
        launch, _, _ = ks.launcher(k, 1)
        launch(stream)
    stream.synchronize()

    # Spin slope from long single kernels (event overhead negligible there).
    say("spin slope")
    w1, w2 = 1 << 16, 1 << 18
    s1 = ks.single_us(ks.launcher("spin", w1)[0], stream)
    s2 = ks.single_us(ks.launcher("spin", w2)[0], stream)
    _, spin_slope = fit_line([w1, w2], [s1, s2])
    if spin_slope <= 0:
        raise GapscopeError(f"spin-kernel calibration failed: times {s1:.2f} and {s2:.2f} us")
    blocker = blocker_work(spin_slope, 200)

    say("launch floor")
    empty_launch = ks.launcher("empty", 0)[0]
    floor = ks.back_to_back_us(empty_launch, stream, blocker)
    launch_us = ks.launch_wall_us(empty_launch, stream)

    calib = Calibration(device=device, gpu=ks.gpu, sm_count=ks.sm_count, floor_us=floor,
                        launch_us=launch_us)
    for target in targets_us:
        say(f"{kind} {target:g} us")
        calib.plans.append(_calibrate_one(ks, stream, kind, float(target), spin_slope, blocker))
    return calib


def _calibrate_one(ks: KernelSet, stream: Any, kind: str, target: float, spin_slope: float,
                   blocker: int) -> KernelPlan:
    """Fit the back-to-back line for one kind, solve for target, refine once, measure."""
    if kind == "empty":
        launch, grid, block = ks.launcher("empty", 0)
        t = ks.back_to_back_us(launch, stream, blocker)
        return KernelPlan("empty", target, 0, grid, block, measured_us=t)

    if kind == "spin":
        lo, hi = 0, max(1, round(target / spin_slope))
    else:
        lo, hi = 1 << 12, 1 << 25  # 16 KiB .. 128 MiB per buffer: both out of L2 reuse

    def b2b(work: int) -> float:
        count = 200 if target < 100 else 20
        return ks.back_to_back_us(ks.launcher(kind, work)[0], stream,
                                  blocker_work(spin_slope, count), count)

    t_lo, t_hi = b2b(lo), b2b(hi)
    intercept, slope = fit_line([lo, hi], [t_lo, t_hi])
    work = solve_work(intercept, slope, target)
    measured = b2b(work)
    prev = (lo, t_lo)
    for _ in range(3):  # secant steps through the last two points, for kernels not quite linear
        if abs(measured - target) <= 0.02 * target or work == prev[0] or measured == prev[1]:
            break
        intercept, slope = fit_line([prev[0], work], [prev[1], measured])
        if slope <= 0:
            break
        prev = (work, measured)
        work = solve_work(intercept, slope, target)
        measured = b2b(work)
    _, grid, block = ks.launcher(kind, work)
    return KernelPlan(kind, target, work, grid, block, measured_us=measured,
                      intercept_us=intercept, slope_us=slope)
