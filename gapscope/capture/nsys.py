"""Capture: find Nsight Systems, build the `nsys profile` command, run it, keep what it wrote;
export a report (`nsys export`) into the format gapscope reads fastest.

Discovery order for nsys: `--nsys PATH`, the environment variable GAPSCOPE_NSYS, PATH, then the
usual install places: /opt/nvidia/nsight-systems/*/bin (newest first), /usr/local/cuda/bin, and
the copy inside Nsight Compute (/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys).
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from gapscope.errors import GapscopeError

NSYS_ENV = "GAPSCOPE_NSYS"
INSTALL_GLOBS: tuple[str, ...] = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/usr/local/cuda/bin/nsys",
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)
GRAPH_TRACE_MODES: tuple[str, ...] = ("node", "graph")


def _version_key(path: str) -> list[tuple[int, object]]:
    """Natural sort key: '2025.3.1' sorts after '2024.10.2' (numbers compared as numbers)."""
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", path)]


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_nsys(explicit: str | os.PathLike[str] | None = None,
              environ: Mapping[str, str] | None = None,
              install_globs: Sequence[str] = INSTALL_GLOBS,
              advice: str = "install Nsight Systems or pass --nsys PATH") -> Path:
    """Path of the nsys to use; raise GapscopeError naming every place that was searched, and
    ``advice`` (what to do about it)."""
    env = os.environ if environ is None else environ
    for origin, value in (("--nsys", explicit), (NSYS_ENV, env.get(NSYS_ENV))):
        if value:
            p = Path(value)
            if p.is_dir():
                p = p / "nsys"
            if not _executable(p):
                raise GapscopeError(f"{origin} {value}: no executable nsys there")
            return p
    on_path = shutil.which("nsys", path=env.get("PATH", ""))
    if on_path:
        return Path(on_path)
    for pattern in install_globs:
        for hit in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            if _executable(Path(hit)):
                return Path(hit)
    raise GapscopeError(
        "nsys (Nsight Systems) not found: searched --nsys, $" + NSYS_ENV + ", PATH and "
        + ", ".join(install_globs) + "; " + advice)


def nsys_version(nsys: Path) -> str | None:
    """'2025.3.1.0' from `nsys --version`, or None if it cannot be read."""
    try:
        out = subprocess.run([str(nsys), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", out.stdout + out.stderr)
    return m.group(1) if m else None


#: `nsys export --type` values gapscope reads, fastest to read first: an Arrow folder is memory-
#: mapped, a Parquet folder decodes only the columns read, SQLite decodes row by row.
EXPORT_TYPES: tuple[str, ...] = ("arrowdir", "parquetdir", "sqlite")


def export_types(nsys: Path, timeout: float = 60) -> tuple[str, ...]:
    """The EXPORT_TYPES this nsys offers, in EXPORT_TYPES order, from `nsys export --help`
    (arrowdir and parquetdir came with nsys 2024; sqlite is always offered)."""
    try:
        out = subprocess.run([str(nsys), "export", "--help"], capture_output=True, text=True,
                             timeout=timeout)
        text = out.stdout + out.stderr
    except (OSError, subprocess.SubprocessError):
        text = ""
    return tuple(t for t in EXPORT_TYPES if t == "sqlite" or re.search(rf"\b{t}\b", text))


def export_report(report: str | os.PathLike[str], output: str | os.PathLike[str],
                  export_type: str | None = None, *, nsys: str | os.PathLike[str] | None = None,
                  timeout: float | None = None) -> Path:
    """Export an Nsight Systems report with `nsys export --type EXPORT_TYPE` and return what it
    wrote (``output``: a folder for arrowdir and parquetdir, a file for sqlite).

    ``report`` is only read. ``output`` must not exist yet (nothing is overwritten); its parent
    folder must. ``export_type`` defaults to the fastest to read that this nsys offers
    (:func:`export_types`); ``nsys`` to :func:`find_nsys`'s choice. GapscopeError when nsys
    fails, times out (``timeout`` seconds) or writes nothing, with its last line of output."""
    report, output = Path(report), Path(output)
    exe = Path(nsys) if nsys is not None else find_nsys()
    export_type = export_type or export_types(exe)[0]
    if export_type not in EXPORT_TYPES:
        raise GapscopeError(f"nsys export type {export_type!r} is not one gapscope reads "
                            f"({', '.join(EXPORT_TYPES)})")
    if output.exists():
        raise GapscopeError(f"{output}: already exists; export_report never overwrites")
    command = export_command(exe, export_type, output, report)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GapscopeError(f"{report}: `{shell_line(command)}` ran past {timeout} s") from None
    except OSError as exc:
        raise GapscopeError(f"cannot start nsys ({exe}): {exc.strerror or exc}") from None
    if done.returncode != 0 or not output.exists():
        lines = [ln.strip() for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
        last = f": {lines[-1][:200]}" if lines else ""
        what = f"exited with {done.returncode}" if done.returncode else "wrote nothing"
        raise GapscopeError(f"{report}: `nsys export --type {export_type}` {what}{last}")
    return output


def export_command(nsys: str | os.PathLike[str], export_type: str, output: str | os.PathLike[str],
                   report: str | os.PathLike[str]) -> list[str]:
    """The `nsys export` command that writes ``report``'s export of ``export_type`` to ``output``
    (the form the shipped exports were made with: traces/provenance/wave2_group2.txt)."""
    return [str(nsys), "export", "--type", export_type, "-o", str(output), str(report)]


def trace_options(graph_trace: str = "node") -> list[tuple[str, list[str]]]:
    """What gapscope's analysis needs nsys to record, as (option, its words on the command line):
    CUDA and NVTX (``--trace``), graphs kernel by kernel (``--cuda-graph-trace``), and no CPU
    sampling or context-switch tracing (``--sample``, ``--cpuctxsw``), whose overhead would
    lengthen the launch gaps being measured."""
    if graph_trace not in GRAPH_TRACE_MODES:
        raise GapscopeError(f"--graph-trace must be node or graph, got {graph_trace!r}")
    return [("--trace", ["-t", "cuda,nvtx"]), ("--cuda-graph-trace", [f"--cuda-graph-trace={graph_trace}"]),
            ("--sample", ["--sample=none"]), ("--cpuctxsw", ["--cpuctxsw=none"])]


def build_command(nsys: str | os.PathLike[str], output_base: str | os.PathLike[str],
                  workload_args: Sequence[str], graph_trace: str = "node",
                  python: str | None = None) -> list[str]:
    """The nsys profile command that records `python -m gapscope.run.workload ARGS` to output_base.

    nsys writes output_base.nsys-rep and, through --export sqlite, output_base.sqlite.
    """
    return [
        str(nsys), "profile", *(w for _, words in trace_options(graph_trace) for w in words),
        "--export", "sqlite", "--force-overwrite", "true",
        "-o", str(output_base), python or sys.executable, "-m", "gapscope.run.workload",
        *map(str, workload_args),
    ]


def shell_line(command: Sequence[str]) -> str:
    """The command as one copy-pasteable shell line."""
    return shlex.join(command)


def workload_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for the profiled child: gapscope importable even when not installed."""
    env = dict(os.environ if base is None else base)
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds the gapscope package
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        env["PYTHONPATH"] = os.pathsep.join([root, *parts])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


