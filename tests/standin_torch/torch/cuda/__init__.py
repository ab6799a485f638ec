"""SYNTHETIC stand-in for torch.cuda: a GPU unless $STANDIN_TORCH_NO_CUDA is set."""

import os

from torch.cuda import nvtx, profiler  # noqa: F401


def is_available() -> bool:
    return not os.environ.get("STANDIN_TORCH_NO_CUDA")
