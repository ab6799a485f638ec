"""The exit status of a program recorded under nsys (`gapscope profile`), kept by a wrapper.

nsys's own exit status does not reliably say how the program it launched ended, so `gapscope
profile` has nsys launch this file as a script, which runs the program and writes its status:

    python -I exit_status.py STATUS.json -- CMD [ARGS...]

The wrapper starts CMD as its child, in the same process group, so a signal sent to the group
(nsys's Ctrl-C handling, gapscope's) reaches the program directly; the wrapper only waits
(it ignores those signals itself), writes STATUS.json, and ends as the program did: with its exit
code, or killed by the same signal. Standard library only, and run by path under ``-I``, so the
program's environment and module path are exactly the user's. CMD that cannot be started ends
with 127 (as a shell's "command not found") and its reason in STATUS.json.

STATUS.json: ``exit_code`` (0-255; 128 + N for a program ended by signal N), ``signal`` (N or
null), ``pid``, ``seconds`` (wall time), ``error`` (why CMD could not start, or null).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

#: Signals the wrapper outlives (they reach the program through its process group).
PASSED_THROUGH = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def status_of(returncode: int) -> tuple[int, int | None]:
    """(exit code as a shell reports it, signal or None) of a subprocess return code."""
    return (128 - returncode, -returncode) if returncode < 0 else (returncode, None)


def read_status(path: Path) -> dict[str, Any] | None:
    """The status a wrapper (or the PyTorch launcher) wrote, or None when there is none (the
    process was killed before it could write it)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("exit_code"), int) else None


def write_status(path: Path, data: dict[str, Any]) -> None:
    """Write STATUS.json whole or not at all (a temporary file renamed into place)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def main(argv: Sequence[str]) -> int:
    """Run CMD, write its status, return (or die by) what it ended with."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: exit_status.py STATUS.json -- CMD [ARGS...]", file=sys.stderr)
        return 2
    status, command = Path(argv[0]), list(argv[2:])
    for sig in PASSED_THROUGH:  # a handler, not SIG_IGN: the child must not inherit an ignore
        signal.signal(sig, lambda signum, frame: None)
    started = time.perf_counter()
    try:
        child = subprocess.Popen(command, restore_signals=True)
    except OSError as exc:
        write_status(status, {"exit_code": 127, "signal": None, "pid": None, "seconds": 0.0,
                              "error": f"{command[0]}: {exc.strerror or exc}"})
        print(f"gapscope: cannot start {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    rc = child.wait()
    code, sig = status_of(rc)
    write_status(status, {"exit_code": code, "signal": sig, "pid": child.pid,
                          "seconds": round(time.perf_counter() - started, 6), "error": None})
    if sig is not None:  # end as the program did, so nsys sees the same
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL and SIGSTOP keep their default anyway
            pass
        os.kill(os.getpid(), sig)
    return code  # also when the signal's default is to be ignored


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
