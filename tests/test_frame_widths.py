"""Frame widths: the id columns of gapscope.trace.frames.NARROW_COLUMNS are 32-bit when every
value fits and 64-bit otherwise, with the same analysis either way; the activity tables are
stacked a column at a time with the rows pd.concat gives; time keys built in place equal the
plain formula."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from gapscope.analysis.keys import TimeKeys
from gapscope.analysis.pipeline import run_analysis
from gapscope.trace.frames import NARROW_COLUMNS, NARROW_LIMIT, build_frames, narrow_ids
from gapscope.trace.handle import open_trace
from gapscope.trace.nsys_schema import _stacked
from paths import TRACES

#: Kernels and copies (two activity tables), several devices, graph replays.
NAMES = ["torch_decode_sync.sqlite", "case_multi_gpu.sqlite", "cupy_paths_node.sqlite"]


def test_narrow_ids_keeps_64_bits_outside_minus_one_to_the_limit():
    small = np.array([-1, 0, 5, NARROW_LIMIT - 1], dtype=np.int64)
    assert narrow_ids(small).dtype == np.int32 and narrow_ids(small).tolist() == small.tolist()
    for wide in ([0, NARROW_LIMIT], [-2, 3]):
        values = np.array(wide, dtype=np.int64)
        assert narrow_ids(values) is values  # no copy, still int64
    assert narrow_ids(np.zeros(0, dtype=np.int64)).dtype == np.int32


def test_name_ids_narrow_to_16_bits_only_where_every_one_fits():
    """TraceFrames.narrow_name_ids (an analysis that reads its result only): the activities'
    name ids in int16 with the same values where all lie in [-1, 32767); left as they are
    otherwise; no column, nothing done."""
    with open_trace(TRACES / "torch_decode_small_parquet") as trace:
        frames = trace.frames(syncs=True)
    ids = frames.activities["name_id"].to_numpy().copy()
    assert ids.dtype == np.int32 and -1 <= ids.min() and ids.max() < 2**15 - 1
    frames.narrow_name_ids()
    assert frames.activities["name_id"].dtype == np.int16
    assert frames.activities["name_id"].to_numpy().tolist() == ids.tolist()
    for wide in ([0, 2**15 - 1], [-2, 3]):
        frames.activities["name_id"] = np.resize(np.array(wide, dtype=np.int32), len(frames.activities))
        frames.narrow_name_ids()
        assert frames.activities["name_id"].dtype == np.int32
    del frames.activities["name_id"]
    frames.narrow_name_ids()
    assert "name_id" not in frames.activities


@pytest.mark.parametrize("name", NAMES)
def test_frames_hold_ids_in_32_bits(name):
    with open_trace(TRACES / name) as trace:
        frames = trace.frames(syncs=True)
    for key, columns in NARROW_COLUMNS.items():
        frame = getattr(frames, key)
        for c in columns:
            values = frame[c].to_numpy()
            # Every id of these shipped traces lies in [-1, 2**30): each column is narrowed.
            assert values.dtype == np.int32, (key, c)
            assert int(values.min(initial=0)) >= -1 and int(values.max(initial=0)) < NARROW_LIMIT
        for c in frame.columns:
            if c not in columns and c not in ("name", "kind"):
                assert frame[c].dtype == np.int64, (key, c)  # times and threads stay int64


@pytest.mark.parametrize("name", NAMES)
def test_wide_correlation_ids_stay_64_bit_and_analyze_the_same(name):
    """The same trace with every correlation id moved past 2**31 (activities and calls alike, so
    the same calls launch the same work): those columns stay int64 and every figure is the
    same as with the 32-bit ids."""
    with open_trace(TRACES / name) as trace:
        frames = trace.frames(syncs=True)
        shift = 2**31 + 7
        moved = {}
        for key in ("activities", "api"):
            f = getattr(frames, key).copy()
            corr = f["corr"].to_numpy().astype(np.int64)
            f["corr"] = np.where(corr > 0, corr + shift, corr)
            for c in f.columns:
                if c not in ("kind", "name"):
                    f[c] = f[c].to_numpy().astype(np.int64)
            moved[key] = f
        wide = build_frames(frames.meta, activities=moved["activities"], api=moved["api"], nvtx=frames.nvtx.copy(),
                            syncs=frames.syncs.copy(), names=frames.names)
        wide = dataclasses.replace(wide, warnings=list(frames.warnings))
        assert wide.activities["corr"].dtype == np.int64 and wide.api["corr"].dtype == np.int64
        assert frames.activities["corr"].dtype == np.int32
        narrow_result = run_analysis(frames, gaps=False).result.to_dict()
        wide_result = run_analysis(wide, gaps=False).result.to_dict()
    assert wide_result == narrow_result


def test_stacked_parts_equal_pd_concat():
    """SYNTHETIC parts: the stacked frame has pd.concat's rows, columns and dtypes."""
    rng = np.random.default_rng(3)
    parts = [pd.DataFrame({"start": rng.integers(0, 10**12, n), "corr": rng.integers(-1, 100, n),
                           "kind": np.full(n, k, dtype=np.int8)}) for k, n in ((0, 5), (1, 0), (2, 3))]
    expected = pd.concat([p.copy() for p in parts], ignore_index=True)
    got = _stacked(parts)
    pd.testing.assert_frame_equal(got, expected)
    assert all(len(p.columns) == 0 for p in parts)  # each part's columns were let go


