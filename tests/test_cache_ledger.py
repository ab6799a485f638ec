"""The cache's running total (gapscope.cache.Ledger): what ``index`` counts after keeps and
evictions, held to a listing of the folders written here (os.walk and os.stat, none of
gapscope's listing), and rebuilt when it is missing, damaged or out of date.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachefiles import seal, sealed_body
from clirun import gapscope
from paths import TRACES

from gapscope import cache


def listing(root: Path) -> tuple[int, int]:
    """(bytes, entries) of columns/, results/ and digests/ as the folders hold them: every column
    entry is a folder (all its files count), every result and digest entry a file."""
    size = count = 0
    for name in ("columns", "results", "digests"):
        folder = root / name
        if not folder.is_dir():
            continue
        for entry in os.listdir(folder):
            path = folder / entry
            count += 1
            if path.is_dir():
                size += sum(os.stat(os.path.join(d, f)).st_size for d, _, fs in os.walk(path) for f in fs)
            else:
                size += os.stat(path).st_size
    return size, count


def index_of(root: Path) -> dict:
    """The index file as kept, its first line and CRC-32 checked here."""
    return json.loads(sealed_body(root / "index", "index"))


def counted(root: Path) -> tuple[int, int]:
    state = index_of(root)
    return state["bytes"], state["entries"]


def result(root: Path, name: str) -> Path:
    """The result entry gapscope would name for ``name`` (a SHA-256 in hex)."""
    return root / "results" / f"{hashlib.sha256(name.encode()).hexdigest()}.result"


def entry(root: Path, key: str) -> Path:
    """The column entry gapscope would name for ``key`` (a SHA-1 in hex and a size)."""
    return root / "columns" / f"{hashlib.sha1(key.encode()).hexdigest()}-1"


def column(root: Path, key: str, query: str) -> Path:
    """The file of ``query`` in the column entry of ``key``, named as gapscope names it."""
    return entry(root, key) / f"{hashlib.sha1(query.encode()).hexdigest()}.arrow"


def sized(root: Path, path: Path, total: int, fill: bytes = b"x") -> bytes:
    """A body that ``path`` keeps in ``total`` bytes once sealed (its first line and CRC-32 taken off)."""
    overhead = len(f"gapscope-cache/2 {path.relative_to(root).as_posix()} -\n") + 4
    assert total > overhead
    return fill * (total - overhead)


def keep(ledger: cache.Ledger, path: Path, total: int, fill: bytes = b"x") -> None:
    """``ledger.keep`` of a body that ``path`` keeps in ``total`` bytes."""
    ledger.keep(path, sized(ledger.root, path, total, fill))


def totals(root: Path) -> tuple[int, int]:
    """What the index counts once the ledger has taken its lock (rebuilt, if it cannot be trusted,
    by a bound that evicts nothing)."""
    assert cache.Ledger(root).bound(1 << 62) == []
    return counted(root)


def no_listing(monkeypatch) -> None:
    """Make a listing of the bounded folders fail the test: what follows must be O(1)."""
    def listed(bases):
        raise AssertionError("the bounded folders were listed")

    monkeypatch.setattr(cache.Ledger, "_entries", staticmethod(listed))


def test_keeps_are_counted_exactly(tmp_path, monkeypatch):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    keep(ledger, result(root, "a"), 1000)  # 1,000 bytes: its first line, body and CRC-32
    assert counted(root) == listing(root) == (1000, 1)
    no_listing(monkeypatch)  # from here on the index is trusted: no keep lists the folders
    keep(ledger, result(root, "b"), 2000, b"y")
    assert counted(root) == (3000, 2)
    keep(ledger, column(root, "k1", "q1"), 500, b"z")
    keep(ledger, column(root, "k1", "q2"), 200, b"z")  # the same column entry: 1 entry, 2 files
    assert counted(root) == (3700, 3)
    keep(ledger, result(root, "a"), 200, b"w")  # a rewrite: 1,000 bytes become 200, no new entry
    assert counted(root) == (2900, 3)
    (column(root, "k1", "q1").parent / cache.STAMP).touch()  # the column entry's use: 0 bytes
    keep(ledger, column(root, "k2", "q1"), 10000, b"v")
    assert counted(root) == (12900, 4)
    monkeypatch.undo()
    assert listing(root) == (12900, 4)
    assert sorted(os.listdir(root)) == [".part", "columns", "index", "index.lock", "results"]
    assert os.listdir(root / ".part") == []  # every private copy was renamed into place


def test_bound_evicts_least_recently_used_first_and_recounts(tmp_path):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    for i, name in enumerate("abc"):
        keep(ledger, result(root, name), 3000, b"r")  # 3,000 bytes each
        os.utime(result(root, name), (1000 + i, 1000 + i))  # a used first, c last
    keep(ledger, column(root, "k", "q"), 3000, b"c")
    (entry(root, "k") / cache.STAMP).touch()
    os.utime(entry(root, "k") / cache.STAMP, (1500, 1500))
    os.utime(result(root, "a"), (2000, 2000))  # then a again: b, c, the column entry, a
    assert counted(root) == listing(root) == (12000, 4)
    assert ledger.bound(12000) == []  # within the bound: nothing goes
    assert ledger.bound(6500) == [result(root, "b"), result(root, "c")]
    assert counted(root) == listing(root) == (6000, 2)
    assert ledger.bound(0) == [entry(root, "k"), result(root, "a")]
    assert counted(root) == listing(root) == (0, 0)


def test_within_the_bound_nothing_is_listed(tmp_path, monkeypatch):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    keep(ledger, result(root, "a"), 1000)
    no_listing(monkeypatch)
    assert ledger.bound(1000) == []
    keep(ledger, result(root, "b"), 1000)
    with pytest.raises(AssertionError, match="listed"):
        ledger.bound(1990)  # 2,000 bytes: over the bound, so the folders are listed


@pytest.mark.parametrize("damage", ["missing", "cut", "flipped", "not json", "negative", "other layout", "empty"])
def test_a_damaged_or_missing_index_is_rebuilt_silently(tmp_path, damage):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    keep(ledger, result(root, "a"), 1000)
    keep(ledger, column(root, "k", "q"), 2000)
    index = root / "index"
    data = index.read_bytes()
    sealed = lambda body: seal("index", body)  # noqa: E731
    state = index_of(root)
    damaged = {"missing": None, "cut": data[:-7], "flipped": bytes([data[0] ^ 1]) + data[1:],
               "not json": sealed(b"{bytes: 1"), "negative": sealed(json.dumps({**state, "bytes": -5}).encode()),
               "other layout": sealed(json.dumps({**state, "layout": 0, "bytes": 1}).encode()), "empty": b""}[damage]
    if damaged is None:
        index.unlink()
    else:
        index.write_bytes(damaged)
    assert totals(root) == listing(root) == (3000, 2)  # and kept so


def test_an_entry_deleted_by_hand_is_noticed(tmp_path):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    for name in "abc":
        keep(ledger, result(root, name), 1000)
    keep(ledger, column(root, "k1", "q"), 2000)
    keep(ledger, column(root, "k2", "q"), 4000)
    assert counted(root) == (9000, 5)
    result(root, "b").unlink()  # the results folder changed behind the index
    assert totals(root) == listing(root) == (8000, 4)
    shutil.rmtree(entry(root, "k1"))
    assert totals(root) == listing(root) == (6000, 3)
    shutil.rmtree(root / "columns")  # the whole folder, then made again by the next keep
    keep(ledger, column(root, "k3", "q"), 1000)
    assert counted(root) == listing(root) == (3000, 3)


def test_removing_an_entry_keeps_the_total(tmp_path):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    keep(ledger, column(root, "a", "q"), 1040)
    keep(ledger, column(root, "b", "q"), 540)
    keep(ledger, result(root, "r"), 740, b"y")
    assert counted(root) == listing(root) == (1040 + 540 + 740, 3)
    ledger.remove(entry(root, "a"))
    ledger.remove(result(root, "r"))
    ledger.remove(entry(root, "gone"))  # not there: nothing
    assert counted(root) == listing(root) == (540, 1)
    assert os.listdir(root / "columns") == [entry(root, "b").name]


def test_a_file_removed_inside_an_entry_is_recounted_before_anything_is_evicted(tmp_path):
    """No folder fingerprint shows it: the total is too high until it crosses the bound, and
    then the listing, not the total, decides what goes."""
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    keep(ledger, column(root, "k", "q1"), 5000)
    keep(ledger, column(root, "k", "q2"), 5000)
    keep(ledger, result(root, "a"), 1000)
    column(root, "k", "q2").unlink()
    assert counted(root) == (11000, 2)
    assert listing(root) == (6000, 2)
    assert ledger.bound(10000) == []  # 6,000 bytes are really there: nothing goes
    assert counted(root) == (6000, 2)


def test_another_writer_is_noticed(tmp_path):
    """An entry written and removed without the index (an older gapscope, which wrote its files
    in place and evicted without counting) changes the folders' fingerprints, so the next keep
    counts from a listing."""
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    keep(ledger, result(root, "a"), 1000)
    result(root, "old").write_bytes(b"o" * 5000)
    keep(ledger, result(root, "b"), 1000)
    assert counted(root) == listing(root) == (7000, 3)
    result(root, "old").unlink()
    keep(ledger, column(root, "k", "q"), 1000)
    assert counted(root) == listing(root) == (3000, 3)


WRITER = r"""
import hashlib, os, sys, time
from pathlib import Path
from gapscope import cache
root, me, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ledger = cache.Ledger(root)
result = lambda name: root / "results" / f"{hashlib.sha256(name.encode()).hexdigest()}.result"
sha1 = lambda text: hashlib.sha1(text.encode()).hexdigest()
column = lambda key, q: root / "columns" / f"{sha1(key)}-1" / f"{sha1(q)}.arrow"
gone = 0
while not os.path.exists(sys.argv[4]):  # both start together
    time.sleep(0.001)
