"""Figures: the data preparation exactly (pixel-column aggregation, log bins, percentiles, the
sweep's crossing points), on synthetic arrays and on the real H200 traces, where the drawn
busy and gap time must add up to the analysis result's own figures; then the files written
(non-trivial PNG and SVG of the expected pixel size) and the CLI's one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from paths import ROOT, TRACES
from gapscope.errors import GapscopeError
from gapscope.plots.binning import (
    column_coverage, crossing, log_edges, log_histogram, percentile_marks, sweep_series, timeline_bins,
)
from gapscope.plots.window import parse_time, parse_window, place_window

from clirun import assert_one_line_error, gapscope



# -- pixel columns -----------------------------------------------------------------------------

def test_column_coverage_integer_columns():
    # Window [0, 100) in 10 columns of 10 ns.
    start = np.array([5, 41, 95, -10, -5, 30])
    end = np.array([25, 44, 130, 3, 200, 30])
    row = np.array([0, 0, 0, 0, 1, 1])
    cov = column_coverage(start, end, row, 2, 0, 100, 10)
    assert cov.tolist() == [
        [5 + 3, 10, 5, 0, 3, 0, 0, 0, 0, 5],  # [5,25) + [-10,3) clipped, [41,44), [95,130) clipped
        [10] * 10,  # [-5,200) covers the window; [30,30) is empty
    ]


def test_column_coverage_fractional_columns():
    # Columns of 2.5 ns: [1, 6) covers 1.5 of column 0, all of column 1, 1 of column 2.
    cov = column_coverage(np.array([1]), np.array([6]), np.array([0]), 1, 0, 10, 4)
    assert cov.tolist() == [[1.5, 2.5, 1.0, 0.0]]


def test_column_coverage_keeps_every_nanosecond_of_a_million_intervals():
    rng = np.random.default_rng(7)
    start = rng.integers(0, 10_000_000, 1_000_000)
    end = start + rng.integers(0, 5_000, start.size)
    row = rng.integers(0, 4, start.size)
    cov = column_coverage(start, end, row, 4, 1_000_000, 9_000_000, 1_000)  # 8,000 ns columns
    clipped = np.clip(end, 1_000_000, 9_000_000) - np.clip(start, 1_000_000, 9_000_000)
    assert cov.sum(axis=1).astype(np.int64).tolist() == np.bincount(row, weights=clipped, minlength=4).astype(np.int64).tolist()


def test_timeline_bins_rows_busy_memops_and_gaps():
    # Streams 0 and 2 on device 0, stream 1 on device 1, stream 3 (device 1) outside the window.
    stream_device = np.array([0, 1, 0, 1])
    start = np.array([0, 70, 0, 200, 45])
    end = np.array([40, 100, 100, 300, 55])
    stream = np.array([0, 2, 1, 3, 0])
    is_memop = np.array([False, False, False, False, True])
    # Device 0 idles [40, 70) for a launch (category 0); device 2 has a gap elsewhere.
    bins = timeline_bins(start, end, stream, is_memop, stream_device,
                         gap_start=np.array([40, 500]), gap_len=np.array([30, 10]),
                         gap_device=np.array([0, 1]), gap_cat=np.array([0, 4]), n_cats=6,
                         t0=0, t1=100, n_cols=5)
    assert bins.rows.tolist() == [0, 2, 1]
    assert bins.row_device.tolist() == [0, 0, 1]
    assert bins.devices.tolist() == [0, 1]
    assert bins.column_ns == 20
    assert bins.busy.tolist() == [[1, 1, 0, 0, 0], [0, 0, 0, 0.5, 1], [1, 1, 1, 1, 1]]
    assert bins.memop.tolist() == [[0, 0, 0.5, 0, 0], [0] * 5, [0] * 5]
    assert bins.gaps[0, 0].tolist() == [0, 0, 1, 0.5, 0]
    assert bins.gaps[0, 1:].sum() == 0 and bins.gaps[1].sum() == 0
    assert bins.idle.tolist() == [[0, 0, 1, 0.5, 0], [0] * 5]


# -- histogram bins, percentiles, sweep ---------------------------------------------------------

def test_log_edges_and_counts():
    lengths = np.array([150, 2_000, 90_000, 100_000])
    edges = log_edges(lengths, per_decade=1)
    assert edges.tolist() == [100, 1_000, 10_000, 100_000]
    counts = log_histogram(lengths, np.array([0, 0, 1, 1]), np.array([0, 4, 4, 0]), edges, 2, 6)
    assert counts.shape == (2, 6, 3)
    want = np.zeros((2, 6, 3), dtype=np.int64)
    want[0, 0, 0] = 1  # 150 ns, launch
    want[0, 4, 1] = 1  # 2 us, pipeline
    want[1, 4, 2] = 1  # 90 us
    want[1, 0, 2] = 1  # 100 us: on the last edge, which is closed
    assert (counts == want).all()
    fine = log_edges(lengths)
    assert fine.size == 31 and fine[0] == 100 and fine[10] == 1_000 and fine[-1] == 100_000


def test_percentile_marks_from_a_result_row():
    assert percentile_marks({"gap_p50_ns": 5, "gap_p90_ns": None, "gap_p99_ns": 7.5}) == [("p50", 5.0), ("p99", 7.5)]


def test_crossing_interpolates_in_log_x():
    x, y = np.array([2, 10, 50]), np.array([0.9, 0.1, 0.02])
    assert crossing(x, y, 0.2) == pytest.approx(2 * 5 ** 0.875)  # 7/8 of the way from 0.9 to 0.1
    assert crossing(x, y, 0.05) == pytest.approx(10 * 5 ** 0.625)
    assert crossing(x, y, 0.95) is None and crossing(x, y, 0.01) is None


def test_sweep_series_orders_by_kernel_time():
    rows = [{"path": "eager", "kernel_us": 50.0, "gap_fraction": 0.02, "speedup_vs_eager": 1.0},
            {"path": "graph", "kernel_us": 2.0, "gap_fraction": 0.2, "speedup_vs_eager": 5.0},
            {"path": "eager", "kernel_us": 2.0, "gap_fraction": 0.9, "speedup_vs_eager": 1.0},
            {"path": "graph", "kernel_us": 50.0, "gap_fraction": None, "speedup_vs_eager": None}]
    eager, graph = sweep_series(rows)
    assert (eager.path, eager.kernel_us.tolist(), eager.gap_fraction.tolist()) == ("eager", [2, 50], [0.9, 0.02])
    assert graph.speedup[0] == 5.0 and np.isnan(graph.speedup[1])


# -- windows ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,want", [("1.5ms", 1_500_000), ("200us", 200_000), ("200 µs", 200_000),
                                       ("42", 42), ("2s", 2_000_000_000), ("-1us", -1_000), ("1e3ns", 1_000)])
def test_parse_time(text, want):
    assert parse_time(text) == want


def test_parse_window():
    assert parse_window("1.5ms:2ms") == (1_500_000, 2_000_000)
    assert parse_window(":500us") == (None, 500_000)
    assert parse_window("2ms:") == (2_000_000, None)
    assert parse_window(None) == (None, None)
    for bad in ("5:3", "1ms", "a:b", "1:2:3", "3us:3000ns"):
        with pytest.raises(GapscopeError):
            parse_window(bad)


def test_place_window_counts_from_the_ranges_first_work():
    start, end = np.array([100, 1_000, 5_000]), np.array([200, 2_000, 6_000])
    w = place_window(start, end, np.array([1, 2]), (None, None))
    assert (w.start, w.end, w.origin) == (1_000, 6_000, 1_000)
    w = place_window(start, end, np.array([1, 2]), (500, 1_500))
    assert (w.start, w.end, w.origin) == (1_500, 2_500, 1_000)
    assert place_window(start, end, np.zeros(0, np.int64), (None, None)).start == 100  # no ranges: the trace
    with pytest.raises(GapscopeError, match="holds no GPU work"):
        place_window(start, end, np.array([1, 2]), (2_000, 3_000))


# -- the real traces ----------------------------------------------------------------------------

def test_timeline_of_a_real_range_adds_up_to_the_result():
    """eager/k=2us of cupy_paths_node: the window is the range's GPU span; the drawn busy and
    gap time equal the result's busy_ns and gap_by_category_ns (traces/README.md figures)."""
    from gapscope.plots.source import load_source
    from gapscope.plots.timeline import axes_columns, timeline_data

    src = load_source(TRACES / "cupy_paths_node.sqlite", "eager/k=2us")
    window, bins = timeline_data(src, (None, None))
    (row,) = src.result.by_name
    assert window.end - window.start == row["gpu_span_ns"] == 2_314_818
    assert bins.n_cols == axes_columns() == 1200
    assert src.analysis.stream_keys["stream"].to_numpy()[bins.rows].tolist() == [13]
    assert (bins.busy * bins.column_ns).sum() == pytest.approx(row["busy_ns"], abs=1e-3)
    assert row["busy_ns"] == 345_856
    # Each gap is drawn in its largest category (the result splits the gaps into 1,932,459 ns of
    # launch and 36,503 ns of host; a few gaps hold more host time than launch time).
    drawn = (bins.gaps * bins.column_ns).sum(axis=(0, 2))
    assert drawn == pytest.approx([1_932_706, 36_256, 0, 0, 0, 0, 0, 0, 0], abs=1e-3)
    assert drawn.sum() == pytest.approx(row["gap_ns"], abs=1e-3)
    assert list(row["gap_by_category_ns"].values()) == [1_932_459, 36_503, 0, 0, 0, 0, 0, 0, 0]