@dataclass
class CaptureFiles:
    """What one nsys run wrote: the report, its SQLite export (with ``--export sqlite``) and
    nsys's own output; nsys's exit status, and the signals passed on to it (Ctrl-C)."""

    report: Path
    sqlite: Path
    log: Path
    returncode: int = 0
    forwarded: tuple[int, ...] = ()


#: A line of nsys's progress bars: `[1/2] [=====45%    ] run.nsys-rep` (a report and its
#: export) or `[1/1] [...]` (a report alone).
PROGRESS_BAR = re.compile(r"\[([12])/([12])\].*?(\d+)%")


def nsys_phase(line: str) -> tuple[str, int | None] | None:
    """Read one line of nsys output: ('capture', None) when the program starts ("Collecting
    data..."), ('report', pct) while nsys writes .nsys-rep, ('export', pct) while it writes the
    SQLite export of ``--export sqlite``; else None."""
    m = PROGRESS_BAR.search(line)
    if m:
        return ("export" if m.group(1) == "2" else "report", int(m.group(3)))
    if "Collecting data" in line:
        return ("capture", None)
    if "Generating '" in line:
        return ("report", 0)
    return None


def run_capture(command: Sequence[str], output_base: Path, log_path: Path,
                env: Mapping[str, str] | None = None,
                on_phase: Callable[[str, int | None], None] | None = None, *,
                require: str = "sqlite", on_output: Callable[[str], None] | None = None,
                hint: str = "") -> CaptureFiles:
    """Run the nsys command (gapscope.capture.session: its own session, Ctrl-C passed on),
    streaming its output into log_path; check what it wrote.

    ``require``: ``sqlite`` (`gapscope run`, which exports with ``--export sqlite``): nsys must
    exit 0 and write the export; ``report``: only the .nsys-rep must be there, whatever nsys's
    exit status (`gapscope profile`: a program that fails or is stopped still leaves a report).
    Lines of output that are not nsys's progress bars go to ``on_output``. On failure nothing is
    deleted: the GapscopeError says which files nsys left and where (``hint`` ends it).
    """
    from gapscope.capture.session import run_session

    output_base = Path(output_base)
    files = CaptureFiles(Path(f"{output_base}.nsys-rep"), Path(f"{output_base}.sqlite"), log_path)

    def on_line(line: str) -> None:
        phase = nsys_phase(line)
        if phase and on_phase:
            on_phase(*phase)
        if on_output and not PROGRESS_BAR.search(line):
            on_output(line)

    ended = run_session(command, log_path, env, on_line)
    files.returncode, files.forwarded = ended.returncode, ended.forwarded
    wanted = files.sqlite if require == "sqlite" else files.report
    failed = ended.killed or (ended.returncode != 0 and require == "sqlite")
    if failed or not wanted.is_file() or wanted.stat().st_size == 0:
        raise GapscopeError(_failure_message(ended.returncode, files, wanted, ended.killed) + hint,
                            130 if ended.killed else 2)
    return files


