"""A stand-in for the small part of CuPy the workload uses, to test launch logic on a CPU.

It records every launch, copy, event record, stream wait and graph launch in `LOG`, and pretends
each kernel takes `KERNEL_US` of GPU time so that event timings are exact and hand-checkable.
`install(monkeypatch)` also puts a fake `cuda.bindings.runtime` and `cuda.bindings.driver` (the
graph calls the cases make through cuda-bindings) in place, sharing the same streams, capture and
log. Like the H200's CUDA 13.0 runtime, the fake runtime refuses the kernel nodes of driver-API
launches (CuPy's) in cudaGraphKernelNodeGetParams and, unless `runtime_set_cufunction`, in
cudaGraphExecKernelNodeSetParams too; `driver_nodes=False` makes it accept them.
"""

from __future__ import annotations

import enum
import sys
import types
from typing import Any

import numpy as np

LOG: list[tuple] = []
KERNEL_US = {"gapscope_spin": lambda args: 1.0 + 0.001 * int(args[2]),
             "gapscope_memory": lambda args: 2.0 + 1e-5 * int(args[2]) * int(args[3]),
             "gapscope_empty": lambda args: 1.0,
             "gapscope_tokens": lambda args: 1.0 + 0.001 * int(args[2]) * int(args[3]),
             "gapscope_attend": lambda args: 1.0 + 0.001 * int(args[2])}
COPY_US_PER_BYTE = 1e-5  # a fake host-to-device copy: 1 us + 10 us per MB


class _Clock:
    """A per-stream GPU clock in microseconds: kernels advance it."""

    now: dict[int, float] = {}


class _Array(np.ndarray):
    """A numpy array with CuPy's `.data.ptr` (a made-up device address)."""

    @property
    def data(self) -> Any:  # type: ignore[override]
        return types.SimpleNamespace(ptr=0x7000_0000 + id(self) % 0x1000_0000)


class Stream:
    _next = 1
    by_ptr: dict[int, "Stream"] = {}
    null: "Stream"

    def __init__(self, non_blocking: bool = False, ptr: int | None = None) -> None:
        if ptr is None:
            ptr = Stream._next
            Stream._next += 1
        self.ptr = ptr
        self.non_blocking = non_blocking
        self.capturing: list | None = None
        _Clock.now[self.ptr] = 0.0
        Stream.by_ptr[self.ptr] = self

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


def _run_nodes(stream_ptr: int, nodes: list) -> None:
    for name, args in nodes:
        _Clock.now[stream_ptr] += KERNEL_US[name](args)


class Graph:
    def __init__(self, launches: list) -> None:
        self.launches = launches

    def launch(self, stream: Stream) -> None:
        LOG.append(("graph_launch", stream.ptr, len(self.launches)))
        _run_nodes(stream.ptr, self.launches)


class Function:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, grid: tuple, block: tuple, args: tuple, stream: Stream | None = None,
                 shared_mem: int = 0) -> None:
        assert stream is not None, "the workload must name the stream of every launch"
        if stream.capturing is not None:
            stream.capturing.append((self.name, args))
            return
        LOG.append(("launch", stream.ptr, self.name, grid[0], block[0], shared_mem))
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
        return np.random.default_rng(0).random(min(n, 1024), dtype=dtype).view(_Array)


class _Device:
    current = 0

    def __init__(self, device: int) -> None:
        self.id = device
        self._prev: list[int] = []

    def use(self) -> None:
        _Device.current = self.id

    def __enter__(self) -> "_Device":
        self._prev.append(_Device.current)
        _Device.current = self.id
        LOG.append(("device", self.id))
        return self

    def __exit__(self, *exc: Any) -> None:
        _Device.current = self._prev.pop()

    def synchronize(self) -> None:
        LOG.append(("device_sync", self.id))


def _memcpy_async(dst: int, src: int, size: int, kind: int, stream: int) -> None:
    LOG.append(("memcpy", stream, int(size), kind))
    _Clock.now[stream] += 1.0 + COPY_US_PER_BYTE * size


# --------------------------------------------------------------------------- cuda-bindings


