"""SYNTHETIC stand-in for torch.autograd.profiler: record_function logs its enter and exit."""

from torch._log import log


class record_function:
    def __init__(self, name: str, args: object = None) -> None:
        self.name = name

    def __enter__(self) -> "record_function":
        log("rf_enter", self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        log("rf_exit", self.name)
