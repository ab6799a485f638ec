"""`gapscope profile` as a library: record the user's own program the way the analysis needs it
(under nsys, or under torch.profiler where there is no nsys), export the report, analyze it and
keep everything in one output folder.

    DIR/                             (-o DIR; %q{VAR}, %h, %p and %% expanded as nsys does)
      NAME.nsys-rep                  nsys's report (NAME is the folder's own name)
      NAME.sqlite, NAME_arrow/ or NAME_parquet/
                                     its export: the fastest to read that this nsys offers
      NAME.pt.trace.json.gz          with --tracer torch, instead of both: the profiler's trace
      output.log                     everything nsys and the program printed
      exit_status.json               how the program ended (gapscope.capture.exit_status)
      command.txt                    the exact command lines: the program, its recording, the export
      environment.json               GPU, driver, nsys and Python versions
      result.json                    the analysis, as `gapscope analyze -f json` writes it
      report.txt                     the report, as `gapscope analyze` prints it (every column)
      profile.json                   the ProfileResult (docs/schema.md)

Data flows one way: :func:`build_plan` (pure) turns ProfileOptions into the commands to run,
:func:`profile` runs them, hands the trace to the library call `gapscope analyze` makes and the
result to the renderers, and writes the folder. `gapscope analyze DIR` reads the trace again
(the folder is a folder of one trace).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from gapscope.errors import GapscopeError
from gapscope.text import printable

PROFILE_SCHEMA = "gapscope-profile/1"
TRACERS = ("nsys", "torch")
DEFAULT_OUT = "gapscope-profile"
#: The export's name in DIR for each `nsys export --type` (NAME: the folder's name).
EXPORT_NAMES = {"sqlite": "{}.sqlite", "parquetdir": "{}_parquet", "arrowdir": "{}_arrow"}
#: Run by path with the program's interpreter (stdlib only, so it needs no gapscope there).
EXIT_STATUS_SCRIPT = Path(__file__).with_name("exit_status.py")
TORCH_LAUNCHER = Path(__file__).with_name("torch_launcher.py")
#: What the fixed files of DIR are called.
FIXED_FILES = {"log": "output.log", "status": "exit_status.json", "commands": "command.txt",
               "environment": "environment.json", "result": "result.json", "report_text": "report.txt",
               "profile": "profile.json"}

#: nsys profile's short options that gapscope looks at, by their long names.
NSYS_SHORT = {"-t": "--trace", "-s": "--sample", "-o": "--output", "-c": "--capture-range",
              "-p": "--nvtx-capture", "-y": "--delay", "-d": "--duration", "-f": "--force-overwrite"}
#: nsys options that gapscope profile sets through options of its own, and which.
NSYS_OWNED = {"--output": "-o DIR", "--capture-range": "--capture-range",
              "--nvtx-capture": "--capture-range nvtx:NAME", "--delay": "--delay",
              "--duration": "--duration", "--export": "--export-type",
              "--force-overwrite": "--force"}
#: Set when the capture range is an NVTX range: nsys then matches unregistered strings too
#: (torch.cuda.nvtx and the nvtx package push plain strings; by default nsys matches only
#: registered ones and would never start).
NVTX_ANY_STRING = ("NSYS_NVTX_PROFILER_REGISTER_ONLY", "0")
NSYS_HINT = ("install Nsight Systems (https://developer.nvidia.com/nsight-systems, or the "
             "nsight-systems package of NVIDIA's CUDA repository) or pass --nsys PATH; a PyTorch "
             "program can be recorded without it: --tracer torch")
_PYTHON = re.compile(r"python[0-9.]*$")
#: Python's options that take a value (``-X dev``, ``-W error``).
_PYTHON_VALUED = ("-X", "-W")


@dataclass(frozen=True)
class CaptureRange:
    """What to record of the program: from the first opening of NVTX (or record_function)
    range ``name`` to its close (``nvtx``), or between cudaProfilerStart and cudaProfilerStop
    (``cudaProfilerApi``)."""

    kind: str
    name: str | None = None

    @classmethod
    def parse(cls, text: str) -> "CaptureRange":
        """``nvtx:NAME`` (``NAME@DOMAIN`` for a range of another domain than the default) or
        ``cudaProfilerApi``; GapscopeError in one line otherwise."""
        kind, sep, name = text.partition(":")
        if kind.lower() == "cudaprofilerapi" and not sep:
            return cls("cudaProfilerApi")
        if kind == "nvtx":
            if not name.strip():
                raise GapscopeError(f"--capture-range {text}: give the range's name: nvtx:NAME")
            return cls("nvtx", name)
        raise GapscopeError(f"--capture-range {text!r}: give nvtx:NAME (an NVTX or record_function "
                            "range's name; NAME@DOMAIN for nsys and a domain other than the "
                            "default) or cudaProfilerApi")

    @property
    def spec(self) -> str:
        """The range as --capture-range takes it."""
        return f"nvtx:{self.name}" if self.kind == "nvtx" else self.kind

    def nsys_words(self) -> list[str]:
        """nsys profile's options for this range. The program runs on after the range closes
        (``--capture-range-end=stop``: nsys's default, stop-shutdown, would end it there and lose
        its exit status)."""
        words = ["--capture-range=nvtx", f"--nvtx-capture={self.name}"] if self.kind == "nvtx" \
            else ["--capture-range=cudaProfilerApi"]
        return words + ["--capture-range-end=stop"]


@dataclass
class ProfileOptions:
    """What `gapscope profile` was asked to do. ``out_dir`` may hold %q{VAR}, %h, %p and %%
    (expanded by :func:`output_folder`); ``nsys_args`` are --nsys-arg's values, each split as a
    shell would split it."""

    command: list[str]
    out_dir: str = DEFAULT_OUT
    tracer: str = "nsys"
    capture_range: str | None = None
    delay: int | None = None
    duration: int | None = None
    nsys_args: list[str] = field(default_factory=list)
    nsys: str | None = None
    export_type: str | None = None
    force: bool = False
    dry_run: bool = False

    def nsys_words(self) -> list[str]:
        """--nsys-arg's values as nsys's words."""
        words: list[str] = []
        for arg in self.nsys_args:
            try:
                words += shlex.split(arg)
            except ValueError as exc:
                raise GapscopeError(f"--nsys-arg {arg!r}: {exc}") from None
        return words

    def validate(self) -> CaptureRange | None:
        """The capture range; GapscopeError for any option a recording cannot start with."""
        from gapscope.capture.nsys import EXPORT_TYPES

        if not self.command:
            raise GapscopeError("no program to profile: gapscope profile [OPTIONS] -- CMD [ARGS...]")
        if self.tracer not in TRACERS:
            raise GapscopeError(f"--tracer must be one of {', '.join(TRACERS)}, got {self.tracer!r}")
        if self.export_type is not None and self.export_type not in EXPORT_TYPES:
            raise GapscopeError(f"--export-type must be one of {', '.join(EXPORT_TYPES)}")
        for name, value, least in (("--delay", self.delay, 0), ("--duration", self.duration, 1)):
            if value is not None and value < least:
                raise GapscopeError(f"{name} must be at least {least} seconds, got {value}")
        capture = CaptureRange.parse(self.capture_range) if self.capture_range is not None else None
        if self.tracer == "torch":
            given = [n for n, v in (("--delay", self.delay), ("--duration", self.duration),
                                    ("--nsys-arg", self.nsys_args), ("--export-type", self.export_type),
                                    ("--nsys", self.nsys)) if v]
            if given:
                raise GapscopeError(f"{given[0]} is for nsys; --tracer torch runs no nsys (its "
                                    "profiler runs around the program or a --capture-range)")
            if capture is not None and capture.kind == "nvtx" and "@" in str(capture.name):
                raise GapscopeError(f"--capture-range {capture.spec}: under --tracer torch a range is "
                                    "matched by its name alone (no NVTX domain): drop @DOMAIN")
            python_program(self.command)
        for word in self.nsys_words():
            name = nsys_option(word)
            if name in NSYS_OWNED:
                raise GapscopeError(f"--nsys-arg {word}: gapscope profile sets {name} itself; "
                                    f"use its {NSYS_OWNED[name]}")
        return capture

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def nsys_option(word: str) -> str | None:
    """The long name of the nsys option a word of its command line sets (``-t`` gives
    ``--trace``, ``--sample=none`` gives ``--sample``), or None for a value."""
    if word.startswith("--"):
        return word.split("=", 1)[0]
    if re.match(r"-[A-Za-z]", word):
        return NSYS_SHORT.get(word[:2], word[:2])
    return None


def output_folder(template: str, environ: Mapping[str, str], hostname: str, pid: int) -> Path:
    """-o's folder with nsys's substitutions: %q{VAR} the variable's value (``rank%q{RANK}``
    under torchrun gives rank0, rank1, ...), %h the host name, %p the process id, %% a %."""

    def sub(m: re.Match[str]) -> str:
        token = m.group(0)
        if token == "%%":
            return "%"
        if token == "%h":
            return hostname
        if token == "%p":
            return str(pid)
        if token.startswith("%q{"):
            var = token[3:-1]
            if var not in environ:
                raise GapscopeError(f"-o {template}: {var} is not set in the environment")
            return environ[var]
        raise GapscopeError(f"-o {template}: unknown {token!r} (gapscope expands %q{{VAR}}, %h, %p "
                            "and %%, as nsys does)")

    return Path(re.sub(r"%q\{[^}]*\}|%.?", sub, template))


def python_program(command: Sequence[str]) -> tuple[str, list[str], list[str]]:
    """(interpreter, its options, the program: ``[SCRIPT, ARGS...]`` or ``["-m", MODULE,
    ARGS...]``) of a Python command line, for the PyTorch launcher. A ``.py`` script given alone
    runs under the interpreter gapscope runs under. GapscopeError for anything else."""
    how = ("--tracer torch runs a Python program: give `python SCRIPT.py ARGS`, "
           "`python -m MODULE ARGS` or `SCRIPT.py ARGS`")
    first = command[0]
    if first.endswith(".py"):
        return sys.executable, [], list(command)
    if not _PYTHON.match(Path(first).name):
        raise GapscopeError(f"{how} (got {shlex.join(command[:3])}...)")
    options: list[str] = []
    i = 1
    while i < len(command):
        word = command[i]
        if word == "-m":
            if i + 1 == len(command):
                raise GapscopeError(f"{how} (no script in {shlex.join(command)})")
            return first, options, list(command[i:])
        if word == "-c":
            raise GapscopeError(f"{how}; python -c cannot run under the launcher: put the code in a file")
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        options += command[i:i + 2] if word in _PYTHON_VALUED else [word]
        i += 2 if word in _PYTHON_VALUED else 1
    if i >= len(command) or command[i] == "-":
        raise GapscopeError(f"{how} (no script in {shlex.join(command)})")
    return first, options, list(command[i:])


@dataclass(frozen=True)
class ProfilePlan:
    """The commands one `gapscope profile` runs, and where their files go: ``record`` is started
    with the caller's environment plus ``env``; ``export`` (nsys) turns ``report`` into ``trace``,
    the file analyzed."""

    out_dir: Path
    name: str
    tracer: str
    program: list[str]
    record: list[str]
    env: dict[str, str]
    trace: Path
    status: Path
    log: Path
    report: Path | None = None
    export: list[str] | None = None
    export_type: str | None = None
    capture: CaptureRange | None = None

    def file(self, key: str) -> Path:
        """One of DIR's fixed files (FIXED_FILES)."""
        return self.out_dir / FIXED_FILES[key]

    def writes(self) -> list[Path]:
        """Every path this profile writes in DIR."""
        return [p for p in (self.report, self.trace) if p is not None] + \
            [self.file(k) for k in FIXED_FILES]

    def command_lines(self) -> list[str]:
        """The recording (its environment as a prefix) and the export, as shell lines."""
        from gapscope.capture.nsys import shell_line

        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        lines = [f"{prefix} {shell_line(self.record)}".strip()]
        return lines + ([shell_line(self.export)] if self.export else [])

    def command_text(self) -> str:
        """command.txt: the program, then the lines that recorded and exported it."""
        from gapscope.capture.nsys import shell_line

        recorder = "nsys, then its export" if self.tracer == "nsys" else "torch.profiler (gapscope's launcher)"
        return (f"# gapscope profile: the program\n#   {shell_line(self.program)}\n"
                f"# recorded with {recorder}:\n" + "\n".join(self.command_lines()) + "\n")


