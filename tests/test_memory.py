"""The memory check before an analysis (gapscope.analysis.memory): each reader's counts of what
a trace holds against an independent count, the estimate's arithmetic per format and path, and
the refusal."""

from __future__ import annotations

import gzip
import math
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clirun import gapscope
from gapscope import catalog
from gapscope.analysis import memory
from gapscope.errors import GapscopeError
from gapscope.trace.frames import RowCounts
from gapscope.trace.handle import open_trace
from paths import TRACES

ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
API, SYNC, NVTX = "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS"


def table_rows(path) -> dict[str, int]:
    """COUNT(*) of every table of a SQLite export, with the stdlib's sqlite3."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        have = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in have}
    finally:
        conn.close()


def plain_counts(path) -> tuple[int, int, int, int]:
    """(activities, API rows, synchronization rows, NVTX rows) of a SQLite export or a parquetdir
    or arrowdir folder, every table read whole: COUNT(*) with sqlite3, or pyarrow's full read."""
    path = Path(path)
    if path.is_file():
        rows = table_rows(path)
    else:
        rows = {}
        for f in path.iterdir():
            if f.suffix == ".parquet":
                rows[f.stem] = pq.read_table(f).num_rows
            elif f.suffix == ".arrow":
                with pa.memory_map(str(f)) as source:
                    rows[f.stem] = pa.ipc.open_stream(source).read_all().num_rows
    return sum(rows.get(t, 0) for t in ACTIVITY), rows.get(API, 0), rows.get(SYNC, 0), rows.get(NVTX, 0)


#: The paths, each keeping what those before it keep: its estimate is the largest of their lines.
ORDER = ("levels", "merge", "gaps", "all_calls")


def line_estimate(fmt: str, kind: str, activities: int, api: int, syncs: int, nvtx: int) -> int:
    """The estimate written out: the largest of the format's lines of the path and the paths
    before it, over the rows (calls: the API rows and the synchronization records)."""
    return max(line.base + line.per_activity * activities + line.per_call * (api + syncs) + line.per_range * nvtx
               for line in (memory.LINES[fmt][k] for k in ORDER[: ORDER.index(kind) + 1]))


def kineto_estimate(kind: str, json_bytes: int) -> int:
    """A PyTorch profiler trace's estimate written out: its events bounded by its JSON bytes."""
    events = -(-json_bytes // memory.KINETO_BYTES_PER_EVENT)
    return max(line.base + line.per_activity * events
               for line in (memory.LINES["kineto"][k] for k in ORDER[: ORDER.index(kind) + 1]))


COLUMNAR = [("torch_decode_small_parquet", "nsys-parquet"), ("torch_decode_small_arrow", "nsys-arrow"),
            ("profile_torch_decode_graph_arrow", "nsys-arrow")]
KINETO = sorted(TRACES.glob("*.json.gz")) + sorted((TRACES / "thirdparty").glob("*/*.json.gz"))
FLAGS = {"levels": {}, "merge": {"merge": True}, "gaps": {"gaps": True}, "all_calls": {"all_calls": True}}


@pytest.mark.parametrize("path", sorted(TRACES.glob("*.sqlite")), ids=lambda p: p.name)
def test_sqlite_rows_are_counted_without_reading_them(path):
    activities, api, syncs, nvtx = plain_counts(path)
    with open_trace(path) as trace:
        assert trace.row_counts().activities == activities
        assert trace.row_counts() == RowCounts("nsys-sqlite", activities, api, syncs, nvtx)


def test_the_count_reads_no_row():
    """The rowid spans are two b-tree lookups a table (SQLite's plan searches, never scans)."""
    from gapscope.trace.nsys_sqlite import rowid_spans_sql

    conn = sqlite3.connect(f"file:{TRACES / 'torch_decode.sqlite'}?mode=ro", uri=True)
    try:
        have = [t for t in (*ACTIVITY, API, SYNC, NVTX)
                if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()]
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + rowid_spans_sql(have))]
        values = conn.execute(rowid_spans_sql(have)).fetchone()
    finally:
        conn.close()
    assert len(have) == 5  # kernels, copies, calls, synchronizations, NVTX
    assert sorted(p for p in plan if p.startswith(("SCAN", "SEARCH"))) == \
        ["SCAN CONSTANT ROW"] + sorted(f"SEARCH {t}" for t in have for _ in range(2))
    assert list(values) == [table_rows(TRACES / "torch_decode.sqlite")[t] for t in have]


