"""The memory check before an analysis (gapscope.analysis.memory): each reader's count of GPU
activity rows against an independent count, the estimate's arithmetic, and the refusal."""

from __future__ import annotations

import sqlite3

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clirun import gapscope
from gapscope.analysis import memory
from gapscope.errors import GapscopeError
from gapscope.trace.handle import open_trace
from paths import TRACES

ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


def counted(path) -> int:
    """COUNT(*) of every GPU activity table of a SQLite export, with the stdlib's sqlite3."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ACTIVITY if t in have)
    finally:
        conn.close()


@pytest.mark.parametrize("path", sorted(TRACES.glob("*.sqlite")), ids=lambda p: p.name)
def test_sqlite_rows_are_counted_without_reading_them(path):
    with open_trace(path) as trace:
        assert trace.activity_rows() == counted(path)


def test_the_count_reads_no_row():
    """The rowid spans are two b-tree lookups a table (SQLite's plan searches, never scans)."""
    from gapscope.trace.nsys_sqlite import rowid_spans_sql

    conn = sqlite3.connect(f"file:{TRACES / 'torch_decode.sqlite'}?mode=ro", uri=True)
    try:
        have = [t for t in ACTIVITY if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()]
        plan = [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + rowid_spans_sql(have))]
        values = conn.execute(rowid_spans_sql(have)).fetchone()
    finally:
        conn.close()
    assert len(have) == 2  # kernels and copies
    assert sorted(p for p in plan if p.startswith(("SCAN", "SEARCH"))) == \
        ["SCAN CONSTANT ROW"] + sorted(f"SEARCH {t}" for t in have for _ in range(2))
    assert sum(values) == counted(TRACES / "torch_decode.sqlite")


@pytest.mark.parametrize("folder,suffix", [("torch_decode_small_parquet", ".parquet"),
                                           ("torch_decode_small_arrow", ".arrow"),
                                           ("profile_torch_decode_graph_arrow", ".arrow")])
def test_columnar_rows_from_footers_and_batch_headers(folder, suffix):
    folder = TRACES / folder

    def rows(path):  # the whole table, read plainly
        if suffix == ".parquet":
            return pq.read_table(path).num_rows
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_stream(source).read_all().num_rows

    expected = sum(rows(folder / f"{t}{suffix}") for t in ACTIVITY if (folder / f"{t}{suffix}").is_file())
    with open_trace(folder) as trace:
        assert trace.activity_rows() == expected == len(trace.frames().activities)


def test_a_pytorch_profiler_trace_is_not_counted():
    with open_trace(TRACES / "torch_decode_small.pt.trace.json.gz") as trace:
        assert trace.activity_rows() is None


def test_the_estimate_is_the_fitted_line_of_each_path():
    assert memory.needed_bytes(0) == 300_000_000
    assert memory.needed_bytes(1_000_000) == 300_000_000 + 200_000_000  # no gap list kept
    assert memory.needed_bytes(1_000_000, gaps=True) == 300_000_000 + 800_000_000  # gap lists kept
    assert memory.needed_bytes(1_000_000, merge=True) == 300_000_000 + 440_000_000  # range pairs, device gaps
    assert memory.needed_bytes(1_000_000, gaps=True, merge=True) == 300_000_000 + 800_000_000
    assert memory.needed_bytes(1_000_000, all_calls=True) == 300_000_000 + 1_350_000_000  # tables, export
    assert memory.needed_bytes(1_000_000, gaps=True, all_calls=True) == 1_650_000_000
    assert memory.needed_bytes(-5, all_calls=True) == 300_000_000


def test_available_memory_is_mem_available_plus_free_swap(tmp_path):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   1000 kB\n"
                    "SwapTotal: 50 kB\nSwapFree:         24 kB\n")
    assert memory.available_bytes(info) == (1000 + 24) * 1024
    info.write_text("MemTotal: 5 kB\n")  # no MemAvailable: the machine does not say
    assert memory.available_bytes(info) is None
    assert memory.available_bytes(tmp_path / "absent") is None


def test_a_trace_too_large_is_refused_in_one_line():
    rows = 40_000_000  # needs 300e6 + 40e6 * 200 = 8.3e9 bytes
    with pytest.raises(GapscopeError) as err:
        memory.check("big.sqlite", rows, available=8_000_000_000, environ={})
    assert str(err.value) == (
        "big.sqlite: analyzing its 40,000,000 GPU activities needs about 8.3 GB of memory, more than "
        "the 8.0 GB this machine has free; record a shorter capture (`nsys profile --capture-range`, "
        "`--duration`) or analyze it on a larger machine (GAPSCOPE_MEMORY_CHECK=0 tries anyway)")
    assert err.value.exit_code == 2
    memory.check("big.sqlite", rows, available=8_300_000_000, environ={})  # exactly enough: analyzed
    with pytest.raises(GapscopeError, match="needs about 32.3 GB"):  # 300e6 + 40e6 * 800
        memory.check("big.sqlite", rows, gaps=True, available=13_100_000_000, environ={})
    with pytest.raises(GapscopeError, match="needs about 54.3 GB"):  # 300e6 + 40e6 * 1,350
        memory.check("big.sqlite", rows, all_calls=True, available=32_300_000_000, environ={})
    memory.check("big.sqlite", rows, available=1, environ={"GAPSCOPE_MEMORY_CHECK": "0"})  # turned off
    memory.check("big.sqlite", None, available=1, environ={})  # rows unknown: nothing to check


