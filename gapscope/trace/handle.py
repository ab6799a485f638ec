"""An open trace: one handle per file, owning its reader until it is closed.

    with open_trace("traces/torch_decode.sqlite") as trace:
        frames = trace.frames()
        ...                      # names are looked up while the trace is open

After ``close()`` (or the ``with`` block) every name lookup raises ClosedTraceError instead of
quietly answering ``[unknown]``. Trace formats plug in as readers in :data:`READERS`: nsys's
SQLite export (``nsys_sqlite``), its parquetdir and arrowdir exports (``nsys_columnar``), an
Nsight Systems report exported on the fly (``nsys_report``) and a PyTorch profiler trace
(``kineto``); every reader makes its frames through gapscope.trace.frames.build_frames.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Protocol

import pandas as pd

from gapscope.catalog import FORMATS
from gapscope.errors import GapscopeError
from gapscope.trace.frames import TraceFrames, TraceMeta


class Reader(Protocol):
    """What a trace format's reader offers (gapscope.trace.nsys_sqlite.NsysSqlite is one); it is
    also the trace's Names (gapscope.trace.frames), answering while it is open."""

    format: str
    meta: TraceMeta

    @property
    def closed(self) -> bool: ...

    def load(self, *, syncs: bool = False, all_calls: bool = False) -> TraceFrames: ...

    def close(self) -> None: ...


def _reader(module: str, cls: str, *args: str) -> Callable[[Path], Reader]:
    """An opener that imports its reader's module (gapscope.trace.<module>) only when a trace of
    its format is opened, so resolving a path stays cheap."""

    def opener(path: Path) -> Reader:
        return getattr(importlib.import_module(f"gapscope.trace.{module}"), cls)(path, *args)

    return opener


#: Trace formats (the resolver's names, gapscope.inputs) and the reader each opens with.
READERS: dict[str, Callable[[Path], Reader]] = {f.name: _reader(f.module, f.cls, *f.args) for f in FORMATS}


class Trace:
    """An open trace file: its meta data, its frames, and extra columns some figures need."""

    def __init__(self, reader: Reader) -> None:
        self._reader = reader

    @property
    def meta(self) -> TraceMeta:
        return self._reader.meta

    @property
    def path(self) -> str:
        return self._reader.meta.path

    @property
    def format(self) -> str:
        return self._reader.format

    @property
    def closed(self) -> bool:
        return self._reader.closed

    def frames(self, *, syncs: bool = True, all_calls: bool = False) -> TraceFrames:
        """Read the frames an analysis needs (``syncs``: the stream-wait records gap attribution
        uses; ``all_calls``: every CUDA API call, not only those that launch or synchronize)."""
        return self._reader.load(syncs=syncs, all_calls=all_calls)

    def activity_rows(self) -> int | None:
        """How many GPU activity rows the trace holds, counted without reading them (None for
        a format that cannot say so cheaply: a PyTorch profiler trace, one JSON stream)."""
        count = getattr(self._reader, "activity_rows", None)
        return count() if count is not None else None

    def kernel_shapes(self, frames: TraceFrames) -> pd.DataFrame:
        """Grid, block and dynamic shared memory per activity row of ``frames`` (-1 where not a
        kernel); GapscopeError for a format that does not record launch shapes."""
        shapes = getattr(self._reader, "kernel_shapes", None)
        if shapes is None:
            raise GapscopeError(f"{self.path}: a {self.format} trace records no kernel launch shapes")
        return shapes(frames.activities)

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> "Trace":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Trace {self.path} ({self.format}, {state})>"


def open_trace(path: str | Path, format: str | None = None) -> Trace:
    """Open a trace read-only; ``format`` as the resolver names it (found from the file when
    omitted). GapscopeError (exit 2) for anything that is not a readable trace."""
    if format is None:
        from gapscope.inputs import resolve

        found = resolve(path)
        found.require("trace")
        format, path = found.format, found.path
    try:
        opener = READERS[format]
    except KeyError:
        raise GapscopeError(f"{path}: gapscope cannot read {format} traces") from None
    return Trace(opener(Path(path)))
