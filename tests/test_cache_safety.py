"""The cache folder trusts nothing in it (issue 41): a symbolic link anywhere under gapscope's
cache folder is never followed, nothing outside the folder is written, stamped or deleted, and
only files gapscope names as it writes them are ever removed.

Each test plants a link (or a foreign file) in a fresh cache folder, runs what reads and writes
the cache, and compares the files outside the cache folder, byte for byte and by mtime, with a
listing taken before (``state``), made here with os.walk and hashlib.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from clirun import gapscope
from paths import TRACES

from gapscope import cache

SMALL = TRACES / "torch_decode_small.sqlite"
OLD = 3 * 24 * 3600  # seconds: older than the 24 h after which a private file counts as stale


def state(folder: Path) -> dict[str, tuple[str, int, int]]:
    """Every path under ``folder`` (links not followed): its kind, mtime (ns) and content digest."""
    out = {}
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(top) / name
            st = os.lstat(path)
            if path.is_symlink():
                out[str(path)] = ("link", st.st_mtime_ns, os.readlink(path))
            elif path.is_dir():
                out[str(path)] = ("dir", 0, "")
            else:
                out[str(path)] = ("file", st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


@pytest.fixture
def victim(tmp_path) -> Path:
    """A user's folder outside the cache: a trace and other files, all last changed days ago."""
    folder = tmp_path / "victim"
    folder.mkdir()
    shutil.copyfile(SMALL, folder / "t.sqlite")
    (folder / "notes.txt").write_text("mine\n")
    (folder / ".part-abcdefgh").write_text("named like a private file of gapscope's\n")
    (folder / "used").write_text("named like a column entry's stamp\n")
    for p in folder.iterdir():
        os.utime(p, (os.stat(p).st_atime - OLD, os.stat(p).st_mtime - OLD))
    return folder


def analyze(trace: Path, *options: str) -> str:
    proc = gapscope("analyze", str(trace), "-f", "json", *options)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout


def test_a_scratch_folder_that_links_elsewhere_deletes_nothing(cache_home, victim, tmp_path):
    """The blocker: `.part` a link to a folder of old files; a cold-cache analysis (whose listing
    removes stale private files) deletes none of them, and the link is replaced by a folder."""
    expected = analyze(victim / "t.sqlite", "--no-cache")
    cache_home.mkdir(parents=True)
    (cache_home / ".part").symlink_to(victim)
    (cache_home / "index").write_bytes(b"damaged: the ledger lists the folders")
    before = state(victim)
    assert analyze(victim / "t.sqlite") == expected
    assert state(victim) == before
    assert (cache_home / ".part").is_dir() and not (cache_home / ".part").is_symlink()
    assert cache.Ledger(cache_home).bound(0)  # an eviction of everything, with a listing
    assert state(victim) == before


@pytest.mark.parametrize("places", [("columns", "results", "digests"),
                                    ("column entry", "result file", "digest file", "index.lock"),
                                    ("stamp", "column file")], ids=lambda p: ", ".join(p))
def test_a_link_anywhere_in_the_cache_is_never_followed(places, cache_home, victim, monkeypatch):
    """A link where a folder or file of the cache belongs (several at once, in places that do
    not hold each other): the analyses (misses and hits) and an eviction leave the linked folder
    and file as they were; each link itself is replaced."""
    monkeypatch.setattr(cache, "_DIGESTS", {})  # as a new process: the digest is looked up
    monkeypatch.setattr(cache, "SETTLED_NS", 0)  # and kept
    trace = victim / "t.sqlite"
    expected = analyze(trace, "--no-cache")
    analyze(trace)  # the cache as it is made: where each entry goes
    entry = next((cache_home / "columns").iterdir())
    where = {"columns": cache_home / "columns", "results": cache_home / "results",
             "digests": cache_home / "digests", "column entry": entry, "stamp": entry / cache.STAMP,
             "index.lock": cache_home / "index.lock", "column file": next(entry.glob("*.arrow")),
             "result file": next((cache_home / "results").iterdir()),
             "digest file": next((cache_home / "digests").iterdir())}
    planted = [where[place] for place in places]
    for path, place in zip(planted, places):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        path.symlink_to(victim if place in ("columns", "results", "digests", "column entry") else trace)
    before = state(victim)
    top3 = analyze(trace, "--top", "3", "--no-cache")
    for _ in range(2):
        monkeypatch.setattr(cache, "_DIGESTS", {})
        assert analyze(trace) == expected  # the result entry (or, where it was replaced, the columns)
        assert analyze(trace, "--top", "3") == top3  # a result miss: the columns, then a new entry
    assert state(victim) == before
    cache.Ledger(cache_home).bound(0)
    assert state(victim) == before
    assert not any(path.is_symlink() for path in planted)


