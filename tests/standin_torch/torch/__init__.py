"""SYNTHETIC stand-in for torch (tests/standin_torch/README.md): not PyTorch."""

import types

from torch import autograd, cuda, profiler  # noqa: F401
from torch._log import log

__version__ = "0.0+standin"


class _ExperimentalConfig:
    def __init__(self, enable_cuda_sync_events: bool = False) -> None:
        log("experimental_config", f"enable_cuda_sync_events={enable_cuda_sync_events}")


_C = types.SimpleNamespace(_profiler=types.SimpleNamespace(_ExperimentalConfig=_ExperimentalConfig))