def test_the_command_refuses_before_reading(monkeypatch):
    need = 300_000_000 + 200 * counted(TRACES / "torch_decode.sqlite")
    monkeypatch.delenv("GAPSCOPE_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: need - 1)
    got = gapscope("analyze", "traces/torch_decode.sqlite", "--no-cache")
    assert got.returncode == 2
    assert got.stderr.count("\n") == 1 and "analyzing its 5,633 GPU activities needs about 0.3 GB" in got.stderr
    assert got.stdout == ""
    monkeypatch.setattr(memory, "available_bytes", lambda: need)
    assert gapscope("analyze", "traces/torch_decode.sqlite", "--no-cache").returncode == 0


DECODE = TRACES / "torch_decode.sqlite"
#: Each path and what it asks the check for: its bytes per activity row (no gap list kept:
#: 200; kept: 800; every CUDA call read too: 1,350; a file of several: 440).
PATHS = [
    (200, ["analyze", "traces/torch_decode.sqlite", "--no-cache", "-f", "json"]),
    (800, ["analyze", "traces/torch_decode.sqlite", "--no-cache", "--plot", "{tmp}/plots"]),
    (800, ["report", "traces/torch_decode.sqlite", "--no-figures", "--html", "{tmp}/r.html"]),
    (1350, ["analyze", "traces/torch_decode.sqlite", "--no-cache", "--gaps-csv", "{tmp}/gaps.csv"]),
    (1350, ["analyze", "traces/torch_decode.sqlite", "--no-cache", "-f", "parquet", "-o", "{tmp}/tables"]),
    (1350, ["export", "traces/torch_decode.sqlite", "--perfetto", "{tmp}/timeline.json"]),
]


@pytest.mark.parametrize("per_row,args", PATHS,
                         ids=lambda v: " ".join(v[:1] + v[3:]) if isinstance(v, list) else str(v))
def test_each_path_asks_for_its_own_figure(per_row, args, monkeypatch, tmp_path):
    need = 300_000_000 + per_row * counted(DECODE)  # 5,633 activities
    args = [a.format(tmp=tmp_path) for a in args]
    monkeypatch.delenv("GAPSCOPE_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: need - 1)  # one byte short: refused
    got = gapscope(*args)
    assert (got.returncode, got.stderr.count("\n"), got.stdout) == (2, 1, "")
    assert "analyzing its 5,633 GPU activities needs about" in got.stderr
    monkeypatch.setattr(memory, "available_bytes", lambda: need)  # exactly enough: runs
    got = gapscope(*args)
    assert got.returncode == 0 and "needs about" not in got.stderr


def test_the_api_and_a_fleet_worker_ask_for_theirs(monkeypatch):
    import gapscope as api
    from gapscope.fleet.ranks import analyze_rank_file

    rows = counted(DECODE)
    monkeypatch.delenv("GAPSCOPE_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: 300_000_000 + 1350 * rows - 1)
    with pytest.raises(GapscopeError, match="needs about"):
        api.analyze(DECODE)  # the tables: every CUDA call
    assert api.analyze(DECODE, tables=False).trace["path"] == str(DECODE)  # the gap lists kept: fits
    monkeypatch.setattr(memory, "available_bytes", lambda: 300_000_000 + 800 * rows - 1)
    with pytest.raises(GapscopeError, match="needs about"):
        api.analyze(DECODE, tables=False)
    assert analyze_rank_file(str(DECODE))["devices"]  # the range pairs and device gaps kept: fits
    monkeypatch.setattr(memory, "available_bytes", lambda: 300_000_000 + 440 * rows - 1)
    with pytest.raises(GapscopeError, match="needs about"):
        analyze_rank_file(str(DECODE))
    monkeypatch.setattr(memory, "available_bytes", lambda: 300_000_000 + 440 * rows)
    assert analyze_rank_file(str(DECODE))["devices"]


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
    need_a, need_b = (300_000_000 + 440 * counted(p) for p in (a, b))  # each worker keeps what the merge reads
    missing = str(tmp_path / "absent.sqlite")  # cannot be opened: left to fail in its worker
    paths = [str(a), missing, str(b)]
    assert memory.estimated_bytes(missing) is None
    assert memory.side_by_side(paths, 3, available=need_a + need_b, environ={}) == (3, None)
    jobs, line = memory.side_by_side(paths, 3, available=need_a + need_b - 1, environ={})
    assert jobs == 1
    assert line == (f"running 1 trace at a time, not 3: 3 at once would need about "
                    f"{(need_a + need_b) / 1e9:.1f} GB, {(need_a + need_b - 1) / 1e9:.1f} GB is free")
    assert memory.side_by_side(paths, 3, available=1, environ={"GAPSCOPE_MEMORY_CHECK": "0"}) == (3, None)
    assert memory.side_by_side(paths, 1, available=1, environ={}) == (1, None)


def test_the_command_says_it_runs_fewer_at_once(monkeypatch):
    a, b = "traces/torch_decode.sqlite", "traces/cmp_base_1.sqlite"
    both = sum(300_000_000 + 440 * counted(TRACES / p.split("/")[1]) for p in (a, b))
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
    both = sum(300_000_000 + 440 * counted(p) for p in paths)
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


def test_large_blocks_mapped_unless_the_user_chose(monkeypatch):
    """The command line gives blocks of 4 MiB or more their own mappings (gapscope.heap); a
    MALLOC_MMAP_THRESHOLD_ the user set is left to glibc."""
    import ctypes
    import platform

    from gapscope import heap

    assert heap.MMAP_THRESHOLD == 4 * 2**20
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert heap.map_large_blocks() is False
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    glibc = platform.libc_ver()[0] == "glibc" and hasattr(ctypes.CDLL(None), "mallopt")
    assert heap.map_large_blocks() is glibc