def test_timeline_of_four_streams_shades_dependency_gaps():
    from gapscope.plots.source import load_source
    from gapscope.plots.timeline import timeline_data

    src = load_source(TRACES / "cupy_paths_node.sqlite", "multistream/k=50us")
    window, bins = timeline_data(src, (None, None))
    (row,) = src.result.by_name
    assert src.analysis.stream_keys["stream"].to_numpy()[bins.rows].tolist() == [17, 18, 19, 20]
    assert (bins.gaps * bins.column_ns).sum(axis=(0, 2)) == pytest.approx([0, 0, 0, 0, 0, 163_712, 0, 0, 0],
                                                                          abs=1e-3)
    assert row["gap_by_category_ns"]["dependency"] == 163_712
    # Busy is per stream: the four rows add up to the kernels' summed durations.
    a = src.analysis
    k = np.unique(a.member_act)
    assert (bins.busy * bins.column_ns).sum() == pytest.approx(int((a.acts.end[k] - a.acts.start[k]).sum()), abs=1e-3)


def test_histogram_data_of_torch_decode():
    from gapscope.plots.histogram import histogram_data
    from gapscope.plots.source import load_source

    src = load_source(TRACES / "torch_decode.sqlite")
    h = histogram_data(src)
    assert h.names == ["eager", "decode_step", "graph"]
    assert h.labels == ("launch", "host", "stall", "setup", "sync", "dependency", "memop", "pipeline", "unknown")
    assert h.edges.size == 41 and (h.edges[0], h.edges[-1]) == (100, 1_000_000)  # 100 ns to 1 ms, 10 a decade
    # Gaps per name and largest category (counts; by time, eager is 28% launch and 72% host:
    # README's table; the gaps behind the copies of the kernels' own stream are memop).
    assert h.counts.sum(axis=2).tolist() == [[401, 2093, 0, 1, 0, 0, 0, 0, 0],
                                            [401, 2062, 0, 1, 0, 0, 160, 2304, 0],
                                            [0, 0, 0, 0, 0, 0, 160, 2335, 0]]
    assert [r["gap_count"] for r in h.rows] == [2495, 4928, 2495]
    # The marks are the result's percentiles, which are numpy's over the same gap lengths.
    a = src.analysis
    names = a.ranges.frame["name"].to_numpy()[a.range_gaps.row]
    for name, row in zip(h.names, h.rows):
        lengths = a.range_gaps.length[names == name]
        assert [v for _, v in percentile_marks(row)] == pytest.approx(np.percentile(lengths, [50, 90, 99]))
        assert h.counts[h.names.index(name)].sum() == lengths.size
    # eager: 2,495 gaps; p90 sits 0.6 of the way between the 2,245th and 2,246th shortest.
    marks = percentile_marks(h.rows[0])
    assert [m[0] for m in marks] == ["p50", "p90", "p99"]
    assert [m[1] for m in marks] == pytest.approx([42_336.0, 62_547.2, 86_245.12])


