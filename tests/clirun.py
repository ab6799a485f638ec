"""Running the gapscope command line from tests, and checking its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def gapscope(*args: str, pythonpath: str | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m gapscope ARGS` from the repository root (``pythonpath`` goes first on the path)."""
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
