"""Reading an Nsight Systems report (``.nsys-rep``, or ``.qdrep`` before nsys 2021.4): exported
once with nsys, then read as its export.

The report is only ever read. Its export goes to a cache folder keyed by the report's content
(sha256), never beside it: ``$XDG_CACHE_HOME/gapscope/reports/<sha256>/<type>`` (or
``~/.cache/gapscope/...``; gapscope.cache, the root every cache of gapscope shares), in the
fastest format to read that the nsys found offers (gapscope.capture.nsys.export_types: arrowdir,
else parquetdir, else sqlite). A later read of the
same report, under any name, reuses the export without running nsys. An export is written into
a private folder and renamed into place when nsys has finished, so an interrupted export is
never mistaken for a complete one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from gapscope.capture import nsys as capture
from gapscope.errors import GapscopeError
from gapscope.cache import cache_root, file_digest, own_folder
from gapscope.trace.frames import ActivityKind, RowCounts, TraceFrames, TraceMeta

FORMAT = "nsys-rep"
#: The reader of each export type.
EXPORT_FORMATS = {"arrowdir": "nsys-arrow", "parquetdir": "nsys-parquet", "sqlite": "nsys-sqlite"}


def cached_export(report: Path, *, root: Path | None = None) -> tuple[Path, str]:
    """(the export's path, its export type) for a report: from the cache when an earlier read
    exported it, else exported now with the nsys that gapscope.capture.nsys.find_nsys finds
    (GapscopeError naming the report when there is none). The cache's folders are its own
    (gapscope.cache.own_folder: no link followed); a link where an export belongs is removed."""
    try:
        key = file_digest(report)
    except OSError as exc:
        raise GapscopeError(f"{report}: cannot read ({exc.strerror or exc})") from None
    base = root or cache_root()
    folder = base / "reports" / key
    for export_type in capture.EXPORT_TYPES:
        done = folder / export_type
        if _kept(done):
            return done, export_type
    try:
        nsys = capture.find_nsys(install_globs=capture.INSTALL_GLOBS)
    except GapscopeError as exc:
        # The fix first: the search's own line lists every place it looked (760 characters).
        why = exc.message if exc.message.startswith(capture.NSYS_ENV) else "none was found"
        raise GapscopeError(
            f"{report}: export it where nsys is (`nsys export --type parquetdir -o DIR {report}`) and give "
            f"gapscope DIR, or install Nsight Systems (or set {capture.NSYS_ENV}): a .nsys-rep is read "
            f"through nsys, and {why}") from None
    export_type = capture.export_types(nsys)[0]
    try:
        own_folder(base, "reports", key)
        scratch = Path(tempfile.mkdtemp(prefix=".export-", dir=folder))
    except OSError as exc:
        raise GapscopeError(f"{folder}: cannot write gapscope's export cache ({exc.strerror or exc}); "
                            "set XDG_CACHE_HOME to a folder you can write (gapscope's own folder in it "
                            "may not be a symbolic link)") from None
    try:
        name = "export.sqlite" if export_type == "sqlite" else "export"
        written = capture.export_report(report, scratch / name, export_type, nsys=nsys)
        done = folder / export_type
        try:
            os.rename(written, done)
        except OSError:
            if not _kept(done):  # not another reader's export that got there first
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # made by this read: rmtree follows no link
    return done, export_type


def _kept(done: Path) -> bool:
    """Whether an export is kept at ``done`` (a folder, or a SQLite file, of the cache's own);
    a symbolic link there is removed (the link itself), never followed; nothing is kept where any
    part of the path is a link."""
    root_parts = done.parents[2]
    try:
        own = all(not os.path.islink(p) for p in (root_parts, done.parents[1], done.parent))
        st = os.lstat(done)
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode):
        if own:
            with contextlib.suppress(OSError):
                os.unlink(done)
        return False
    return own and (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode))


class NsysReport:
    """An open report: its export (from the cache, or made now) opened with that export's reader;
    the meta data and frames name the report, with format ``nsys-rep``."""

    format = FORMAT

    def __init__(self, path: str | Path, *, cache: Path | None = None) -> None:
        from gapscope.trace.handle import READERS

        self.path = Path(path)
        self.export, export_type = cached_export(self.path, root=cache)
        self._inner = READERS[EXPORT_FORMATS[export_type]](self.export)
        self.meta: TraceMeta = dataclasses.replace(self._inner.meta, path=str(self.path), format=FORMAT)

    @property
    def closed(self) -> bool:
        return self._inner.closed

    def close(self) -> None:
        self._inner.close()

    def load(self, *, syncs: bool = False, all_calls: bool = False) -> TraceFrames:
        """The export's frames, with the report's meta data."""
        frames = self._inner.load(syncs=syncs, all_calls=all_calls)
        return dataclasses.replace(frames, meta=self.meta)

    def row_counts(self) -> RowCounts:
        """The export's rows, as its reader counts them (with the export's format)."""
        return self._inner.row_counts()

    def lookup(self, ids: Iterable[int]) -> dict[int, str]:
        """Names from the export's string table (gapscope.trace.frames.Names)."""
        return self._inner.lookup(ids)

    def activity_name_ids(self, kind: ActivityKind, rows: np.ndarray) -> np.ndarray:
        """Activity name ids from the export (gapscope.trace.frames.Names)."""
        return self._inner.activity_name_ids(kind, rows)

    def kernel_shapes(self, activities: pd.DataFrame) -> pd.DataFrame:
        """Launch shapes from the export, when its reader records them (the SQLite one does)."""
        shapes = getattr(self._inner, "kernel_shapes", None)
        if shapes is None:
            raise GapscopeError(f"{self.path}: its {self._inner.format} export gives no kernel launch shapes")
        return shapes(activities)
