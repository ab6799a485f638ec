"""The NVTX domains of known libraries and runtimes, without numpy or pandas: the renderers of
a saved or cached result read them too (gapscope.analysis.ranges uses them for the analysis)."""

from __future__ import annotations

#: NVTX domains that libraries and runtimes register (compared case-insensitively): reports list
#: their ranges after the default domain's and the program's own domains.
LIBRARY_DOMAINS = frozenset(d.lower() for d in (
    "CCCL", "CUB", "Thrust", "TSL", "XLA", "NCCL", "NVSHMEM", "cuBLAS", "cuBLASLt", "cuDNN", "cuFFT",
    "cuSPARSE", "cuSOLVER", "cuRAND", "cuTENSOR", "nvJPEG", "NPP", "TensorRT", "DALI", "MPI", "OpenMP",
    "OSHMEM", "UCX", "CUPTI", "NVTX", "Triton",
))


def is_library_domain(domain: str | None) -> bool:
    """True for the NVTX domain of a known library or runtime (CCCL, TSL, NCCL, cuDNN, ...);
    False for the default domain (None, or NaN in a frame)."""
    return isinstance(domain, str) and domain.lower() in LIBRARY_DOMAINS
