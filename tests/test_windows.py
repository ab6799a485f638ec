"""The levels measured window by window (gapscope.analysis.windows): a gap that straddles two
windows is found once, exactly as one pass finds it, and the whole result does not depend on
where the windows are cut."""

import itertools
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from gapscope.analysis.intervals import RunningTimelines, group_timelines
from gapscope.analysis.pipeline import run_analysis
from gapscope.analysis.windows import WINDOW_ENV, ShortLengths, activity_windows
from gapscope.trace.handle import open_trace
from tests.paths import CLOVERLEAF_NAME, FSDP_NAME, SAXPY_NAME, TRACES, thirdparty
from tests.reference import merge


def _feed_in_windows(g, s, e, cuts):
    """Feed intervals to RunningTimelines in (start, index) order cut at ``cuts``, each window
    sorted by (group, start, index); the gaps as (group, length, start, next id, prev id)."""
    order = np.lexsort((np.arange(g.size), s))
    rt = RunningTimelines(int(g.max()) + 1 if g.size else 0)
    found = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        w = order[a:b]
        w = w[np.argsort(g[w], kind="stable")]
        gaps = rt.feed(g[w], s[w], e[w], w)
        found += zip(gaps.group.tolist(), gaps.length.tolist(), gaps.start.tolist(),
                     w[gaps.next_pos].tolist(), gaps.prev_id.tolist())
    return rt, found


def test_a_gap_straddling_two_windows_is_found_once_with_its_holder():
    # Group 0: [0,10) [5,20) [30,40) | [35,38) [50,60); group 1: [100,110) | [105,130).
    g = np.array([0, 0, 0, 1, 0, 0, 1])
    s = np.array([0, 5, 30, 100, 35, 50, 105])
    e = np.array([10, 20, 40, 110, 38, 60, 130])
    # (start, index) order: 0, 1, 2, 4, 5, 3, 6; the first window holds the first three.
    rt, found = _feed_in_windows(g, s, e, [0, 3, 7])
    # The gap 40 -> 50 starts in the first window at the end of [30,40) (id 2), which still
    # holds the running end after [35,38) (id 4) of the second window.
    assert found == [(0, 10, 20, 2, 1), (0, 10, 40, 5, 2)]
    assert rt.gap_ns.tolist() == [20, 0] and rt.gap_count.tolist() == [2, 0]
    assert rt.span_ns.tolist() == [60, 30] and rt.count.tolist() == [5, 2]
    assert rt.holder.tolist() == [5, 6]
    # An independent sort-and-merge of each group's intervals.
    for group, (span, gap, _) in ((0, merge([(0, 10), (5, 20), (30, 40), (35, 38), (50, 60)])),
                                  (1, merge([(100, 110), (105, 130)]))):
        assert (rt.span_ns[group], rt.gap_ns[group]) == (span, gap)


@pytest.mark.parametrize("seed", range(12))
def test_short_lengths_give_back_every_length_in_order(seed):
    """ShortLengths keeps lengths under 65,535 ns in two bytes and the others apart: read back,
    every length kept, window after window (empty windows among them), equals the lengths
    given, 32-bit unless one reaches 2**31 - 1 (as keys.narrowed_to_fit widens a window's)."""
    rng = np.random.default_rng(seed)
    windows = []
    for _ in range(int(rng.integers(0, 8))):
        n = int(rng.integers(0, 50))
        # around the two bytes' limit, zero, long gaps; a gap of 3 s in the last seeds
        pool = np.array([0, 1, 65_534, 65_535, 65_536, 70_000, 2**31 - 1] + ([3 * 10**9] if seed >= 8 else []))
        windows.append(np.where(rng.random(n) < 0.5, rng.integers(0, 65_535, n), rng.choice(pool, n)).astype(np.int64))
    kept = ShortLengths()
    for w in windows:
        kept.append(w)
    expected = np.concatenate(windows) if windows else np.zeros(0, dtype=np.int64)
    got = kept.taken()
    assert got.tolist() == expected.tolist()
    assert got.dtype == (np.int64 if expected.size and expected.max() >= 2**31 - 1 else np.int32)
    assert kept.taken().size == 0  # read once: let go


