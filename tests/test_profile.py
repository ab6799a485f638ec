"""CPU tests of `gapscope profile`: command building for every option, capture-range parsing,
-o's substitutions, the output folder, exit codes, Ctrl-C and the failing-nsys paths, all with a
FAKE nsys (a script written here that records its argv, runs the program through the real
exit-status wrapper and writes a copy of a shipped export where nsys would) and fake programs;
the PyTorch launcher with a SYNTHETIC stand-in torch (tests/standin_torch).

The analyses of what the fake recorders "recorded" are checked against tests/reference.py's
plain recomputation of the shipped trace that was copied into the output folder."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import reference
from clirun import assert_one_line_error, gapscope
from paths import ROOT, TRACES
from gapscope.capture.profile import (EXIT_STATUS_SCRIPT, TORCH_LAUNCHER, CaptureRange, ProfileOptions,
                                      build_plan, output_folder, profile, python_program)
from gapscope.errors import GapscopeError

PY = sys.executable
SQLITE = TRACES / "torch_decode_small.sqlite"
ARROW = TRACES / "torch_decode_small_arrow"
KINETO = TRACES / "torch_decode_small.pt.trace.json.gz"
STANDIN_TORCH = ROOT / "tests" / "standin_torch"

FAKE_NSYS = textwrap.dedent(f"""\
    #!{PY}
    # FAKE nsys: profile runs the program (the wrapper and CMD after -o BASE) and writes a fake
    # report; export copies $FAKE_EXPORT_<TYPE> (a shipped export) to -o.
    import json, os, shutil, signal, subprocess, sys
    args = sys.argv[1:]
    if args[:1] == ["--version"]:
        print("NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0")
        sys.exit(0)
    if args[:1] == ["export"]:
        if "--help" in args:
            print(os.environ.get("FAKE_NSYS_HELP", "--type <arg>  sqlite, hdf, text, json"))
            sys.exit(0)
        kind, out = args[args.index("--type") + 1], args[args.index("-o") + 1]
        if os.environ.get("FAKE_EXPORT_FAIL"):
            print("Exporter error: the report is damaged")
            sys.exit(1)
        src = os.environ["FAKE_EXPORT_" + kind.upper()]
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, out)
        sys.exit(0)
    if os.environ.get("FAKE_NSYS_ARGV"):
        with open(os.environ["FAKE_NSYS_ARGV"], "w") as fh:
            json.dump(args, fh)
    at = args.index("-o")
    base, program = args[at + 1].replace("%%", "%"), args[at + 2:]
    signal.signal(signal.SIGINT, lambda *a: print("fake nsys: SIGINT, stopping", flush=True))
    if os.environ.get("FAKE_NSYS_DEAF"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("Collecting data...", flush=True)
    rc = subprocess.call(program)
    if os.environ.get("FAKE_NSYS_FAIL"):
        open(base + ".qdstrm", "w").write("partial")
        print("Importer error: libdw.so.1: cannot open shared object file")
        sys.exit(1)
    if os.environ.get("FAKE_NSYS_NO_REPORT"):
        print("No reports were generated")
        sys.exit(0)
    print("Generating '/tmp/nsys-report-f00d.qdstrm'")
    open(base + ".nsys-rep", "w").write("fake report")
    print("[1/1] [========================100%] x.nsys-rep", end="\\r", flush=True)
    print("Generated:\\n    " + base + ".nsys-rep")
    sys.exit(int(os.environ.get("FAKE_NSYS_RC", "0")))
    """)

PROGRAM = textwrap.dedent("""\
    # a fake program: prints its argv, exits with $FAKE_EXIT, or waits for Ctrl-C
    import os, signal, sys, time
    print("program argv", sys.argv[1:], flush=True)
    if os.environ.get("FAKE_READY"):
        if os.environ.get("FAKE_DEAF"):
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        open(os.environ["FAKE_READY"], "w").write("ready")
        time.sleep(60)
    if os.environ.get("FAKE_SIGNAL"):
        os.kill(os.getpid(), int(os.environ["FAKE_SIGNAL"]))
    sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
    """)


def _exe(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A FAKE nsys (exporting the shipped torch_decode_small exports) and a fake program."""
    nsys = _exe(tmp_path / "bin" / "nsys", FAKE_NSYS)
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    monkeypatch.setenv("GAPSCOPE_NSYS", str(nsys))
    monkeypatch.setenv("FAKE_EXPORT_SQLITE", str(SQLITE))
    monkeypatch.setenv("FAKE_EXPORT_ARROWDIR", str(ARROW))
    monkeypatch.setenv("FAKE_NSYS_ARGV", str(tmp_path / "nsys_argv.json"))
    for name in ("FAKE_NSYS_FAIL", "FAKE_EXPORT_FAIL", "FAKE_NSYS_NO_REPORT", "FAKE_EXIT", "FAKE_READY"):
        monkeypatch.delenv(name, raising=False)

    class Fake:
        root, bin = tmp_path, nsys
        prog = [PY, str(program)]

        def argv(self) -> list[str]:
            return json.loads((tmp_path / "nsys_argv.json").read_text())

    return Fake()


def _options(fake, out: Path, *extra: str, **kw) -> ProfileOptions:
    return ProfileOptions(command=[*fake.prog, *extra], out_dir=str(out), **kw)


# ---------------------------------------------------------------- capture range


@pytest.mark.parametrize("text, kind, name, words", [
    ("nvtx:decode", "nvtx", "decode",
     ["--capture-range=nvtx", "--nvtx-capture=decode", "--capture-range-end=stop"]),
    ("nvtx:step 3@MyDomain", "nvtx", "step 3@MyDomain",
     ["--capture-range=nvtx", "--nvtx-capture=step 3@MyDomain", "--capture-range-end=stop"]),
    ("nvtx:a:b", "nvtx", "a:b", ["--capture-range=nvtx", "--nvtx-capture=a:b", "--capture-range-end=stop"]),
    ("cudaProfilerApi", "cudaProfilerApi", None, ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]),
    ("cudaprofilerapi", "cudaProfilerApi", None, ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]),
])
def test_capture_range_parsed(text: str, kind: str, name: str | None, words: list[str]) -> None:
    cr = CaptureRange.parse(text)
    assert (cr.kind, cr.name, cr.nsys_words()) == (kind, name, words)
    assert CaptureRange.parse(cr.spec) == cr


