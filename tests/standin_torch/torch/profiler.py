"""SYNTHETIC stand-in for torch.profiler: profile logs start, stop and export; export copies the
real trace named by $STANDIN_TORCH_TRACE."""

import enum
import os
import shutil

from torch._log import log
from torch.autograd.profiler import record_function  # noqa: F401


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    CUDA = "CUDA"


class profile:
    def __init__(self, activities=(), record_shapes=False, experimental_config=None) -> None:
        log("profile", ",".join(a.value for a in activities), f"record_shapes={record_shapes}",
            f"experimental_config={experimental_config is not None}")

    def start(self) -> None:
        log("profiler_start")

    def stop(self) -> None:
        log("profiler_stop")

    def export_chrome_trace(self, path: str) -> None:
        log("export", os.path.basename(path))
        if os.environ.get("STANDIN_TORCH_EXPORT_FAIL"):
            raise RuntimeError("stand-in export failure")
        shutil.copy(os.environ["STANDIN_TORCH_TRACE"], path)