@pytest.mark.parametrize("folder,fmt", COLUMNAR, ids=lambda v: str(v))
def test_columnar_rows_from_footers_and_batch_headers(folder, fmt):
    activities, api, syncs, nvtx = plain_counts(TRACES / folder)
    with open_trace(TRACES / folder) as trace:
        assert trace.row_counts() == RowCounts(fmt, activities, api, syncs, nvtx)
        assert trace.row_counts().activities == activities == len(trace.frames().activities)


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_a_pytorch_profiler_trace_counts_its_json_bytes(path):
    """Only its size is cheap: the bytes of JSON gzip's own decompression gives."""
    with open_trace(path) as trace:
        assert trace.row_counts().activities is None
        assert trace.row_counts() == RowCounts("kineto", json_bytes=len(gzip.decompress(path.read_bytes())))


def test_a_plain_json_trace_counts_its_file_size(tmp_path):
    plain = tmp_path / "t.pt.trace.json"
    plain.write_bytes(gzip.decompress((TRACES / "torch_decode_small.pt.trace.json.gz").read_bytes()))
    with open_trace(plain) as trace:
        assert trace.row_counts() == RowCounts("kineto", json_bytes=plain.stat().st_size)


def test_a_gzip_of_several_members_or_cut_short_counts_what_inflates(tmp_path):
    """A small gzip file is inflated whole: every member counted (as gzip reads them), and a file
    cut short counts what inflates before the cut (the read then refuses it, in its own words)."""
    import zlib

    raw = gzip.decompress((TRACES / "torch_decode_small.pt.trace.json.gz").read_bytes())
    several = tmp_path / "several.pt.trace.json.gz"
    several.write_bytes(gzip.compress(raw[:1_000_000]) + gzip.compress(raw[1_000_000:]))
    cut = tmp_path / "cut.pt.trace.json.gz"
    cut.write_bytes((TRACES / "torch_decode_small.pt.trace.json.gz").read_bytes()[:60_000])
    with open_trace(several) as trace:
        assert trace.row_counts().json_bytes == len(gzip.decompress(several.read_bytes())) == len(raw)
    with open_trace(cut) as trace:
        counted = trace.row_counts().json_bytes
    # zlib's inflate of the same bytes; ISA-L's (gapscope's) may hold back the last few bytes of a
    # stream cut mid-block (777,949 against zlib's 777,950 here).
    inflated = len(zlib.decompressobj(31).decompress(cut.read_bytes()))
    assert inflated - 8 <= counted <= inflated < len(raw)
    got = gapscope("analyze", str(cut), "--no-cache")
    assert got.returncode == 2 and "memory" not in got.stderr and "truncated" in got.stderr


def test_every_format_read_has_a_line_for_every_path():
    """A report is estimated as its export; every other format of the catalog has its lines."""
    assert set(memory.LINES) == set(catalog.FORMAT_NAMES) - {"nsys-rep"}
    assert all(set(lines) == set(memory.KINDS) for lines in memory.LINES.values())


@pytest.mark.parametrize("trace,fmt", [("torch_decode_small.sqlite", "nsys-sqlite"), *COLUMNAR],
                         ids=lambda v: str(v))
