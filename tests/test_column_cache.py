"""The column cache (gapscope.trace.column_cache): what the SQLite reader keeps of an export's bulk
reads, in gapscope's cache folder, and takes instead of the export on a repeat.

Every test turns the cache on in a folder of its own (the suite's conftest keeps it off); the
truth a cached analysis is held to is the same analysis with the cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import zlib
from pathlib import Path

import pytest

from clirun import assert_one_line_error, gapscope
from paths import TRACES

from gapscope.analysis.pipeline import analyze
from gapscope import cache as cache_folder
from gapscope.trace import sqlite_reads

SMALL = TRACES / "torch_decode_small.sqlite"


@pytest.fixture
def cache_on(cache_home) -> Path:
    """The column cache on, under a fresh $XDG_CACHE_HOME; its columns folder."""
    return cache_home / "columns"


@pytest.fixture
def queries(monkeypatch) -> list[str]:
    """Every bulk query the SQLite reader runs against an export (not answered by the cache)."""
    ran: list[str] = []
    real = sqlite_reads.BulkReader._query

    def counted(self, query):
        ran.append(query)
        return real(self, query)

    monkeypatch.setattr(sqlite_reads.BulkReader, "_query", counted)
    return ran


def uncached(path: Path) -> dict:
    """The analysis of ``path`` with the cache off: what every cached analysis must equal."""
    before = os.environ.get(cache_folder.NO_CACHE_ENV)
    os.environ[cache_folder.NO_CACHE_ENV] = "1"
    try:
        return analyze(path).to_dict()
    finally:
        if before is None:
            del os.environ[cache_folder.NO_CACHE_ENV]
        else:
            os.environ[cache_folder.NO_CACHE_ENV] = before


def entry_files(columns: Path) -> list[Path]:
    return sorted(columns.glob("*/*.arrow"))


@pytest.mark.parametrize("trace", sorted(TRACES.glob("*.sqlite")), ids=lambda p: p.stem)
def test_cached_analysis_is_the_uncached_one(trace, cache_on, queries, analyzed):
    expected = analyzed(trace.stem).to_dict()  # the session's analysis, cache off
    assert analyze(trace).to_dict() == expected  # kept
    first = len(queries)
    assert first > 0 and len(entry_files(cache_on)) == first  # one file per query run
    assert analyze(trace).to_dict() == expected  # read from the cache
    assert len(queries) == first  # no bulk query ran against the export


def test_a_repeat_reads_the_cache_under_any_name(tmp_path, cache_on, queries):
    copy = tmp_path / "elsewhere" / "renamed.sqlite"
    copy.parent.mkdir()
    shutil.copy(SMALL, copy)
    expected = uncached(SMALL)
    analyze(SMALL)
    ran = len(queries)
    assert analyze(copy).to_dict()["devices"] == expected["devices"]
    assert len(queries) == ran  # same content, same entry
    assert [p.name for p in cache_on.iterdir()] == [f"{cache_folder.file_digest(SMALL, 'sha1')}-{SMALL.stat().st_size}"]


def test_same_size_and_mtime_other_content_is_not_stale(tmp_path, cache_on, queries):
    copy = tmp_path / "t.sqlite"
    shutil.copy(SMALL, copy)
    original = analyze(copy).to_dict()
    st = os.stat(copy)
    with sqlite3.connect(copy) as conn:  # the last kernel ends 1000 ns later: same integer width
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 1000 WHERE rowid = "
                     "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY end DESC LIMIT 1)")
    conn.close()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(copy).st_size, os.stat(copy).st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    expected = uncached(copy)
    ran = len(queries)
    changed = analyze(copy).to_dict()
    assert len(queries) > ran  # read from the file again, not from the old entry
    assert changed == expected
    assert changed["devices"] != original["devices"]
    assert len(list(cache_on.iterdir())) == 2  # one entry per content


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_entry_is_rebuilt(damage, cache_on, queries):
    expected = uncached(SMALL)
    analyze(SMALL)
    files = entry_files(cache_on)
    victim = max(files, key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data[: len(data) // 3]) if damage == "truncate"
                       else b"" if damage == "empty" else bytes(data))
    ran = len(queries)
    assert analyze(SMALL).to_dict() == expected
    assert len(queries) == ran + 1  # that one query read from the export again, the others kept
    body = victim.read_bytes()
    assert zlib.crc32(body[:-4]).to_bytes(4, "big") == body[-4:]  # and kept again, whole


def test_no_cache_flag_and_environment(tmp_path, cache_on):
    trace = str(SMALL)
    assert gapscope("analyze", trace, "-f", "json", "--no-cache").returncode == 0
    assert not cache_on.exists()
    assert os.environ.get(cache_folder.NO_CACHE_ENV) is None  # the flag's setting did not outlive it
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(cache_folder.NO_CACHE_ENV, "1")
        assert gapscope("analyze", trace, "-f", "json").returncode == 0
    assert not cache_on.exists()
    base = gapscope("analyze", trace, "-f", "json", "--no-cache").stdout
    assert gapscope("compare", trace, trace, "--no-cache").returncode == 0
    assert not cache_on.exists()
    assert gapscope("analyze", trace, "-f", "json").stdout == base  # kept now
    assert len(list(cache_on.iterdir())) == 1
    assert gapscope("analyze", trace, "-f", "json").stdout == base  # and read


def test_nothing_is_written_beside_the_trace(tmp_path, cache_on):
    folder = tmp_path / "traces"
    folder.mkdir()
    copy = folder / "t.sqlite"
    shutil.copy(SMALL, copy)
    for _ in range(2):
        assert gapscope("analyze", str(copy), "-f", "json").returncode == 0
    assert [p.name for p in folder.iterdir()] == ["t.sqlite"]
    assert entry_files(cache_on) and all(cache_on in p.parents for p in entry_files(cache_on))


def key(name: str, size: int = 0) -> str:
    """A column entry's name as gapscope gives it (the SHA-1 of a content, its size), for ``name``."""
    return f"{hashlib.sha1(name.encode()).hexdigest()}-{size}"


