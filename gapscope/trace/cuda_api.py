"""CUDA runtime and driver API calls by what they do, as the analysis needs to tell them apart;
AMD's HIP calls (PyTorch profiler traces recorded on ROCm) beside their CUDA twins.

Names are without nsys's ``_vNNNN`` version suffix (:func:`base_name` strips it). Gap attribution
(docs/metrics.md, "Gap attribution") reads a launching thread's calls by their role: a *launch*
call issues GPU work, a *sync* call blocks until GPU work is done, a *setup* call prepares
resources and issues no work; every other call is host time.
"""

from __future__ import annotations

import re

_SUFFIX = re.compile(r"_v\d+$")


def base_name(name: str) -> str:
    """An API name without nsys's ``_vNNNN`` version suffix."""
    return _SUFFIX.sub("", name)


#: Calls that never launch GPU work nor block on it, left out of the ``api`` frame unless every
#: call is asked for: in PyTorch and CuPy traces they are up to half of all calls. (A stream
#: wait's issue time is read from its SYNCHRONIZATION record instead.) Gap attribution counts
#: the time a thread spends in them as host time, like the time between calls.
QUIET_CALLS = frozenset({
    "cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord", "cuEventRecordWithFlags",
    "cudaStreamWaitEvent", "cuStreamWaitEvent", "cudaEventQuery", "cuEventQuery",
    "cudaEventElapsedTime", "cuEventElapsedTime",
    "cudaGetDevice", "cudaSetDevice", "cudaGetDeviceCount", "cudaGetLastError", "cudaPeekAtLastError",
    "cudaStreamIsCapturing", "cudaStreamGetCaptureInfo", "cuStreamIsCapturing", "cuStreamGetCaptureInfo",
    "cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxGetDevice", "cuDevicePrimaryCtxGetState",
    "cuKernelGetName", "cuKernelGetAttribute", "cuKernelGetFunction", "cuGetProcAddress",
    "cudaFuncGetAttributes", "cudaFuncSetAttribute", "cuFuncGetAttribute", "cuFuncSetAttribute",
    "cudaDeviceGetAttribute", "cuDeviceGetAttribute", "cudaPointerGetAttributes", "cuPointerGetAttribute",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuModuleGetFunction", "cuLibraryGetKernel", "cuLibraryGetModule",
}) | frozenset({  # HIP
    "hipEventRecord", "hipEventRecordWithFlags", "hipStreamWaitEvent", "hipEventQuery", "hipEventElapsedTime",
    "hipGetDevice", "hipSetDevice", "hipGetDeviceCount", "hipGetLastError", "hipPeekAtLastError",
    "hipStreamIsCapturing", "hipStreamGetCaptureInfo", "hipCtxGetCurrent", "hipCtxSetCurrent", "hipCtxGetDevice",
    "hipDevicePrimaryCtxGetState", "hipFuncGetAttributes", "hipFuncSetAttribute", "hipFuncGetAttribute",
    "hipDeviceGetAttribute", "hipPointerGetAttributes", "hipPointerGetAttribute",
    "hipOccupancyMaxActiveBlocksPerMultiprocessor", "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor",
    "hipModuleGetFunction", "hipModuleGetGlobal", "hipGetFuncBySymbol", "hipGetDeviceProperties",
    "hipGetDevicePropertiesR0600", "hipGetDevicePropertiesR0000", "hipStreamGetDevice", "hipDeviceGet",
    "hipDriverGetVersion", "hipRuntimeGetVersion", "hipGetDeviceFlags", "hipStreamQuery", "hipStreamGetFlags",
    "hipStreamGetPriority", "hipDeviceGetStreamPriorityRange",
})