@pytest.mark.parametrize("text, message", [
    ("nvtx", "--capture-range nvtx: give the range's name: nvtx:NAME"),
    ("nvtx:", "--capture-range nvtx:: give the range's name: nvtx:NAME"),
    ("nvtx:  ", "--capture-range nvtx:  : give the range's name: nvtx:NAME"),
    ("", "--capture-range '': give nvtx:NAME"),
    ("decode", "--capture-range 'decode': give nvtx:NAME"),
    ("NVTX:decode", "--capture-range 'NVTX:decode': give nvtx:NAME"),
    ("cudaProfilerApi:x", "--capture-range 'cudaProfilerApi:x': give nvtx:NAME"),
])
def test_bad_capture_range_is_one_line(text: str, message: str) -> None:
    with pytest.raises(GapscopeError) as info:
        CaptureRange.parse(text)
    assert info.value.message.startswith(message) and "\n" not in info.value.message
    assert info.value.exit_code == 2


def test_bad_capture_range_from_the_cli(fake) -> None:
    proc = gapscope("profile", "--dry-run", "--capture-range", "nvtx", "--", *fake.prog)
    assert_one_line_error(proc, "--capture-range nvtx: give the range's name")


# ---------------------------------------------------------------- -o substitutions


def test_output_folder_substitutions() -> None:
    env = {"RANK": "3", "JOB": "j7"}
    assert output_folder("rank%q{RANK}", env, "node1", 42) == Path("rank3")
    assert output_folder("out/%q{JOB}-%h-%p-100%%", env, "node1", 42) == Path("out/j7-node1-42-100%")
    assert output_folder("plain", env, "h", 1) == Path("plain")
    with pytest.raises(GapscopeError, match=r"^-o rank%q\{WORLD\}: WORLD is not set in the environment$"):
        output_folder("rank%q{WORLD}", env, "h", 1)
    with pytest.raises(GapscopeError, match=r"^-o a%n: unknown '%n' \(gapscope expands"):
        output_folder("a%n", env, "h", 1)
    with pytest.raises(GapscopeError, match="unknown '%'"):
        output_folder("trailing%", env, "h", 1)


# ---------------------------------------------------------------- command building


def _plan(command, environ=None, nsys="/opt/nsys", export_type="arrowdir", **kw):
    opts = ProfileOptions(command=list(command), out_dir="/out/run1", **kw)
    return build_plan(opts, nsys, export_type, environ if environ is not None else {}, "host", 7,
                      python="/py/bin/python3")


WRAPPER = ["/py/bin/python3", "-I", str(EXIT_STATUS_SCRIPT), "/out/run1/exit_status.json", "--"]
TRACE = ["-t", "cuda,nvtx", "--cuda-graph-trace=node", "--sample=none", "--cpuctxsw=none"]


def test_nsys_plan_exact() -> None:
    plan = _plan(["python", "serve.py", "--batch", "8"])
    assert plan.record == ["/opt/nsys", "profile", *TRACE, "-o", "/out/run1/run1", *WRAPPER,
                           "python", "serve.py", "--batch", "8"]
    assert plan.export == ["/opt/nsys", "export", "--type", "arrowdir", "-o", "/out/run1/run1_arrow",
                           "/out/run1/run1.nsys-rep"]
    assert plan.env == {"PYTHONUNBUFFERED": "1"}
    assert (plan.name, plan.report, plan.trace) == ("run1", Path("/out/run1/run1.nsys-rep"),
                                                    Path("/out/run1/run1_arrow"))
    assert plan.command_lines() == [
        "PYTHONUNBUFFERED=1 /opt/nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none "
        f"--cpuctxsw=none -o /out/run1/run1 /py/bin/python3 -I {EXIT_STATUS_SCRIPT} "
        "/out/run1/exit_status.json -- python serve.py --batch 8",
        "/opt/nsys export --type arrowdir -o /out/run1/run1_arrow /out/run1/run1.nsys-rep"]
    assert plan.command_text().splitlines()[:3] == [
        "# gapscope profile: the program", "#   python serve.py --batch 8",
        "# recorded with nsys, then its export:"]


@pytest.mark.parametrize("export_type, name", [("sqlite", "run1.sqlite"), ("parquetdir", "run1_parquet"),
                                               ("arrowdir", "run1_arrow")])
def test_export_names(export_type: str, name: str) -> None:
    plan = _plan(["x"], export_type=export_type)
    assert plan.trace == Path("/out/run1") / name and plan.export[3] == export_type