def _failure_message(rc: int, files: CaptureFiles, wanted: Path, killed: bool = False) -> str:
    folder = wanted.parent
    stem = files.report.name[: -len(".nsys-rep")]
    left = sorted(p.name for p in folder.glob(glob.escape(stem) + "*")) if folder.is_dir() else []
    tail = ""
    try:
        lines = [ln for ln in re.split(r"[\r\n]", files.log.read_text(errors="replace")) if ln.strip()]
        tail = f"; its last line: {lines[-1].strip()[:200]}" if lines else ""
    except OSError:
        pass
    if killed:
        what = "nsys was killed (interrupted three times) before it finished"
    elif rc != 0:
        what = f"nsys exited with {rc}"
    else:
        what = "nsys wrote no SQLite export" if wanted == files.sqlite else "nsys wrote no report (.nsys-rep)"
    if not left:  # nothing kept (gapscope profile removes what it wrote)
        return f"{what}; it wrote no report files{tail}"
    return f"{what}; kept what it wrote in {folder} ({', '.join(left)}); its output is in {files.log}{tail}"


def environment(nsys: Path | None, device: int = 0, with_cupy: bool = True) -> dict[str, str | int | None]:
    """GPU, driver, nsys and Python versions and, ``with_cupy`` (`gapscope run`'s workload), CUDA
    and CuPy's; each None where it cannot be read."""
    env: dict[str, str | int | None] = {
        "python": platform.python_version(), "platform": platform.platform(),
        "gpu": None, "driver": None, "cuda_driver_api": None, "cuda_runtime": None,
        "cupy": None, "nsys": nsys_version(nsys) if nsys else None,
        "nsys_path": str(nsys) if nsys else None,
    }
    if not with_cupy:
        for key in ("cuda_driver_api", "cuda_runtime", "cupy"):
            del env[key]
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={device}", "--query-gpu=name,driver_version",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            name, _, driver = out.stdout.strip().splitlines()[0].rpartition(",")
            env["gpu"], env["driver"] = name.strip(), driver.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    if not with_cupy:
        return env
    try:
        import cupy

        env["cupy"] = cupy.__version__
        env["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        env["cuda_driver_api"] = cupy.cuda.runtime.driverGetVersion()
        if env["gpu"] is None:
            name = cupy.cuda.runtime.getDeviceProperties(device)["name"]
            env["gpu"] = name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # no CuPy or no GPU: leave the fields empty
        pass
    return env