@pytest.mark.parametrize("seed", range(40))
def test_windows_find_the_gaps_one_pass_finds(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    g = rng.integers(0, 5, n)
    s = rng.integers(0, 400, n)
    e = s + rng.integers(-3, 50, n)  # some end before they start: counted as empty
    order = np.lexsort((np.arange(n), s))
    change = [i for i in range(1, n) if s[order[i]] != s[order[i - 1]]]  # cuts only where the start changes
    cuts = [0, *sorted(rng.choice(change, size=min(len(change), 6), replace=False).tolist()), n] if change else [0, n]
    rt, found = _feed_in_windows(g, s, e, cuts)
    by_group = defaultdict(list)
    for gi, si, ei in zip(g.tolist(), s.tolist(), e.tolist()):
        by_group[gi].append((si, max(si, ei)))
    for group, intervals in by_group.items():
        span, gap, lengths = merge(intervals)
        assert (rt.span_ns[group], rt.gap_ns[group], rt.gap_count[group]) == (span, gap, len(lengths))
        assert sorted(f[1] for f in found if f[0] == group) == sorted(lengths)
    # The same gaps, endpoints and holders as one pass over every interval.
    one = group_timelines(g, s, e, 5)
    expected = sorted(zip(one.gaps_group.tolist(), one.gaps_len.tolist(), one.gaps_start.tolist(),
                          one.gaps_next.tolist(), one.gaps_prev.tolist()))
    assert sorted(found) == expected


def test_windows_are_cut_only_where_the_start_changes():
    start = np.array([5, 1, 1, 1, 3, 3, 9, 9])
    order, bounds = activity_windows(start, 2)
    assert order.tolist() == [1, 2, 3, 4, 5, 0, 6, 7]
    # In start order 1 1 1 3 3 5 9 9, cuts are asked at 2, 4 and 6: 2 falls inside the three 1s
    # (moved to 3, the first 3), 4 inside the 3s (to 5, the 5), 6 is where the 9s begin.
    assert bounds.tolist() == [0, 3, 5, 6, 8]
    assert activity_windows(start, 3)[1].tolist() == [0, 3, 6, 8]
    assert activity_windows(start, 8)[1].tolist() == [0, 8]


@pytest.mark.parametrize("scan", [1, 3, 4096])
def test_window_cuts_equal_the_first_change_at_or_after_each_multiple(monkeypatch, scan):
    """SYNTHETIC starts with long ties: every cut is, for some multiple c of the size, the first
    position at or after c whose start (in order) differs from the one before, as a plain loop
    over the sorted starts finds it; whatever CUT_SCAN the search reads at a time."""
    from gapscope.analysis import windows

    monkeypatch.setattr(windows, "CUT_SCAN", scan)
    rng = np.random.default_rng(11)
    for case in range(60):
        n = int(rng.integers(1, 300))
        start = rng.integers(0, int(rng.integers(1, 40)), n) * 1000  # few distinct starts: long ties
        size = int(rng.integers(1, 50))
        order, bounds = activity_windows(start, size)
        s = start[np.argsort(start, kind="stable")].tolist()
        want = {0, n}
        for c in range(size, n, size):
            first = next((i for i in range(c, n) if s[i] != s[i - 1]), None)
            if first is not None:
                want.add(first)
        assert bounds.tolist() == sorted(want), (case, n, size)
        assert order.tolist() == np.argsort(start, kind="stable").tolist()


LEVEL_TRACES = sorted([*TRACES.glob("*.sqlite"), *TRACES.glob("*.pt.trace.json.gz"),
                       TRACES / "torch_decode_small_parquet"]) + [CLOVERLEAF_NAME, FSDP_NAME, SAXPY_NAME]


#: Where windows of one start time each are tried too (thousands of windows a trace): graph
#: replays, several streams and devices, copies, NCCL, XLA's command buffers, a worker thread.
EVERY_START = {"torch_decode_small.sqlite", "case_multi_gpu.sqlite", "case_default_stream.sqlite", FSDP_NAME,
               "jax_train.sqlite", "torch_worker_thread.sqlite"}


@pytest.mark.parametrize("path", LEVEL_TRACES, ids=lambda p: Path(p).name)
def test_the_result_does_not_depend_on_the_windows(path, monkeypatch):
    """Windows of 50 activities against the whole trace in one pass (``gaps=True`` keeps every
    gap list: no window): the same result, field for field, with the defaults, with every
    thread's launches, and with one range name selected; on EVERY_START, with the defaults,
    also windows of one start time each."""
    path = path if isinstance(path, Path) else thirdparty(path)
    with open_trace(path) as trace:
        frames = trace.frames(syncs=True)
        kept = run_analysis(frames)
        working = [r["name"] for r in kept.result.by_name if r["kernels"] > 0]
        variants = [{}, {"threads": "process", "top": 3}]
        if working:
            variants.append({"ranges": (working[-1],)})
        for options in variants:
            expected = (kept if not options else run_analysis(frames, **options)).result.to_dict()
            for size in ("1", "50") if not options and path.name in EVERY_START else ("50",):
                monkeypatch.setenv(WINDOW_ENV, size)
                assert run_analysis(frames, gaps=False, **options).result.to_dict() == expected, (options, size)


@pytest.mark.parametrize("path", LEVEL_TRACES, ids=lambda p: Path(p).name)
def test_letting_the_read_ids_go_changes_no_figure(path):
    """``release_ids`` (what `gapscope analyze` runs with) against frames kept whole: the same
    result, field for field, with the defaults and with every thread's launches; the frames
    lack the released columns afterwards and keep every other."""
    path = path if isinstance(path, Path) else thirdparty(path)
    with open_trace(path) as trace:
        for options in ({}, {"threads": "process", "top": 3}):
            expected = run_analysis(trace.frames(syncs=True), gaps=False, **options).result.to_dict()
            frames = trace.frames(syncs=True)
            before = {k: set(getattr(frames, k).columns) for k in ("activities", "api")}
            assert run_analysis(frames, gaps=False, release_ids=True, **options).result.to_dict() == expected
            gone = {"activities": {"proc", "corr", "device", "stream", "row"}, "api": {"proc", "corr", "name_id", "start",
                                                                             "end", "tid"}}
            for k in before:
                assert set(getattr(frames, k).columns) == before[k] - gone[k], k
            if "name_id" in frames.activities:  # kept in 16 bits where every id fits
                ids = trace.frames(syncs=True).activities["name_id"].to_numpy()
                narrow = ids.size == 0 or (ids.min() >= -1 and ids.max() < 2**15 - 1)
                assert frames.activities["name_id"].dtype == (np.int16 if narrow else ids.dtype)
                assert frames.activities["name_id"].to_numpy().tolist() == ids.tolist()


@pytest.mark.parametrize("name, options", [("torch_decode_small.sqlite", {}), ("torch_decode.sqlite", {"ranges": ("eager",)}),
                                           ("torch_worker_thread.sqlite", {"threads": "process"}),
                                           (FSDP_NAME, {"merge": True})])
def test_a_large_traces_steps_one_after_the_other_give_the_same_result(name, options, monkeypatch):
    """From pipeline.SERIAL_ACTIVITIES activities on, the launch statistics, the attribution's
    build and the windows run one after the other (the calls' threads let go in between), and
    the rollups take both groupings' gap percentiles, then their kernel medians: forced here on
    small traces, the same result, field for field, as the steps side by side; with ``merge``,
    the same device gaps too."""
    from gapscope.analysis import pipeline

    path = thirdparty(name) if name == FSDP_NAME else TRACES / name
    with open_trace(path) as trace:
        beside = run_analysis(trace.frames(syncs=True), gaps=False, **options)
        monkeypatch.setattr(pipeline, "SERIAL_ACTIVITIES", 0)
        serial = run_analysis(trace.frames(syncs=True), gaps=False, release_ids=True, **options)
    assert serial.result.to_dict() == beside.result.to_dict()
    if options.get("merge"):
        assert np.array_equal(serial.device_gaps.length, beside.device_gaps.length)
        assert np.array_equal(serial.device_gaps.category, beside.device_gaps.category)


def test_a_tiled_trace_gives_the_same_result_in_windows(tmp_path, monkeypatch):
    """A SYNTHETIC tiling (benchmarks/tile_trace.py) of a shipped trace, 20 copies end to end:
    windows of 1,000 activities against one pass."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from tile_trace import tile

    tiled = tmp_path / "decode_x20.sqlite"
    assert tile(TRACES / "torch_decode_small.sqlite", tiled, 20 * 1488) == 20
    with open_trace(tiled) as trace:
        frames = trace.frames(syncs=True)
        expected = run_analysis(frames).result.to_dict()
        monkeypatch.setenv(WINDOW_ENV, "1000")
        windowed = run_analysis(frames, gaps=False).result.to_dict()
    assert windowed == expected
    assert expected["devices"][0]["kernels"] == 20 * 1488


def test_the_longest_gaps_kept_hold_only_their_own_state_rows():
    """A window's longest gaps are kept with the state rows they use, not with every state row
    of their window (which, kept for each window, grew with the trace)."""
    from gapscope.analysis.attribution import GapSplit

    states = np.arange(4 * 5, dtype=np.int64).reshape(4, 5)  # 4 split gaps' time per thread state
    split = GapSplit(whole=np.array([-1, 6, -1, -1, 7, -1], dtype=np.int8),
                     state_row=np.array([0, -1, 1, 2, -1, 3]), states=states,
                     category=np.array([4, 6, 4, 4, 7, 4], dtype=np.int8))
    some = split.take(np.array([5, 1, 2]))
    assert some.states.shape == (4, 5)  # take() shares the whole table
    small = some.compacted()
    assert small.state_row.tolist() == [0, -1, 1] and small.states.tolist() == [states[3].tolist(), states[1].tolist()]
    length = np.array([100, 30, 100, 100, 50, 100])
    assert np.array_equal(small.matrix(np.arange(3), length[[5, 1, 2]]), some.matrix(np.arange(3), length[[5, 1, 2]]))


MERGED = ["torch_decode_small.sqlite", "case_multi_gpu.sqlite", "jax_train.sqlite", FSDP_NAME]


@pytest.mark.parametrize("name", MERGED)
def test_each_file_of_several_gives_the_merge_what_one_pass_gives(name, monkeypatch):
    """analyze_rank_file (each file of several, the many-trace merge) measures its levels in
    windows, keeping only the range pairs and the device gaps: its per-device names, range
    steps and communication kernels are those of one pass that keeps every gap list."""
    from gapscope.analysis.communication import instances
    from gapscope.analysis.pipeline import analysis_of
    from gapscope.analysis.result import clean_rows
    from gapscope.fleet.ranks import analyze_rank_file, per_device

    path = thirdparty(name) if name == FSDP_NAME else TRACES / name
    one_pass = analysis_of(path, top=0)
    names, steps = per_device(one_pass)
    collectives = instances(one_pass)
    monkeypatch.setenv(WINDOW_ENV, "50")
    got = analyze_rank_file(str(path))
    assert got["names"] == names
    assert steps.keys() == got["steps"].keys()
    assert all(np.array_equal(steps[k], got["steps"][k]) for k in steps)
    assert (collectives is None) == (got["collectives"] is None)
    if collectives is not None:
        assert collectives.keys() == got["collectives"].keys()
        assert all(np.array_equal(collectives[k], got["collectives"][k]) for k in collectives)
    assert got["devices"] and got["devices"] == clean_rows(one_pass.result.devices)


@pytest.mark.parametrize("n, n_windows, block", [(0, 3, 4), (1_000, 7, 64), (50_000, 300, 4_096), (5_000, 1, 100),
                                                 (999, 5, 1_000), (1_000, 5, 1_000)])
def test_members_by_window_is_a_stable_sort_by_window_block_by_block(monkeypatch, n, n_windows, block):
    """SYNTHETIC memberships: the block-by-block placement equals one stable sort of the busy
    memberships by their activity's window, the others after them, written here by a loop over
    windows."""
    from gapscope.analysis import windows

    monkeypatch.setattr(windows, "MEMBER_BLOCK", block)
    rng = np.random.default_rng(n + block)
    n_acts = 3_000
    member_act = rng.integers(0, n_acts, n).astype(np.int32)
    busy = rng.random(n_acts) < 0.8
    window_of = rng.integers(0, n_windows, n_acts).astype(np.int16)
    order, bounds = windows.members_by_window(busy, member_act, window_of, n_windows)
    window = window_of[member_act].tolist()
    is_busy = busy[member_act].tolist()
    # Each window's busy memberships, in membership order: Python's sort is stable.
    expected = sorted((m for m in range(n) if is_busy[m]), key=window.__getitem__)
    expected += [m for m in range(n) if not is_busy[m]]  # then the others, in their order
    counts = [0] * n_windows
    for m in range(n):
        counts[window[m]] += is_busy[m]
    assert order.tolist() == expected
    assert bounds.tolist() == [0, *itertools.accumulate(counts)]