def test_sweep_rows_from_a_traced_run():
    from gapscope.plots.crossover import crossover_points
    from gapscope.plots.source import load_source

    src = load_source(TRACES / "run_sweep_node.sqlite")
    assert [(r.kernel_us, r.path) for r in src.sweep[:3]] == [(2.0, "eager"), (2.0, "multistream"), (2.0, "graph")]
    assert sorted({r.kernel_us for r in src.sweep}) == [2, 10, 50, 200, 1000]
    spans = {r["name"]: r["gpu_span_ns"] for r in src.result.by_name}
    graph2 = next(r for r in src.sweep if (r.path, r.kernel_us) == ("graph", 2.0))
    assert graph2.speedup_vs_eager == spans["eager/k=2us"] / spans["graph/k=2us"]
    assert graph2.gap_fraction == pytest.approx(0.185, abs=5e-4)  # traces/README.md
    fr = {r["name"]: r["gap_fraction"] for r in src.result.by_name}
    (_, _, launch_bound), (_, _, amortized) = crossover_points(sweep_series(src.sweep))
    assert launch_bound == pytest.approx(crossing(np.array([2, 10]), np.array([fr["eager/k=2us"], fr["eager/k=10us"]]), 0.2))
    assert amortized == pytest.approx(crossing(np.array([10, 50]), np.array([fr["eager/k=10us"], fr["eager/k=50us"]]), 0.05))
    assert 9 < launch_bound < 10 and 30 < amortized < 40