def query_file(name: str) -> str:
    """A column file's name as gapscope gives it (the SHA-1 of its query), for ``name``."""
    return f"{hashlib.sha1(name.encode()).hexdigest()}.arrow"


def test_the_size_bound_evicts_least_recently_used(tmp_path):
    root = tmp_path / "gapscope"
    base = root / "columns"
    for i, name in enumerate("abc"):
        entry = base / key(name)
        entry.mkdir(parents=True)
        (entry / query_file("q")).write_bytes(b"x" * 300)
        (entry / "used").touch()
        os.utime(entry / "used", (1000 + i, 1000 + i))  # a used first, c last
    os.utime(base / key("a") / "used", (2000, 2000))  # then a again: b is the least recently used
    ledger = cache_folder.Ledger(root)
    assert ledger.bound(650) == [base / key("b")]
    assert sorted(p.name for p in base.iterdir()) == sorted([key("a"), key("c")])
    assert ledger.bound(650) == []
    assert ledger.bound(0) == [base / key("c"), base / key("a")]


def test_an_analysis_keeps_the_cache_within_its_bound(tmp_path, cache_on, monkeypatch, unbudgeted):
    analyze(SMALL)
    small = sum(p.stat().st_size for p in cache_on.rglob("*"))
    other = TRACES / "torch_decode.sqlite"
    monkeypatch.setenv(cache_folder.SIZE_ENV, str(small + 1))
    analyze(other)  # bigger than the bound alone: not kept, and nothing evicted for it
    assert [p.name for p in cache_on.iterdir()] == [f"{cache_folder.file_digest(SMALL, 'sha1')}-{SMALL.stat().st_size}"]
    assert sum(p.stat().st_size for p in cache_on.rglob("*")) == small
    monkeypatch.setenv(cache_folder.SIZE_ENV, "1G")
    analyze(SMALL)
    analyze(other)
    assert len(list(cache_on.iterdir())) == 2
    mine = cache_on / f"{cache_folder.file_digest(other, 'sha1')}-{other.stat().st_size}"
    monkeypatch.setenv(cache_folder.SIZE_ENV, str(sum(p.stat().st_size for p in mine.rglob("*"))))
    analyze(other)  # a hit writes nothing, so it evicts nothing
    assert len(list(cache_on.iterdir())) == 2
    (cache_on / f"{cache_folder.file_digest(SMALL, 'sha1')}-{SMALL.stat().st_size}" / "used").touch()
    os.utime(mine / "used", (1, 1))
    shutil.rmtree(next(p for p in cache_on.iterdir() if p != mine))  # SMALL's entry made again:
    analyze(SMALL)  # over the bound, and `other` is the least recently used
    assert [p.name for p in cache_on.iterdir()] == [f"{cache_folder.file_digest(SMALL, 'sha1')}-{SMALL.stat().st_size}"]