def test_the_estimate_counts_every_table_of_each_format(trace, fmt):
    """Each shipped export's estimate is its format's line over its rows, counted plainly; the
    CUDA call rows weigh in every format and path: more calls, the activities the same, is more."""
    activities, api, syncs, nvtx = plain_counts(TRACES / trace)
    with open_trace(TRACES / trace) as handle:
        counts = handle.row_counts()
    for kind, flags in FLAGS.items():
        assert memory.needed_bytes(counts, **flags) == line_estimate(fmt, kind, activities, api, syncs, nvtx)
        more = RowCounts(fmt, activities, api + 1_000_000, syncs, nvtx)
        assert memory.needed_bytes(more, **flags) == line_estimate(fmt, kind, activities, api + 1_000_000, syncs,
                                                                   nvtx) > memory.needed_bytes(counts, **flags)
        assert memory.LINES[fmt][kind].per_call > 0


@pytest.mark.parametrize("trace,fmt", [("torch_decode_small.sqlite", "nsys-sqlite"), *COLUMNAR],
                         ids=lambda v: str(v))
def test_more_activities_need_more_on_every_path(trace, fmt):
    """The activity columns are held whatever the calls: a million more activity rows, the calls
    the same, raise every path's estimate by its line's bytes per activity, some on every line
    (a line fitted over call-heavy tilings alone can put it all on the calls)."""
    activities, api, syncs, nvtx = plain_counts(TRACES / trace)
    for kind, flags in FLAGS.items():
        counts = RowCounts(fmt, activities, api, syncs, nvtx)
        more = RowCounts(fmt, activities + 1_000_000, api, syncs, nvtx)
        assert memory.needed_bytes(more, **flags) == line_estimate(fmt, kind, activities + 1_000_000, api, syncs,
                                                                   nvtx) > memory.needed_bytes(counts, **flags)
        assert memory.LINES[fmt][kind].per_activity > 0


def test_a_pytorch_profiler_trace_is_estimated_from_its_bytes():
    path = TRACES / "torch_decode_small.pt.trace.json.gz"
    size = len(gzip.decompress(path.read_bytes()))  # 2,184,108 bytes
    with open_trace(path) as trace:
        counts = trace.row_counts()
    for kind, flags in FLAGS.items():
        assert memory.needed_bytes(counts, **flags) == kineto_estimate(kind, size)
    # Its kept events (GPU work, calls, annotations: 2,041) are under the bound the bytes give.
    assert 1332 + 691 + 18 <= math.ceil(size / memory.KINETO_BYTES_PER_EVENT)


def test_the_path_picks_its_line():
    counts = RowCounts("nsys-parquet", 1_000_000, 2_000_000, 10_000, 5_000)
    for kind, flags in [("levels", {}), ("merge", {"merge": True}), ("gaps", {"gaps": True}),
                        ("gaps", {"gaps": True, "merge": True}), ("all_calls", {"all_calls": True}),
                        ("all_calls", {"gaps": True, "all_calls": True})]:
        assert memory.needed_bytes(counts, **flags) == line_estimate("nsys-parquet", kind, 1_000_000, 2_000_000,
                                                                     10_000, 5_000)
    assert memory.needed_bytes(RowCounts("nsys-sqlite", -5, -1, 0, 0), all_calls=True) == \
        max(memory.LINES["nsys-sqlite"][k].base for k in ORDER)


def test_available_memory_is_mem_available_plus_free_swap(tmp_path):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   1000 kB\n"
                    "SwapTotal: 50 kB\nSwapFree:         24 kB\n")
    assert memory.available_bytes(info) == (1000 + 24) * 1024
    info.write_text("MemTotal: 5 kB\n")  # no MemAvailable: the machine does not say
    assert memory.available_bytes(info) is None
    assert memory.available_bytes(tmp_path / "absent") is None


def sqlite_need(path, kind: str) -> int:
    """A SQLite export's estimate for one path, from its tables counted plainly."""
    return line_estimate("nsys-sqlite", kind, *plain_counts(path))