#: Synchronizing calls: the calling thread blocks until GPU work is done.
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
    "cudaMemcpyPeer", "cudaMemset", "cudaMemset2D", "cudaMemset3D",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpyPeer", "cuMemcpy2D", "cuMemcpy3D",
}) | frozenset({  # HIP; hipMemcpyWithStream is PyTorch's blocking copy on ROCm (cudaMemcpy's twin)
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipCtxSynchronize",
    "hipMemcpy", "hipMemcpyWithStream", "hipMemcpy2D", "hipMemcpy3D", "hipMemcpyToSymbol", "hipMemcpyFromSymbol",
    "hipMemcpyPeer", "hipMemcpyHtoD", "hipMemcpyDtoH", "hipMemcpyDtoD", "hipMemcpyParam2D", "hipMemset",
    "hipMemset2D", "hipMemset3D",
})

#: Calls that launch a whole CUDA graph.
GRAPH_LAUNCH_CALLS = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})

#: Calls that launch one kernel.
KERNEL_LAUNCH_CALLS = frozenset({"cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernel",
                                 "cudaLaunchKernelExC",
                                 "hipLaunchKernel", "hipLaunchKernelExC", "hipExtLaunchKernel", "hipModuleLaunchKernel",
                                 "hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel", "hipDrvLaunchKernelEx"})

#: Asynchronous copies, memsets and other stream work issued from the host (``launch`` role).
ASYNC_WORK_CALLS = frozenset({
    "cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpy3DAsync", "cudaMemcpyToSymbolAsync",
    "cudaMemcpyFromSymbolAsync", "cudaMemcpyPeerAsync", "cudaMemcpy3DPeerAsync", "cudaMemcpy2DToArrayAsync",
    "cudaMemcpy2DFromArrayAsync", "cudaMemsetAsync", "cudaMemset2DAsync", "cudaMemset3DAsync",
    "cudaMemPrefetchAsync", "cudaLaunchHostFunc", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cudaLaunch",
    "cuMemcpyAsync", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync", "cuMemcpyPeerAsync",
    "cuMemcpy2DAsync", "cuMemcpy3DAsync", "cuMemcpy3DPeerAsync", "cuMemcpyHtoAAsync", "cuMemcpyAtoHAsync",
    "cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async", "cuMemsetD2D8Async", "cuMemsetD2D16Async",
    "cuMemsetD2D32Async", "cuMemPrefetchAsync", "cuLaunchHostFunc", "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernelMultiDevice", "cuLaunchGrid", "cuLaunchGridAsync",
}) | frozenset({  # HIP
    "hipMemcpyAsync", "hipMemcpy2DAsync", "hipMemcpy3DAsync", "hipMemcpyToSymbolAsync", "hipMemcpyFromSymbolAsync",
    "hipMemcpyPeerAsync", "hipMemcpyHtoDAsync", "hipMemcpyDtoHAsync", "hipMemcpyDtoDAsync",
    "hipMemcpyParam2DAsync", "hipMemcpy2DToArrayAsync", "hipMemsetAsync", "hipMemset2DAsync",
    "hipMemset3DAsync", "hipMemsetD8Async", "hipMemsetD16Async", "hipMemsetD32Async", "hipMemPrefetchAsync",
    "hipLaunchHostFunc", "hipLaunchCooperativeKernel", "hipLaunchCooperativeKernelMultiDevice",
    "hipModuleLaunchCooperativeKernel", "hipExtLaunchMultiKernelMultiDevice",
})

#: Calls that issue GPU work: kernel and graph launches, asynchronous copies and memsets.
LAUNCH_CALLS = KERNEL_LAUNCH_CALLS | GRAPH_LAUNCH_CALLS | ASYNC_WORK_CALLS

