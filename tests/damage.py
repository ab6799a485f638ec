"""Damaged copies of the shipped traces, made by SQL (the files in traces/ are never changed).

The robustness tests, the fuzz test and tools/fuzz_campaign.py start from these:

* :func:`copy_trace` copies a shipped trace into a folder of the test's own;
* :func:`loosen` rebuilds a table without its NOT NULL constraints (rowids kept), so that any
  value can be written into it, as a damaged export may hold;
* :func:`damage` runs SQL statements on a copy;
* :func:`small_trace` gives the fuzz seed: a SYNTHETIC cut of ``torch_decode.sqlite`` (three
  eager decode steps and three graph replays, about 470 kernels) holding only the tables
  gapscope reads, so that every mutation lands on something the reader uses; it is cut once
  per process (0.3-0.6 s) and each call gets a byte-for-byte copy;
* :func:`files_of` fingerprints a folder (names, sizes, sha256) to show that nothing was
  changed or created beside an input.
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import sqlite3
import tempfile
from pathlib import Path

from paths import TRACES

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
#: The tables gapscope reads from an nsys export (the small trace keeps only these).
READ_TABLES = ("META_DATA_EXPORT", "StringIds", KERNEL, MEMCPY, RUNTIME, SYNC, NVTX, "TARGET_INFO_GPU",
               "ANALYSIS_DETAILS")
#: Tables with rows to damage, and their columns that gapscope reads.
DAMAGEABLE = {
    KERNEL: ("start", "end", "deviceId", "streamId", "globalPid", "correlationId", "shortName"),
    MEMCPY: ("start", "end", "deviceId", "streamId", "globalPid", "correlationId"),
    RUNTIME: ("start", "end", "globalTid", "correlationId", "nameId", "eventClass"),
    SYNC: ("start", "deviceId", "streamId", "globalPid", "syncType"),
    NVTX: ("start", "end", "globalTid", "eventType", "domainId", "text", "textId"),
}
#: The window of torch_decode.sqlite the small trace keeps: NVTX decode steps 31-33 (eager)
#: and 35-37 (graph replays), in ns.
SMALL_WINDOW = (6_692_077_386, 6_703_627_026)


def copy_trace(name: str, folder: Path, as_name: str | None = None) -> Path:
    """A copy of ``traces/<name>.sqlite`` in ``folder``."""
    target = folder / (as_name or f"{name}.sqlite")
    shutil.copyfile(TRACES / f"{name}.sqlite", target)
    return target


def loosen(conn: sqlite3.Connection, table: str) -> None:
    """Rebuild ``table`` with the same columns and declared types but no constraints, keeping
    every rowid, so that NULLs (and anything else) can be written into any column."""
    cols = conn.execute(f"PRAGMA table_info({table})").fetchall()
    decl = ", ".join(f'"{c[1]}" {c[2]}' for c in cols)
    names = ", ".join(f'"{c[1]}"' for c in cols)
    conn.execute(f"CREATE TABLE loose_copy ({decl})")
    conn.execute(f"INSERT INTO loose_copy (rowid, {names}) SELECT rowid, {names} FROM {table}")
    conn.execute(f"DROP TABLE {table}")
    conn.execute(f"ALTER TABLE loose_copy RENAME TO {table}")


def damage(path: Path, *statements: str, loose: tuple[str, ...] = tuple(DAMAGEABLE)) -> Path:
    """Run ``statements`` on the export at ``path`` (a copy), its ``loose`` tables rebuilt
    without constraints first; returns ``path``."""
    conn = sqlite3.connect(path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for table in loose:
            if table in tables:
                loosen(conn, table)
        for sql in statements:
            conn.execute(sql)
        conn.commit()
    finally:
        conn.close()
    return path


def _cut_small_trace(folder: Path, name: str) -> Path:
    """Cut the fuzz seed (SYNTHETIC: a cut of torch_decode.sqlite, see the module docstring)
    into ``folder/name``, its damageable tables already loosened and their rowids renumbered
    from 1."""
    work = copy_trace("torch_decode", folder, "cut-in-progress.sqlite")
    lo, hi = SMALL_WINDOW
    conn = sqlite3.connect(work)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            if table not in READ_TABLES:
                conn.execute(f"DROP TABLE {table}")
        for table in (KERNEL, MEMCPY, RUNTIME, SYNC):
            conn.execute(f"DELETE FROM {table} WHERE start < {lo} OR start > {hi}")
        conn.execute(f"DELETE FROM {NVTX} WHERE start < {lo} OR end > {hi} OR end IS NULL")
        for table in DAMAGEABLE:
            loosen(conn, table)
            conn.execute(f"UPDATE {table} SET rowid = rowid - (SELECT min(rowid) - 1 FROM {table})")
        conn.commit()
        target = folder / name
        conn.execute("VACUUM INTO ?", (str(target),))
    finally:
        conn.close()
    work.unlink()
    return target


_SMALL_SEED: list[Path] = []  # the seed, cut once per process into a folder removed at exit


def small_trace(folder: Path, name: str = "small.sqlite") -> Path:
    """The fuzz seed (SYNTHETIC: a cut of torch_decode.sqlite, see the module docstring) as
    ``folder/name``: a copy of the one this process cut first, the same bytes as a fresh cut."""
    if not _SMALL_SEED:
        scratch = Path(tempfile.mkdtemp(prefix="gapscope-small-trace-"))
        atexit.register(shutil.rmtree, scratch, True)
        _SMALL_SEED.append(_cut_small_trace(scratch, "small.sqlite"))
    target = folder / name
    shutil.copyfile(_SMALL_SEED[0], target)
    return target


def files_of(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file in ``folder``: name -> (size, sha256)."""
    return {p.name: (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.iterdir()) if p.is_file()}
