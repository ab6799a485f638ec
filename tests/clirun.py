"""Running the gapscope command line from tests, and checking its one-line errors.

:func:`gapscope` runs the command in this process (the CLI's ``main`` with stdout and stderr
captured, from the repository root), which is fast; :func:`gapscope_process` runs
``python -m gapscope`` as a real subprocess, for the few tests that need a separate interpreter
(another module path, the process's own exit and output).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

from paths import ROOT


def gapscope(*args: str, pythonpath: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """``gapscope ARGS`` from the repository root, in this process (in a subprocess when
    ``pythonpath`` must go first on the module path)."""
    if pythonpath is not None:
        return gapscope_process(*args, pythonpath=pythonpath, timeout=timeout)
    from gapscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "200"
    code = 0
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(cwd)
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    return subprocess.CompletedProcess(["gapscope", *args], code, out.getvalue(), err.getvalue())


def gapscope_process(*args: str, pythonpath: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m gapscope ARGS` as a subprocess from the repository root (``pythonpath`` goes
    first on the path)."""
    path = str(ROOT) if pythonpath is None else f"{pythonpath}{os.pathsep}{ROOT}"
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "gapscope", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=timeout)


def assert_one_line_error(proc: subprocess.CompletedProcess, needle: str, code: int = 2) -> None:
    """The command failed with ``code`` and exactly one `gapscope: error:` line naming ``needle``."""
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gapscope: error: ") and needle in lines[0], lines[0]
