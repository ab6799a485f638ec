"""SYNTHETIC stand-in for torch.cuda.nvtx: push and pop log their calls."""

from torch._log import log

_depth = 0


def range_push(msg: str) -> int:
    global _depth
    log("nvtx_push", msg)
    _depth += 1
    return _depth - 1


def range_pop() -> int:
    global _depth
    log("nvtx_pop")
    _depth -= 1
    return _depth