def build_plan(opts: ProfileOptions, nsys: str | os.PathLike[str] | None, export_type: str | None,
               environ: Mapping[str, str], hostname: str = "", pid: int = 0,
               python: str | None = None) -> ProfilePlan:
    """The commands of a profile (pure: nothing is run or read). ``nsys`` and ``export_type``
    are those found for the nsys tracer; ``environ`` the environment the recording starts
    from (-o's %q{VAR}; variables gapscope would set but the user already has are left alone);
    ``python``: the interpreter of the exit-status wrapper (default: gapscope's)."""
    from gapscope.capture.nsys import trace_options

    capture = opts.validate()
    out = output_folder(opts.out_dir, environ, hostname, pid)
    name = out.resolve().name or "profile"
    status, log = out / FIXED_FILES["status"], out / FIXED_FILES["log"]
    env = {} if "PYTHONUNBUFFERED" in environ else {"PYTHONUNBUFFERED": "1"}
    if opts.tracer == "torch":
        interpreter, py_options, program = python_program(opts.command)
        trace = out / f"{name}.pt.trace.json.gz"
        record = [interpreter, *py_options, str(TORCH_LAUNCHER), "--trace", str(trace),
                  "--status", str(status), *(["--capture-range", capture.spec] if capture else []),
                  "--", *program]
        return ProfilePlan(out, name, "torch", list(opts.command), record, env, trace, status, log,
                           capture=capture)
    user = opts.nsys_words()
    given = {nsys_option(w) for w in user}
    ours = [w for option, words in trace_options() if option not in given for w in words]
    if capture is not None:
        ours += [w for w in capture.nsys_words() if nsys_option(w) not in given]
        if capture.kind == "nvtx" and NVTX_ANY_STRING[0] not in environ:
            env = {NVTX_ANY_STRING[0]: NVTX_ANY_STRING[1], **env}
    ours += [f"--delay={opts.delay}"] if opts.delay is not None else []
    ours += [f"--duration={opts.duration}"] if opts.duration is not None else []
    base = out / name
    report = Path(f"{base}.nsys-rep")
    export_type = export_type or "sqlite"
    trace = out / EXPORT_NAMES[export_type].format(name)
    wrapper = [python or sys.executable, "-I", str(EXIT_STATUS_SCRIPT), str(status), "--"]
    record = [str(nsys or "nsys"), "profile", *ours, *user, "-o", str(base).replace("%", "%%"),
              *wrapper, *opts.command]
    export = [str(nsys or "nsys"), "export", "--type", export_type, "-o", str(trace), str(report)]
    return ProfilePlan(out, name, "nsys", list(opts.command), record, env, trace, status, log,
                       report=report, export=export, export_type=export_type, capture=capture)


