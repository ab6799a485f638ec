"""CUDA runtime and driver API calls by what they do, as the analysis needs to tell them apart.

Names are without nsys's ``_vNNNN`` version suffix (:func:`base_name` strips it).
"""

from __future__ import annotations

import re

_SUFFIX = re.compile(r"_v\d+$")


def base_name(name: str) -> str:
    """An API name without nsys's ``_vNNNN`` version suffix."""
    return _SUFFIX.sub("", name)


#: Calls that never launch GPU work nor block on it, left out of the ``api`` frame unless every
#: call is asked for: in PyTorch and CuPy traces they are up to half of all calls. (A stream
#: wait's issue time is read from its SYNCHRONIZATION record instead.)
QUIET_CALLS = frozenset({
    "cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord", "cuEventRecordWithFlags",
    "cudaStreamWaitEvent", "cuStreamWaitEvent", "cudaEventQuery", "cuEventQuery",
    "cudaEventCreate", "cudaEventCreateWithFlags", "cuEventCreate", "cudaEventDestroy", "cuEventDestroy",
    "cudaEventElapsedTime", "cuEventElapsedTime",
    "cudaGetDevice", "cudaSetDevice", "cudaGetDeviceCount", "cudaGetLastError", "cudaPeekAtLastError",
    "cudaStreamIsCapturing", "cudaStreamGetCaptureInfo", "cuStreamIsCapturing", "cuStreamGetCaptureInfo",
    "cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxGetDevice", "cuDevicePrimaryCtxGetState",
    "cuKernelGetName", "cuKernelGetAttribute", "cuKernelGetFunction", "cuGetProcAddress",
    "cudaFuncGetAttributes", "cudaFuncSetAttribute", "cuFuncGetAttribute", "cuFuncSetAttribute",
    "cudaDeviceGetAttribute", "cuDeviceGetAttribute", "cudaPointerGetAttributes", "cuPointerGetAttribute",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuModuleGetFunction", "cuLibraryGetKernel", "cuLibraryGetModule",
})

#: Synchronizing calls: the calling thread blocks until GPU work is done.
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
    "cudaMemcpyPeer", "cudaMemset", "cudaMemset2D", "cudaMemset3D",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpyPeer", "cuMemcpy2D", "cuMemcpy3D",
})

#: Calls that launch a whole CUDA graph.
GRAPH_LAUNCH_CALLS = frozenset({"cudaGraphLaunch", "cuGraphLaunch"})

#: Calls that launch one kernel.
KERNEL_LAUNCH_CALLS = frozenset({"cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernel",
                                 "cudaLaunchKernelExC"})