def listed_totals(root: Path) -> tuple[int, int]:
    """(bytes, entries) of the bounded folders under ``root``, by a plain walk (the truth the
    ledger's running total is held to); unlike test_cache_ledger's ``listing``, which its
    hand-made folders suit, with the export's kept digest (``digests/``) an analysis writes."""
    folders = [root / name for name in cache_folder.BOUNDED if (root / name).is_dir()]
    entries = [e for f in folders for e in f.iterdir() if not e.name.startswith(".part")]
    return sum(p.stat().st_size for f in folders for p in f.rglob("*") if p.is_file()), len(entries)


def indexed_totals(root: Path) -> tuple[int, int]:
    """(bytes, entries) as the ledger's index keeps them (its first line and CRC-32 checked here)."""
    data = (root / "index").read_bytes()
    assert zlib.crc32(data[:-4]).to_bytes(4, "big") == data[-4:]
    header, _, body = data[:-4].partition(b"\n")
    assert header == b"gapscope-cache/2 index -"
    state = json.loads(body)
    return state["bytes"], state["entries"]


def test_an_entry_larger_than_the_bound_is_not_written_past_it(tmp_path, cache_on, monkeypatch, unbudgeted):
    """A column entry that alone would pass the bound: its writes stop once the next table
    would pass it, what was written goes, the other entries stay, and the running total is
    what a listing finds."""
    analyze(SMALL)
    small_files = {p: p.stat().st_size for p in cache_on.rglob("*") if p.is_file()}
    other = TRACES / "torch_decode.sqlite"
    sizes: list[int] = []  # every table the reader hands the cache for `other`, as kept (+ CRC)
    real_keep = cache_folder.Ledger.keep

    def counted(self, path, body, content=""):
        sizes.append(cache_folder.sealed_size(self.root, path, content, len(memoryview(body).cast("B"))))
        return real_keep(self, path, body, content)

    monkeypatch.setattr(cache_folder.Ledger, "keep", counted)
    analyze(other)  # the bound at 1G: every table kept
    whole = sorted(sizes)
    assert len(whole) >= 2
    mine = cache_on / f"{cache_folder.file_digest(other, 'sha1')}-{other.stat().st_size}"
    assert sorted(p.stat().st_size for p in mine.glob("*.arrow")) == whole
    shutil.rmtree(mine)
    sizes.clear()
    limit = sum(whole) - 1  # one byte short of the whole entry
    monkeypatch.setenv(cache_folder.SIZE_ENV, str(limit))
    analyze(other)
    assert 0 < sum(sizes) <= limit and len(sizes) < len(whole)  # written up to the bound, not past it
    assert not mine.exists()
    assert {p: p.stat().st_size for p in cache_on.rglob("*") if p.is_file()} == small_files
    assert cache_folder.Ledger(cache_on.parent).bound(1 << 62) == []  # the index, rebuilt if it must be
    assert indexed_totals(cache_on.parent) == listed_totals(cache_on.parent)