@dataclass
class ProfileResult:
    """Everything one `gapscope profile` did; ``to_dict()`` is what profile.json holds.
    ``analysis`` is the AnalysisResult of the recorded trace (result.json)."""

    options: ProfileOptions
    plan: ProfilePlan
    warnings: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    program_exit_code: int | None = None
    program_signal: int | None = None
    recorder_exit_code: int | None = None
    forwarded: tuple[int, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)
    analysis: Any = None
    read_seconds: float | None = None
    files: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def interrupted(self) -> bool:
        """True when a Ctrl-C (or SIGTERM) stopped the program."""
        return bool(self.forwarded)

    @property
    def exit_code(self) -> int:
        """What `gapscope profile` exits with: 128 + the signal after Ctrl-C (130) or SIGTERM,
        the program's exit status when it failed, else 0."""
        if self.forwarded:
            return 128 + self.forwarded[0]
        return self.program_exit_code or 0

    def to_dict(self) -> dict[str, Any]:
        from gapscope import __version__

        plan = self.plan
        return {
            "schema": PROFILE_SCHEMA, "gapscope_version": __version__,
            "options": self.options.to_dict(), "tracer": plan.tracer, "program": plan.program,
            "output_dir": str(plan.out_dir),
            "capture_range": plan.capture.spec if plan.capture else None,
            "commands": {"record": plan.record, "export": plan.export},
            "command_lines": plan.command_lines(), "env": plan.env,
            "environment": self.environment,
            "program_exit_code": self.program_exit_code, "program_signal": self.program_signal,
            "recorder_exit_code": self.recorder_exit_code, "interrupted": self.interrupted,
            "signals": [signal.Signals(s).name for s in self.forwarded],
            "seconds": self.seconds, "trace": str(plan.trace) if plan.trace.exists() else None,
            "export_type": plan.export_type, "files": self.files, "warnings": self.warnings,
            "error": self.error,
        }