# -- files --------------------------------------------------------------------------------------

def _png(path: Path) -> np.ndarray:
    import matplotlib.image as mpimg

    return mpimg.imread(path)


def assert_real_png(path: Path, width: int, height: int) -> None:
    img = _png(path)
    assert img.shape[:2] == (height, width), (path, img.shape)
    assert path.stat().st_size > 10_000
    rgb = img[..., :3].reshape(-1, 3)
    assert (rgb < 0.9).any(axis=1).mean() > 0.03  # not blank: some ink
    assert np.unique((rgb * 255).astype(np.uint8), axis=0).shape[0] > 20  # colours, text, shading


def assert_real_svg(path: Path) -> None:
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg") and root.get("viewBox")
    assert path.stat().st_size > 10_000


def test_write_plots_png_and_svg(tmp_path):
    from gapscope.plots import write_plots
    from gapscope.plots.timeline import BOTTOM_IN, NVTX_IN, ROW_IN, TOP_IN

    files = write_plots(TRACES / "cupy_paths_node.sqlite", tmp_path / "out", ("png", "svg"))
    assert [f.name for f in files] == ["timeline.png", "timeline.svg", "histogram.png", "histogram.svg",
                                       "crossover.png", "crossover.svg"]
    # The default view: the work of multistream/k=2us, the answer's first range (the most to win):
    # its 4 stream rows and one NVTX level.
    assert_real_png(files[0], 1400, round(100 * (TOP_IN + BOTTOM_IN + 4 * ROW_IN + NVTX_IN + 0.1)))
    assert_real_png(files[2], 1410, 760)  # 2 x 3 panels of 2.8 in, 1.45 + 0.55 in margins
    assert_real_png(files[4], 1000, 740)
    for f in files[1::2]:
        assert_real_svg(f)
    for f in files[0::2]:
        assert f.stat().st_size < 200_000


def test_range_and_window(tmp_path):
    from gapscope.plots import write_plots

    files = write_plots(TRACES / "torch_decode.sqlite", tmp_path, ("png",), range_name="eager",
                        window="10ms:10.4ms")
    assert [f.name for f in files] == ["timeline.png", "histogram.png"]
    assert_real_png(files[0], 1400, 239)  # 1.05 + 0.6 in margins, one NVTX level, one stream


