"""Where the tests' inputs are: the repository, its shipped traces, the third-party exports.

Third-party exports live in ``../shared/thirdparty-traces`` beside the checkout (never copied
into the repository). :func:`thirdparty` skips a test, naming that folder, when it is absent,
and fails instead when the environment variable CI is set, so CI can never pass without them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
THIRDPARTY = ROOT.parent / "shared" / "thirdparty-traces"

CLOVERLEAF_NAME = "perlmutter-cloverleaf-cuda.sqlite"
SAXPY_NAME = "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
FSDP_NAME = "fsdp-2gpu-h100-nccl.sqlite"


def thirdparty(name: str) -> Path:
    """The path of a third-party export; skips (or, under CI, fails) when it is not there."""
    path = THIRDPARTY / name
    if not path.is_file():
        why = f"{name} is not in {THIRDPARTY} (the shared third-party traces beside the checkout)"
        if os.environ.get("CI"):
            pytest.fail(why + "; CI must have them")
        pytest.skip(why)
    return path
