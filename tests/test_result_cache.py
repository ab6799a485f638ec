"""The result cache (gapscope.cache.ResultCache): `gapscope analyze TRACE` keeps its result JSON
in gapscope's cache folder, and a repeat with the same trace content, options and gapscope code
renders that instead of reading and analyzing the trace.

Every test turns the cache on in a folder of its own (the suite's conftest keeps it off). The
truth a cached report is held to is the same command with the cache off (``--no-cache``): its
JSON byte for byte, its other formats byte for byte but for the header's read time, which a
hit replaces by "cached result".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gapscope.cache as cache
from clirun import gapscope
from cachefiles import seal, sealed_body
from paths import ROOT, TRACES

SMALL = TRACES / "torch_decode_small.sqlite"
#: Shipped traces of each cached format: SQLite exports (one GPU, several GPUs, graphs, NVTX
#: domains) and a PyTorch profiler trace.
SHIPPED = ["torch_decode_small.sqlite", "case_multi_gpu.sqlite", "torch_compile_graphs.sqlite",
           "torch_emit_nvtx.sqlite", "jax_train.sqlite", "torch_decode_small.pt.trace.json.gz"]
READ_IN = re.compile(r", read in [0-9.]+ [mun]?s")


@pytest.fixture
def results(cache_home) -> Path:
    """The caches on, under a fresh $XDG_CACHE_HOME; the result cache's folder."""
    return cache_home / "results"


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.result")) if folder.is_dir() else []