def test_trace_without_api_calls_or_ranges(tmp_path):
    """No CUDA API calls and no ranges: one timeline of the whole trace, every gap `unknown`
    (nothing launched it in the trace), one row per device and stream in device order."""
    from synthetic import Synthetic

    from gapscope.plots import write_plots
    from gapscope.plots.source import load_source
    from gapscope.plots.timeline import timeline_data
    from gapscope.analysis.attribution import IdleCategory

    t = Synthetic()
    for i in range(12):
        t.kernel(1_000 * i, 1_000 * i + 400, i + 1, device=i % 2, stream=7 + i % 3)
    path = t.write(tmp_path / "noapi.sqlite")
    src = load_source(path)
    assert set(src.device_gap_cats.tolist()) == {IdleCategory.UNKNOWN}
    window, bins = timeline_data(src, (None, None))
    assert (window.start, window.end) == (0, 11_400)
    keys = src.analysis.stream_keys
    assert list(zip(keys["device"].to_numpy()[bins.rows], keys["stream"].to_numpy()[bins.rows])) == \
        [(0, 7), (0, 8), (0, 9), (1, 7), (1, 8), (1, 9)]
    assert bins.gaps.shape == (2, len(IdleCategory), 1200)
    # Device 0 runs kernels at 0, 2, ..., 10 us: five gaps of 1.6 us, all `unknown`.
    assert (bins.gaps[0] * bins.column_ns).sum() == pytest.approx(5 * 1_600)
    assert (bins.gaps[0, IdleCategory.UNKNOWN] * bins.column_ns).sum() == pytest.approx(5 * 1_600)
    assert [f.name for f in write_plots(path, tmp_path / "out")] == ["timeline.png"]


def test_run_folder_and_result_json(tmp_path):
    from gapscope.analysis import analyze
    from gapscope.plots import write_plots

    rows = [{"kernel_us": k, "path": p, "ranges": 1, "kernels": 100, "gap_fraction": f,
             "gap_fraction_min": f, "gap_fraction_max": f, "span_us": 1.0, "traced_per_kernel_us": 1.0,
             "kernel_median_us": 1.0, "untraced_per_kernel_us": 1.0, "untraced_spread_us": 0.0,
             "speedup_vs_eager": s}
            for k, p, f, s in [(2.0, "eager", 0.9, 1.0), (2.0, "graph", 0.2, 5.0),
                               (50.0, "eager", 0.02, 1.0), (50.0, "graph", 0.005, 1.02)]]
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"schema": "gapscope-run/1", "rows": rows, "calibration": None}))
    assert [f.name for f in write_plots(run, tmp_path / "a")] == ["crossover.png"]
    shutil.copy(TRACES / "cupy_paths_node.sqlite", run / "gapscope_run.sqlite")
    assert [f.name for f in write_plots(run / "run.json", tmp_path / "b")] == \
        ["timeline.png", "histogram.png", "crossover.png"]

    saved = tmp_path / "sweep.json"
    saved.write_text(json.dumps(analyze(TRACES / "run_sweep_node.sqlite").to_dict()))
    assert [f.name for f in write_plots(saved, tmp_path / "c")] == ["crossover.png"]
    saved.write_text(json.dumps(analyze(TRACES / "torch_decode.sqlite").to_dict()))
    with pytest.raises(GapscopeError, match="holds no gap list"):
        write_plots(saved, tmp_path / "d")


# -- command line -------------------------------------------------------------------------------







def test_cli_plot_writes_and_lists_files(tmp_path):
    out = tmp_path / "figs"
    proc = gapscope("plot", str(TRACES / "cupy_paths_node.sqlite"), "-o", str(out), "--range", "graph/k=2us",
                    "--window", "0:40us", "--format", "svg,png")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(out / f) for f in ("timeline.svg", "timeline.png", "histogram.svg",
                                                          "histogram.png")]