def test_nsys_plan_with_every_option() -> None:
    plan = _plan(["./serve"], capture_range="nvtx:decode", delay=5, duration=30,
                 nsys_args=["--trace=cuda,nvtx,osrt --sample process-tree", "--backtrace=none"])
    assert plan.record == ["/opt/nsys", "profile", "--cuda-graph-trace=node", "--cpuctxsw=none",
                           "--capture-range=nvtx", "--nvtx-capture=decode", "--capture-range-end=stop",
                           "--delay=5", "--duration=30", "--trace=cuda,nvtx,osrt", "--sample",
                           "process-tree", "--backtrace=none", "-o", "/out/run1/run1", *WRAPPER, "./serve"]
    assert plan.env == {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "0", "PYTHONUNBUFFERED": "1"}
    assert plan.command_lines()[0].startswith(
        "NSYS_NVTX_PROFILER_REGISTER_ONLY=0 PYTHONUNBUFFERED=1 /opt/nsys profile --cuda-graph-trace=node")


def test_nsys_plan_short_options_and_capture_range_end_replace_gapscopes() -> None:
    plan = _plan(["./a"], capture_range="cudaProfilerApi",
                 nsys_args=["-t cuda", "-s none", "--cuda-graph-trace=graph", "--capture-range-end=repeat:3"])
    assert plan.record[2:plan.record.index("-o")] == [
        "--cpuctxsw=none", "--capture-range=cudaProfilerApi", "-t", "cuda", "-s", "none",
        "--cuda-graph-trace=graph", "--capture-range-end=repeat:3"]
    assert plan.env == {"PYTHONUNBUFFERED": "1"}  # not an NVTX range: nsys's default matching


def test_nsys_plan_leaves_the_users_variables_alone() -> None:
    plan = _plan(["./a"], {"NSYS_NVTX_PROFILER_REGISTER_ONLY": "1", "PYTHONUNBUFFERED": ""},
                 capture_range="nvtx:x")
    assert plan.env == {}


def test_nsys_plan_escapes_percent_in_the_report_name() -> None:
    opts = ProfileOptions(command=["./a"], out_dir="/out/a%%b")
    plan = build_plan(opts, "nsys", "sqlite", {}, "h", 1)
    assert plan.out_dir == Path("/out/a%b") and plan.record[plan.record.index("-o") + 1] == "/out/a%%b/a%%b"
    assert plan.trace == Path("/out/a%b/a%b.sqlite")


@pytest.mark.parametrize("arg, owned, ours", [
    ("-o x", "--output", "-o DIR"), ("--output=x", "--output", "-o DIR"),
    ("--capture-range=nvtx", "--capture-range", "--capture-range"), ("-c cudaProfilerApi", "--capture-range", "--capture-range"),
    ("--nvtx-capture=a", "--nvtx-capture", "--capture-range nvtx:NAME"), ("-p a", "--nvtx-capture", "--capture-range nvtx:NAME"),
    ("--delay=3", "--delay", "--delay"), ("-y 3", "--delay", "--delay"),
    ("--duration=5", "--duration", "--duration"), ("-d 5", "--duration", "--duration"),
    ("--export=sqlite", "--export", "--export-type"), ("--force-overwrite=true", "--force-overwrite", "--force"),
    ("-f true", "--force-overwrite", "--force"),
])
def test_nsys_args_that_gapscope_sets_are_refused(arg: str, owned: str, ours: str) -> None:
    with pytest.raises(GapscopeError) as info:
        _plan(["./a"], nsys_args=[arg])
    word = arg.split()[0]
    assert info.value.message == f"--nsys-arg {word}: gapscope profile sets {owned} itself; use its {ours}"


def test_nsys_arg_with_bad_quoting() -> None:
    with pytest.raises(GapscopeError, match="^--nsys-arg \"--trace='cuda\": No closing quotation$"):
        _plan(["./a"], nsys_args=["--trace='cuda"])


@pytest.mark.parametrize("bad, message", [
    (dict(command=[]), "no program to profile: gapscope profile [OPTIONS] -- CMD [ARGS...]"),
    (dict(tracer="perf"), "--tracer must be one of nsys, torch, got 'perf'"),
    (dict(export_type="json"), "--export-type must be one of arrowdir, parquetdir, sqlite"),
    (dict(delay=-1), "--delay must be at least 0 seconds, got -1"),
    (dict(duration=0), "--duration must be at least 1 seconds, got 0"),
])
def test_bad_options(bad: dict, message: str) -> None:
    opts = ProfileOptions(**{"command": ["./a"], **bad})
    with pytest.raises(GapscopeError) as info:
        opts.validate()
    assert info.value.message == message


# ---------------------------------------------------------------- the torch tracer's command


def test_torch_plan_exact() -> None:
    plan = _plan(["python3", "-u", "-X", "dev", "train.py", "--lr", "0.1"], tracer="torch",
                 capture_range="nvtx:step", nsys=None, export_type=None)
    assert plan.record == ["python3", "-u", "-X", "dev", str(TORCH_LAUNCHER), "--trace",
                           "/out/run1/run1.pt.trace.json.gz", "--status", "/out/run1/exit_status.json",
                           "--capture-range", "nvtx:step", "--", "train.py", "--lr", "0.1"]
    assert (plan.export, plan.report, plan.env) == (None, None, {"PYTHONUNBUFFERED": "1"})


@pytest.mark.parametrize("command, want", [
    (["python", "-m", "pkg.serve", "-m", "x"], ("python", [], ["-m", "pkg.serve", "-m", "x"])),
    (["/opt/venv/bin/python3.12", "-O", "-Wignore", "s.py"], ("/opt/venv/bin/python3.12", ["-O", "-Wignore"], ["s.py"])),
    (["python", "-W", "error", "--", "-odd.py", "a"], ("python", ["-W", "error"], ["-odd.py", "a"])),
    (["train.py", "--x"], (sys.executable, [], ["train.py", "--x"])),
])
def test_python_program(command: list[str], want: tuple) -> None:
    assert python_program(command) == want