#: Calls that prepare resources and issue no work: module loading (lazy loading included),
#: device and host allocation, stream and event creation, graph capture, instantiation and
#: upload, context creation.
SETUP_CALLS = frozenset({
    # modules and libraries (CUDA lazy loading calls these on a kernel's first launch)
    "cuLibraryLoadData", "cuLibraryLoadFromFile", "cuLibraryUnload", "cuModuleLoad", "cuModuleLoadData",
    "cuModuleLoadDataEx", "cuModuleLoadFatBinary", "cuModuleUnload", "cuLinkCreate", "cuLinkAddData",
    "cuLinkAddFile", "cuLinkComplete", "cuLinkDestroy", "cudaLibraryLoadData", "cudaLibraryLoadFromFile",
    "cudaLibraryUnload",
    # device memory
    "cudaMalloc", "cudaMallocManaged", "cudaMallocPitch", "cudaMalloc3D", "cudaMallocArray",
    "cudaMalloc3DArray", "cudaMallocMipmappedArray", "cudaMallocAsync", "cudaMallocFromPoolAsync",
    "cudaFree", "cudaFreeArray", "cudaFreeMipmappedArray", "cudaFreeAsync", "cudaMemPoolCreate",
    "cudaMemPoolDestroy", "cudaMemPoolTrimTo",
    "cuMemAlloc", "cuMemAllocManaged", "cuMemAllocPitch", "cuMemAllocAsync", "cuMemAllocFromPoolAsync",
    "cuMemFree", "cuMemFreeAsync", "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap",
    "cuMemMapArrayAsync", "cuMemSetAccess", "cuMemAddressReserve", "cuMemAddressFree", "cuMemPoolCreate",
    "cuMemPoolDestroy", "cuMemPoolTrimTo", "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle",
    "cuArrayCreate", "cuArray3DCreate", "cuArrayDestroy",
    # host memory
    "cudaHostAlloc", "cudaMallocHost", "cudaFreeHost", "cudaHostRegister", "cudaHostUnregister",
    "cuMemHostAlloc", "cuMemAllocHost", "cuMemFreeHost", "cuMemHostRegister", "cuMemHostUnregister",
    # streams and events
    "cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority", "cudaStreamDestroy",
    "cuStreamCreate", "cuStreamCreateWithPriority", "cuStreamDestroy",
    "cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventDestroy", "cuEventCreate", "cuEventDestroy",
    # graphs: capture, construction, instantiation, upload, teardown
    "cudaStreamBeginCapture", "cudaStreamEndCapture", "cudaStreamBeginCaptureToGraph", "cuStreamBeginCapture",
    "cuStreamEndCapture", "cuStreamBeginCaptureToGraph", "cudaGraphCreate", "cuGraphCreate",
    "cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams",
    "cuGraphInstantiate", "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams",
    "cudaGraphUpload", "cuGraphUpload", "cudaGraphDestroy", "cudaGraphExecDestroy", "cuGraphDestroy",
    "cuGraphExecDestroy", "cudaGraphAddKernelNode", "cudaGraphAddMemcpyNode", "cudaGraphAddMemsetNode",
    "cudaGraphAddNode", "cudaGraphAddEmptyNode", "cudaGraphAddHostNode", "cudaGraphAddChildGraphNode",
    "cudaGraphAddEventRecordNode", "cudaGraphAddEventWaitNode", "cudaGraphClone", "cuGraphAddNode",
    "cuGraphAddKernelNode", "cuGraphAddMemcpyNode", "cuGraphAddMemsetNode", "cuGraphAddEmptyNode",
    "cuGraphAddHostNode", "cuGraphAddChildGraphNode", "cuGraphAddEventRecordNode", "cuGraphAddEventWaitNode",
    "cuGraphClone",
    # contexts and devices
    "cuInit", "cuCtxCreate", "cuCtxDestroy", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxReset", "cudaDeviceReset", "cudaDeviceSetLimit", "cudaInitDevice",
}) | frozenset({  # HIP
    "hipMalloc", "hipMallocManaged", "hipMallocPitch", "hipMalloc3D", "hipMallocArray", "hipMalloc3DArray",
    "hipMallocAsync", "hipMallocFromPoolAsync", "hipExtMallocWithFlags", "hipFree", "hipFreeArray",
    "hipFreeAsync", "hipMemPoolCreate", "hipMemPoolDestroy", "hipMemPoolTrimTo", "hipMemCreate",
    "hipMemRelease", "hipMemMap", "hipMemUnmap", "hipMemSetAccess", "hipMemAddressReserve", "hipMemAddressFree",
    "hipHostMalloc", "hipHostAlloc", "hipMallocHost", "hipHostFree", "hipFreeHost", "hipHostRegister",
    "hipHostUnregister", "hipModuleLoad", "hipModuleLoadData", "hipModuleLoadDataEx", "hipModuleUnload",
    "hipStreamCreate", "hipStreamCreateWithFlags", "hipStreamCreateWithPriority", "hipStreamDestroy",
    "hipEventCreate", "hipEventCreateWithFlags", "hipEventDestroy", "hipStreamBeginCapture",
    "hipStreamBeginCaptureToGraph", "hipStreamEndCapture", "hipGraphCreate", "hipGraphInstantiate",
    "hipGraphInstantiateWithFlags", "hipGraphInstantiateWithParams", "hipGraphUpload", "hipGraphDestroy",
    "hipGraphExecDestroy", "hipGraphAddKernelNode", "hipGraphAddMemcpyNode", "hipGraphAddMemsetNode",
    "hipGraphAddNode", "hipGraphAddEmptyNode", "hipGraphAddHostNode", "hipGraphAddChildGraphNode",
    "hipGraphAddEventRecordNode", "hipGraphAddEventWaitNode", "hipGraphClone", "hipInit", "hipCtxCreate",
    "hipCtxDestroy", "hipDevicePrimaryCtxRetain", "hipDevicePrimaryCtxRelease", "hipDevicePrimaryCtxReset",
    "hipDeviceReset", "hipDeviceSetLimit",
})