def _find_nsys(opts: ProfileOptions, warnings: list[str]) -> Path | None:
    """The nsys to record with, or None (torch tracer); on a dry run a missing nsys is shown
    as plain 'nsys' with a warning."""
    from gapscope.capture.nsys import find_nsys

    if opts.tracer != "nsys":
        return None
    try:
        return find_nsys(opts.nsys, advice=NSYS_HINT)
    except GapscopeError:
        if not opts.dry_run:
            raise
        warnings.append("nsys not found; the commands show plain 'nsys'")
        return None


def _export_type(opts: ProfileOptions, nsys: Path | None, warnings: list[str]) -> str | None:
    """--export-type, else the fastest to read that this nsys offers."""
    from gapscope.capture.nsys import export_types

    if opts.tracer != "nsys" or opts.export_type:
        return opts.export_type
    if nsys is None:
        warnings.append("the export type is the fastest this nsys offers (arrowdir from nsys 2024 "
                        "on); shown as sqlite")
        return "sqlite"
    return export_types(nsys)[0]


def claim_folder(out: Path, writes: Sequence[Path], force: bool) -> list[Path]:
    """Make DIR ready: created when missing; an existing one must be empty, or, with --force,
    the files an earlier profile listed in its profile.json are removed (and nothing else: a
    path this profile would write that is not from an earlier profile is refused). The folders
    it created, deepest first (what a failed profile removes again)."""
    if out.exists() and not out.is_dir():
        raise GapscopeError(f"{out}: exists and is not a folder")
    if not out.exists():
        made = [p for p in (out, *out.parents) if not p.exists()]
        out.mkdir(parents=True)
        return made
    if not any(out.iterdir()):
        return []
    if not force:
        raise GapscopeError(f"{out}: exists and is not empty; choose another -o, or --force to "
                            "replace an earlier gapscope profile's files there (nothing else in it "
                            "is touched)")
    for old in _earlier_files(out):
        shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
    for path in writes:
        if path.exists() or path.is_symlink():
            raise GapscopeError(f"{path}: exists and is not from an earlier gapscope profile; "
                                "gapscope never overwrites it: move it or choose another -o")
    return []


