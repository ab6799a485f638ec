"""Where per-file tasks run: in this process, on a local process pool, or on a Dask cluster.

An executor takes a picklable task (one path in, one small dict out) and yields an
:class:`Outcome` per path as each finishes. A task that fails becomes an Outcome carrying its
one-line error, never an exception, so one bad file does not stop the others.
"""

from __future__ import annotations

import multiprocessing
import os
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from gapscope import heap
from gapscope.errors import GapscopeError
from gapscope.text import one_line as printable_line

Task = Callable[[str], dict[str, Any]]
#: A Dask scheduler address: [protocol://]host:port, the host possibly a bracketed IPv6 address.
_ADDRESS = re.compile(r"^(?:[a-z]+://)?(?:\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):\d+$")


@dataclass(frozen=True)
class Outcome:
    """What one file gave: its result dict, or the one-line error that stopped it."""

    index: int  # position in the list of paths
    path: str
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def one_line(path: str, message: str) -> str:
    """``message`` on one line, led by the file's path unless it already names it."""
    text = printable_line(message) or "failed"
    name = str(Path(path))
    return text if text.startswith((name, str(path))) else f"{name}: {text}"


def run_task(task: Task, path: str) -> tuple[dict[str, Any] | None, str | None]:
    """Run ``task(path)`` where the worker is, turning every failure into a message, so no
    exception has to travel back from another process or machine."""
    try:
        return task(path), None
    except GapscopeError as exc:
        return None, exc.message
    except MemoryError:
        return None, "out of memory while analyzing this file"
    except Exception as exc:  # a bug: still one line, and the other files go on
        return None, f"internal error: {type(exc).__name__}: {exc}"


class Executor(Protocol):
    """Runs a task on every path; yields Outcomes in completion order."""

    description: str

    def run(self, task: Task, paths: Sequence[str]) -> Iterator[Outcome]: ...


class InProcess:
    """Every file in this process, one after the other (one file, or ``--jobs 1``)."""

    description = "in-process"

    def run(self, task: Task, paths: Sequence[str]) -> Iterator[Outcome]:
        for i, path in enumerate(paths):
            result, error = run_task(task, path)
            yield Outcome(i, path, result, one_line(path, error) if error else None)


class ProcessPool:
    """A local pool of ``jobs`` worker processes, started by forkserver where the platform has
    it (so no worker inherits this process's threads) with ``preload`` modules imported once."""

    def __init__(self, jobs: int, preload: Sequence[str] = ()) -> None:
        if jobs < 1:
            raise GapscopeError(f"--jobs must be at least 1, not {jobs}")
        self.jobs = jobs
        self.preload = list(preload)
        self.description = f"{jobs} local worker process{'es' if jobs > 1 else ''}"

    def _context(self) -> multiprocessing.context.BaseContext:
        if "forkserver" in multiprocessing.get_all_start_methods():
            ctx = multiprocessing.get_context("forkserver")
            if self.preload:
                ctx.set_forkserver_preload(self.preload)
            return ctx
        return multiprocessing.get_context("spawn")

    def run(self, task: Task, paths: Sequence[str]) -> Iterator[Outcome]:
        pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=self._context(),
                                   initializer=heap.tune_for_analysis)  # as the command line's own process
        try:
            futures = {pool.submit(run_task, task, p): i for i, p in enumerate(paths)}
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    result, error = fut.result()
                except Exception as exc:  # BrokenProcessPool: a worker was killed (memory?)
                    result, error = None, f"worker process failed ({type(exc).__name__}: {exc})"
                yield Outcome(i, paths[i], result, one_line(paths[i], error) if error else None)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


class DaskCluster:
    """The workers of a running Dask cluster (``tcp://host:8786``). Paths are sent absolute,
    so every worker must see the files at the same path (a shared file system)."""

    def __init__(self, address: str, *, connect_timeout: float = 10.0) -> None:
        if not _ADDRESS.match(address):
            raise GapscopeError(f"--scheduler wants a Dask scheduler address like tcp://HOST:8786, not {address!r}")
        self.address = address
        self.connect_timeout = connect_timeout
        self.description = f"Dask cluster at {address}"

    def _client(self):  # type: ignore[no-untyped-def]
        try:
            from distributed import Client
        except ImportError:
            raise GapscopeError(
                "--scheduler needs dask.distributed: pip install 'dask[distributed]' "
                "(or, in a gapscope checkout, pip install -e '.[dask]')"
            ) from None
        try:
            return Client(self.address, timeout=self.connect_timeout, set_as_default=False)
        except Exception as exc:  # OSError, TimeoutError, ValueError for a bad address
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise GapscopeError(f"cannot reach the Dask scheduler at {self.address}: {detail}") from None

    def run(self, task: Task, paths: Sequence[str]) -> Iterator[Outcome]:
        from distributed import as_completed as dask_completed

        client = self._client()
        try:
            workers = len(client.scheduler_info().get("workers", {}))
            self.description = f"Dask cluster at {self.address} ({workers} workers)"
            shared = [os.path.abspath(p) for p in paths]
            futures = client.map(partial(run_task, task), shared, pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            for fut in dask_completed(futures, loop=client.loop):
                i = index[fut.key]
                try:
                    result, error = fut.result()
                except Exception as exc:  # KilledWorker, a lost connection, a cancelled task
                    result, error = None, f"Dask task failed ({type(exc).__name__}: {exc})"
                fut.release()  # the worker's messages name the absolute path it was sent
                yield Outcome(i, paths[i], result, one_line(shared[i], error) if error else None)
        finally:
            client.close()


def within_memory(executor: Executor, paths: Sequence[str], note: Callable[[str], None]) -> Executor:
    """``executor``, or for a local pool whose workers would not all fit in memory at once (each
    file's estimated peak, gapscope.analysis.memory.side_by_side) a smaller pool, said through
    ``note`` in one line. A Dask cluster's workers are elsewhere: not estimated here."""
    if not isinstance(executor, ProcessPool):
        return executor
    from gapscope.analysis import memory

    jobs, why = memory.side_by_side(paths, executor.jobs)
    if why is None:
        return executor
    note(why)
    return ProcessPool(jobs, executor.preload)


def choose_executor(n_files: int, jobs: int | None = None, scheduler: str | None = None,
                    preload: Sequence[str] = ()) -> Executor:
    """In-process for one file or ``jobs == 1``; Dask when ``scheduler`` is given; otherwise a
    pool of ``jobs`` processes (default: the CPU count), never more than there are files."""
    if scheduler:
        if jobs is not None:
            raise GapscopeError("give --jobs or --scheduler, not both (a Dask cluster has its own workers)")
        return DaskCluster(scheduler)
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    if n_files <= 1 or jobs == 1:
        return InProcess()
    return ProcessPool(min(jobs, n_files), preload)
