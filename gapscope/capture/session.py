"""A recording session: the profiler's command (nsys, or the PyTorch launcher) run in a session
of its own, its output streamed into a log, Ctrl-C and SIGTERM forwarded to it.

The child gets its own session (and so its own process group, without the terminal as its
controlling terminal): a Ctrl-C at the terminal reaches gapscope alone, which passes it on to the
child's whole group once, so nsys stops the program and still writes what it recorded, and the
program is never interrupted twice by one key press. A second Ctrl-C is passed on too; the third
kills the group (SIGKILL), for a recorder that does not stop. gapscope itself keeps waiting
for the child throughout, so what the child wrote is always analyzed or reported.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from gapscope.errors import GapscopeError

#: Signals passed on to the child's process group while it runs.
FORWARDED = (signal.SIGINT, signal.SIGTERM)
#: The interrupt that kills the group instead of passing the signal on.
KILL_AFTER = 3
#: How long output is still read after the child exited (a grandchild that inherited its
#: stdout, such as a compile worker, may hold the pipe open long after).
DRAIN_SECONDS = 2.0


@dataclass(frozen=True)
class Ended:
    """How a session ended: the child's exit status (negative: the signal that ended it), the
    signals gapscope passed on to it (empty when nobody interrupted it), whether it was killed
    after KILL_AFTER interrupts, and its wall time in seconds."""

    returncode: int
    forwarded: tuple[int, ...]
    killed: bool
    seconds: float

    @property
    def interrupted(self) -> bool:
        """True when a Ctrl-C or SIGTERM was passed on to the child."""
        return bool(self.forwarded)


class _Forwarder:
    """The signal handler of a session: pass the signal on to the child's group."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        self.forwarded: list[int] = []
        self.killed = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.forwarded.append(signum)
        sig = signal.SIGKILL if len(self.forwarded) >= KILL_AFTER else signum
        self.killed = self.killed or sig == signal.SIGKILL
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def run_session(command: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None,
                on_line: Callable[[str], None] | None = None) -> Ended:
    """Run ``command`` in a session of its own, its stdout and stderr written to ``log_path``
    and handed, line by line (a line ends at a newline or a carriage return), to ``on_line``;
    SIGINT and SIGTERM are passed on to it while it runs (from the main thread only, where
    Python delivers signals). GapscopeError when it cannot be started."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=dict(env) if env is not None else None, start_new_session=True)
    except OSError as exc:
        raise GapscopeError(f"cannot start {command[0]}: {exc.strerror or exc}") from None
    forward = _Forwarder(proc.pid)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        assert proc.stdout is not None
        with log_path.open("wb") as log:
            _pump(proc, proc.stdout.fileno(), log, on_line)
        rc = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.stdout is not None:
            proc.stdout.close()
    return Ended(rc, tuple(forward.forwarded), forward.killed, time.perf_counter() - started)


def _pump(proc: subprocess.Popen, fd: int, log: Any, on_line: Callable[[str], None] | None) -> None:
    """Copy the child's output into the log until the pipe closes, or DRAIN_SECONDS after the
    child exited; complete lines go to ``on_line`` (the last, unterminated one at the end)."""
    pending = b""
    exited_at: float | None = None
    while True:
        if exited_at is None and proc.poll() is not None:
            exited_at = time.monotonic()
        if exited_at is not None and time.monotonic() - exited_at > DRAIN_SECONDS:
            break
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        log.write(chunk)
        log.flush()
        pending += chunk
        *lines, pending = re.split(rb"(?<=[\r\n])", pending)
        if on_line:
            for raw in lines:
                if raw.strip():
                    on_line(raw.decode(errors="replace").rstrip("\r\n"))
    if on_line and pending.strip():
        on_line(pending.decode(errors="replace"))