def _leave_nothing(plan: ProfilePlan, made: list[Path]) -> None:
    """After a profile that recorded nothing: the files it wrote (and those nsys began under the
    report's name) removed, and the folders it created, so that a retry starts afresh. Nothing
    else is touched: a folder that holds anything else stays."""
    stem = glob.escape(plan.name)
    for path in {*plan.writes(), *plan.out_dir.glob(stem + ".*")}:
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
        except OSError:
            pass
    for folder in made:
        try:
            folder.rmdir()  # only when empty
        except OSError:
            break


def _earlier_files(out: Path) -> list[Path]:
    """The files an earlier profile in ``out`` wrote, as its profile.json lists them (only
    those directly inside ``out`` that are still there)."""
    from gapscope.inputs import read_json

    listed = out / FIXED_FILES["profile"]
    if not listed.is_file():
        return []
    try:
        data = read_json(listed)
    except GapscopeError:
        return []
    if data.get("schema") != PROFILE_SCHEMA or not isinstance(data.get("files"), dict):
        return []
    here = out.resolve()
    found = []
    for value in data["files"].values():
        p = out / Path(str(value)).name
        if (p.exists() or p.is_symlink()) and p.parent.resolve() == here and p not in found:
            found.append(p)
    return found


def profile(opts: ProfileOptions, progress: bool = True) -> ProfileResult:
    """Record the program, export, analyze; write the output folder. With ``opts.dry_run`` only
    the commands are built (no nsys, GPU or program needed; nothing is written).

    The program's output goes to output.log and, with ``progress``, above the progress display
    on stderr. GapscopeError when nothing can be analyzed: its exit code is the program's when
    the program failed, else 2 (130 when three Ctrl-C killed the recording). When something was
    recorded, profile.json is written whatever failed; when nothing was, the folder is left as
    it was found (:func:`_leave_nothing`)."""
    from gapscope.capture.progress import Progress

    warnings: list[str] = []
    nsys = _find_nsys(opts, warnings)
    export_type = _export_type(opts, nsys, warnings)
    plan = build_plan(opts, nsys, export_type, os.environ, socket.gethostname(), os.getpid())
    result = ProfileResult(opts, plan, warnings)
    if opts.dry_run:
        return result
    if shutil.which(opts.command[0]) is None:
        raise GapscopeError(f"{opts.command[0]}: command not found (the program to profile: "
                            "gapscope profile [OPTIONS] -- CMD [ARGS...])")
    made = claim_folder(plan.out_dir, plan.writes(), opts.force)
    try:
        with Progress(progress) as prog:
            _record(result, nsys, prog)
            if plan.export is not None:
                _export(result, nsys, prog)
            _analyze(result, prog)
    except BaseException as exc:
        if not _recorded(plan):  # nothing to keep: the failure leaves nothing behind
            _leave_nothing(plan, made)
            raise
        if isinstance(exc, GapscopeError):
            result.error = exc.message
        _write_profile(result)
        if isinstance(exc, GapscopeError) and str(plan.out_dir) not in exc.message:  # where it is
            raise GapscopeError(f"{exc.message}; what was recorded is in {plan.out_dir}", exc.exit_code) from None
        raise
    _write_profile(result)
    return result