def test_time_keys_in_place_equal_the_formula():
    rng = np.random.default_rng(5)
    times = rng.integers(10**9, 2**53 - 1, 200)
    groups = rng.integers(0, 40, 200).astype(np.int32)
    tk = TimeKeys([times], 40)
    expected = [int(g) * tk.width + int(t) - tk.lo for g, t in zip(groups, times)]  # Python ints
    assert tk.key(groups, times).tolist() == expected
    assert tk.key(groups, tk.lo).tolist() == [int(g) * tk.width for g in groups]  # a scalar time
    assert int(tk.key(3, times[:1])[0]) == 3 * tk.width + int(times[0]) - tk.lo


def test_reader_keeps_ids_32_bit_batch_by_batch_and_64_bit_when_one_does_not_fit():
    """SYNTHETIC Arrow batches through the SQLite reader's column filling: a narrow column comes
    out int32 when every batch fits, and int64 with the same values as soon as one batch holds an
    id at or past NARROW_LIMIT (the rows before it kept); other columns stay int64; each column
    is one array of its own (no view of the driver's batches), cut to the rows read although
    allocated for more."""
    import pyarrow as pa

    from gapscope.trace.sqlite_reads import Read, _checked, _Filling

    r = Read("T", (("corr", "correlationId"), ("start", "start")), narrow=frozenset({"corr"}))
    fits = [[-1, 0, 7], [NARROW_LIMIT - 1]]
    table = pa.table({"corr": pa.chunked_array(fits, pa.int64()), "start": pa.chunked_array([[1, 2, 3], [4]], pa.int64())})
    fill = _Filling(r, 10)
    fill.add_table(_checked(table, r))
    joined = fill.columns()
    assert joined["corr"][0].dtype == np.int32 and joined["corr"][0].tolist() == [-1, 0, 7, NARROW_LIMIT - 1]
    start = joined["start"][0]
    assert start.dtype == np.int64 and start.base is None and start.tolist() == [1, 2, 3, 4]
    assert joined["corr"][1] is None and joined["start"][1] is None
    wide = [[3, 4], [NARROW_LIMIT], [5]]
    table = pa.table({"corr": pa.chunked_array(wide, pa.int64()), "start": pa.chunked_array([[1, 2], [3], [4]], pa.int64())})
    fill = _Filling(r, 3)  # fewer rows than the chunks give: the arrays grow
    fill.add_table(table)
    fill.add_table(pa.table({"corr": pa.array([9], pa.int64()), "start": pa.array([5], pa.int64())}))
    joined = fill.columns()
    assert joined["corr"][0].dtype == np.int64
    assert joined["corr"][0].tolist() == [3, 4, NARROW_LIMIT, 5, 9]
    assert joined["start"][0].tolist() == [1, 2, 3, 4, 5]


def test_reader_fills_null_cells_and_typed_chunks_in_order():
    """SYNTHETIC chunks: a NULL cell reads -1 with Cell.NULL at its row, a column of NULLs only
    (Arrow's null type) -1 and Cell.NULL throughout, and a typed chunk's own Cell codes land at
    its rows; columns with no damaged cell have no codes."""
    import pyarrow as pa

    from gapscope.trace.sqlite_reads import Read, _checked, _Filling
    from gapscope.trace.validation import Cell

    r = Read("T", (("corr", "correlationId"), ("start", "start"), ("end", "end")), narrow=frozenset({"corr"}))
    fill = _Filling(r, 100)
    fill.add_table(_checked(pa.table({"corr": pa.chunked_array([[1, None], [3]], pa.int64()),
                                      "start": pa.chunked_array([[10, 11], [12]], pa.int64()),
                                      "end": pa.nulls(3)}), r))
    fill.add_columns({"corr": (np.array([4, -1]), np.array([0, 2], dtype=np.uint8)),
                      "start": (np.array([13, 14]), None), "end": (np.array([20, 21]), None)})
    joined = fill.columns()
    assert joined["corr"][0].tolist() == [1, -1, 3, 4, -1] and joined["corr"][0].dtype == np.int32
    assert joined["corr"][1].tolist() == [0, Cell.NULL, 0, 0, Cell.NOT_INTEGER]
    assert joined["start"][0].tolist() == [10, 11, 12, 13, 14] and joined["start"][1] is None
    assert joined["end"][0].tolist() == [-1, -1, -1, 20, 21]
    assert joined["end"][1].tolist() == [Cell.NULL] * 3 + [0, 0]
    assert _checked(pa.table({"corr": pa.array([1.5]), "start": pa.array([1]), "end": pa.array([2])}), r) is None


@pytest.mark.parametrize("name", NAMES)
def test_kernel_ids_read_in_32_bits_equal_a_plain_sqlite_read(name):
    """The kernels' ids that the reader narrowed batch by batch equal, row for row, what the
    stdlib sqlite3 module reads from the export (rowid, deviceId, streamId, correlationId,
    shortName), and are int32."""
    import sqlite3

    from gapscope.trace.frames import ActivityKind

    conn = sqlite3.connect(f"file:{TRACES / name}?mode=ro", uri=True)
    want = conn.execute("SELECT rowid, deviceId, streamId, correlationId, shortName "
                        "FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid").fetchall()
    conn.close()
    with open_trace(TRACES / name) as trace:
        a = trace.frames().activities
    k = a[a["kind"].to_numpy() == ActivityKind.KERNEL]
    cols = ["row", "device", "stream", "corr", "name_id"]
    assert all(k[c].dtype == np.int32 for c in cols)
    got = sorted(zip(*(k[c].tolist() for c in cols)))
    assert got == [tuple(r) for r in want] and len(want) > 100