@pytest.mark.parametrize("command, needle", [
    (["torchrun", "train.py"], "(got torchrun train.py...)"),
    (["python", "-c", "print(1)"], "python -c cannot run under the launcher"),
    (["python", "-u"], "(no script in python -u)"),
    (["python", "-m"], "(no script in python -m)"),
    (["python", "-"], "(no script in python -)"),
])
def test_torch_tracer_needs_a_python_program(command: list[str], needle: str) -> None:
    with pytest.raises(GapscopeError) as info:
        ProfileOptions(command=command, tracer="torch").validate()
    assert info.value.message.startswith("--tracer torch runs a Python program") and needle in info.value.message


@pytest.mark.parametrize("bad, flag", [
    (dict(delay=1), "--delay"), (dict(duration=1), "--duration"), (dict(nsys_args=["-x"]), "--nsys-arg"),
    (dict(export_type="sqlite"), "--export-type"), (dict(nsys="/opt/nsys"), "--nsys"),
])
def test_nsys_options_are_refused_under_the_torch_tracer(bad: dict, flag: str) -> None:
    with pytest.raises(GapscopeError) as info:
        ProfileOptions(command=["python", "a.py"], tracer="torch", **bad).validate()
    assert info.value.message.startswith(f"{flag} is for nsys; --tracer torch runs no nsys")


def test_torch_tracer_refuses_an_nvtx_domain() -> None:
    with pytest.raises(GapscopeError, match="matched by its name alone .*drop @DOMAIN"):
        ProfileOptions(command=["python", "a.py"], tracer="torch", capture_range="nvtx:step@D").validate()


# ---------------------------------------------------------------- dry run and missing nsys


