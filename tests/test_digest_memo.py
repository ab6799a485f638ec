"""The content digests kept for later processes (gapscope.cache.content_digest): the SHA-1 of a
file's bytes, the key of its column and result entries, kept in the cache folder's ``digests/``
by the file's identity (device, inode, size, mtime, ctime), so a repeat in a new process reads
40 bytes, not the whole trace. Each test checks the digest against ``hashlib.sha1`` of the
file's bytes, and counts the SHA-1 hashings made (``hashlib.new("sha1")``, what
``file_digest`` calls); clearing ``cache._DIGESTS`` stands for a new process.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

import gapscope.cache as cache
from clirun import gapscope
from cachefiles import seal, sealed_body
from paths import TRACES

SMALL = TRACES / "torch_decode_small.sqlite"


@pytest.fixture
def hashings(monkeypatch) -> list[str]:
    """The names of the digests hashlib.new makes from here on."""
    made: list[str] = []
    real = hashlib.new
    monkeypatch.setattr(hashlib, "new", lambda name, *a, **k: made.append(name) or real(name, *a, **k))
    return made


@pytest.fixture
def settled(monkeypatch):
    """Every file counts as settled (the tests' files were all just written)."""
    monkeypatch.setattr(cache, "SETTLED_NS", 0)


def memos(root: Path) -> list[Path]:
    folder = root / "digests"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def sha1_of(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def test_a_new_process_reads_the_kept_digest(tmp_path, cache_home, hashings, settled):
    trace = tmp_path / "t.sqlite"
    shutil.copyfile(SMALL, trace)
    cache._DIGESTS.clear()
    assert cache.content_digest(trace) == sha1_of(trace)
    assert hashings.count("sha1") == 1
    [memo] = memos(cache_home)
    assert sealed_body(memo, f"digests/{memo.name}") == sha1_of(trace).encode()  # the digest, sealed
    state = json.loads(sealed_body(cache_home / "index", "index"))
    assert (state["bytes"], state["entries"]) == (memo.stat().st_size, 1)  # counted in the size bound

    cache._DIGESTS.clear()  # a new process
    hashings.clear()
    assert cache.content_digest(trace) == sha1_of(trace)
    assert hashings.count("sha1") == 0


def test_a_rewritten_file_is_hashed_again(tmp_path, cache_home, hashings, settled):
    """Same size, same mtime set back by hand: the write changed the ctime, so the identity."""
    trace = tmp_path / "t.sqlite"
    shutil.copyfile(SMALL, trace)
    before = cache.content_digest(trace)
    st = trace.stat()
    data = bytearray(trace.read_bytes())
    data[-1] ^= 0xFF
    trace.write_bytes(bytes(data))
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    cache._DIGESTS.clear()
    hashings.clear()
    after = cache.content_digest(trace)
    assert after == sha1_of(trace) != before
    assert hashings.count("sha1") == 1
    assert len(memos(cache_home)) == 2


def test_a_file_changed_just_now_is_not_kept(tmp_path, cache_home, hashings):
    """Within SETTLED_NS of its last change a write may leave the identity as it was: hashed,
    not kept (hashed again by the next process)."""
    trace = tmp_path / "t.sqlite"
    shutil.copyfile(SMALL, trace)
    assert cache.content_digest(trace) == sha1_of(trace)
    assert memos(cache_home) == []
    cache._DIGESTS.clear()
    hashings.clear()
    assert cache.content_digest(trace) == sha1_of(trace)
    assert hashings.count("sha1") == 1


@pytest.mark.parametrize("damage", ["crc", "not a digest", "empty"])
def test_a_damaged_digest_is_hashed_again_and_kept_anew(tmp_path, cache_home, hashings, settled, damage):
    trace = tmp_path / "t.sqlite"
    shutil.copyfile(SMALL, trace)
    cache.content_digest(trace)
    [memo] = memos(cache_home)
    if damage == "crc":
        body = bytearray(memo.read_bytes())
        body[0] ^= 0x01
        memo.write_bytes(bytes(body))
    elif damage == "not a digest":  # a sound seal around other bytes
        memo.write_bytes(seal(f"digests/{memo.name}", b"0" * 39 + b"g"))
    else:
        memo.write_bytes(b"")
    cache._DIGESTS.clear()
    hashings.clear()
    assert cache.content_digest(trace) == sha1_of(trace)
    assert hashings.count("sha1") == 1
    assert sealed_body(memo, f"digests/{memo.name}") == sha1_of(trace).encode()


def test_no_digest_is_kept_with_the_cache_off(tmp_path, cache_home, monkeypatch, settled):
    monkeypatch.setenv(cache.NO_CACHE_ENV, "1")
    trace = tmp_path / "t.sqlite"
    shutil.copyfile(SMALL, trace)
    assert cache.content_digest(trace) == sha1_of(trace)
    assert not cache_home.exists()


def test_a_repeat_analysis_hashes_nothing(tmp_path, cache_home, hashings, settled):
    """`gapscope analyze` twice, the second as a new process would: the result cache hit (its
    header says so), and the trace's bytes never hashed; nothing written beside the trace."""
    folder = tmp_path / "traces"
    folder.mkdir()
    trace = folder / "t.sqlite"
    shutil.copyfile(SMALL, trace)
    cache._DIGESTS.clear()
    first = gapscope("analyze", str(trace))
    assert first.returncode == 0, first.stderr
    assert hashings.count("sha1") == 1 and "cached result" not in first.stdout
    cache._DIGESTS.clear()
    hashings.clear()
    second = gapscope("analyze", str(trace))
    assert second.returncode == 0, second.stderr
    assert hashings.count("sha1") == 0
    assert "cached result" in second.stdout
    assert sorted(p.name for p in folder.iterdir()) == ["t.sqlite"]