def test_tables_other_reads_kept_count_toward_the_entry(tmp_path):
    """An entry's size is what other reads of the same content kept in it (other queries)
    plus this read's: once together they would pass the bound, the whole entry goes."""
    import pyarrow as pa

    from gapscope.trace.column_cache import ColumnCache

    root = tmp_path / "gapscope"
    table = pa.table({"x": list(range(1000))})
    other = ColumnCache(root / "columns" / key("other"), limit=1 << 30)  # another export's entry, used long ago
    other.keep("SELECT 1", pa.table({"x": [1]}))
    other.finish()
    os.utime(root / "columns" / key("other") / cache_folder.STAMP, (1, 1))
    small = cache_folder.Ledger(root).entry_bytes(root / "columns" / key("other"))
    first = ColumnCache(root / "columns" / key("key"), limit=1 << 30)
    first.keep("SELECT 1", table)
    first.finish()
    [kept] = (root / "columns" / key("key")).glob("*.arrow")
    one = kept.stat().st_size  # one table as kept, its CRC included
    second = ColumnCache(root / "columns" / key("key"), limit=2 * one - 1)  # room for one table, not two
    second.keep("SELECT 2", table)
    second.finish()
    assert not (root / "columns" / key("key")).exists()
    assert cache_folder.Ledger(root).entry_bytes(root / "columns" / key("other")) == small  # nothing evicted for it
    third = ColumnCache(root / "columns" / key("key"), limit=2 * one)
    third.keep("SELECT 1", table)
    third.keep("SELECT 2", table)
    third.finish()
    assert sorted(p.stat().st_size for p in (root / "columns" / key("key")).glob("*.arrow")) == [one, one]


@pytest.mark.parametrize("text, limit", [("", cache_folder.DEFAULT_LIMIT), ("4096", 4096), ("500M", 500 << 20),
                                         ("2g", 2 << 30), ("3KiB", 3 << 10), ("lots", cache_folder.DEFAULT_LIMIT)])
def test_size_limit(text, limit):
    assert cache_folder.size_limit({cache_folder.SIZE_ENV: text}) == limit


def test_an_unwritable_cache_is_no_error(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    monkeypatch.delenv(cache_folder.NO_CACHE_ENV, raising=False)
    assert analyze(SMALL).to_dict() == uncached(SMALL)


def test_json_is_compact_unless_indented(tmp_path):
    trace = str(SMALL)
    compact = gapscope("analyze", trace, "-f", "json").stdout
    indented = gapscope("analyze", trace, "-f", "json", "--indent", "2").stdout

    data = json.loads(compact)
    assert compact == json.dumps(data, separators=(",", ":")) + "\n"
    assert indented == json.dumps(data, indent=2) + "\n"
    assert json.loads(gapscope("analyze", trace, "-f", "json", "--indent", "0").stdout) == data
    assert_one_line_error(gapscope("analyze", trace, "--indent", "2"), "--indent applies to JSON output")
    assert_one_line_error(gapscope("compare", trace, trace, "--indent", "2"), "--indent applies to JSON output")
    cmp = gapscope("compare", trace, trace, "--format", "json", "--indent", "4").stdout
    assert cmp == json.dumps(json.loads(cmp), indent=4) + "\n"


def test_an_export_with_a_write_in_flight_is_not_cached(tmp_path, cache_on):
    """Its content is the file and its -wal together, read from a private snapshot: no entry."""
    from damage import small_trace

    src = small_trace(tmp_path, "wal-source.sqlite")
    writer = sqlite3.connect(src)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL "
                   "WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    writer.commit()
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copyfile(src, folder / "wal.sqlite")
    shutil.copyfile(f"{src}-wal", folder / "wal.sqlite-wal")
    writer.close()
    expected = uncached(folder / "wal.sqlite")
    assert analyze(folder / "wal.sqlite").to_dict() == expected
    assert expected["devices"][0]["kernels"] == 338  # the kernel only in the -wal counts
    assert not cache_on.exists()
