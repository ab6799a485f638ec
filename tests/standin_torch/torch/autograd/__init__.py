"""SYNTHETIC stand-in for torch.autograd."""

from torch.autograd import profiler  # noqa: F401
