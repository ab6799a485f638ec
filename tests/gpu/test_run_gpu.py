"""GPU tests of `gapscope run`: a real calibration, capture under nsys and analysis.

They need a CUDA GPU, CuPy and Nsight Systems, so they carry the `gpu` marker, which the
project's pytest options deselect by default. On the GPU machine run:

    python3 -m pytest -m gpu tests/gpu -q
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gapscope.run.runner import RunOptions, run

pytestmark = pytest.mark.gpu

N = 200


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("run")
    opts = RunOptions(out_dir=out, kernel_us=[2.0, 200.0], kernels=N, streams=4, repeat=2)
    return run(opts, progress=False)


def test_calibration_hits_its_targets(small_sweep) -> None:
    plans = small_sweep.calibration["plans"]
    assert [p["target_us"] for p in plans] == [2.0, 200.0]
    for p in plans:
        if p["work"] == 0:
            # A target at or below the spin kernel's floor (2 us sits on the H200's ~2.0-2.1 us
            # floor) runs with no work: it cannot be closer than the floor itself.
            assert p["measured_us"] <= 1.15 * p["target_us"]
        else:
            assert abs(p["measured_us"] - p["target_us"]) <= 0.05 * p["target_us"]
    assert 0 < small_sweep.calibration["floor_us"] < 2.0 * plans[0]["measured_us"]


def test_every_range_holds_exactly_its_kernels(small_sweep) -> None:
    rows = small_sweep.rows
    assert [(r.path, r.kernel_us, r.ranges, r.kernels) for r in rows] == [
        (p, k, 2, N) for k in (2.0, 200.0) for p in ("eager", "multistream", "graph")]
    db = sqlite3.connect(f"file:{small_sweep.files['sqlite']}?mode=ro", uri=True)
    graph_kernels = db.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL "
                               "where graphNodeId is not null").fetchone()[0]
    # two kernel times x (one warm-up + two ranged replays) of an N-kernel graph
    assert graph_kernels == 2 * 3 * N
    for name in ("run.json", "analysis.json", "plan.json", "timing.json", "command.txt",
                 "environment.json", "gapscope_run.nsys-rep", "gapscope_run.sqlite"):
        assert (Path(small_sweep.options.out_dir) / name).is_file()


def test_shape_of_the_seed_table(small_sweep) -> None:
    by = {(r.path, r.kernel_us): r for r in small_sweep.rows}
    # short kernels: eager is launch-bound, the graph removes most of the gap
    assert by["eager", 2.0].gap_fraction > 0.5
    assert by["graph", 2.0].gap_fraction < by["eager", 2.0].gap_fraction / 2
    assert by["graph", 2.0].speedup_vs_eager > 2.0
    # long kernels: the launch cost is amortized, graphs buy little
    assert by["eager", 200.0].gap_fraction < 0.05
    assert 0.9 < by["graph", 200.0].speedup_vs_eager < 1.1
    # untraced, the graph runs 2 us kernels near the back-to-back floor, eager does not
    floor = small_sweep.calibration["floor_us"]
    assert by["graph", 2.0].untraced_per_kernel_us < 2.0 * max(floor, 1.0)
    assert by["eager", 2.0].untraced_per_kernel_us > by["graph", 2.0].untraced_per_kernel_us * 2
