"""Shared fixtures: analyses of the shipped traces, computed once per test session."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests' helper modules (paths, clirun, ...)

from paths import CLOVERLEAF_NAME, FSDP_NAME, SAXPY_NAME, TRACES, thirdparty  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """The suite never reads or writes the user's cache: gapscope's cache folder is a temporary
    one, and the column cache is off (tests/test_column_cache.py turns it on, in folders of its own);
    subprocesses inherit both."""
    import os
    import signal
    import tempfile

    config._gapscope_cache = tempfile.mkdtemp(prefix="gapscope-test-cache-")  # type: ignore[attr-defined]
    os.environ["XDG_CACHE_HOME"] = config._gapscope_cache  # type: ignore[attr-defined]
    os.environ["GAPSCOPE_NO_CACHE"] = "1"
    _work_stealing(config)
    # Run in the background by a shell without job control (`nohup pytest &`), pytest starts with
    # SIGINT ignored, which its subprocesses inherit: the Ctrl-C tests of gapscope profile then
    # wait for programs that never stop. A handler (reset to the default in a child) instead.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _work_stealing(config: pytest.Config) -> None:
    """With `-n N` and no --dist, pytest-xdist's ``worksteal`` instead of its ``load``: an idle
    worker takes tests queued for a busy one (the suite's tests run 0.01 to 3 s). An explicit
    --dist is kept; without pytest-xdist (or with -p no:xdist) there is nothing to choose."""
    args = config.invocation_params.args
    given = any(a in ("--dist", "-d") or a.startswith("--dist=") for a in args)
    if getattr(config.option, "dist", None) == "load" and not given:
        config.option.dist = "worksteal"


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    shutil.rmtree(getattr(config, "_gapscope_cache", ""), ignore_errors=True)


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """gapscope's caches on (column and result, default size bound), under a fresh
    $XDG_CACHE_HOME; gapscope's cache folder there (gapscope.cache.cache_root)."""
    from gapscope import cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    monkeypatch.delenv(cache.SIZE_ENV, raising=False)
    return tmp_path / "xdg" / "gapscope"


@pytest.fixture
def unbudgeted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache's hashing budget set aside (gapscope.cache.content_digest hashes any file, however
    much larger than the bound it is), for tests of the size bound's other rules with bounds
    smaller than the shipped traces."""
    from gapscope import cache
    from gapscope.trace import column_cache

    real = cache.content_digest

    def unbounded(path: Path, root: Path | None = None, limit: int | None = None) -> str:
        return real(path, root, 1 << 62)

    monkeypatch.setattr(cache, "content_digest", unbounded)
    monkeypatch.setattr(column_cache, "content_digest", unbounded)


@pytest.fixture(scope="session")
def analyzed() -> Callable[..., object]:
    """``analyzed(name, **options)``: the AnalysisResult of ``traces/<name>.sqlite`` with those
    options, computed once per session (tests must not change it: it is shared)."""
    from gapscope.analysis.pipeline import analyze

    cache: dict[tuple, object] = {}

    def get(name: str, **options: object) -> object:
        key = (name, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = analyze(TRACES / f"{name}.sqlite", **options)
        return cache[key]

    return get


@pytest.fixture
def cloverleaf() -> Path:
    """CloverLeaf on Perlmutter (nsys 2024.5, no NVTX table), from ../shared/thirdparty-traces."""
    return thirdparty(CLOVERLEAF_NAME)


@pytest.fixture
def saxpy() -> Path:
    """MPI + CUDA saxpy on Perlmutter (nsys 2022.2), from ../shared/thirdparty-traces."""
    return thirdparty(SAXPY_NAME)


@pytest.fixture
def fsdp() -> Path:
    """Two-GPU FSDP training window on H100s (nsys 2026.2), from ../shared/thirdparty-traces."""
    return thirdparty(FSDP_NAME)
