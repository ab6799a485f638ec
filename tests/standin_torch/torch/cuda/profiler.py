"""SYNTHETIC stand-in for torch.cuda.profiler (cudaProfilerStart/Stop)."""

import contextlib

from torch._log import log


def start() -> None:
    log("cuda_profiler_start")


def stop() -> None:
    log("cuda_profiler_stop")


@contextlib.contextmanager
def profile():
    try:
        start()
        yield
    finally:
        stop()