class _Err(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorInvalidDeviceFunction = 98
    cudaErrorGraphExecUpdateFailure = 910


class _CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1


class _CUfunction:
    """A driver function handle: an int for the runtime, its kernel name for the fake."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __int__(self) -> int:
        return 0x5000 + sum(map(ord, self.name))


class _DrvParams:
    def __init__(self, node: "_Node") -> None:
        self.func = _CUfunction(node.graph.nodes[node.index][0])
        self.gridDimX, self.gridDimY, self.gridDimZ = 4, 1, 1
        self.blockDimX, self.blockDimY, self.blockDimZ = 128, 1, 1
        self.sharedMemBytes = 0
        self.kernelParams: Any = None


class _Dim3:
    def __init__(self) -> None:
        self.x = self.y = self.z = 1


class _RtParams:
    def __init__(self) -> None:
        self.func: Any = None
        self.gridDim = self.blockDim = None
        self.sharedMemBytes = 0
        self.kernelParams: Any = None


class _Node:
    def __init__(self, graph: "_RtGraph", index: int) -> None:
        self.graph = graph
        self.index = index


class _Params:
    def __init__(self, node: _Node) -> None:
        self.node = node
        self.func = node.graph.nodes[node.index][0]
        self.kernelParams: Any = None


class _RtGraph:
    def __init__(self, nodes: list) -> None:
        self.nodes = [(name, tuple(args)) for name, args in nodes]


class _RtExec:
    def __init__(self, graph: _RtGraph) -> None:
        self.nodes = [list(n) for n in graph.nodes]


def _set_args(graph_exec: "_RtExec", node: "_Node", params: Any, func_name: str) -> None:
    values, kinds = params.kernelParams
    assert len(values) == len(kinds) and func_name == graph_exec.nodes[node.index][0]
    LOG.append(("set_params", node.index, tuple(values)))
    graph_exec.nodes[node.index][1] = tuple(values)


def _bindings_driver() -> types.ModuleType:
    drv = types.ModuleType("cuda.bindings.driver")
    drv.CUresult = _CUresult
    drv.CUgraphNode = drv.CUgraphExec = lambda v: v  # handles pass through

    def set_params(graph_exec: "_RtExec", node: "_Node", params: _DrvParams) -> tuple:
        _set_args(graph_exec, node, params, params.func.name)
        return (_CUresult.CUDA_SUCCESS,)

    drv.cuGraphKernelNodeGetParams = lambda node: (_CUresult.CUDA_SUCCESS, _DrvParams(node))
    drv.cuGraphExecKernelNodeSetParams = set_params
    return drv


def _bindings_runtime(driver_nodes: bool = True, runtime_set_cufunction: bool = False) -> types.ModuleType:
    rt = types.ModuleType("cuda.bindings.runtime")
    rt.cudaKernelNodeParams = _RtParams
    rt.dim3 = _Dim3
    ok = (_Err.cudaSuccess,)
    rt.cudaError_t = _Err
    rt.cudaStreamCaptureMode = types.SimpleNamespace(cudaStreamCaptureModeRelaxed=2)
    rt.cudaGraphNodeType = types.SimpleNamespace(cudaGraphNodeTypeKernel=0)
    rt.cudaGetErrorString = lambda err: (_Err.cudaSuccess, f"fake error {int(err)}".encode())

    def begin(stream: int, mode: int) -> tuple:
        LOG.append(("begin_capture", stream))
        Stream.by_ptr[stream].capturing = []
        return ok

    def end(stream: int) -> tuple:
        s = Stream.by_ptr[stream]
        graph = _RtGraph(s.capturing or [])
        s.capturing = None
        LOG.append(("end_capture", stream, len(graph.nodes)))
        return (_Err.cudaSuccess, graph)

    def instantiate(graph: _RtGraph, flags: int) -> tuple:
        LOG.append(("instantiate", len(graph.nodes)))
        return (_Err.cudaSuccess, _RtExec(graph))

    def launch(graph_exec: _RtExec, stream: int) -> tuple:
        LOG.append(("graph_launch", stream, len(graph_exec.nodes)))
        _run_nodes(stream, graph_exec.nodes)
        return ok

    def update(graph_exec: _RtExec, graph: _RtGraph) -> tuple:
        LOG.append(("exec_update", len(graph.nodes)))
        if [n[0] for n in graph_exec.nodes] != [n[0] for n in graph.nodes]:
            return (_Err.cudaErrorGraphExecUpdateFailure, None)
        graph_exec.nodes = [list(n) for n in graph.nodes]
        return (_Err.cudaSuccess, types.SimpleNamespace(result=0))

    def get_nodes(graph: _RtGraph, count: int = 0) -> tuple:
        nodes = [_Node(graph, i) for i in range(len(graph.nodes))][:count] if count else None
        return (_Err.cudaSuccess, nodes, len(graph.nodes))

    def get_params(node: _Node) -> tuple:
        if driver_nodes:
            return (_Err.cudaErrorInvalidDeviceFunction, None)
        return (_Err.cudaSuccess, _Params(node))

    def set_params(graph_exec: _RtExec, node: _Node, params: Any) -> tuple:
        if isinstance(params.func, str):
            name = params.func
        elif runtime_set_cufunction:
            name = graph_exec.nodes[node.index][0]
        else:
            return (_Err.cudaErrorInvalidDeviceFunction,)
        _set_args(graph_exec, node, params, name)
        return ok

    rt.cudaStreamBeginCapture = begin
    rt.cudaStreamEndCapture = end
    rt.cudaGraphInstantiate = instantiate
    rt.cudaGraphLaunch = launch
    rt.cudaGraphExecUpdate = update
    rt.cudaGraphGetNodes = get_nodes
    rt.cudaGraphNodeGetType = lambda node: (_Err.cudaSuccess, 0)
    rt.cudaGraphKernelNodeGetParams = get_params
    rt.cudaGraphExecKernelNodeSetParams = set_params
    rt.cudaGraphDestroy = lambda graph: (LOG.append(("graph_destroy",)), ok)[1]
    rt.cudaGraphExecDestroy = lambda graph_exec: (LOG.append(("exec_destroy",)), ok)[1]
    return rt


def install(monkeypatch: Any, devices: int = 1, bindings: bool = True, driver_nodes: bool = True,
            runtime_set_cufunction: bool = False) -> types.ModuleType:
    """Put a fake `cupy` (and, with `bindings`, fake `cuda.bindings.runtime` and `.driver`)
    into sys.modules (undone by monkeypatch) and clear the log."""
    LOG.clear()
    _Clock.now.clear()
    Stream.by_ptr.clear()
    Stream.null = Stream(ptr=0)
    _Device.current = 0
    cp = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: devices,
        getDeviceProperties=lambda d: {"name": b"Fake GPU", "multiProcessorCount": 4},
        memcpyAsync=_memcpy_async,
        memcpyHostToDevice=1,
    )
    cuda.runtime = runtime
    cuda.Stream = Stream
    cuda.Event = Event
    cuda.Device = _Device
    cuda.get_elapsed_time = lambda a, b: (b.time - a.time) / 1000.0  # ms
    cuda.alloc_pinned_memory = lambda n: types.SimpleNamespace(ptr=0x1000, size=n)
    nvtx = types.ModuleType("cupy.cuda.nvtx")
    nvtx.RangePush = lambda name: LOG.append(("push", name))
    nvtx.RangePop = lambda: LOG.append(("pop",))
    cuda.nvtx = nvtx
    cp.cuda = cuda
    cp.RawModule = RawModule
    cp.random = types.SimpleNamespace(default_rng=lambda seed=None: _Rng())
    cp.float32 = np.float32
    cp.uint8 = np.uint8
    cp.int64 = np.int64
    cp.int32 = np.int32
    cp.empty_like = np.empty_like
    cp.empty = lambda n, dtype=np.float32: np.empty(min(n, 1024), dtype=dtype).view(_Array)
    cp.__version__ = "0.0-fake"
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nvtx", nvtx)
    monkeypatch.setitem(sys.modules, "nvtx", None)  # force the CuPy NVTX fallback
    if bindings:
        pkg = types.ModuleType("cuda")
        sub = types.ModuleType("cuda.bindings")
        rt = _bindings_runtime(driver_nodes, runtime_set_cufunction)
        drv = _bindings_driver()
        pkg.bindings = sub
        sub.runtime, sub.driver = rt, drv
        monkeypatch.setitem(sys.modules, "cuda", pkg)
        monkeypatch.setitem(sys.modules, "cuda.bindings", sub)
        monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", rt)
        monkeypatch.setitem(sys.modules, "cuda.bindings.driver", drv)
    else:
        for name in ("cuda", "cuda.bindings", "cuda.bindings.runtime", "cuda.bindings.driver",
                     "cuda.cudart"):
            monkeypatch.setitem(sys.modules, name, None)
    return cp
