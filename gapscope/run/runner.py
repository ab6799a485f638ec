"""`gapscope run` as a library: calibrate, time untraced, capture under nsys, analyze, tabulate.

Everything lands in one output folder:

    plan.json          the calibration (kernel work per target time, launch floors)
    timing.json        the paths timed without the profiler (CUDA events)
    gapscope_run.nsys-rep, gapscope_run.sqlite   what nsys wrote
    nsys.log           nsys's own output, and the workload's
    command.txt        the exact nsys command line
    environment.json   GPU, driver, CUDA, CuPy, nsys and Python versions
    analysis.json      `gapscope analyze`'s result for the export
    workload.json      what the profiled workload ran: range names, case sizes, traced host timers
    run.json           the RunResult: options, the above, the sweep table rows, and for the
                       CUDA Graph cases (docs/cases.md) their host timers and figures
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gapscope.capture.folder import write_json
from gapscope.capture.progress import Progress
from gapscope.errors import GapscopeError
from gapscope.analysis.sweep import SweepRow, sweep_rows
from gapscope.run.workload import KERNEL_KINDS, PATHS, split_paths
from gapscope.run.workload.ladder import vllm_ladder

RUN_SCHEMA = "gapscope-run/1"
OUTPUT_BASE = "gapscope_run"


@dataclass
class RunOptions:
    """What `gapscope run` was asked to do."""

    out_dir: Path
    kernel_us: list[float] = field(default_factory=lambda: [10.0])
    kernels: int = 1000
    streams: int = 4
    paths: list[str] = field(default_factory=lambda: list(PATHS))
    repeat: int = 1
    device: int = 0
    kind: str = "spin"
    nsys: str | None = None
    graph_trace: str = "node"
    dry_run: bool = False
    steps: int = 32
    layers: int = 8
    pool_sizes: list[int] = field(default_factory=vllm_ladder)
    seed: int = 0

    def validate(self) -> None:
        """Raise GapscopeError for any option a run cannot start with."""
        from gapscope.run.workload.paths import check_paths

        check_paths(self.paths)
        self.case_config().validate()
        if self.cases and self.kind != "spin":
            raise GapscopeError(f"the cases ({', '.join(self.cases)}) run spin kernels: "
                                f"use --kind spin with them, not {self.kind}")
        if not self.kernel_us or any(k <= 0 for k in self.kernel_us):
            raise GapscopeError("--kernel-us wants positive microseconds")
        for name, value in (("--kernels", self.kernels), ("--streams", self.streams),
                            ("--repeat", self.repeat)):
            if value < 1:
                raise GapscopeError(f"{name} must be at least 1, got {value}")
        if self.kind not in KERNEL_KINDS:
            raise GapscopeError(f"--kind must be one of {', '.join(KERNEL_KINDS)}")
        if self.out_dir.exists() and not self.out_dir.is_dir():
            raise GapscopeError(f"{self.out_dir}: exists and is not a folder")

    @property
    def sweep(self) -> bool:
        return len(self.kernel_us) > 1

    @property
    def launch_paths(self) -> list[str]:
        """The eager/multistream/graph paths among --paths."""
        return split_paths(self.paths)[0]

    @property
    def cases(self) -> list[str]:
        """The CUDA Graph cases (docs/cases.md) among --paths."""
        return split_paths(self.paths)[1]

    def case_config(self) -> Any:
        from gapscope.run.workload.cases import CaseConfig

        return CaseConfig(steps=self.steps, layers=self.layers, kernels=self.kernels,
                          pool_sizes=list(self.pool_sizes), seed=self.seed)

    def workload_args(self) -> list[str]:
        """Arguments of `python -m gapscope.run.workload` under nsys (the plan is made beforehand)."""
        d = self.out_dir
        args = ["--plan", str(d / "plan.json"), "--kernels", str(self.kernels),
                "--streams", str(self.streams), "--paths", ",".join(self.paths),
                "--repeat", str(self.repeat), "--device", str(self.device)]
        if self.cases:
            args += ["--steps", str(self.steps), "--layers", str(self.layers),
                     "--pool-sizes", ",".join(map(str, self.pool_sizes)), "--seed", str(self.seed)]
        return args + ["--summary", str(d / "workload.json")]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out_dir"] = str(self.out_dir)
        return d


@dataclass
class RunResult:
    """Everything one `gapscope run` produced; `to_dict()` is what run.json holds."""

    options: RunOptions
    command: list[str]
    environment: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None
    timing: list[dict[str, Any]] = field(default_factory=list)
    rows: list[SweepRow] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    host_timed: dict[str, Any] = field(default_factory=dict)  # cases run without the profiler
    host_timed_traced: dict[str, Any] = field(default_factory=dict)  # the same under nsys
    cases: dict[str, Any] = field(default_factory=dict)  # case figures (gapscope.run.case_figures)

    @property
    def command_line(self) -> str:
        from gapscope.capture.nsys import shell_line

        return shell_line(self.command)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": RUN_SCHEMA,
            "options": self.options.to_dict(),
            "nsys_command": self.command,
            "nsys_command_line": self.command_line,
            "environment": self.environment,
            "calibration": self.calibration,
            "timing": self.timing,
            "rows": [asdict(r) for r in self.rows],
            "host_timed": self.host_timed,
            "host_timed_traced": self.host_timed_traced,
            "cases": self.cases,
            "files": self.files,
            "warnings": self.warnings,
        }


def run(opts: RunOptions, progress: bool = True) -> RunResult:
    """Calibrate, time untraced, capture under nsys, analyze; write the output folder.

    With `opts.dry_run` only the nsys command is built (nsys need not exist; no GPU is used).
    """
    from gapscope.capture import nsys as capture

    opts.validate()
    out = opts.out_dir
    base = out / OUTPUT_BASE
    warnings: list[str] = []
    try:
        nsys = capture.find_nsys(opts.nsys)
    except GapscopeError:
        if not opts.dry_run:
            raise
        nsys = Path("nsys")
        warnings.append("nsys not found; the command shows plain 'nsys'")
    command = capture.build_command(nsys, base, opts.workload_args(), opts.graph_trace)
    result = RunResult(options=opts, command=command, warnings=warnings)
    if opts.dry_run:
        return result

    from gapscope.run.workload.kernels import KernelSet, calibration_warnings, calibrate
    from gapscope.run.workload.paths import Workload
    from gapscope.run.workload.timing import time_paths

    ks = KernelSet(opts.device)  # raises a GapscopeError without CuPy or a GPU
    if "multi-gpu" in opts.cases:
        from gapscope.run.workload.cases import require_two_gpus

        require_two_gpus(ks.cp, opts.device)
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.txt").write_text(result.command_line + "\n")
    result.environment = capture.environment(nsys, opts.device)
    write_json(out / "environment.json", result.environment)

    with Progress(progress) as prog:
        with prog.task("calibrate kernels", 2 + len(opts.kernel_us)) as t:
            calib = calibrate(opts.kernel_us, opts.kind, opts.device, t.step, ks)
        result.calibration = calib.to_dict()
        result.warnings += calibration_warnings(calib)
        write_json(out / "plan.json", result.calibration)

        sweep = opts.sweep
        paths, cases = opts.launch_paths, opts.cases
        if paths:
            workloads = [(p.target_us if sweep else None,
                          Workload(ks, p, opts.kernels, opts.streams)) for p in calib.plans]
            with prog.task("time untraced", len(workloads) * len(paths)) as t:
                timings = time_paths(workloads, paths, max(3, opts.repeat), t.step)
            result.timing = [tm.to_dict() for tm in timings]
            write_json(out / "timing.json", result.timing)
            del workloads
        if cases:
            from gapscope.run.workload.cases import run_cases

            with prog.task("cases untraced", len(calib.plans) * len(cases)) as t:
                result.host_timed = run_cases(ks, calib.plans, cases, opts.case_config(),
                                              opts.repeat, t.step)
            for timed in result.host_timed.values():
                result.warnings += timed.get("warnings", [])

        with prog.task("capture (nsys)", None) as t_cap, \
                prog.task("write .nsys-rep", 100) as t_rep, \
                prog.task("export .sqlite", 100) as t_exp:
            def on_phase(phase: str, pct: int | None) -> None:
                if phase == "report":
                    t_cap.set(1, "done")
                    t_rep.set(pct or 0)
                elif phase == "export":
                    t_rep.set(100)
                    t_exp.set(pct or 0)

            files = capture.run_capture(command, base, out / "nsys.log", capture.workload_env(),
                                        on_phase)

        with prog.task("analyze export", 1):
            from gapscope.analysis.pipeline import run_analysis
            from gapscope.trace.handle import open_trace

            with open_trace(files.sqlite) as trace:
                an = run_analysis(trace.frames(syncs=True, all_calls=True))
                analysis = an.result.to_dict()
                if cases:
                    from gapscope.run.case_figures import case_figures

                    try:
                        result.cases = case_figures(
                            an, trace, cases, [p.target_us if sweep else None for p in calib.plans],
                            result.host_timed)
                    except Exception as exc:  # noqa: BLE001 - keep the run; say what failed
                        result.warnings.append(
                            f"case figures failed ({type(exc).__name__}: {exc}); the trace and "
                            "host timers are kept: rerun gapscope.run.case_figures on the export")
        write_json(out / "analysis.json", analysis)

    summary = out / "workload.json"
    if summary.is_file():
        try:
            result.host_timed_traced = json.loads(summary.read_text()).get("cases", {})
        except ValueError:
            result.warnings.append(f"{summary}: not JSON; the traced host timers are missing")
    result.rows = sweep_rows(analysis["ranges"], result.timing, paths, opts.kernel_us,
                             opts.kernels) if paths else []
    result.warnings += list(analysis.get("warnings", []))
    result.files = {k: str(v) for k, v in {
        "report": files.report, "sqlite": files.sqlite, "nsys_log": files.log,
        "analysis": out / "analysis.json", "plan": out / "plan.json",
        **({"timing": out / "timing.json"} if paths else {}), "command": out / "command.txt",
        "environment": out / "environment.json", "run": out / "run.json",
        **({"workload": summary} if summary.is_file() else {})}.items()}
    write_json(out / "run.json", result.to_dict())
    return result
