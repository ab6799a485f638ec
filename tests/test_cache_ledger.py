"""The cache's running total (gapscope.cache.Ledger): what ``index`` counts after keeps and
evictions, held to a listing of the folders written here (os.walk and os.stat, none of
gapscope's listing), and rebuilt when it is missing, damaged or out of date.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from clirun import gapscope
from paths import TRACES

from gapscope import cache


def listing(root: Path) -> tuple[int, int]:
    """(bytes, entries) of columns/ and results/ as the folders hold them: every column entry
    is a folder (all its files count), every result entry a file."""
    size = count = 0
    for name in ("columns", "results"):
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
    """The index file as kept, its CRC-32 checked here."""
    data = (root / "index").read_bytes()
    assert zlib.crc32(data[:-4]).to_bytes(4, "big") == data[-4:]
    return json.loads(data[:-4])


def counted(root: Path) -> tuple[int, int]:
    state = index_of(root)
    return state["bytes"], state["entries"]


def result(root: Path, name: str) -> Path:
    return root / "results" / f"{name}.result"


def column(root: Path, key: str, query: str) -> Path:
    return root / "columns" / key / f"{query}.arrow"


def no_listing(monkeypatch) -> None:
    """Make a listing of the bounded folders fail the test: what follows must be O(1)."""
    def listed(bases):
        raise AssertionError("the bounded folders were listed")

    monkeypatch.setattr(cache, "_entries", listed)


def test_keeps_are_counted_exactly(tmp_path, monkeypatch):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    ledger.keep(result(root, "a"), b"x" * 96)  # 96 bytes and a 4-byte CRC
    assert counted(root) == listing(root) == (100, 1)
    no_listing(monkeypatch)  # from here on the index is trusted: no keep lists the folders
    ledger.keep(result(root, "b"), b"y" * 196)
    assert counted(root) == (300, 2)
    ledger.keep(column(root, "k1", "q1"), b"z" * 46)
    ledger.keep(column(root, "k1", "q2"), b"z" * 6)  # the same column entry: 1 entry, 2 files
    assert counted(root) == (360, 3)
    ledger.keep(result(root, "a"), b"w" * 16)  # a rewrite: 100 bytes become 20, no new entry
    assert counted(root) == (280, 3)
    (column(root, "k1", "q1").parent / cache.STAMP).touch()  # the column entry's use: 0 bytes
    ledger.keep(column(root, "k2", "q1"), b"v" * 996)
    assert counted(root) == (1280, 4)
    monkeypatch.undo()
    assert listing(root) == (1280, 4)
    assert sorted(os.listdir(root)) == [".part", "columns", "index", "index.lock", "results"]
    assert os.listdir(root / ".part") == []  # every private copy was renamed into place


def test_bound_evicts_least_recently_used_first_and_recounts(tmp_path):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    for i, name in enumerate("abc"):
        ledger.keep(result(root, name), b"r" * 296)  # 300 bytes each
        os.utime(result(root, name), (1000 + i, 1000 + i))  # a used first, c last
    ledger.keep(column(root, "k", "q"), b"c" * 296)
    (root / "columns" / "k" / cache.STAMP).touch()
    os.utime(root / "columns" / "k" / cache.STAMP, (1500, 1500))
    os.utime(result(root, "a"), (2000, 2000))  # then a again: b, c, the column entry, a
    assert counted(root) == listing(root) == (1200, 4)
    assert ledger.bound(1200) == []  # within the bound: nothing goes
    assert ledger.bound(650) == [result(root, "b"), result(root, "c")]
    assert counted(root) == listing(root) == (600, 2)
    assert ledger.bound(0) == [root / "columns" / "k", result(root, "a")]
    assert counted(root) == listing(root) == (0, 0)


def test_within_the_bound_nothing_is_listed(tmp_path, monkeypatch):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    ledger.keep(result(root, "a"), b"x" * 96)
    no_listing(monkeypatch)
    assert ledger.bound(100) == []
    ledger.keep(result(root, "b"), b"x" * 96)
    with pytest.raises(AssertionError, match="listed"):
        ledger.bound(199)  # 200 bytes: over the bound, so the folders are listed


@pytest.mark.parametrize("damage", ["missing", "cut", "flipped", "not json", "negative", "other layout", "empty"])
def test_a_damaged_or_missing_index_is_rebuilt_silently(tmp_path, damage):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    ledger.keep(result(root, "a"), b"x" * 96)
    ledger.keep(column(root, "k", "q"), b"x" * 196)
    index = root / "index"
    data = index.read_bytes()
    seal = lambda body: body + zlib.crc32(body).to_bytes(4, "big")  # noqa: E731
    state = json.loads(data[:-4])
    damaged = {"missing": None, "cut": data[:-7], "flipped": bytes([data[0] ^ 1]) + data[1:],
               "not json": seal(b"{bytes: 1"), "negative": seal(json.dumps({**state, "bytes": -5}).encode()),
               "other layout": seal(json.dumps({**state, "layout": 0, "bytes": 1}).encode()), "empty": b""}[damage]
    if damaged is None:
        index.unlink()
    else:
        index.write_bytes(damaged)
    assert ledger.totals() == listing(root) == (300, 2)
    assert counted(root) == (300, 2)  # and kept so


def test_an_entry_deleted_by_hand_is_noticed(tmp_path):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    for name in "abc":
        ledger.keep(result(root, name), b"x" * 96)
    ledger.keep(column(root, "k1", "q"), b"x" * 196)
    ledger.keep(column(root, "k2", "q"), b"x" * 396)
    assert counted(root) == (900, 5)
    result(root, "b").unlink()  # the results folder changed behind the index
    assert ledger.totals() == listing(root) == (800, 4)
    shutil.rmtree(root / "columns" / "k1")
    assert ledger.totals() == listing(root) == (600, 3)
    shutil.rmtree(root / "columns")  # the whole folder, then made again by the next keep
    ledger.keep(column(root, "k3", "q"), b"x" * 96)
    assert counted(root) == listing(root) == (300, 3)


def test_removing_an_entry_keeps_the_total(tmp_path):
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    ledger.keep(column(root, "a", "q"), b"x" * 100)
    ledger.keep(column(root, "b", "q"), b"x" * 50)
    ledger.keep(result(root, "r"), b"y" * 70)
    assert counted(root) == listing(root) == (104 + 54 + 74, 3)
    ledger.remove(root / "columns" / "a")
    ledger.remove(result(root, "r"))
    ledger.remove(root / "columns" / "gone")  # not there: nothing
    assert counted(root) == listing(root) == (54, 1)
    assert os.listdir(root / "columns") == ["b"]


def test_a_file_removed_inside_an_entry_is_recounted_before_anything_is_evicted(tmp_path):
    """No folder fingerprint shows it: the total is too high until it crosses the bound, and
    then the listing, not the total, decides what goes."""
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    ledger.keep(column(root, "k", "q1"), b"x" * 496)
    ledger.keep(column(root, "k", "q2"), b"x" * 496)
    ledger.keep(result(root, "a"), b"x" * 96)
    column(root, "k", "q2").unlink()
    assert counted(root) == (1100, 2)
    assert listing(root) == (600, 2)
    assert ledger.bound(1000) == []  # 600 bytes are really there: nothing goes
    assert counted(root) == (600, 2)


def test_another_writer_is_noticed(tmp_path):
    """An entry written and evicted without the index (an older gapscope: write_sealed and a
    plain evict) changes the folders' fingerprints, so the next keep counts from a listing."""
    root = tmp_path / "gapscope"
    ledger = cache.Ledger(root)
    ledger.keep(result(root, "a"), b"x" * 96)
    cache.write_sealed(result(root, "old"), b"o" * 496)
    ledger.keep(result(root, "b"), b"x" * 96)
    assert counted(root) == listing(root) == (700, 3)
    os.utime(result(root, "old"), (1, 1))
    assert cache.evict(cache.bounded_folders(root), 200) == [result(root, "old")]
    ledger.keep(column(root, "k", "q"), b"x" * 96)
    assert counted(root) == listing(root) == (300, 3)


