"""Run a Python program under torch.profiler (`gapscope profile --tracer torch`, no nsys needed).

    python [PYTHON OPTIONS] torch_launcher.py --trace OUT.pt.trace.json.gz --status STATUS.json
        [--capture-range nvtx:NAME | --capture-range cudaProfilerApi] -- (SCRIPT | -m MODULE) [ARGS...]

The program runs in this process, as ``python SCRIPT ARGS`` or ``python -m MODULE ARGS`` would run
it (runpy: ``__main__``, ``sys.argv``, ``sys.path[0]`` as Python sets them). The profiler records
CPU and CUDA activities (Kineto's stream-wait events too, where this torch offers them); it runs

* around the whole program, without ``--capture-range``;
* ``nvtx:NAME``: from the first opening of a range named NAME (a ``record_function``, or a
  ``torch.cuda.nvtx.range_push``) to that range's close;
* ``cudaProfilerApi``: from the first ``torch.cuda.profiler.start()`` (or
  ``torch.cuda.profiler.profile()``) to the next ``stop()``.

``torch.cuda.nvtx.range_push``/``range_pop`` ranges are also opened as ``record_function``
ranges of the same name, so a program instrumented for nsys shows the same ranges in the
profiler's trace (which holds no NVTX). The trace is written (gzipped) as soon as the profiler
stops; the status when the program ends, however it ends (an exception, ``sys.exit``, Ctrl-C,
SIGTERM): ``exit_code`` (130 after Ctrl-C, 143 after SIGTERM), ``error``, ``torch``,
``cuda``, ``capture`` (the range and whether the profiler is ``waiting``, ``recording`` or
``done``), ``trace`` (null when nothing was recorded), ``trace_error``. A program that ends
with ``os._exit`` or a crash writes neither. Standard library and torch only: it is run by path,
so the program's interpreter needs no gapscope and its module path stays the user's.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

USAGE = ("usage: torch_launcher.py --trace OUT --status STATUS [--capture-range nvtx:NAME|cudaProfilerApi] "
         "-- (SCRIPT | -m MODULE) [ARGS...]")


@dataclass
class Launch:
    """What to run and where its trace and status go."""

    trace: Path
    status: Path
    capture: str | None = None
    module: str | None = None
    script: str | None = None
    args: list[str] = field(default_factory=list)


def parse(argv: Sequence[str]) -> Launch:
    """The launcher's arguments; ValueError with the usage line when they are wrong."""
    argv = list(argv)
    if "--" not in argv:
        raise ValueError(USAGE)
    split = argv.index("--")
    own, program = argv[:split], argv[split + 1:]
    opts: dict[str, str] = {}
    while own:
        key = own.pop(0)
        if key not in ("--trace", "--status", "--capture-range") or not own:
            raise ValueError(USAGE)
        opts[key] = own.pop(0)
    if "--trace" not in opts or "--status" not in opts or not program:
        raise ValueError(USAGE)
    # absolute: the program may change its working folder before the trace is written
    launch = Launch(Path(opts["--trace"]).absolute(), Path(opts["--status"]).absolute(),
                    opts.get("--capture-range"))
    if program[0] == "-m":
        if len(program) < 2:
            raise ValueError(USAGE)
        launch.module, launch.args = program[1], program[2:]
    else:
        launch.script, launch.args = program[0], program[1:]
    return launch


class Recorder:
    """torch.profiler, started and stopped as the capture range says; the trace written at stop."""

    def __init__(self, torch: Any, trace: Path, capture: str | None) -> None:
        self.torch, self.trace, self.capture = torch, trace, capture
        self.kind, _, self.name = (capture or "").partition(":")
        self.state = "waiting"
        self.prof: Any = None
        self.opener: Any = None
        self.written = False
        self.error: str | None = None
        self._lock = threading.RLock()

    def _profiler(self) -> Any:
        from torch.profiler import ProfilerActivity, profile

        torch = self.torch
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        options: dict[str, Any] = {"activities": activities, "record_shapes": False}
        try:  # Kineto's stream-wait events: the dependency category (docs/formats.md)
            options["experimental_config"] = torch._C._profiler._ExperimentalConfig(
                enable_cuda_sync_events=True)
        except Exception:  # noqa: BLE001 - an older torch: without them
            pass
        return profile(**options)

    def start(self) -> None:
        with self._lock:
            if self.state == "waiting":
                self.prof = self._profiler()
                self.prof.start()
                self.state = "recording"

    def stop(self) -> None:
        with self._lock:
            if self.state != "recording":
                return
            self.state = "done"
            try:
                self.prof.stop()
                self.prof.export_chrome_trace(str(self.trace))
                self.written = True
            except Exception as exc:  # noqa: BLE001 - said in the status, the program goes on
                self.error = f"{type(exc).__name__}: {exc}"

    def opened(self, rf: Any) -> None:
        """A record_function range opens: the capture range's first opening starts recording."""
        if self.kind == "nvtx" and self.state == "waiting" and getattr(rf, "name", None) == self.name:
            self.start()
            self.opener = rf

    def closed(self, rf: Any) -> None:
        """A record_function range closed: the capture range's closing stops recording."""
        if self.opener is not None and rf is self.opener:
            self.opener = None
            self.stop()

    def profiler_api(self, on: bool) -> None:
        """torch.cuda.profiler.start() (on) or stop() was called."""
        if self.kind == "cudaProfilerApi":
            self.start() if on else self.stop()