def test_a_trace_too_large_is_refused_in_one_line():
    big = RowCounts("nsys-sqlite", 40_000_000, 90_000_000, 1_000_000, 100_000)
    need = line_estimate("nsys-sqlite", "levels", 40_000_000, 90_000_000, 1_000_000, 100_000)
    with pytest.raises(GapscopeError) as err:
        memory.check("big.sqlite", big, available=need - 1, environ={})
    assert str(err.value) == (
        f"big.sqlite: analyzing its 40,000,000 GPU activities and 90,000,000 CUDA calls needs about "
        f"{need / 1e9:.1f} GB of memory, more than the {(need - 1) / 1e9:.1f} GB this machine has free; record "
        "a shorter capture (`nsys profile --capture-range`, `--duration`) or analyze it on a larger machine "
        "(GAPSCOPE_MEMORY_CHECK=0 tries anyway)")
    assert err.value.exit_code == 2
    memory.check("big.sqlite", big, available=need, environ={})  # exactly enough: analyzed
    for kind, flags in FLAGS.items():
        need = line_estimate("nsys-sqlite", kind, 40_000_000, 90_000_000, 1_000_000, 100_000)
        with pytest.raises(GapscopeError, match=f"needs about {need / 1e9:.1f} GB"):
            memory.check("big.sqlite", big, available=need - 1, environ={}, **flags)
    memory.check("big.sqlite", big, available=1, environ={"GAPSCOPE_MEMORY_CHECK": "0"})  # turned off
    memory.check("big.sqlite", None, available=1, environ={})  # nothing counted: nothing to check
    memory.check("t.json", RowCounts("kineto"), available=1, environ={})
    kineto = RowCounts("kineto", json_bytes=17_000_000_000)
    need = kineto_estimate("levels", 17_000_000_000)
    with pytest.raises(GapscopeError, match=r"^t\.json: analyzing its 17\.0 GB of trace JSON needs about "
                                            f"{need / 1e9:.1f} GB of memory, more than"):
        memory.check("t.json", kineto, available=need - 1, environ={})