WRITER = r"""
import os, sys, time
from pathlib import Path
from gapscope import cache
root, me, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ledger = cache.Ledger(root)
gone = 0
while not os.path.exists(sys.argv[4]):  # both start together
    time.sleep(0.001)
for i in range(n):
    ledger.keep(root / "results" / f"{me}-{i}.result", bytes([i % 251]) * (100 + i))
    ledger.keep(root / "results" / f"shared-{i % 7}.result", me.encode() * (50 + i))  # both write these
    ledger.keep(root / "columns" / f"key-{i % 5}" / f"{me}.arrow", b"c" * (10 + i))
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
    for path in files:  # every entry whole: its CRC-32 holds
        data = path.read_bytes()
        assert zlib.crc32(data[:-4]).to_bytes(4, "big") == data[-4:], path
    assert os.listdir(root / ".part") == []
    assert cache.Ledger(root).totals() == (size, count)


def test_an_analysis_keeps_the_index_true_and_no_cache_writes_nothing(cache_home):
    trace = str(TRACES / "torch_decode_small.sqlite")
    proc = gapscope("analyze", trace, "-f", "json", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    assert not cache_home.exists()
    for options in ((), ("--top", "3")):
        proc = gapscope("analyze", trace, "-f", "json", *options)
        assert proc.returncode == 0, proc.stderr
        assert counted(cache_home) == listing(cache_home)
    assert listing(cache_home)[1] == 3  # one column entry, two result entries