for i in range(n):
    ledger.keep(result(f"{me}-{i}"), bytes([i % 251]) * (100 + i))
    ledger.keep(result(f"shared-{i % 7}"), me.encode() * (50 + i))  # both write these
    ledger.keep(column(f"key-{i % 5}", me), b"c" * (10 + i))
    if i % 100 == 99:  # now and then over the bound: a listing, and evictions (unless the
        gone += len(ledger.bound(20000))  # other process has just evicted: counted together)
print(gone)
"""


def test_two_processes_keeping_at_once_leave_the_folder_consistent(tmp_path):
    """Both keep (the same names too) and evict at once; the index ends counting what the
    folders hold, and every entry is whole. (Without the lock the index loses counts.)"""
    root, go = tmp_path / "gapscope", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), me, "350", str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for me in ("p", "q")]
    time.sleep(1.5)  # both interpreters started and waiting
    go.touch()
    evicted = 0
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        evicted += int(out)
    assert evicted > 0  # the bound was crossed and entries went
    assert counted(root) == listing(root)
    size, count = listing(root)
    assert size > 20000  # the keeps after the last eviction
    files = [p for p in (root / "results").iterdir()] + [p for p in (root / "columns").rglob("*.arrow")]
    for path in files:  # every entry whole: its first line and CRC-32 hold
        sealed_body(path, path.relative_to(root).as_posix())
    assert os.listdir(root / ".part") == []
    assert totals(root) == (size, count)


def test_an_analysis_keeps_the_index_true_and_no_cache_writes_nothing(cache_home, monkeypatch):
    trace = str(TRACES / "torch_decode_small.sqlite")
    monkeypatch.setattr(cache, "_DIGESTS", {})  # as a new process: the export's digest is kept too
    proc = gapscope("analyze", trace, "-f", "json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    assert not cache_home.exists()
    for options in ((), ("--top", "3")):
        proc = gapscope("analyze", trace, "-f", "json", *options)
        assert proc.returncode == 0, proc.stderr
        assert counted(cache_home) == listing(cache_home)
    assert listing(cache_home)[1] == 4  # one column entry, two result entries, the export's digest