#: Calls that open and close a stream capture; the calls that make or update an executable CUDA
#: graph (a recording); and all of them, the calls of graph recording (docs/metrics.md, "Graph
#: recording").
CAPTURE_BEGIN_CALLS = frozenset({
    "cudaStreamBeginCapture", "cudaStreamBeginCaptureToGraph", "cuStreamBeginCapture", "cuStreamBeginCaptureToGraph",
    "hipStreamBeginCapture", "hipStreamBeginCaptureToGraph",
})
CAPTURE_END_CALLS = frozenset({"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"})
GRAPH_INSTANTIATE_CALLS = frozenset({
    "cudaGraphInstantiate", "cudaGraphInstantiateWithFlags", "cudaGraphInstantiateWithParams",
    "cuGraphInstantiate", "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams",
    "hipGraphInstantiate", "hipGraphInstantiateWithFlags", "hipGraphInstantiateWithParams",
    "cudaGraphExecUpdate", "cuGraphExecUpdate", "hipGraphExecUpdate",
})
GRAPH_RECORD_CALLS = CAPTURE_BEGIN_CALLS | CAPTURE_END_CALLS | GRAPH_INSTANTIATE_CALLS

#: A call's role, as gapscope.analysis.host_timeline numbers it; every other call is OTHER. A
#: graph launch is a launch that is never a stall, however long (a large graph's launch).
ROLE_OTHER, ROLE_LAUNCH, ROLE_SYNC, ROLE_SETUP, ROLE_GRAPH_LAUNCH = 0, 1, 2, 3, 4


def call_role(name: str) -> int:
    """The role of a (suffix-stripped) API name: ROLE_SYNC, ROLE_SETUP, ROLE_GRAPH_LAUNCH,
    ROLE_LAUNCH or ROLE_OTHER."""
    if name in SYNC_CALLS:
        return ROLE_SYNC
    if name in SETUP_CALLS:
        return ROLE_SETUP
    if name in GRAPH_LAUNCH_CALLS:
        return ROLE_GRAPH_LAUNCH
    if name in LAUNCH_CALLS:
        return ROLE_LAUNCH
    return ROLE_OTHER