def test_the_command_refuses_before_reading(monkeypatch):
    need = sqlite_need(TRACES / "torch_decode.sqlite", "levels")
    monkeypatch.delenv("GAPSCOPE_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: need - 1)
    got = gapscope("analyze", "traces/torch_decode.sqlite", "--no-cache")
    assert got.returncode == 2
    assert got.stderr.count("\n") == 1
    assert f"analyzing its 5,633 GPU activities and 8,073 CUDA calls needs about {need / 1e9:.1f} GB" in got.stderr
    assert got.stdout == ""
    monkeypatch.setattr(memory, "available_bytes", lambda: need)
    assert gapscope("analyze", "traces/torch_decode.sqlite", "--no-cache").returncode == 0


def test_a_pytorch_profiler_trace_is_refused_too(monkeypatch):
    path = TRACES / "torch_decode_small.pt.trace.json.gz"
    need = kineto_estimate("levels", len(gzip.decompress(path.read_bytes())))
    monkeypatch.delenv("GAPSCOPE_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: need - 1)
    got = gapscope("analyze", str(path), "--no-cache")
    assert (got.returncode, got.stderr.count("\n"), got.stdout) == (2, 1, "")
    assert "analyzing its 2.2 MB of trace JSON needs about" in got.stderr
    monkeypatch.setattr(memory, "available_bytes", lambda: need)
    assert gapscope("analyze", str(path), "--no-cache").returncode == 0


DECODE = TRACES / "torch_decode.sqlite"
#: Each path and the line it asks the check for: no gap list kept (levels), every gap list kept
#: (gaps), every CUDA call read too (all_calls); a file of several (merge) below.
PATHS = [
    ("levels", ["analyze", "traces/torch_decode.sqlite", "--no-cache", "-f", "json"]),
    ("gaps", ["analyze", "traces/torch_decode.sqlite", "--no-cache", "--plot", "{tmp}/plots"]),
    ("gaps", ["report", "traces/torch_decode.sqlite", "--no-figures", "--html", "{tmp}/r.html"]),
    ("all_calls", ["analyze", "traces/torch_decode.sqlite", "--no-cache", "--gaps-csv", "{tmp}/gaps.csv"]),
    ("all_calls", ["analyze", "traces/torch_decode.sqlite", "--no-cache", "-f", "parquet", "-o", "{tmp}/tables"]),
    ("all_calls", ["export", "traces/torch_decode.sqlite", "--perfetto", "{tmp}/timeline.json"]),
]


@pytest.mark.parametrize("kind,args", PATHS, ids=lambda v: " ".join(v[:1] + v[3:]) if isinstance(v, list) else v)
def test_each_path_asks_for_its_own_figure(kind, args, monkeypatch, tmp_path):
    need = sqlite_need(DECODE, kind)  # 5,633 activities, 8,073 calls, 65 synchronizations, 66 NVTX rows
    args = [a.format(tmp=tmp_path) for a in args]
    monkeypatch.delenv("GAPSCOPE_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: need - 1)  # one byte short: refused
    got = gapscope(*args)
    assert (got.returncode, got.stderr.count("\n"), got.stdout) == (2, 1, "")
    assert "analyzing its 5,633 GPU activities and 8,073 CUDA calls needs about" in got.stderr
    monkeypatch.setattr(memory, "available_bytes", lambda: need)  # exactly enough: runs
    got = gapscope(*args)
    assert got.returncode == 0 and "needs about" not in got.stderr


@pytest.mark.parametrize("kind", ["all_calls", "gaps", "merge"])
def test_the_api_and_a_fleet_worker_ask_for_theirs(kind, monkeypatch):
    import gapscope as api
    from gapscope.fleet.ranks import analyze_rank_file

    run = {"all_calls": lambda: api.analyze(DECODE).trace["path"],  # the tables: every CUDA call
           "gaps": lambda: api.analyze(DECODE, tables=False).trace["path"],  # every gap list kept
           "merge": lambda: analyze_rank_file(str(DECODE))["trace"]["path"]}[kind]  # range pairs, device gaps
    need = sqlite_need(DECODE, kind)
    monkeypatch.delenv("GAPSCOPE_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: need - 1)
    with pytest.raises(GapscopeError, match=f"needs about {need / 1e9:.1f} GB"):
        run()
    monkeypatch.setattr(memory, "available_bytes", lambda: need)
    assert run() == str(DECODE)


@pytest.mark.parametrize("needs,jobs,available,expected", [
    ([4, 3, 3, 2, None, 12], 4, 10, 3),  # 12 alone is too large, None unknown: 4 + 3 + 3 = 10 fits, + 2 not
    ([4, 3, 3, 2, None, 12], 2, 10, 2),  # 4 + 3 fits: as asked
    ([4, 3, 3, 2], 4, 9, 2),  # 4 + 3 = 7 fits, 4 + 3 + 3 = 10 not
    ([4, 3, 3, 2], 4, 3.5, 1),  # 4 is too large alone; 3 + 3 = 6 is not 3.5
    ([4, 3, 3, 2], 8, 12, 8),  # all four together fit: 8 workers, as asked (the pool takes 4)
    ([4, 3], 2, 2, 2),  # none fits alone: each is refused by its own check, nothing to wait for
    ([None, None], 3, 1, 3),  # nothing known: as asked
    ([5, 5, 5], 3, 4.99, 3),
    ([5, 5, 5], 3, 5, 1),
])
def test_jobs_are_lowered_until_the_largest_fit_together(needs, jobs, available, expected):
    scaled = [None if n is None else int(n * 1e9) for n in needs]
    assert memory.concurrent_jobs(scaled, jobs, int(available * 1e9)) == expected


def test_several_traces_are_estimated_from_their_rows(tmp_path):
    a, b = TRACES / "torch_decode.sqlite", TRACES / "cmp_base_1.sqlite"
    need_a, need_b = (sqlite_need(p, "merge") for p in (a, b))  # each worker keeps what the merge reads
    missing = str(tmp_path / "absent.sqlite")  # cannot be opened: left to fail in its worker
    paths = [str(a), missing, str(b)]
    assert memory.estimated_bytes(missing) is None
    kineto = TRACES / "torch_decode_small.pt.trace.json.gz"  # estimated from its bytes of JSON
    assert memory.estimated_bytes(str(kineto)) == kineto_estimate("merge", len(gzip.decompress(kineto.read_bytes())))
    assert memory.side_by_side(paths, 3, available=need_a + need_b, environ={}) == (3, None)
    jobs, line = memory.side_by_side(paths, 3, available=need_a + need_b - 1, environ={})
    assert jobs == 1
    assert line == (f"running 1 trace at a time, not 3: 3 at once would need about "
                    f"{(need_a + need_b) / 1e9:.1f} GB, {(need_a + need_b - 1) / 1e9:.1f} GB is free")
    assert memory.side_by_side(paths, 3, available=1, environ={"GAPSCOPE_MEMORY_CHECK": "0"}) == (3, None)
    assert memory.side_by_side(paths, 1, available=1, environ={}) == (1, None)


def test_the_command_says_it_runs_fewer_at_once(monkeypatch):
    a, b = "traces/torch_decode.sqlite", "traces/cmp_base_1.sqlite"
    both = sum(sqlite_need(TRACES / p.split("/")[1], "merge") for p in (a, b))
    monkeypatch.delenv("GAPSCOPE_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: both - 1)  # the parent's view; workers see the machine
    # The result's own warnings go to stderr too (64 decode steps against 32): not this test's.
    warning = "gapscope: warning: range 'decode_step': 32 to 64 instances per rank; steps past the first 32 " \
              "are compared among fewer ranks\n"
    got = gapscope("analyze", a, b, "--jobs", "2", "-f", "json")
    assert got.returncode == 0, got.stderr
    assert got.stderr == (f"gapscope: running 1 trace at a time, not 2: 2 at once would need about "
                          f"{both / 1e9:.1f} GB, {(both - 1) / 1e9:.1f} GB is free\n") + warning
    monkeypatch.setattr(memory, "available_bytes", lambda: both)
    got = gapscope("analyze", a, b, "--jobs", "2", "-f", "json")
    assert got.returncode == 0 and got.stderr == warning
    monkeypatch.setenv("GAPSCOPE_MEMORY_CHECK", "0")
    monkeypatch.setattr(memory, "available_bytes", lambda: 1)
    got = gapscope("analyze", a, b, "--jobs", "2", "-f", "json")
    assert got.returncode == 0 and got.stderr == warning


def test_the_library_warns_where_the_command_prints(monkeypatch):
    """analyze_fleet (the Python API's several traces) says it through a RuntimeWarning."""
    from gapscope.fleet.executors import ProcessPool
    from gapscope.fleet.merge import analyze_fleet

    paths = [str(TRACES / "torch_decode.sqlite"), str(TRACES / "cmp_base_1.sqlite")]
    both = sum(sqlite_need(p, "merge") for p in paths)
    monkeypatch.delenv("GAPSCOPE_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: both - 1)
    with pytest.warns(RuntimeWarning, match="^gapscope: running 1 trace at a time, not 2: "):
        fleet = analyze_fleet(paths, ProcessPool(2, ["gapscope.fleet.merge"]))
    assert len(fleet.devices) == 2 and not fleet.failed


def test_one_malloc_arena_unless_the_user_chose(monkeypatch):
    """The command line shares one glibc arena between its threads (gapscope.heap); a
    MALLOC_ARENA_MAX the user set is left to glibc."""
    import ctypes
    import platform

    from gapscope import heap

    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert heap.use_one_arena() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    glibc = platform.libc_ver()[0] == "glibc" and hasattr(ctypes.CDLL(None), "mallopt")
    assert heap.use_one_arena() is glibc


def _declare_mallinfo2(libc) -> None:  # type: ignore[no-untyped-def]
    """Give glibc's mallinfo2, malloc and free their C types on ``libc`` (ctypes)."""
    import ctypes

    class MallInfo(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc.mallinfo2.restype = MallInfo
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]


def test_blocks_come_from_the_heap_and_stay_there_unless_the_user_chose(monkeypatch):
    """The command line serves every block under heap.MMAP_THRESHOLD from the heap and keeps what
    is freed there for the next block (gapscope.heap): a 64 MiB block is no mapping of its own
    (glibc's mallinfo2), and once freed its bytes are still the heap's, free. A
    MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ the user set is left to glibc."""
    import ctypes
    import platform

    from gapscope import heap

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert heap.map_large_blocks() is False and heap.keep_freed_pages() is False
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    libc = ctypes.CDLL(None)
    glibc = platform.libc_ver()[0] == "glibc" and hasattr(libc, "mallopt")
    assert heap.map_large_blocks() is glibc and heap.keep_freed_pages() is glibc
    assert heap.MMAP_THRESHOLD > 64 << 20
    if not hasattr(libc, "mallinfo2"):  # glibc before 2.33, or no glibc: the settings were all there is
        return

    _declare_mallinfo2(libc)
    before = libc.mallinfo2()
    block = libc.malloc(64 << 20)
    assert libc.mallinfo2().hblkhd == before.hblkhd  # no mapping of its own
    libc.free(block)
    assert libc.mallinfo2().fordblks >= 64 << 20  # kept, free, for the next block


def test_an_analysis_hands_the_heap_back_once_at_its_end(monkeypatch):
    """Between its steps an analysis keeps the heap's free pages for the next step's arrays;
    it hands them back once (heap.give_back_freed_pages), when its result is built."""
    from gapscope import heap
    from gapscope.analysis import pipeline

    calls = []
    monkeypatch.setattr(heap, "TRIM_ROWS", 0)
    monkeypatch.setattr(heap, "give_back_freed_pages", lambda: calls.append(1))
    pipeline.analyze(TRACES / "torch_decode.sqlite")
    assert calls == [1]


def test_a_large_trace_maps_its_large_blocks_apart_then_sets_the_heap_back(monkeypatch):
    """For a trace of heap.LARGE_ROWS activities or more, in a process whose heap the command line
    tuned, blocks of heap.LARGE_TRACE_MMAP_THRESHOLD bytes or more get a mapping of their own
    (glibc's mallinfo2 counts it) until the analysis is done; then they come from the heap again.
    A smaller trace, or a process the command line did not tune, changes nothing."""
    import ctypes
    import platform

    from gapscope import heap

    libc = ctypes.CDLL(None)
    glibc = platform.libc_ver()[0] == "glibc" and hasattr(libc, "mallopt")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setattr(heap, "_tuned", False)
    assert heap.map_apart_for(heap.LARGE_ROWS) is False  # not tuned: a library's own settings
    assert heap.map_large_blocks() is glibc
    assert heap.map_apart_for(heap.LARGE_ROWS - 1) is False
    assert heap.map_apart_for(heap.LARGE_ROWS) is glibc
    if not glibc or not hasattr(libc, "mallinfo2"):
        return

    _declare_mallinfo2(libc)

    def mapped_apart(size: int) -> bool:
        before = libc.mallinfo2().hblkhd
        block = libc.malloc(size)
        apart = libc.mallinfo2().hblkhd >= before + size
        libc.free(block)
        return apart

    size = 256 << 20  # above any free block the heap may hold (never touched: no page is made)
    assert mapped_apart(size)
    heap.give_back_for(heap.LARGE_ROWS)
    assert not mapped_apart(size)