@pytest.mark.parametrize("args,needle", [
    (["traces/missing.sqlite", "-o", "{tmp}"], "no such file"),
    (["traces/torch_decode.sqlite", "-o", "{tmp}", "--range", "prefill"], "range names in this trace: decode_step, eager, graph"),
    (["traces/torch_decode.sqlite", "-o", "{tmp}", "--window", "3ms:1ms"], "the end must come after the start"),
    (["traces/torch_decode.sqlite", "-o", "{tmp}", "--window", "soon:later"], "is not a time"),
    (["traces/torch_decode.sqlite", "-o", "{tmp}", "--window", "10s:20s"], "holds no GPU work"),
    (["traces/torch_decode.sqlite", "-o", "{tmp}", "--format", "jpg"], "png and/or svg"),
    (["traces/torch_decode.sqlite", "-o", "{file}"], "exists and is not a folder"),
    (["traces/README.md", "-o", "{tmp}"], "not a SQLite file"),
    (["traces/torch_decode.sqlite"], "Missing option"),
])
def test_cli_plot_errors(tmp_path, args, needle):
    (tmp_path / "file").write_text("x")
    args = [a.format(tmp=tmp_path / "out", file=tmp_path / "file") for a in args]
    assert_one_line_error(gapscope("plot", *args), needle)


def test_cli_without_matplotlib(tmp_path):
    fake = tmp_path / "nompl" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    proc = gapscope("plot", "traces/torch_decode.sqlite", "-o", str(tmp_path / "o"), pythonpath=str(fake.parent))
    assert_one_line_error(proc, "pip install matplotlib (or, in a gapscope checkout, pip install -e '.[plot]')")
    proc = gapscope("report", "traces/torch_decode.sqlite", "-o", str(tmp_path / "r.md"), pythonpath=str(fake.parent))
    assert_one_line_error(proc, "pip install matplotlib")
    # Tables alone need no matplotlib.
    proc = gapscope("report", "traces/torch_decode.sqlite", "-o", str(tmp_path / "r.md"), "--no-figures",
                    pythonpath=str(fake.parent))
    assert proc.returncode == 0, proc.stderr
    assert "![" not in (tmp_path / "r.md").read_text()


def test_cli_report_links_its_figures(tmp_path):
    md = tmp_path / "report.md"
    proc = gapscope("report", "traces/cupy_paths_node.sqlite", "-o", str(md))
    assert proc.returncode == 0, proc.stderr
    text = md.read_text()
    links = [line[line.index("(") + 1:-1] for line in text.splitlines() if line.startswith("![")]
    assert links == ["report_files/timeline.png", "report_files/histogram.png", "report_files/crossover.png"]
    widths = {"timeline": 1400, "histogram": 1410, "crossover": 1000}
    for link in links:
        img = tmp_path / link
        assert_real_png(img, widths[img.stem], _png(img).shape[0])
    assert "## NVTX ranges by name (6 of 6 launched GPU work)" in text
    assert "| `eager/k=2us` | 1 | 300 | 2.31 ms | 346 us | 1.97 ms | 85.1% | 299 |" in text
    assert "| 2 | graph | 18.1% | 1.50 | 1.22 | - | 5.13x |" in text  # the sweep table, from the ranges
    assert "## Why the GPU sat idle (share of gap time)" in text


def test_cli_report_errors(tmp_path):
    assert_one_line_error(gapscope("report", "traces/torch_decode.sqlite", "-o", str(tmp_path / "no" / "r.md")),
                          "existing folder")
    assert_one_line_error(gapscope("report", "traces/torch_decode.sqlite", "-o", str(tmp_path / "r.md"),
                                   "--range", "x"), "no NVTX range matches 'x'")


def test_help_lists_the_commands():
    proc = gapscope("--help")
    assert proc.returncode == 0
    assert "plot" in proc.stdout and "report" in proc.stdout


def test_analyze_plot_option_draws_from_the_same_analysis(tmp_path):
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "figs"
    proc = subprocess.run(
        [sys.executable, "-m", "gapscope", "analyze", str(root / "traces" / "torch_decode.sqlite"),
         "--limit", "0", "--plot", str(out)],
        capture_output=True, text=True, cwd=root, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "eager" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["histogram.png", "timeline.png"]
    assert all(p.stat().st_size > 5_000 for p in out.iterdir())
    # The usage error in this process (the subprocess above is the real exit status).
    many = gapscope("analyze", str(root / "traces" / "torch_decode.sqlite"),
                    str(root / "traces" / "torch_decode_sync.sqlite"), "--plot", str(out))
    assert many.returncode == 2 and "--plot draws one trace" in many.stderr