def _recorded(plan: ProfilePlan) -> bool:
    """Whether the recording left anything to read: the report or the trace, or what nsys began
    under the report's name (a .qdstrm its importer failed on can still be imported)."""
    begun = [p for p in plan.out_dir.glob(glob.escape(plan.name) + ".*") if p != plan.file("log")]
    return any(p is not None and p.exists() and (p.is_dir() or p.stat().st_size > 0)
               for p in (plan.report, plan.trace, *begun))


def _last_line(log: Path) -> str:
    """``; its last line: ...``: the recorded program's last line of output (empty for none)."""
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return f"; its last line: {printable(lines[-1].strip(), 160)}" if lines else ""


def _record(result: ProfileResult, nsys: Path | None, prog: Any) -> None:
    """Run the recording; the program's exit status from its status file."""
    from gapscope.capture import nsys as capture
    from gapscope.capture.exit_status import read_status, status_of
    from gapscope.capture.folder import write_json
    from gapscope.capture.session import run_session

    plan = result.plan
    plan.file("commands").write_text(plan.command_text())
    result.environment = capture.environment(nsys, with_cupy=False)
    write_json(plan.file("environment"), result.environment)
    env = {**os.environ, **plan.env}
    started = time.perf_counter()
    if plan.tracer == "nsys":
        with prog.task("record (nsys)", None) as t_rec, prog.task("write .nsys-rep", 100) as t_rep:
            def on_phase(phase: str, pct: int | None) -> None:
                if phase == "report":
                    t_rec.set(1, "done")
                    t_rep.set(pct or 0)

            hint = ""
            if plan.capture is not None and plan.capture.kind == "nvtx":
                hint = (f" (with --capture-range {plan.capture.spec} nsys records only once a range "
                        "of that exact name opens; NAME@DOMAIN for a domain other than the default)")
            elif plan.capture is not None:
                hint = (f" (with --capture-range {plan.capture.spec} nsys records only between "
                        "cudaProfilerStart and cudaProfilerStop)")
            files = capture.run_capture(plan.record, plan.out_dir / plan.name, plan.log, env, on_phase,
                                        require="report", on_output=prog.line, hint=hint)
        result.recorder_exit_code, result.forwarded = files.returncode, files.forwarded
    else:
        with prog.task("record (torch.profiler)", None):
            ended = run_session(plan.record, plan.log, env, prog.line)
        result.recorder_exit_code, result.forwarded = ended.returncode, ended.forwarded
        if ended.killed:
            raise GapscopeError("stopped: the program was killed (interrupted three times)", 130)
    result.seconds["record"] = round(time.perf_counter() - started, 3)
    status = read_status(plan.status)
    if status is not None:
        result.program_exit_code, result.program_signal = status["exit_code"], status.get("signal")
    elif plan.tracer == "torch":
        result.program_exit_code, result.program_signal = status_of(result.recorder_exit_code)
    else:
        result.warnings.append(f"the program's exit status is unknown (no {plan.status.name}: it "
                               f"was killed, or never started); nsys exited with {result.recorder_exit_code}")
        result.program_exit_code = result.recorder_exit_code or None
    if plan.tracer == "torch":
        _check_torch_status(result, status)
    elif result.recorder_exit_code not in (0, result.program_exit_code):
        result.warnings.append(f"nsys exited with {result.recorder_exit_code}; the report it wrote is analyzed")


