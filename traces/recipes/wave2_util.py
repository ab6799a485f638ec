"""Shared by the wave-2 recipes (traces/recipes/record_wave2.sh): the device and NVTX ranges.

Every program runs on CUDA when it is there and on the CPU with `--device cpu` (the driver's
DRYRUN=1), where the ranges are only counted: a CPU build of torch has no NVTX, and the counts,
printed at exit, show the range plan without a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator


def add_device_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None,
                    help="default: cuda when torch sees a GPU, else cpu (a dry run)")


def torch_device(name: str | None):
    import torch

    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


class Ranges:
    """NVTX push/pop ranges, counted by name.

    backend "torch": torch.cuda.nvtx.range_push/range_pop (on the calling thread);
    backend "nvtx": the nvtx package's push_range/pop_range (default domain);
    backend "count": nothing but the counts (a CPU dry run of a torch program).
    """

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.counts: dict[str, int] = {}
        self.depth = 0
        if backend == "torch":
            import torch

            self._push, self._pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
        elif backend == "nvtx":
            import nvtx

            self._push, self._pop = (lambda name: nvtx.push_range(name)), nvtx.pop_range
        elif backend == "count":
            self._push, self._pop = (lambda name: None), (lambda: None)
        else:
            raise ValueError(f"unknown NVTX backend {backend!r}")

    @classmethod
    def for_torch(cls, device) -> Ranges:
        return cls("torch" if device.type == "cuda" else "count")

    def push(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        self.depth += 1
        self._push(name)

    def pop(self) -> None:
        self._pop()
        self.depth -= 1

    @contextlib.contextmanager
    def range(self, name: str) -> Iterator[None]:
        self.push(name)
        try:
            yield
        finally:
            self.pop()

    def summary(self) -> str:
        body = ", ".join(f"{k} x{v}" for k, v in self.counts.items())
        return f"ranges ({self.backend}): {body} (open at exit: {self.depth})"


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
