"""An open trace: one handle per file, owning its reader until it is closed.

    with open_trace("traces/torch_decode.sqlite") as trace:
        frames = trace.frames()
        ...                      # names are looked up while the trace is open

After ``close()`` (or the ``with`` block) every name lookup raises ClosedTraceError instead of
quietly answering ``[unknown]``. A trace whose file changes while it is read (its size, mtime,
ctime or inode, or those of a folder's table files or of a SQLite export's ``-wal`` and
``-journal``, differ from what they were when it was opened) is refused in one line when its
frames have been read and again when it is closed, never analyzed as if it were consistent
(:func:`file_state`). Trace formats plug in as readers in :data:`READERS`: nsys's
SQLite export (``nsys_sqlite``), its parquetdir and arrowdir exports (``nsys_columnar``), an
Nsight Systems report exported on the fly (``nsys_report``) and a PyTorch profiler trace
(``kineto``); every reader makes its frames through gapscope.trace.frames.build_frames.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Protocol

import pandas as pd

from gapscope.catalog import FORMATS
from gapscope.errors import GapscopeError
from gapscope.trace.frames import RowCounts, TraceFrames, TraceMeta


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


#: What a file's state is made of: (name, device, inode, size, mtime, ctime) per file.
FileState = tuple[tuple[object, ...], ...]


def file_state(path: str | Path) -> FileState:
    """What changes when a trace is written: the identity, size and times of the file (and of
    the ``-wal`` and ``-journal`` SQLite keeps beside it), or of every file in a folder (a
    parquetdir or arrowdir export's tables); a missing file is part of the state too."""
    p = Path(path)
    names = [p, p.with_name(p.name + "-wal"), p.with_name(p.name + "-journal")]
    try:
        if p.is_dir():
            names = [p, *sorted(p.iterdir())]
    except OSError:
        pass
    state = []
    for name in names:
        try:
            st = os.stat(name)
        except OSError:
            state.append((name.name,))
            continue
        state.append((name.name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(state)


class Trace:
    """An open trace file: its meta data, its frames, and extra columns some figures need.
    ``state``: the file's :func:`file_state` from before it was opened."""

    def __init__(self, reader: Reader, state: FileState | None = None) -> None:
        self._reader = reader
        self._state = state

    def check_unchanged(self) -> None:
        """GapscopeError (one line, exit 2) when the file changed since it was opened."""
        if self._state is not None and file_state(self.path) != self._state:
            raise GapscopeError(f"{self.path}: the file changed while gapscope read it (its size, times "
                                "or identity differ from when it was opened); read it again once the "
                                "program writing it has finished")

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
        uses; ``all_calls``: every CUDA API call, not only those that launch or synchronize);
        refused when the file changed while they were read (:meth:`check_unchanged`)."""
        frames = self._reader.load(syncs=syncs, all_calls=all_calls)
        self.check_unchanged()
        return frames

    def row_counts(self) -> RowCounts | None:
        """What the trace holds, counted without reading it (gapscope.trace.frames.RowCounts;
        None for a reader that cannot say)."""
        count = getattr(self._reader, "row_counts", None)
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
        if exc_type is None:  # names were looked up in it until now
            self.check_unchanged()

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
    state = file_state(path)
    return Trace(opener(Path(path)), state)
