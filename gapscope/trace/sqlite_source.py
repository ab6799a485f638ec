"""Opening an Nsight Systems SQLite export safely, and the few queries every read of it shares.

The file is opened truly read-only: SQLite's ``immutable=1`` URI, which takes no lock and
creates no ``-wal``, ``-shm`` or ``-journal`` file beside the export, so it reads from a
read-only folder and beside other readers. An export left with a write in flight (a
non-empty ``-wal`` file, or a hot ``-journal``) is read from a private snapshot: the file and
its journal are copied to a folder of our own, where SQLite applies or rolls back the write;
the user's files are never changed (:class:`Source`).

A query that fails on a damaged file is one line (:func:`read_error`): an unknown schema when a
table or column is missing, a damaged file otherwise.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import tempfile
import urllib.parse
from collections.abc import Iterable
from pathlib import Path

from gapscope.errors import GapscopeError
from gapscope.text import printable

SQLITE_MAGIC = b"SQLite format 3\x00"
#: The first bytes of a rollback journal with a transaction in it (SQLite's file format).
JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


#: What a read of a damaged file can raise (an undecodable SQLite message is a UnicodeDecodeError).
DB_ERRORS = (sqlite3.Error, UnicodeDecodeError, OverflowError)


class _Connection(sqlite3.Connection):
    """A connection that knows which file it reads, for error messages."""

    path: str = ""


def sql_rows(conn: sqlite3.Connection, query: str, params: Iterable = ()) -> list[tuple]:
    """Every row ``query`` gives on ``conn``; a failure as :func:`read_error`'s one line."""
    try:
        return conn.execute(query, tuple(params)).fetchall()
    except DB_ERRORS as exc:
        raise read_error(getattr(conn, "path", ""), exc) from None


def read_error(path: str, exc: BaseException) -> GapscopeError:
    """One line for a read that failed: a missing table or column is an unknown schema,
    anything else a damaged file."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = printable(text.removeprefix("[SQLite] "), 200)
    where = f"{path}: " if path else ""
    if text.startswith(("no such column", "no such table")):
        return GapscopeError(f"{where}unknown export schema ({text}); gapscope reads nsys exports "
                             "of schema 2.x and 3.x")
    return GapscopeError(f"{where}cannot read the export (SQLite: {text}); the file is truncated "
                         "or damaged")


def check_file(path: str | Path) -> Path:
    """Fail with one clear line unless ``path`` is a regular file holding a SQLite database
    (checked before it is opened: a pipe or a device is refused, not read)."""
    from gapscope.inputs import NSYS_REPORT_SUFFIXES, regular_file

    p = Path(path)
    st = regular_file(p)
    if p.suffix in NSYS_REPORT_SUFFIXES:
        raise GapscopeError(
            f"{p}: is an Nsight Systems report, not its SQLite export; "
            f"run `nsys export --type sqlite {p}` first"
        )
    try:
        with p.open("rb") as fh:
            head = fh.read(100)
    except OSError as exc:
        raise GapscopeError(f"{p}: cannot read ({exc.strerror})") from None
    if not head.startswith(SQLITE_MAGIC):
        raise GapscopeError(f"{p}: not a SQLite file (expected an nsys SQLite export)")
    if len(head) < 100:
        raise GapscopeError(f"{p}: truncated SQLite file ({len(head)} bytes)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    if pages and page_size and st.st_size < pages * page_size:
        raise GapscopeError(
            f"{p}: truncated export: {st.st_size} bytes on disk, the SQLite header promises "
            f"{pages * page_size}"
        )
    return p


def _pending(path: Path) -> tuple[str, Path] | None:
    """('wal' | 'journal', file) when the export has a write in flight beside it: a non-empty
    ``-wal`` file, or a rollback journal that starts with a transaction header (hot)."""
    for kind, suffix in (("wal", "-wal"), ("journal", "-journal")):
        side = path.with_name(path.name + suffix)
        try:
            st = os.stat(side)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            continue  # SQLite ignores anything but a regular file there too
        if kind == "journal":
            try:
                with open(side, "rb") as fh:
                    if fh.read(len(JOURNAL_MAGIC)) != JOURNAL_MAGIC:
                        continue
            except OSError:
                continue
        return kind, side
    return None


class Source:
    """Where the export is read from: the file itself, immutable, or a private snapshot (copied
    with its pending ``-wal`` or ``-journal``) in a temporary folder that :meth:`close` removes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.warnings: list[str] = []
        self._snapshot: Path | None = None
        pending = _pending(path)
        if pending is None:
            self.uri = "file:" + urllib.parse.quote(os.fsencode(path.resolve())) + "?mode=ro&immutable=1"
            return
        kind, side = pending
        self._snapshot = Path(tempfile.mkdtemp(prefix="gapscope-snapshot-"))
        copy = self._snapshot / "export.sqlite"
        try:
            shutil.copyfile(path, copy)
            shutil.copyfile(side, copy.with_name(copy.name + side.name[len(path.name):]))
        except OSError as exc:
            self.close()
            raise GapscopeError(f"{path}: cannot copy the export to read it with its {side.name} "
                                f"({exc.strerror or exc})") from None
        self.uri = "file:" + urllib.parse.quote(os.fsencode(copy))
        if kind == "journal":
            self.warnings.append(
                f"the export was left with an unfinished write ({side.name} beside it): read from a "
                "private copy with that write rolled back, as SQLite would; the files were not changed")

    def connect(self) -> sqlite3.Connection:
        """The reader's own connection (stdlib sqlite3); undecodable text reads as U+FFFD."""
        try:
            conn = sqlite3.connect(self.uri, uri=True, check_same_thread=False, factory=_Connection)
        except DB_ERRORS as exc:
            raise read_error(str(self.path), exc) from None
        conn.path = str(self.path)
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except DB_ERRORS as exc:
            conn.close()
            raise GapscopeError(f"{self.path}: cannot open as SQLite "
                                f"({printable(str(exc).splitlines()[0] if str(exc) else exc, 200)})") from None
        return conn

    @property
    def snapshot(self) -> bool:
        """Whether the export is read from a private snapshot (a write was in flight)."""
        return self._snapshot is not None

    def close(self) -> None:
        if self._snapshot is not None:
            shutil.rmtree(self._snapshot, ignore_errors=True)
            self._snapshot = None


def tables_of(conn: sqlite3.Connection) -> frozenset[str]:
    """The names of the export's tables."""
    return frozenset(r[0] for r in sql_rows(conn, "SELECT name FROM sqlite_master WHERE type='table'"))


def columns_of(conn: sqlite3.Connection, table: str) -> set[str]:
    """The names of a table's columns (none for a table the export lacks)."""
    return {r[1] for r in sql_rows(conn, f"PRAGMA table_info({table})")}
