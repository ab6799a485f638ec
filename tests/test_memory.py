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


def test_the_estimate_is_the_fitted_line():
    assert memory.needed_bytes(0) == 300_000_000
    assert memory.needed_bytes(1_000_000) == 300_000_000 + 550_000_000
    assert memory.needed_bytes(-5) == 300_000_000


def test_available_memory_is_mem_available_plus_free_swap(tmp_path):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   1000 kB\n"
                    "SwapTotal: 50 kB\nSwapFree:         24 kB\n")
    assert memory.available_bytes(info) == (1000 + 24) * 1024
    info.write_text("MemTotal: 5 kB\n")  # no MemAvailable: the machine does not say
    assert memory.available_bytes(info) is None
    assert memory.available_bytes(tmp_path / "absent") is None


def test_a_trace_too_large_is_refused_in_one_line():
    rows = 40_000_000  # needs 300e6 + 40e6 * 550 = 22.3e9 bytes
    with pytest.raises(GapscopeError) as err:
        memory.check("big.sqlite", rows, available=18_000_000_000, environ={})
    assert str(err.value) == (
        "big.sqlite: analyzing its 40,000,000 GPU activities needs about 22.3 GB of memory, more than "
        "the 18.0 GB this machine has free; record a shorter capture (`nsys profile --capture-range`, "
        "`--duration`) or analyze it on a larger machine (GAPSCOPE_MEMORY_CHECK=0 tries anyway)")
    assert err.value.exit_code == 2
    memory.check("big.sqlite", rows, available=22_300_000_000, environ={})  # exactly enough: analyzed
    memory.check("big.sqlite", rows, available=1, environ={"GAPSCOPE_MEMORY_CHECK": "0"})  # turned off
    memory.check("big.sqlite", None, available=1, environ={})  # rows unknown: nothing to check


def test_the_command_refuses_before_reading(monkeypatch):
    need = memory.needed_bytes(counted(TRACES / "torch_decode.sqlite"))
    monkeypatch.delenv("GAPSCOPE_MEMORY_CHECK", raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: need - 1)
    got = gapscope("analyze", "traces/torch_decode.sqlite", "--no-cache")
    assert got.returncode == 2
    assert got.stderr.count("\n") == 1 and "analyzing its 5,633 GPU activities needs about 0.3 GB" in got.stderr
    assert got.stdout == ""
    monkeypatch.setattr(memory, "available_bytes", lambda: need)
    assert gapscope("analyze", "traces/torch_decode.sqlite", "--no-cache").returncode == 0