def install(torch: Any, recorder: Recorder) -> None:
    """Hook record_function, torch.cuda.nvtx's push/pop and torch.cuda.profiler's start/stop."""
    rf_class = torch.autograd.profiler.record_function
    enter, leave = rf_class.__enter__, rf_class.__exit__

    def __enter__(self: Any) -> Any:
        recorder.opened(self)
        return enter(self)

    def __exit__(self: Any, *exc: Any) -> Any:
        try:
            return leave(self, *exc)
        finally:
            recorder.closed(self)

    rf_class.__enter__, rf_class.__exit__ = __enter__, __exit__

    nvtx = torch.cuda.nvtx
    push, pop = nvtx.range_push, nvtx.range_pop
    local = threading.local()

    def range_push(msg: str) -> Any:
        depth = push(msg)
        rf = rf_class(str(msg))
        rf.__enter__()
        local.__dict__.setdefault("stack", []).append(rf)
        return depth

    def range_pop() -> Any:
        stack = local.__dict__.get("stack")
        if stack:
            stack.pop().__exit__(None, None, None)
        return pop()

    nvtx.range_push, nvtx.range_pop = range_push, range_pop

    cuda_profiler = torch.cuda.profiler
    api_start, api_stop = cuda_profiler.start, cuda_profiler.stop

    def start() -> Any:
        recorder.profiler_api(True)
        return api_start()

    def stop() -> Any:
        try:
            return api_stop()
        finally:
            recorder.profiler_api(False)

    cuda_profiler.start, cuda_profiler.stop = start, stop


def _exit_code(code: Any) -> int:
    """The exit status of ``sys.exit(code)``, as Python reports it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _set_path0(entry: str) -> None:
    """sys.path[0] as Python sets it for the program: this file's folder replaced (it is not
    there under ``-P`` or ``-I``, and then neither is the program's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == here:
        sys.path[0] = entry


def run_program(launch: Launch) -> int:
    """Run the program as Python would; its exit status (130 after Ctrl-C)."""
    try:
        if launch.module is not None:
            sys.argv = [launch.module, *launch.args]
            _set_path0(os.getcwd())
            runpy.run_module(launch.module, run_name="__main__", alter_sys=True)
        else:
            assert launch.script is not None
            sys.argv = [launch.script, *launch.args]
            _set_path0(os.path.dirname(os.path.abspath(launch.script)))
            runpy.run_path(launch.script, run_name="__main__")
    except SystemExit as exc:
        return _exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        return 130
    except BaseException:  # noqa: BLE001 - reported as Python reports it
        traceback.print_exc()
        return 1
    return 0


def _write_status(path: Path, data: dict[str, Any]) -> None:
    """exit_status.write_status, loaded from beside this file under a private name (the
    program's own modules, whatever their names, are not shadowed)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_gapscope_exit_status",
                                                  Path(__file__).with_name("exit_status.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_status(path, data)


def main(argv: Sequence[str]) -> int:
    """Record the program; write the status; return its exit status."""
    try:
        launch = parse(argv)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    started = time.perf_counter()
    status: dict[str, Any] = {"exit_code": 2, "signal": None, "pid": os.getpid(), "seconds": 0.0,
                              "error": None, "torch": None, "cuda": None,
                              "capture": {"range": launch.capture, "state": "waiting"},
                              "trace": None, "trace_error": None}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any failure to import is the same answer
        status["error"] = f"cannot import torch ({type(exc).__name__}: {exc})"
        _write_status(launch.status, status)  # gapscope profile says it, in its one error line
        return 2
    status["torch"], status["cuda"] = torch.__version__, bool(torch.cuda.is_available())
    recorder = Recorder(torch, launch.trace, launch.capture)
    install(torch, recorder)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # SIGTERM ends the program as an exit
        signal.signal(signal.SIGTERM, _terminate)
    if launch.capture is None:
        recorder.start()
    code = 2
    try:
        code = run_program(launch)
    finally:
        recorder.stop()
        status.update(exit_code=code, seconds=round(time.perf_counter() - started, 6),
                      capture={"range": launch.capture, "state": recorder.state},
                      trace=str(launch.trace) if recorder.written else None,
                      trace_error=recorder.error)
        _write_status(launch.status, status)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
