"""CPU-side tests of capture and runner: nsys discovery, command building, nsys output parsing,
failure handling, the sweep-table math and the run's output folder (fake nsys, fake CuPy)."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import fakecupy  # tests/ is on sys.path under pytest's default rootdir import mode
import pytest

from paths import TRACES
from gapscope.capture import nsys as capture
from gapscope.errors import GapscopeError
from gapscope.analysis.sweep import SweepRow, sweep_rows
from gapscope.run.runner import RunOptions, run
from gapscope.run.workload import paths as P



def _exe(path: Path, body: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# ---------------------------------------------------------------- discovery


def test_explicit_nsys_wins(tmp_path: Path) -> None:
    mine = _exe(tmp_path / "mine" / "nsys")
    env_one = _exe(tmp_path / "env" / "nsys")
    found = capture.find_nsys(mine, {"GAPSCOPE_NSYS": str(env_one), "PATH": ""}, ())
    assert found == mine


def test_explicit_folder_means_its_nsys(tmp_path: Path) -> None:
    mine = _exe(tmp_path / "bin" / "nsys")
    assert capture.find_nsys(tmp_path / "bin", {"PATH": ""}, ()) == mine


def test_env_variable_before_path(tmp_path: Path) -> None:
    env_one = _exe(tmp_path / "env" / "nsys")
    on_path = _exe(tmp_path / "path" / "nsys")
    env = {"GAPSCOPE_NSYS": str(env_one), "PATH": str(on_path.parent)}
    assert capture.find_nsys(None, env, ()) == env_one


def test_path_before_install_places(tmp_path: Path) -> None:
    on_path = _exe(tmp_path / "path" / "nsys")
    installed = _exe(tmp_path / "opt" / "nsight-systems" / "2025.1" / "bin" / "nsys")
    globs = (str(tmp_path / "opt" / "nsight-systems" / "*" / "bin" / "nsys"),)
    assert capture.find_nsys(None, {"PATH": str(on_path.parent)}, globs) == on_path
    assert capture.find_nsys(None, {"PATH": ""}, globs) == installed


def test_install_places_newest_version_first_then_nsight_compute(tmp_path: Path) -> None:
    old = _exe(tmp_path / "nsys-sys" / "2024.10.2" / "bin" / "nsys")
    new = _exe(tmp_path / "nsys-sys" / "2025.3.1" / "bin" / "nsys")
    ncu = _exe(tmp_path / "ncu" / "2025.3.1" / "host" / "target-linux-x64" / "nsys")
    globs = (str(tmp_path / "nsys-sys" / "*" / "bin" / "nsys"),
             str(tmp_path / "cuda" / "bin" / "nsys"),
             str(tmp_path / "ncu" / "*" / "host" / "target-linux-x64" / "nsys"))
    assert capture.find_nsys(None, {"PATH": ""}, globs) == new
    new.unlink()
    assert capture.find_nsys(None, {"PATH": ""}, globs) == old
    old.unlink()
    assert capture.find_nsys(None, {"PATH": ""}, globs) == ncu


def test_non_executable_is_skipped_and_missing_is_a_clear_error(tmp_path: Path) -> None:
    plain = tmp_path / "x" / "nsys"
    plain.parent.mkdir()
    plain.write_text("not executable")
    globs = (str(tmp_path / "x" / "nsys"),)
    with pytest.raises(GapscopeError, match="nsys \\(Nsight Systems\\) not found") as info:
        capture.find_nsys(None, {"PATH": ""}, globs)
    assert info.value.exit_code == 2
    with pytest.raises(GapscopeError, match="GAPSCOPE_NSYS .*no executable nsys"):
        capture.find_nsys(None, {"GAPSCOPE_NSYS": str(plain), "PATH": ""}, globs)


def test_nsys_version_parsed(tmp_path: Path) -> None:
    fake = _exe(tmp_path / "nsys", "#!/bin/sh\necho 'NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0'\n")
    assert capture.nsys_version(fake) == "2025.3.1.90"
    assert capture.nsys_version(tmp_path / "missing") is None


# ---------------------------------------------------------------- command


def test_build_command_exact() -> None:
    cmd = capture.build_command("/opt/nsys", "/out/gapscope_run", ["--kernels", 300],
                                python="/usr/bin/python3")
    assert cmd == ["/opt/nsys", "profile", "-t", "cuda,nvtx", "--cuda-graph-trace=node",
                   "--sample=none", "--cpuctxsw=none", "--export", "sqlite",
                   "--force-overwrite", "true", "-o", "/out/gapscope_run", "/usr/bin/python3",
                   "-m", "gapscope.run.workload", "--kernels", "300"]
    assert capture.shell_line(["a b", "c"]) == "'a b' c"
    assert "--cuda-graph-trace=graph" in capture.build_command("nsys", "o", [], "graph")
    with pytest.raises(GapscopeError, match="--graph-trace"):
        capture.build_command("nsys", "o", [], "nodes")


def test_workload_args_and_dry_run(tmp_path: Path) -> None:
    opts = RunOptions(out_dir=tmp_path / "r", kernel_us=[2, 50], kernels=300, streams=4,
                      repeat=2, dry_run=True, nsys=str(_exe(tmp_path / "nsys")))
    res = run(opts, progress=False)
    d = tmp_path / "r"
    assert res.command[-16:] == ["-m", "gapscope.run.workload", "--plan", str(d / "plan.json"),
                                 "--kernels", "300", "--streams", "4", "--paths",
                                 "eager,multistream,graph", "--repeat", "2", "--device", "0",
                                 "--summary", str(d / "workload.json")]
    assert res.command[-17] == sys.executable
    assert res.command[0] == str(tmp_path / "nsys")
    assert not d.exists()  # a dry run writes nothing


def test_workload_env_makes_gapscope_importable() -> None:
    root = str(Path(__file__).resolve().parents[1])  # the repository: it holds gapscope/__init__.py
    assert (Path(root) / "gapscope" / "__init__.py").is_file()
    env = capture.workload_env({"PYTHONPATH": "/x"})
    assert env["PYTHONPATH"] == os.pathsep.join([root, "/x"])
    assert capture.workload_env({"PYTHONPATH": root})["PYTHONPATH"] == root


def test_nsys_phase_lines() -> None:
    assert capture.nsys_phase("Collecting data...") == ("capture", None)  # the program starts
    assert capture.nsys_phase("Generating '/tmp/nsys-report-5e1f.qdstrm'") == ("report", 0)
    assert capture.nsys_phase("[1/2] [=====45%    ] run.nsys-rep") == ("report", 45)
    assert capture.nsys_phase("[2/2] [========100%] run.sqlite") == ("export", 100)
    assert capture.nsys_phase("[1/1] [===70%      ] profile.nsys-rep") == ("report", 70)  # no --export
    assert capture.nsys_phase("[workload] eager/k=2us (1/1)") is None


@pytest.mark.parametrize("bad", [
    dict(kernels=0), dict(streams=0), dict(repeat=0), dict(kernel_us=[]),
    dict(kernel_us=[2.0, -1.0]), dict(paths=["eager", "lazy"]), dict(kind="warp"),
])
def test_bad_options_are_clear_errors(tmp_path: Path, bad: dict) -> None:
    opts = RunOptions(out_dir=tmp_path / "r", dry_run=True, **bad)
    with pytest.raises(GapscopeError):
        opts.validate()


def test_out_dir_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(GapscopeError, match="not a folder"):
        RunOptions(out_dir=f).validate()


# ---------------------------------------------------------------- sweep math


def _r(name: str, span: int, busy: int, kernels: int = 10, kmed: float = 1000.0) -> dict:
    return {"name": name, "gpu_span_ns": span, "busy_ns": busy, "kernels": kernels,
            "gap_fraction": (span - busy) / span, "kernel_median_ns": kmed}


def test_sweep_rows_medians_spread_and_speedup() -> None:
    ranges = [_r("eager/k=2us", 100_000, 20_000), _r("eager/k=2us", 80_000, 20_000),
              _r("eager/k=2us", 120_000, 30_000),
              _r("graph/k=2us", 25_000, 20_000), _r("graph/k=2us", 25_000, 20_000),
              _r("graph/k=2us", 40_000, 20_000)]
    timings = [{"path": "eager", "kernel_us": 2.0, "median_us": 6.0, "spread_us": 0.5},
               {"path": "graph", "kernel_us": 2.0, "median_us": 1.5, "spread_us": 0.1}]
    eager, graph = sweep_rows(ranges, timings, ["eager", "graph"], [2.0, 50.0], 10)[:2]
    # eager gap fractions 0.8, 0.75, 0.75 -> median 0.75; spans 80/100/120 us -> median 100 us
    assert eager == SweepRow(2.0, "eager", 3, 10, 0.75, 0.75, 0.8, 100.0, 10.0, 1.0, 6.0, 0.5, 1.0, 1.0)
    # graph gap fractions 0.2, 0.2, 0.5 -> 0.2; median span 25 us -> speedup 100/25 = 4 traced;
    # untraced 6.0 / 1.5 us a kernel = 4 too (the untraced timing is what the program gets)
    assert graph == SweepRow(2.0, "graph", 3, 10, 0.2, 0.2, 0.5, 25.0, 2.5, 1.0, 1.5, 0.1, 4.0, 6.0 / 1.5)


def test_sweep_rows_missing_ranges_and_single_time() -> None:
    rows = sweep_rows([_r("graph", 50_000, 40_000, kernels=1)], [], ["eager", "graph"], [10.0], 10)
    assert rows[0] == SweepRow(10.0, "eager", 0, None, None, None, None, None, None, None,
                               None, None, None)
    assert rows[1].gap_fraction == 0.2 and rows[1].speedup_vs_eager is None
    # one graph-level row stands for the 10 kernels launched: 50 us / 10, not / 1
    assert rows[1].kernels == 1 and rows[1].traced_per_kernel_us == 5.0


# ---------------------------------------------------------------- a whole run, faked

FAKE_NSYS = textwrap.dedent(f"""\
    #!{sys.executable}
    import os, shutil, sys
    args = sys.argv[1:]
    base = args[args.index("-o") + 1]
    print("Collecting data...")
    if os.environ.get("FAKE_NSYS_FAIL"):
        open(base + ".qdstrm", "w").write("partial")
        print("Importer error: libdw.so.1: cannot open shared object file")
        sys.exit(1)
    open(base + ".nsys-rep", "w").write("report")
    print("[1/2] [========100%] x.nsys-rep", end="\\r")
    shutil.copy(os.environ["FAKE_NSYS_TRACE"], base + ".sqlite")
    print("[2/2] [========100%] x.sqlite")
    """)


@pytest.fixture()
def fake_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fakecupy.install(monkeypatch)
    monkeypatch.setattr(P, "_NVTX", None)
    nsys = _exe(tmp_path / "bin" / "nsys", FAKE_NSYS)
    monkeypatch.setenv("FAKE_NSYS_TRACE", str(TRACES / "cupy_paths_node.sqlite"))
    return RunOptions(out_dir=tmp_path / "out", kernel_us=[2.0, 50.0], kernels=300, streams=4,
                      nsys=str(nsys))


def test_run_writes_the_output_folder_and_the_table(fake_run: RunOptions) -> None:
    res = run(fake_run, progress=False)
    out = fake_run.out_dir
    names = sorted(p.name for p in out.iterdir())
    assert names == ["analysis.json", "command.txt", "environment.json", "gapscope_run.nsys-rep",
                     "gapscope_run.sqlite", "nsys.log", "plan.json", "run.json", "timing.json"]
    assert (out / "command.txt").read_text() == res.command_line + "\n"
    saved = json.loads((out / "run.json").read_text())
    assert saved["schema"] == "gapscope-run/1" and saved["nsys_command"] == res.command
    # Rows come from the real H200 export (traces/cupy_paths_node.sqlite), one range per path.
    by = {(r.path, r.kernel_us): r for r in res.rows}
    assert [(r.path, r.kernel_us) for r in res.rows] == [
        ("eager", 2.0), ("multistream", 2.0), ("graph", 2.0),
        ("eager", 50.0), ("multistream", 50.0), ("graph", 50.0)]
    assert by["eager", 2.0].gap_fraction == (2314818 - 345856) / 2314818
    assert by["graph", 2.0].gap_fraction == (450816 - 369312) / 450816
    assert by["graph", 2.0].speedup_vs_eager == 2314818 / 450816
    assert by["multistream", 50.0].speedup_vs_eager == 15124554 / 5587011
    assert by["eager", 2.0].kernel_median_us == 1.152
    assert by["graph", 50.0].traced_per_kernel_us == 14852745 / 1000 / 300
    # Untraced timing from the fake GPU: 1000 and 49000 spin iterations = 2 and 50 us
    assert by["eager", 2.0].untraced_per_kernel_us == pytest.approx(2.0)
    assert by["graph", 50.0].untraced_per_kernel_us == pytest.approx(50.0)


def test_nsys_failure_keeps_its_files_and_says_where(fake_run: RunOptions,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NSYS_FAIL", "1")
    with pytest.raises(GapscopeError) as info:
        run(fake_run, progress=False)
    out = fake_run.out_dir
    msg = info.value.message
    assert info.value.exit_code == 2
    assert msg.startswith(f"nsys exited with 1; kept what it wrote in {out} (gapscope_run.qdstrm)")
    assert msg.endswith("its last line: Importer error: libdw.so.1: cannot open shared object file")
    assert (out / "gapscope_run.qdstrm").read_text() == "partial"
    assert (out / "plan.json").is_file() and (out / "timing.json").is_file()


def test_cli_dry_run_prints_the_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from gapscope.cli import main

    nsys = _exe(tmp_path / "nsys")
    with pytest.raises(SystemExit) as info:
        main(["run", "--dry-run", "--kernel-us", "2,10", "--nsys", str(nsys), "-o", str(tmp_path / "o")])
    assert info.value.code == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{nsys} profile -t cuda,nvtx --cuda-graph-trace=node ")
    assert line.endswith(f"--summary {tmp_path / 'o' / 'workload.json'}")


def test_cli_without_cupy_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture) -> None:
    from gapscope.cli import main

    monkeypatch.setitem(sys.modules, "cupy", None)
    nsys = _exe(tmp_path / "nsys")
    with pytest.raises(SystemExit) as info:
        main(["run", "--nsys", str(nsys), "-o", str(tmp_path / "o"), "-q"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gapscope: error: CuPy is not installed")


def test_run_on_its_own_h200_export(fake_run: RunOptions, monkeypatch: pytest.MonkeyPatch) -> None:
    """The five-time sweep that `gapscope run` recorded on the H200 (traces/run_sweep_node.sqlite):
    spans and busy times below come from a plain sort-and-merge of each range's kernels."""
    monkeypatch.setenv("FAKE_NSYS_TRACE", str(TRACES / "run_sweep_node.sqlite"))
    fake_run.kernel_us = [2.0, 10.0, 50.0, 200.0, 1000.0]
    fake_run.kernels = 150
    by = {(r.path, r.kernel_us): r for r in run(fake_run, progress=False).rows}
    expect = {  # (path, k): (span ns, busy ns)
        ("eager", 2.0): (1526260, 150367), ("multistream", 2.0): (2045200, 150368),
        ("graph", 2.0): (202014, 164606), ("eager", 10.0): (1611252, 1354583),
        ("graph", 10.0): (1403030, 1365590), ("eager", 1000.0): (150012273, 149849139),
        ("multistream", 1000.0): (54331013, 54252870), ("graph", 1000.0): (149881522, 149843730),
    }
    for key, (span, busy) in expect.items():
        assert by[key].kernels == 150 and by[key].ranges == 1
        assert by[key].span_us == span / 1000
        assert by[key].gap_fraction == (span - busy) / span
    assert by["graph", 2.0].speedup_vs_eager == 1526260 / 202014
    assert by["graph", 10.0].speedup_vs_eager == 1611252 / 1403030
    assert by["multistream", 1000.0].speedup_vs_eager == 150012273 / 54331013