def test_dry_run_prints_the_commands_and_writes_nothing(fake, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NSYS_HELP", "--type <arg>  sqlite, arrowdir, parquetdir, hdf")
    out = tmp_path / "o"
    proc = gapscope("profile", "--dry-run", "-o", str(out), "--capture-range", "nvtx:decode", "--", *fake.prog, "-n", "3")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and proc.stderr == ""
    assert lines[0].startswith(f"NSYS_NVTX_PROFILER_REGISTER_ONLY=0 ") and f" {fake.bin} profile -t cuda,nvtx " in lines[0]
    assert lines[0].endswith(f" -o {out}/o {PY} -I {EXIT_STATUS_SCRIPT} {out}/exit_status.json -- {PY} {fake.prog[1]} -n 3")
    assert lines[1] == f"{fake.bin} export --type arrowdir -o {out}/o_arrow {out}/o.nsys-rep"
    assert not out.exists()


def test_dry_run_without_nsys_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("gapscope.capture.nsys.INSTALL_GLOBS", ())
    monkeypatch.delenv("GAPSCOPE_NSYS", raising=False)
    result = profile(ProfileOptions(command=["./a"], out_dir=str(tmp_path / "o"), dry_run=True), progress=False)
    assert result.warnings[0] == "nsys not found; the commands show plain 'nsys'"
    assert result.plan.record[:2] == ["nsys", "profile"] and result.plan.export_type == "sqlite"


def test_missing_nsys_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("GAPSCOPE_NSYS", raising=False)
    monkeypatch.setattr("gapscope.capture.nsys.INSTALL_GLOBS", ())
    proc = gapscope("profile", "-o", str(tmp_path / "o"), "--", PY, "x.py")
    assert_one_line_error(proc, "nsys (Nsight Systems) not found: searched --nsys, $GAPSCOPE_NSYS, PATH")
    assert proc.stderr.rstrip().endswith(
        "; install Nsight Systems (https://developer.nvidia.com/nsight-systems, or the nsight-systems "
        "package of NVIDIA's CUDA repository) or pass --nsys PATH; a PyTorch program can be recorded "
        "without it: --tracer torch")
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- a whole profile, faked


def _decode_small_checks(result, export: Path, kernels_of, ranges_of) -> None:
    """The analysis of the copied torch_decode_small export, against the plain recomputation."""
    by = {r["name"]: r for r in result.by_name}
    assert {n: by[n]["count"] for n in ("eager", "graph", "decode_step")} == {"eager": 1, "graph": 1, "decode_step": 16}
    ks, rs = kernels_of(str(export)), ranges_of(str(export))
    for row in result.ranges:
        ref = next(r for r in rs if r["start"] == row["start_ns"] and r["name"] == row["name"])
        assert (row["kernels"], row["gpu_span_ns"], row["gap_ns"]) == reference.range_metrics(ref, ks)
    assert by["decode_step"]["kernels"] == 16 * 78


def test_profile_writes_the_folder(fake, tmp_path: Path) -> None:
    out = tmp_path / "run7"
    result = profile(_options(fake, out, "--batch", "8"), progress=False)
    plan = result.plan
    assert sorted(p.name for p in out.iterdir()) == [
        "command.txt", "environment.json", "exit_status.json", "output.log", "profile.json",
        "report.txt", "result.json", "run7.nsys-rep", "run7.sqlite"]
    assert fake.argv() == plan.record[1:]
    assert (out / "command.txt").read_text() == plan.command_text()
    log = (out / "output.log").read_text()
    assert f"program argv ['--batch', '8']\n" in log and "Collecting data..." in log
    assert (result.program_exit_code, result.program_signal, result.recorder_exit_code, result.exit_code) == (0, None, 0, 0)
    _decode_small_checks(result.analysis, out / "run7.sqlite", reference.kernels, reference.ranges)
    from gapscope.analysis.pipeline import analyze

    again = analyze(out / "run7.sqlite").to_dict()
    assert json.loads((out / "result.json").read_text()) == json.loads(json.dumps(again))
    saved = json.loads((out / "profile.json").read_text())
    assert saved["schema"] == "gapscope-profile/1" and saved["tracer"] == "nsys"
    assert saved["commands"] == {"record": plan.record, "export": plan.export}
    assert saved["program"] == [*fake.prog, "--batch", "8"] and saved["program_exit_code"] == 0
    assert saved["files"] == {k: str(out / v) for k, v in {
        "report": "run7.nsys-rep", "trace": "run7.sqlite", "log": "output.log", "status": "exit_status.json",
        "commands": "command.txt", "environment": "environment.json", "result": "result.json",
        "report_text": "report.txt", "profile": "profile.json"}.items()}
    assert saved["error"] is None and saved["interrupted"] is False and saved["signals"] == []
    env = json.loads((out / "environment.json").read_text())
    assert env["nsys"] == "2025.3.1.90" and env["nsys_path"] == str(fake.bin) and "cupy" not in env
    assert (out / "report.txt").read_text().startswith("gapscope run7.sqlite  format: nsys SQLite export")
    # `gapscope analyze DIR` reads the folder's trace again (a folder of one trace)
    proc = gapscope("analyze", str(out), "-f", "json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["ranges"] == saved_ranges(out)


def saved_ranges(out: Path) -> list:
    return json.loads((out / "result.json").read_text())["ranges"]


def test_profile_exports_the_fastest_type_offered(fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NSYS_HELP", "--type <arg>  sqlite, arrowdir, parquetdir")
    result = profile(_options(fake, tmp_path / "a"), progress=False)
    assert result.plan.trace == tmp_path / "a" / "a_arrow" and (tmp_path / "a" / "a_arrow").is_dir()
    assert result.analysis.trace["format"] == "nsys-arrow"
    _decode_small_checks(result.analysis, tmp_path / "a" / "a_arrow", reference.columnar_kernels,
                         reference.columnar_ranges)


def test_cli_prints_the_report_and_the_programs_exit_code(fake, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_EXIT", "3")
    out = tmp_path / "p"
    proc = gapscope("profile", "-q", "-o", str(out), "--", *fake.prog)
    assert proc.returncode == 3
    assert proc.stdout.startswith("gapscope p.sqlite  format: nsys SQLite export")
    assert proc.stderr == f"gapscope: the program exited with 3; everything is in {out}\n"
    assert json.loads((out / "profile.json").read_text())["program_exit_code"] == 3


def test_cli_json_on_stdout(fake, tmp_path: Path) -> None:
    proc = gapscope("profile", "-q", "-f", "json", "-o", str(tmp_path / "p"), "--", *fake.prog)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads((tmp_path / "p" / "result.json").read_text())


def test_program_ended_by_a_signal(fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SIGNAL", str(int(signal.SIGUSR1)))
    proc = gapscope("profile", "-q", "-o", str(tmp_path / "p"), "--", *fake.prog)
    code = 128 + int(signal.SIGUSR1)
    assert proc.returncode == code
    assert proc.stderr == f"gapscope: the program was ended by SIGUSR1 (exit status {code}); everything is in {tmp_path / 'p'}\n"
    status = json.loads((tmp_path / "p" / "exit_status.json").read_text())
    assert (status["exit_code"], status["signal"], status["error"]) == (code, int(signal.SIGUSR1), None)


def test_failing_nsys_keeps_its_files_and_says_where(fake, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NSYS_FAIL", "1")
    out = tmp_path / "f"
    proc = gapscope("profile", "-q", "-o", str(out), "--", *fake.prog)
    assert_one_line_error(proc, f"nsys exited with 1; kept what it wrote in {out} (f.qdstrm); its output "
                                f"is in {out / 'output.log'}; its last line: Importer error: libdw.so.1")
    assert (out / "f.qdstrm").read_text() == "partial"
    saved = json.loads((out / "profile.json").read_text())
    assert saved["error"].startswith("nsys exited with 1; kept") and saved["trace"] is None
    assert not (out / "result.json").exists()


def test_capture_range_that_never_opened_under_nsys(fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NSYS_NO_REPORT", "1")
    out = tmp_path / "n"
    proc = gapscope("profile", "-q", "--capture-range", "nvtx:decode", "-o", str(out), "--", *fake.prog)
    assert_one_line_error(proc, "nsys wrote no report (.nsys-rep); it wrote no report files")
    assert not out.exists()  # nothing recorded: nothing left behind, so a retry starts afresh
    assert proc.stderr.rstrip().endswith(
        "its last line: No reports were generated (with --capture-range nvtx:decode nsys records only once "
        "a range of that exact name opens; NAME@DOMAIN for a domain other than the default)")


def test_failing_export_keeps_the_report(fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_EXPORT_FAIL", "1")
    out = tmp_path / "e"
    proc = gapscope("profile", "-q", "-o", str(out), "--", *fake.prog)
    assert_one_line_error(proc, f"{out / 'e.nsys-rep'}: `nsys export --type sqlite` exited with 1: Exporter "
                                f"error: the report is damaged; the report is kept: {out / 'e.nsys-rep'}")
    assert (out / "e.nsys-rep").read_text() == "fake report" and not (out / "e.sqlite").exists()


def test_program_that_is_not_there(fake, tmp_path: Path) -> None:
    proc = gapscope("profile", "-q", "-o", str(tmp_path / "x"), "--", "no-such-program-4711", "a")
    assert_one_line_error(proc, "no-such-program-4711: command not found")
    assert not (tmp_path / "x").exists()


def test_an_existing_folder_is_only_replaced_when_it_is_an_earlier_profile(fake, tmp_path: Path) -> None:
    out = tmp_path / "again"
    profile(_options(fake, out), progress=False)
    (out / "notes.txt").write_text("mine")
    assert_one_line_error(gapscope("profile", "-q", "-o", str(out), "--", *fake.prog),
                          f"{out}: exists and is not empty; choose another -o, or --force")
    first = (out / "again.nsys-rep").stat().st_mtime_ns
    proc = gapscope("profile", "-q", "--force", "--export-type", "arrowdir", "-o", str(out), "--", *fake.prog)
    assert proc.returncode == 0, proc.stderr
    # the earlier profile's files went (its SQLite export too), the user's file stayed
    assert sorted(p.name for p in out.iterdir()) == [
        "again.nsys-rep", "again_arrow", "command.txt", "environment.json", "exit_status.json",
        "notes.txt", "output.log", "profile.json", "report.txt", "result.json"]
    assert (out / "notes.txt").read_text() == "mine" and (out / "again.nsys-rep").stat().st_mtime_ns >= first


def test_force_never_overwrites_a_file_that_is_not_a_profiles(fake, tmp_path: Path) -> None:
    out = tmp_path / "theirs"
    out.mkdir()
    (out / "report.txt").write_text("the user's own report")
    proc = gapscope("profile", "-q", "--force", "-o", str(out), "--", *fake.prog)
    assert_one_line_error(proc, f"{out / 'report.txt'}: exists and is not from an earlier gapscope profile")
    assert (out / "report.txt").read_text() == "the user's own report"
    assert sorted(p.name for p in out.iterdir()) == ["report.txt"]


def test_output_is_a_file(fake, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert_one_line_error(gapscope("profile", "-q", "-o", str(tmp_path / "f"), "--", *fake.prog),
                          f"{tmp_path / 'f'}: exists and is not a folder")


# ---------------------------------------------------------------- Ctrl-C (real processes)


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "gapscope", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def test_ctrl_c_stops_the_program_and_analyzes_what_was_recorded(fake, tmp_path: Path) -> None:
    ready, out = tmp_path / "ready", tmp_path / "c"
    proc = _start(["profile", "-q", "-o", str(out), "--", *fake.prog], _env(FAKE_READY=str(ready)))
    _wait_for(ready, proc)
    os.kill(proc.pid, signal.SIGINT)  # gapscope alone gets it, as from a terminal in its own group
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert stdout.startswith("gapscope c.sqlite  format: nsys SQLite export")
    assert stderr.endswith(f"gapscope: interrupted (SIGINT): the program was ended by SIGINT (exit status "
                           f"130); what was recorded until then is analyzed above; everything is in {out}\n")
    saved = json.loads((out / "profile.json").read_text())
    assert (saved["interrupted"], saved["signals"], saved["program_signal"]) == (True, ["SIGINT"], 2)
    assert "fake nsys: SIGINT, stopping" in (out / "output.log").read_text()


def test_three_ctrl_c_kill_a_recording_that_does_not_stop(fake, tmp_path: Path) -> None:
    ready, out = tmp_path / "ready", tmp_path / "k"
    proc = _start(["profile", "-q", "-o", str(out), "--", *fake.prog],
                  _env(FAKE_READY=str(ready), FAKE_DEAF="1", FAKE_NSYS_DEAF="1"))
    _wait_for(ready, proc)
    for _ in range(3):
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.3)
    stdout, stderr = proc.communicate(timeout=60)
    assert_one_line_error(subprocess.CompletedProcess([], proc.returncode, stdout, stderr),
                          "nsys was killed (interrupted three times) before it finished; it wrote no report "
                          "files", code=130)
    assert not out.exists()


# ---------------------------------------------------------------- --tracer torch (SYNTHETIC stand-in torch)

TORCH_PROGRAM = textwrap.dedent("""\
    # a program for the stand-in torch: ranges before, inside and after the capture range
    import os, sys, time
    import torch
    nv = torch.cuda.nvtx
    nv.range_push("warmup"); nv.range_pop()
    with torch.profiler.record_function("step"):
        pass
    torch.cuda.profiler.start()
    nv.range_push("decode"); nv.range_push("inner"); nv.range_pop(); nv.range_pop()
    torch.cuda.profiler.stop()
    nv.range_push("decode"); nv.range_pop()
    print("torch program", sys.argv[1:], __name__, sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
    os.chdir("/")  # the trace and the status still go where the plan says
    if os.environ.get("FAKE_READY"):
        open(os.environ["FAKE_READY"], "w").write("ready")
        time.sleep(60)
    if os.environ.get("FAKE_RAISE"):
        raise RuntimeError("the program failed")
    sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
    """)

BEFORE = ["nvtx_push warmup", "rf_enter warmup", "rf_exit warmup", "nvtx_pop", "rf_enter step", "rf_exit step"]
INSIDE = ["nvtx_push decode", "rf_enter decode", "nvtx_push inner", "rf_enter inner", "rf_exit inner",
          "nvtx_pop", "rf_exit decode", "nvtx_pop"]
AFTER = ["nvtx_push decode", "rf_enter decode", "rf_exit decode", "nvtx_pop"]
START = ["experimental_config enable_cuda_sync_events=True",
         "profile CPU,CUDA record_shapes=False experimental_config=True", "profiler_start"]


@pytest.fixture()
def torch_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    prog = tmp_path / "train.py"
    prog.write_text(TORCH_PROGRAM)
    log = tmp_path / "torch.log"
    monkeypatch.setenv("PYTHONPATH", str(STANDIN_TORCH))
    monkeypatch.setenv("STANDIN_TORCH_LOG", str(log))
    monkeypatch.setenv("STANDIN_TORCH_TRACE", str(KINETO))
    for name in ("FAKE_EXIT", "FAKE_RAISE", "FAKE_READY", "STANDIN_TORCH_EXPORT_FAIL"):
        monkeypatch.delenv(name, raising=False)
    return [PY, str(prog)], (lambda: log.read_text().splitlines())


def _kineto_checks(result) -> None:
    assert result.trace["format"] == "kineto"
    ks, rs = reference.kineto_kernels(KINETO), reference.kineto_ranges(KINETO)
    assert len(result.ranges) == len(rs) == 18
    for row, ref in zip(result.ranges, rs):
        assert (row["name"], row["kernels"], row["gpu_span_ns"], row["gap_ns"]) == \
               (ref["name"], *reference.range_metrics(ref, ks))


def test_torch_tracer_records_the_nvtx_capture_range(torch_program, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    command, events = torch_program
    monkeypatch.setenv("FAKE_EXIT", "4")
    out = tmp_path / "t"
    proc = gapscope("profile", "-q", "--tracer", "torch", "--capture-range", "nvtx:decode", "-o", str(out),
                    "--", *command, "--lr", "1")
    assert proc.returncode == 4, proc.stderr
    # started at the first opening of `decode`, before its record_function; stopped and
    # written at its close; the second `decode` and the cudaProfilerApi calls change nothing
    assert events() == [*BEFORE, "cuda_profiler_start", "nvtx_push decode", *START, *INSIDE[1:6],
                        "rf_exit decode", "profiler_stop", "export t.pt.trace.json.gz", "nvtx_pop",
                        "cuda_profiler_stop", *AFTER]
    assert "torch program ['--lr', '1'] __main__ True" in (out / "output.log").read_text()
    status = json.loads((out / "exit_status.json").read_text())
    assert (status["exit_code"], status["capture"], status["torch"], status["cuda"]) == (
        4, {"range": "nvtx:decode", "state": "done"}, "0.0+standin", True)
    assert sorted(p.name for p in out.iterdir()) == [
        "command.txt", "environment.json", "exit_status.json", "output.log", "profile.json", "report.txt",
        "result.json", "t.pt.trace.json.gz"]
    saved = json.loads((out / "profile.json").read_text())
    assert saved["tracer"] == "torch" and saved["commands"]["export"] is None and saved["program_exit_code"] == 4
    from gapscope.analysis.result import load_result

    _kineto_checks(load_result(out / "result.json"))


def test_torch_tracer_cuda_profiler_api_range(torch_program, tmp_path: Path) -> None:
    command, events = torch_program
    proc = gapscope("profile", "-q", "--tracer", "torch", "--capture-range", "cudaProfilerApi",
                    "-o", str(tmp_path / "t"), "--", *command)
    assert proc.returncode == 0, proc.stderr
    assert events() == [*BEFORE, *START, "cuda_profiler_start", *INSIDE, "cuda_profiler_stop",
                        "profiler_stop", "export t.pt.trace.json.gz", *AFTER]


def test_torch_tracer_whole_program_keeps_the_trace_of_a_failing_program(torch_program, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    command, events = torch_program
    monkeypatch.setenv("FAKE_RAISE", "1")
    monkeypatch.setenv("STANDIN_TORCH_NO_CUDA", "1")
    out = tmp_path / "w"
    proc = gapscope("profile", "-q", "--tracer", "torch", "-o", str(out), "--", *command)
    assert proc.returncode == 1
    # The analysis's warnings, then how the program ended, all on stderr.
    lines = proc.stderr.splitlines()
    assert [line.split(":")[:2] for line in lines[:-1]] == [["gapscope", " warning"]] * len(lines[:-1])
    assert lines[-1] == f"gapscope: the program exited with 1; everything is in {out}"
    assert events()[:3] == ["experimental_config enable_cuda_sync_events=True",
                            "profile CPU record_shapes=False experimental_config=True", "profiler_start"]
    assert events()[3:] == [*BEFORE, "cuda_profiler_start", *INSIDE, "cuda_profiler_stop", *AFTER,
                            "profiler_stop", "export w.pt.trace.json.gz"]
    assert "RuntimeError: the program failed" in (out / "output.log").read_text()
    assert proc.stdout.startswith("gapscope w.pt.trace.json.gz  format: PyTorch profiler trace")


def test_torch_tracer_range_that_never_opened(torch_program, tmp_path: Path) -> None:
    command, _ = torch_program
    out = tmp_path / "n"
    proc = gapscope("profile", "-q", "--tracer", "torch", "--capture-range", "nvtx:prefill", "-o", str(out),
                    "--", *command)
    assert_one_line_error(proc, "nothing was recorded: the capture range nvtx:prefill never opened; the "
                                "program exited with 0; its last line: ")
    assert not out.exists()  # nothing recorded: nothing left behind
    again = gapscope("profile", "-q", "--tracer", "torch", "-o", str(out), "--", *command)
    assert again.returncode == 0, again.stderr  # the retry needs no --force


def test_torch_tracer_export_failure(torch_program, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    command, _ = torch_program
    monkeypatch.setenv("STANDIN_TORCH_EXPORT_FAIL", "1")
    proc = gapscope("profile", "-q", "--tracer", "torch", "-o", str(tmp_path / "x"), "--", *command)
    assert_one_line_error(proc, "torch.profiler could not write its trace (RuntimeError: stand-in export failure)")


def test_torch_tracer_without_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "site" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('no torch in this interpreter')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    (tmp_path / "a.py").write_text("print('never runs')\n")
    proc = gapscope("profile", "-q", "--tracer", "torch", "-o", str(tmp_path / "x"), "--", PY, str(tmp_path / "a.py"))
    assert_one_line_error(proc, f"--tracer torch: {PY} cannot import torch (ImportError: no torch in this "
                                "interpreter); run the program with a Python that has PyTorch")


def test_torch_tracer_ctrl_c_keeps_the_trace(torch_program, tmp_path: Path) -> None:
    command, events = torch_program
    ready, out = tmp_path / "ready", tmp_path / "c"
    proc = _start(["profile", "-q", "--tracer", "torch", "-o", str(out), "--", *command],
                  _env(FAKE_READY=str(ready), PYTHONPATH=f"{STANDIN_TORCH}{os.pathsep}{ROOT}"))
    _wait_for(ready, proc)
    os.kill(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert events()[-2:] == ["profiler_stop", "export c.pt.trace.json.gz"]
    assert stdout.startswith("gapscope c.pt.trace.json.gz")
    assert stderr.endswith(f"gapscope: interrupted (SIGINT): the program exited with 130; what was recorded "
                           f"until then is analyzed above; everything is in {out}\n")
    assert "KeyboardInterrupt" in (out / "output.log").read_text()


# ---------------------------------------------------------------- the launcher and the wrapper alone


def test_launcher_arguments() -> None:
    from gapscope.capture import torch_launcher as tl

    got = tl.parse(["--trace", "t.gz", "--status", "s.json", "--", "-m", "pkg", "-x"])
    assert (got.trace, got.status, got.capture, got.module, got.script, got.args) == (
        Path.cwd() / "t.gz", Path.cwd() / "s.json", None, "pkg", None, ["-x"])
    for bad in (["--trace", "t", "--", "a.py"], ["--trace", "t", "--status", "s", "a.py"],
                ["--trace", "t", "--status", "s", "--"], ["--trace", "t", "--status", "s", "--", "-m"],
                ["--bogus", "1", "--trace", "t", "--status", "s", "--", "a.py"]):
        with pytest.raises(ValueError, match="^usage: torch_launcher.py"):
            tl.parse(bad)
    assert [tl._exit_code(c) for c in (None, 0, 3, 256 + 7, -1)] == [0, 0, 3, 7, 255]


def test_exit_status_wrapper_alone(tmp_path: Path) -> None:
    status = tmp_path / "s.json"
    done = subprocess.run([PY, "-I", str(EXIT_STATUS_SCRIPT), str(status), "--", PY, "-c", "import sys; sys.exit(9)"])
    assert done.returncode == 9 and json.loads(status.read_text())["exit_code"] == 9
    done = subprocess.run([PY, "-I", str(EXIT_STATUS_SCRIPT), str(status), "--", "no-such-program-4711"],
                          capture_output=True, text=True)
    saved = json.loads(status.read_text())
    assert done.returncode == 127 and (saved["exit_code"], saved["error"]) == (
        127, "no-such-program-4711: No such file or directory")
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    done = subprocess.run([PY, "-I", str(EXIT_STATUS_SCRIPT), str(status), "--", PY, "-c", kill])
    assert done.returncode == -signal.SIGTERM  # the wrapper ends as its program did
    assert (json.loads(status.read_text())["exit_code"], json.loads(status.read_text())["signal"]) == (143, 15)
    assert subprocess.run([PY, str(EXIT_STATUS_SCRIPT), "x"], capture_output=True).returncode == 2


def test_torch_tracer_without_torch_is_one_line_and_leaves_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python whose `import torch` fails (a SYNTHETIC torch that raises as a missing one
    does): one line on stderr, no progress bar, no folder left that a retry would trip on."""
    missing = tmp_path / "no_torch" / "torch"
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text('raise ModuleNotFoundError("No module named torch", name="torch")\n')
    monkeypatch.setenv("PYTHONPATH", str(missing.parent))
    prog = tmp_path / "train.py"
    prog.write_text("print('training')\n")
    out = tmp_path / "runs" / "p"
    proc = gapscope("profile", "--tracer", "torch", "-o", str(out), "--", PY, str(prog))  # not -q
    assert proc.returncode == 2
    assert proc.stderr == (f"gapscope: error: --tracer torch: {PY} cannot import torch (ModuleNotFoundError: No "
                           "module named torch); run the program with a Python that has PyTorch\n")
    assert not (tmp_path / "runs").exists()


def test_progress_bars_only_on_a_terminal(capfd: pytest.CaptureFixture[str]) -> None:
    from gapscope.capture.progress import Progress

    with Progress(True, terminal=False) as prog:  # a file, a pipe, a CI log: the program's lines alone
        with prog.task("record (torch.profiler)", None):
            prog.line("step 1")
    assert capfd.readouterr().err == "step 1\n"
    with Progress(True, terminal=True) as prog:
        with prog.task("record (torch.profiler)", None):
            prog.line("step 1")
    err = capfd.readouterr().err
    assert "record (torch.profiler)" in err and "step 1" in err
    with Progress(False, terminal=True) as prog:  # -q
        prog.line("step 1")
    assert capfd.readouterr().err == ""