def _check_torch_status(result: ProfileResult, status: dict[str, Any] | None) -> None:
    """The launcher's status: a trace to analyze, or one line saying why there is none."""
    plan = result.plan
    code = result.program_exit_code
    ended = f"the program exited with {code}"
    if status is not None and status.get("error"):
        raise GapscopeError(f"--tracer torch: {plan.record[0]} {status['error']}; run the program "
                            "with a Python that has PyTorch")
    if status is not None and status.get("trace_error"):
        raise GapscopeError(f"torch.profiler could not write its trace ({status['trace_error']}); "
                            f"{ended}{_last_line(plan.log)}", code or 2)
    if not plan.trace.is_file():
        state = (status or {}).get("capture", {}).get("state")
        why = (f"the capture range {plan.capture.spec} never opened" if state == "waiting" and plan.capture
               else "the program ended before the profiler wrote its trace")
        raise GapscopeError(f"nothing was recorded: {why}; {ended}{_last_line(plan.log)}", code or 2)


def _export(result: ProfileResult, nsys: Path | None, prog: Any) -> None:
    """nsys export into the fastest format; on failure the report is kept and named."""
    from gapscope.capture.nsys import export_report

    plan = result.plan
    assert plan.report is not None and plan.export_type is not None
    started = time.perf_counter()
    with prog.task(f"export ({plan.export_type})", None):
        try:
            export_report(plan.report, plan.trace, plan.export_type, nsys=nsys)
        except GapscopeError as exc:
            raise GapscopeError(f"{exc.message}; the report is kept: {plan.report} (gapscope analyze "
                                "reads it too)") from None
    result.seconds["export"] = round(time.perf_counter() - started, 3)


def _analyze(result: ProfileResult, prog: Any) -> None:
    """The analysis `gapscope analyze` makes of the trace, saved as its JSON and its table."""
    from gapscope.analysis.pipeline import analysis_of
    from gapscope.render import render

    plan = result.plan
    started = time.perf_counter()
    with prog.task("analyze", 1):
        try:
            analysis = analysis_of(plan.trace, gaps=False)  # only the result is written
        except GapscopeError as exc:
            code = result.program_exit_code
            if code:
                raise GapscopeError(f"the program exited with {code} and left nothing to analyze "
                                    f"({exc.message}); its output is in {plan.log}", code) from None
            raise GapscopeError(f"{exc.message}; everything recorded is in {plan.out_dir}") from None
    result.analysis, result.read_seconds = analysis.result, analysis.read_seconds
    with plan.file("result").open("w", encoding="utf-8") as fh:
        render(analysis.result, "json", fh)
    with plan.file("report_text").open("w", encoding="utf-8") as fh:
        render(analysis.result, "table", fh, read_seconds=analysis.read_seconds)
    result.seconds["analyze"] = round(time.perf_counter() - started, 3)


def _write_profile(result: ProfileResult) -> None:
    """profile.json, listing every file of the folder that this profile wrote."""
    from gapscope.capture.folder import write_json

    plan = result.plan
    named = {"report": plan.report, "trace": plan.trace,
             **{key: plan.file(key) for key in FIXED_FILES}}
    result.files = {k: str(p) for k, p in named.items()
                    if p is not None and (p.exists() or k == "profile")}
    write_json(plan.file("profile"), result.to_dict())