def run(*args: str) -> str:
    proc = gapscope("analyze", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def as_cached(uncached: str) -> str:
    """An uncached report as a cache hit must write it: the read time (exactly one) replaced."""
    assert len(READ_IN.findall(uncached)) == 1, uncached[:300]
    return READ_IN.sub(", cached result", uncached)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_hit_is_the_uncached_report(name, results):
    trace = str(TRACES / name)
    plain = {fmt: run(trace, "-f", fmt, "--no-cache") for fmt in ("json", "table", "markdown", "html", "csv")}
    assert not results.exists()  # --no-cache kept nothing
    assert run(trace, "-f", "json") == plain["json"]  # the miss: analyzed, and kept
    [entry] = entries(results)
    content = hashlib.sha1(Path(trace).read_bytes()).hexdigest()
    assert sealed_body(entry, f"results/{entry.name}", content).decode() == plain["json"]  # the compact JSON
    assert json.loads(plain["json"])["trace"]["path"] == trace
    for _ in range(2):
        assert run(trace, "-f", "json") == plain["json"]
        assert run(trace, "-f", "csv") == plain["csv"]
        for fmt in ("table", "markdown", "html"):
            assert run(trace, "-f", fmt) == as_cached(plain[fmt]), fmt
    assert run(trace, "-f", "json", "--indent", "2") == run(trace, "-f", "json", "--indent", "2", "--no-cache")
    assert entries(results) == [entry]  # every format read the one entry


def test_every_option_that_changes_the_result_misses(results):
    trace = str(SMALL)
    variants = [(), ("--top", "3"), ("--count-memops",), ("--no-attribution",), ("--range", "decode*"),
                ("--domain", "default"), ("--threads", "process"), ("--no-normalize",),
                ("--stall-threshold", "10us")]
    for n, options in enumerate(variants, 1):
        expected = run(trace, "-f", "json", "--no-cache", *options)
        assert run(trace, "-f", "json", *options) == expected  # a miss: its own entry
        assert len(entries(results)) == n, options
        assert run(trace, "-f", "json", *options) == expected  # then a hit
        assert len(entries(results)) == n
    # options of the report alone (rows shown, width) read the same entry
    assert run(trace, "--limit", "1", "--wide").startswith("gapscope torch_decode_small.sqlite  format: nsys SQLite "
                                                           "export, cached result")
    assert len(entries(results)) == len(variants)


def test_another_path_or_content_misses(tmp_path, results):
    copy = tmp_path / "t.sqlite"
    shutil.copyfile(SMALL, copy)
    first = run(str(copy), "-f", "json")
    assert json.loads(first)["trace"]["path"] == str(copy)  # the path is in the result: in the key too
    twin = tmp_path / "u.sqlite"
    shutil.copyfile(SMALL, twin)
    assert run(str(twin), "-f", "json") == run(str(twin), "-f", "json", "--no-cache") != first
    assert len(entries(results)) == 2
    twin.unlink()
    other = TRACES / "torch_decode_sync.sqlite"
    shutil.copyfile(other, copy)  # the same path, another content
    st = os.stat(copy)
    assert run(str(copy), "-f", "json") == run(str(copy), "-f", "json", "--no-cache") != first
    assert len(entries(results)) == 3
    # the same content again, size and mtime as they were: its own entry, not the other's
    shutil.copyfile(SMALL, copy)
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert run(str(copy), "-f", "json") == first
    assert len(entries(results)) == 3


def test_other_gapscope_code_or_packages_miss(results, monkeypatch):
    trace = str(SMALL)
    run(trace, "-f", "json")
    assert run(trace).startswith("gapscope torch_decode_small.sqlite  format: nsys SQLite export, cached result")
    monkeypatch.setattr(cache, "code_digest", lambda: "0" * 64)
    assert READ_IN.search(run(trace).splitlines()[0])  # analyzed again: the old entry is not read
    assert len(entries(results)) == 2
    monkeypatch.setattr(cache, "package_versions", lambda: ("numpy-0.0.dist-info",))
    assert READ_IN.search(run(trace).splitlines()[0])
    assert len(entries(results)) == 3


def test_the_package_versions_are_those_installed():
    import numpy
    import pandas
    import pyarrow

    found = cache.package_versions()
    for module in (numpy, pandas, pyarrow):
        assert f"{module.__name__}-{module.__version__}.dist-info" in found


def test_the_code_digest_covers_every_module():
    package = ROOT / "gapscope"
    files = sorted(package.rglob("*.py"))
    assert len(files) > 100 and package / "analysis" / "pipeline.py" in files
    assert cache.code_digest() == cache.code_digest.__wrapped__()
    assert len(cache.code_digest()) == 64


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "not utf-8"])
def test_a_damaged_entry_is_recomputed(damage, results):
    trace = str(SMALL)
    expected = run(trace, "-f", "json", "--no-cache")
    run(trace, "-f", "json")
    [entry] = entries(results)
    data = bytearray(entry.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    else:  # its first line and CRC right, its body no text: gapscope never wrote it
        data = bytearray(seal(f"results/{entry.name}", b"\xff" + expected.encode()[1:], content(SMALL)))
    entry.write_bytes(bytes(data))
    assert READ_IN.search(run(trace).splitlines()[0])  # analyzed again, never read from the entry
    assert run(trace, "-f", "json") == expected  # and kept again, whole
    assert entry.read_bytes() == seal(f"results/{entry.name}", expected.encode(), content(SMALL))


def content(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def test_another_traces_entry_copied_over_this_ones_is_not_served(tmp_path, results):
    """Issue 41: a valid entry (its CRC right) of another trace, copied over this one's, is
    refused because its first line names another place and content; the report is this trace's."""
    other = TRACES / "torch_decode_sync.sqlite"
    mine_expected = run(str(SMALL), "-f", "json", "--no-cache")
    run(str(SMALL), "-f", "json")
    [mine] = entries(results)
    run(str(other), "-f", "json")
    [theirs] = [e for e in entries(results) if e != mine]
    shutil.copyfile(theirs, mine)
    assert READ_IN.search(run(str(SMALL)).splitlines()[0])  # analyzed again: the copy was not served
    assert run(str(SMALL), "-f", "json") == mine_expected
    assert sealed_body(mine, f"results/{mine.name}", content(SMALL)).decode() == mine_expected


def test_no_cache_flag_and_environment(results, monkeypatch):
    trace = str(SMALL)
    run(trace, "--no-cache")
    assert not results.exists()
    run(trace)
    [entry] = entries(results)
    assert READ_IN.search(run(trace, "--no-cache").splitlines()[0])  # the entry is there, not read
    monkeypatch.setenv(cache.NO_CACHE_ENV, "1")
    assert READ_IN.search(run(trace).splitlines()[0])
    monkeypatch.setenv(cache.NO_CACHE_ENV, "0")
    assert "cached result" in run(trace).splitlines()[0]
    assert entries(results) == [entry]


HEAVY = """
import contextlib, io, json, sys
from gapscope.cli import main
outs = []
for args in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["analyze", *args])
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
    outs.append(out.getvalue())
heavy = [m for m in ("numpy", "pandas", "pyarrow") if m in sys.modules]
print(json.dumps({"outs": outs, "heavy": heavy}))
"""


def hit_process(*runs: list[str], env: dict[str, str]) -> tuple[list[str], list[str]]:
    """``gapscope analyze ARGS`` for each of ``runs`` in turn, in one fresh interpreter: their
    outputs, and which of numpy, pandas and pyarrow that interpreter imported over all of them
    (modules are never unloaded: none after the last run means none in any run)."""
    proc = subprocess.run([sys.executable, "-c", HEAVY, json.dumps(runs)], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout)
    return done["outs"], done["heavy"]


def test_a_hit_imports_no_numpy_pandas_or_pyarrow(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), cache.NO_CACHE_ENV: ""}
    trace = str(TRACES / "torch_emit_nvtx.sqlite")  # NVTX domains: the renderers look them up
    _, heavy = hit_process([trace, "-f", "json"], env=env)
    assert heavy == ["numpy", "pandas", "pyarrow"]  # the miss
    formats = ("json", "table", "markdown", "html", "csv")
    hits, heavy = hit_process(*([trace, "-f", fmt] for fmt in formats), env=env)
    assert heavy == []  # five hits in one fresh interpreter
    for fmt, out in zip(formats, hits):
        if fmt in ("table", "markdown", "html"):
            assert "cached result" in out, fmt
        else:  # the uncached output, computed here (in this process: it may import anything)
            assert out == gapscope("analyze", trace, "-f", fmt, "--no-cache").stdout, fmt


def test_the_renderers_category_order_is_the_analysis_one():
    from gapscope.analysis.attribution import CATEGORY_LABELS
    from gapscope.schema import CATEGORIES

    assert CATEGORIES == CATEGORY_LABELS


def test_a_verified_object_skips_only_the_deep_check():
    from gapscope.errors import GapscopeError
    from gapscope.schema import Verified, check_result

    data = json.loads(run(str(SMALL), "-f", "json", "--no-cache"))
    data["devices"][0]["gap_fraction"] = 7.0  # outside [0, 1]: a user's edit
    with pytest.raises(GapscopeError, match="gap_fraction"):
        check_result(data, "edited.json")
    assert check_result(Verified(data), "cache") == "analysis"
    with pytest.raises(GapscopeError):  # its schema is still read
        check_result(Verified({**data, "schema": "other/1"}), "cache")


def test_not_used_where_the_command_needs_more_than_the_result(tmp_path, results):
    trace = str(SMALL)
    run(trace, "-f", "parquet", "-o", str(tmp_path / "tables"))
    run(trace, "-f", "json", "--gaps-csv", str(tmp_path / "gaps.csv"))
    run(trace, str(TRACES / "torch_decode_sync.sqlite"), "-f", "json")
    run(trace, "--ranks", "-f", "json")
    assert not results.exists()
    run(trace, "-f", "json")
    assert len(entries(results)) == 1
    (tmp_path / "gaps.csv").unlink()
    out = run(trace, "--gaps-csv", str(tmp_path / "gaps.csv"))
    assert READ_IN.search(out.splitlines()[0]) and (tmp_path / "gaps.csv").stat().st_size > 0
    saved = tmp_path / "saved.json"
    saved.write_text(run(trace, "-f", "json"))
    assert run(str(saved), "-f", "json") == saved.read_text()  # a saved result: not keyed, not kept
    assert len(entries(results)) == 1


def test_an_export_with_a_write_in_flight_is_not_cached(tmp_path, results):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copyfile(SMALL, folder / "t.sqlite")
    (folder / "t.sqlite-journal").write_bytes(b"")  # no hot journal: read as it is, yet not cached
    for _ in range(2):
        assert READ_IN.search(run(str(folder / "t.sqlite")).splitlines()[0])
    assert not results.exists()
    assert sorted(p.name for p in folder.iterdir()) == ["t.sqlite", "t.sqlite-journal"]


def test_nothing_is_written_beside_the_trace(tmp_path, results):
    folder = tmp_path / "traces"
    folder.mkdir()
    for name in ("t.sqlite", "t.pt.trace.json.gz"):
        shutil.copyfile(SMALL if name.endswith("sqlite") else TRACES / "torch_decode_small.pt.trace.json.gz",
                        folder / name)
        for _ in range(2):
            run(str(folder / name), "-f", "json")
    assert sorted(p.name for p in folder.iterdir()) == ["t.pt.trace.json.gz", "t.sqlite"]
    assert len(entries(results)) == 2


def test_eviction_counts_result_entries(tmp_path):
    root = tmp_path / "gapscope"
    name = hashlib.sha1(b"c").hexdigest()
    column = root / "columns" / f"{name}-300"
    result = root / "results" / f"{hashlib.sha256(b'r').hexdigest()}.result"
    column.mkdir(parents=True)
    result.parent.mkdir(parents=True)
    (column / f"{name}.arrow").write_bytes(b"x" * 300)
    (column / cache.STAMP).touch()
    result.write_bytes(b"y" * 300)
    os.utime(result, (1000, 1000))  # the result used first
    os.utime(column / cache.STAMP, (2000, 2000))
    ledger = cache.Ledger(root)
    assert ledger.bound(600) == []  # 300 + 300 bytes fit
    assert ledger.bound(599) == [result]
    assert ledger.bound(0) == [column]


def test_the_size_bound_holds_columns_and_results_together(tmp_path, results, monkeypatch, unbudgeted):
    trace = str(SMALL)
    run(trace, "-f", "json")
    [entry] = entries(results)
    columns = results.parent / "columns"
    kept = sum(p.stat().st_size for p in columns.rglob("*") if p.is_file())
    assert kept > 0
    # a bound that holds the columns and not the result as well: the next entry written evicts
    # the least recently used one, the result
    os.utime(entry, (1000, 1000))
    limit = kept + entry.stat().st_size - 1
    monkeypatch.setenv(cache.SIZE_ENV, str(limit))
    run(trace, "-f", "json", "--top", "3")  # a miss: writes a result entry (smaller), no column entry
    left = entries(results)
    assert entry not in left and len(left) == 1
    assert sum(p.stat().st_size for p in results.parent.rglob("*") if p.is_file()) <= limit
    assert sum(p.stat().st_size for p in columns.rglob("*") if p.is_file()) == kept  # the columns stay


def test_a_result_larger_than_the_bound_is_not_kept(results, monkeypatch, unbudgeted):
    """A result entry that alone would pass the bound is not written, and evicts nothing."""
    trace = str(SMALL)
    top3 = run(trace, "-f", "json", "--top", "3", "--no-cache")
    run(trace, "-f", "json")  # the columns and the result kept

    def kept() -> dict[Path, int]:
        return {p: p.stat().st_size for f in ("columns", "results") for p in (results.parent / f).rglob("*")
                if p.is_file()}

    before = kept()
    assert len(entries(results)) == 1
    monkeypatch.setenv(cache.SIZE_ENV, str(len(top3.encode()) + cache.CRC_BYTES - 1))  # the body's own bytes
    assert run(trace, "-f", "json", "--top", "3") == top3  # a miss whose result is one byte too large
    assert kept() == before  # nothing written, nothing evicted


def test_a_miss_reads_the_trace_bytes_once_for_both_caches(results, tmp_path, monkeypatch):
    """The column entry and the result entry of one analysis are keyed by one SHA-1 of the
    export (gapscope.cache.content_digest), hashed once; a rewrite of the file (same size, a
    new ctime) is hashed again and keyed anew."""
    trace = tmp_path / "t.sqlite"
    shutil.copyfile(SMALL, trace)
    hashed = []
    real = hashlib.new
    monkeypatch.setattr(hashlib, "new", lambda name, *a, **k: hashed.append(name) or real(name, *a, **k))
    run(str(trace), "-f", "json")
    assert hashed.count("sha1") == 1
    assert [p.name for p in (results.parent / "columns").iterdir()] == [
        f"{hashlib.sha1(trace.read_bytes()).hexdigest()}-{trace.stat().st_size}"]
    assert len(entries(results)) == 1
    data = bytearray(trace.read_bytes())
    data[-1] ^= 0xFF  # the last page's last byte: same size, other content
    trace.write_bytes(bytes(data))
    hashed.clear()
    run(str(trace), "-f", "json")
    assert hashed.count("sha1") == 1
    assert len(entries(results)) == 2


def test_the_default_options_are_the_pipelines():
    """An entry's key merges the options given over ANALYSIS_DEFAULTS: they must be run_analysis's
    own defaults, or a caller giving none would read another analysis's entry."""
    import inspect

    from gapscope.analysis.pipeline import run_analysis

    params = inspect.signature(run_analysis).parameters
    assert {k: params[k].default for k in cache.ANALYSIS_DEFAULTS} == dict(cache.ANALYSIS_DEFAULTS)
    assert dict(cache.ANALYSIS_DEFAULTS) == {"ranges": (), "domains": (), "count_memops": False,
                                             "attribution": True, "top": 10, "threads": "same", "normalize": True,
                                             "window": None}


def test_analysis_result_reads_the_entry_the_command_kept(results, monkeypatch):
    trace = str(SMALL)
    kept = json.loads(run(trace, "-f", "json"))  # `gapscope analyze` keeps it, with every option given
    import gapscope.analysis.pipeline as pipeline

    monkeypatch.setattr(pipeline, "analysis_of", lambda *a, **k: pytest.fail("analyzed again"))
    result, cached = cache.analysis_result(Path(trace), "nsys-sqlite")  # no option given: the same entry
    assert cached and result.to_dict() == kept
    assert len(entries(results)) == 1
    with pytest.raises(BaseException, match="analyzed again"):  # another option: its own entry
        cache.analysis_result(Path(trace), "nsys-sqlite", {"top": 3})


def test_analysis_result_keeps_a_miss_for_the_command(results):
    trace = str(SMALL)
    made, cached = cache.analysis_result(Path(trace), "nsys-sqlite", {"ranges": ("decode*",)})
    assert not cached
    [entry] = entries(results)
    again, cached = cache.analysis_result(Path(trace), "nsys-sqlite", {"ranges": ["decode*"]})
    assert cached and again.to_dict() == json.loads(json.dumps(made.to_dict()))
    plain = run(trace, "--range", "decode*", "-f", "json", "--no-cache")
    assert run(trace, "--range", "decode*", "-f", "json") == plain  # the command reads it
    assert entries(results) == [entry] and entry.read_bytes()[:-4].decode().split("\n", 1)[1] == plain  # after its purpose line


def test_compare_reads_a_trace_from_the_result_cache(results, monkeypatch):
    """`gapscope compare TRACE ...` analyzes a trace as `gapscope analyze TRACE` does: the entry that
    command kept is read, not analyzed again (and one compare made serves the command)."""
    from gapscope.regression.comparison import load_input

    trace = str(SMALL)
    kept = json.loads(run(trace, "-f", "json"))
    import gapscope.analysis.pipeline as pipeline

    real = pipeline.analysis_of
    monkeypatch.setattr(pipeline, "analysis_of", lambda *a, **k: pytest.fail("analyzed again"))
    assert load_input(trace) == kept
    monkeypatch.setattr(pipeline, "analysis_of", real)
    other = str(TRACES / "torch_decode_sync.sqlite")
    assert load_input(other) == json.loads(run(other, "-f", "json", "--no-cache"))
    assert "cached result" in run(other).splitlines()[0]
    assert len(entries(results)) == 2


def test_one_entry_serves_every_spelling_of_the_trace(results, tmp_path):
    """The entry is keyed by the file (its resolved path and content), not by how the path is
    spelled: an absolute path and a link to the trace hit the entry the relative path made, and
    the JSON says the path as given, as an analysis of that spelling writes it."""
    link = tmp_path / "link.sqlite"
    link.symlink_to(SMALL.resolve())
    relative = os.path.relpath(SMALL)
    run(relative, "-f", "json")
    assert len(entries(results)) == 1
    for spelled in (str(SMALL.resolve()), relative):
        assert run(spelled, "-f", "json") == run(spelled, "-f", "json", "--no-cache")
        assert "cached result" in run(spelled)
    assert len(entries(results)) == 1
    # A link to it resolves to the same file: the same entry, the path as given.
    assert json.loads(run(str(link), "-f", "json"))["trace"]["path"] == str(link)
    assert "cached result" in run(str(link)) and len(entries(results)) == 1