def test_a_cache_folder_that_is_a_link_is_not_used(tmp_path, victim, monkeypatch):
    """gapscope's own folder being a link: the caches are off, nothing is written through it."""
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    (xdg / "gapscope").symlink_to(victim)
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    monkeypatch.delenv(cache.NO_CACHE_ENV, raising=False)
    before = state(victim)
    expected = analyze(victim / "t.sqlite", "--no-cache")
    assert analyze(victim / "t.sqlite") == expected
    assert state(victim) == before


def test_only_gapscopes_own_names_are_removed(cache_home, monkeypatch):
    """Files gapscope did not name, in its folders and entries, are neither counted nor evicted."""
    monkeypatch.setattr(cache, "_DIGESTS", {})  # as a new process: the export's digest is kept too
    monkeypatch.setattr(cache, "SETTLED_NS", 0)
    analyze(SMALL)
    entry = next((cache_home / "columns").iterdir())
    foreign = [cache_home / "columns" / "mine", cache_home / "results" / "mine.txt", entry / "mine.arrow",
               cache_home / "digests" / "MINE", cache_home / ".part" / "mine"]
    for path in foreign:
        path.write_text("not gapscope's\n")
        os.utime(path, (1, 1))
    assert cache.Ledger(cache_home).bound(0)  # everything of gapscope's goes
    assert all(path.read_text() == "not gapscope's\n" for path in foreign)
    assert sorted(os.listdir(entry)) == ["mine.arrow"]  # the entry's own files went, its folder stays
    assert not list((cache_home / "results").glob("*.result"))
    assert os.listdir(cache_home / "digests") == ["MINE"]


def test_a_file_larger_than_the_cache_is_not_hashed(tmp_path, cache_home, monkeypatch):
    """Hashing for the key has a budget: a trace larger than the cache's bound is not read for a
    digest at all, and nothing is cached for it; the report is the same."""
    expected = analyze(SMALL, "--no-cache")
    monkeypatch.setattr(cache, "_DIGESTS", {})  # as a new process
    made: list[str] = []
    real = hashlib.new
    monkeypatch.setattr(hashlib, "new", lambda name, *a, **k: made.append(name) or real(name, *a, **k))
    monkeypatch.setenv(cache.SIZE_ENV, str(SMALL.stat().st_size - 1))
    assert analyze(SMALL) == expected
    assert "sha1" not in made
    assert not cache_home.exists()
    monkeypatch.setenv(cache.SIZE_ENV, str(SMALL.stat().st_size))  # one that fits is cached
    assert analyze(SMALL) == expected
    assert made.count("sha1") == 1 and list((cache_home / "results").glob("*.result"))


def test_a_device_is_never_hashed():
    with pytest.raises(cache.NotHashed):
        cache.content_digest(Path("/dev/zero"))


def test_a_report_export_folder_that_links_elsewhere_is_not_used(tmp_path, cache_home, victim):
    """A `.nsys-rep`'s export in the cache replaced by a link to a user's folder: it is not read
    as the export (the link is removed; without nsys the report is refused in one line)."""
    from gapscope.trace.nsys_report import _kept

    key = "0" * 64
    folder = cache_home / "reports" / key
    folder.mkdir(parents=True)
    (folder / "arrowdir").symlink_to(victim)
    assert not _kept(folder / "arrowdir")
    assert not (folder / "arrowdir").exists() and victim.is_dir()
    (folder / "arrowdir").mkdir()
    assert _kept(folder / "arrowdir")
