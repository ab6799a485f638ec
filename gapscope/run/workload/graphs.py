"""CUDA graph calls that CuPy does not expose, through cuda-bindings' runtime module.

CuPy's `Stream.end_capture()` instantiates the captured graph and keeps only the executable
one, so it cannot time capture and instantiation apart, update an executable graph from a fresh
capture (`cudaGraphExecUpdate`) or set the parameters of its kernel nodes
(`cudaGraphExecKernelNodeSetParams`). `GraphApi` does those on CuPy's streams (by handle), with
CuPy's kernels launched in between: capture records whatever is launched into the stream.

Kernel-node parameters: CuPy launches through the driver API (`cuLaunchKernel` of a
CUfunction), and the runtime's `cudaGraphKernelNodeGetParams` refuses such nodes with
cudaErrorInvalidDeviceFunction (seen on the H200, CUDA 13.0, cuda-bindings 13.3.1). Then the
node's parameters come from the driver's `cuGraphKernelNodeGetParams`; setting them tries the
runtime's `cudaGraphExecKernelNodeSetParams` once with the same function, grid, block and
shared memory, and uses the driver's `cuGraphExecKernelNodeSetParams` (the same operation) if
the runtime refuses. `GraphApi.params_api` says which pair ran.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

from gapscope.errors import GapscopeError


def load_driver() -> Any:
    """`cuda.bindings.driver`, else the older `cuda.cuda`."""
    try:
        from cuda.bindings import driver
        return driver
    except ImportError:
        from cuda import cuda  # cuda-python < 12.6
        return cuda


def load_runtime() -> Any:
    """`cuda.bindings.runtime` (cuda-bindings >= 12.6), else the older `cuda.cudart`."""
    try:
        from cuda.bindings import runtime
        return runtime
    except ImportError:
        pass
    try:
        from cuda import cudart  # cuda-python < 12.6
        return cudart
    except ImportError as exc:
        raise GapscopeError(
            "this case needs cuda-bindings (pip install cuda-bindings, the CUDA runtime's "
            f"Python bindings) for the graph calls CuPy lacks; import failed with: {exc}"
        ) from exc


class GraphApi:
    """Capture, instantiate, launch, update and destroy CUDA graphs by handle."""

    def __init__(self, runtime: Any | None = None) -> None:
        self.rt = runtime if runtime is not None else load_runtime()
        self._ok = self.rt.cudaError_t.cudaSuccess
        self._drv: Any = None
        #: Which get/set pair kernel-node parameters go through: "runtime" (cudaGraphKernelNode-
        #: GetParams + cudaGraphExecKernelNodeSetParams), "driver+runtime" (cuGraphKernelNode-
        #: GetParams + cudaGraphExecKernelNodeSetParams) or "driver" (both cu*); None until used.
        self.params_api: str | None = None
        self._rt_params: dict[int, tuple[Any, Any]] = {}  # id -> (driver params, runtime twin)

    @property
    def drv(self) -> Any:
        if self._drv is None:
            self._drv = load_driver()
        return self._drv

    def _check_driver(self, result: Any, what: str) -> Any:
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != self.drv.CUresult.CUDA_SUCCESS:
            raise GapscopeError(f"{what} failed: {err}")
        return values[0] if len(values) == 1 else tuple(values) if values else None

    def _check(self, result: Any, what: str) -> Any:
        """Unpack a cuda-bindings result tuple (error, *values); raise on an error."""
        err, *values = result if isinstance(result, tuple) else (result,)
        if err != self._ok:
            try:
                text = self.rt.cudaGetErrorString(err)[1]
                text = text.decode() if isinstance(text, bytes) else str(text)
            except Exception:  # noqa: BLE001 - the name is enough
                text = str(err)
            raise GapscopeError(f"{what} failed: {text}")
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    # ---- capture and instantiation

    def begin_capture(self, stream: int) -> None:
        """Start capturing the stream (relaxed mode: no call is refused while it runs)."""
        mode = self.rt.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed
        self._check(self.rt.cudaStreamBeginCapture(stream, mode), "cudaStreamBeginCapture")

    def end_capture(self, stream: int) -> Any:
        """Stop capturing; the captured (not instantiated) graph."""
        return self._check(self.rt.cudaStreamEndCapture(stream), "cudaStreamEndCapture")

    def instantiate(self, graph: Any) -> Any:
        """The executable graph of `graph`."""
        return self._check(self.rt.cudaGraphInstantiate(graph, 0), "cudaGraphInstantiate")

    def launch(self, graph_exec: Any, stream: int) -> None:
        self._check(self.rt.cudaGraphLaunch(graph_exec, stream), "cudaGraphLaunch")

    def destroy(self, graph: Any = None, graph_exec: Any = None) -> None:
        if graph_exec is not None:
            self._check(self.rt.cudaGraphExecDestroy(graph_exec), "cudaGraphExecDestroy")
        if graph is not None:
            self._check(self.rt.cudaGraphDestroy(graph), "cudaGraphDestroy")

    # ---- updates

    def exec_update(self, graph_exec: Any, graph: Any) -> None:
        """Update `graph_exec` in place from the topologically identical `graph`."""
        self._check(self.rt.cudaGraphExecUpdate(graph_exec, graph), "cudaGraphExecUpdate")

    def kernel_nodes(self, graph: Any) -> list[Any]:
        """The graph's kernel nodes, in the order cudaGraphGetNodes lists them."""
        _, count = self._check(self.rt.cudaGraphGetNodes(graph, 0), "cudaGraphGetNodes")
        nodes, _ = self._check(self.rt.cudaGraphGetNodes(graph, count), "cudaGraphGetNodes")
        kernel = self.rt.cudaGraphNodeType.cudaGraphNodeTypeKernel
        return [n for n in nodes
                if self._check(self.rt.cudaGraphNodeGetType(n), "cudaGraphNodeGetType") == kernel]

    def node_params(self, node: Any) -> Any:
        """The kernel node's parameters (function, grid, block, shared memory, arguments): the
        runtime's cudaKernelNodeParams, or the driver's CUDA_KERNEL_NODE_PARAMS for a node the
        runtime refuses (a kernel launched through the driver API, as CuPy launches)."""
        if self.params_api in (None, "runtime"):
            result = self.rt.cudaGraphKernelNodeGetParams(node)
            if result[0] == self._ok:
                self.params_api = "runtime"
                return result[1]
            if self.params_api == "runtime":
                self._check(result, "cudaGraphKernelNodeGetParams")
            self.params_api = "driver+runtime"
        drv = self.drv
        return self._check_driver(drv.cuGraphKernelNodeGetParams(_handle(drv.CUgraphNode, node)),
                                  "cuGraphKernelNodeGetParams")

    def set_kernel_args(self, graph_exec: Any, node: Any, params: Any, values: Sequence[Any],
                        types: Sequence[Any]) -> None:
        """Give the node's kernel new arguments in `graph_exec` (cudaGraphExecKernelNodeSetParams,
        or its driver twin; see the module docstring); `params` is the node's own (node_params),
        so function, grid, block and shared memory stay."""
        args = (tuple(values), tuple(types))
        if self.params_api == "driver+runtime":
            try:
                if id(params) not in self._rt_params:  # built once per node, as an app would
                    self._rt_params[id(params)] = (params, self._runtime_params(params))
                twin = self._rt_params[id(params)][1]  # (params kept: its id stays unique)
                twin.kernelParams = args
                result = self.rt.cudaGraphExecKernelNodeSetParams(graph_exec, node, twin)
                ok = result[0] == self._ok
            except Exception:  # noqa: BLE001 - a binding that cannot express it: use the driver
                ok = False
            if ok:
                return
            self.params_api = "driver"
        params.kernelParams = args
        if self.params_api == "driver":
            drv = self.drv
            self._check_driver(drv.cuGraphExecKernelNodeSetParams(
                _handle(drv.CUgraphExec, graph_exec), _handle(drv.CUgraphNode, node), params),
                "cuGraphExecKernelNodeSetParams")
        else:
            self._check(self.rt.cudaGraphExecKernelNodeSetParams(graph_exec, node, params),
                        "cudaGraphExecKernelNodeSetParams")

    def _runtime_params(self, dp: Any) -> Any:
        """A runtime cudaKernelNodeParams carrying a driver node's function and shape."""
        rt = self.rt
        p = rt.cudaKernelNodeParams()
        p.func = int(dp.func)
        grid, block = rt.dim3(), rt.dim3()
        grid.x, grid.y, grid.z = dp.gridDimX, dp.gridDimY, dp.gridDimZ
        block.x, block.y, block.z = dp.blockDimX, dp.blockDimY, dp.blockDimZ
        p.gridDim, p.blockDim = grid, block
        p.sharedMemBytes = dp.sharedMemBytes
        return p


def _handle(kind: Any, obj: Any) -> Any:
    """A runtime handle (cudaGraphNode_t, cudaGraphExec_t) as the driver's type of it."""
    try:
        return kind(int(obj))
    except (TypeError, ValueError):
        return obj


#: ctypes of the spin kernel's arguments (out, in, iterations) for kernel-node parameters.
SPIN_ARG_TYPES = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong)
