"""`gapscope run`: parse options, call gapscope.run.runner.run, render the sweep table."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gapscope.cli import cli
from gapscope.run.workload import CASES, KERNEL_KINDS, PATHS, parse_us_list


@cli.command("run")
@click.option("--kernel-us", default="10", show_default=True, metavar="US[,US...]",
              help="Target kernel time(s) in microseconds; several make a sweep, "
                   "e.g. 2,10,50,200,1000.")
@click.option("--kernels", "-n", default=1000, show_default=True, help="Kernels per path (N).")
@click.option("--streams", "-s", default=4, show_default=True,
              help="Streams of the multistream path (S).")
@click.option("--paths", default=",".join(PATHS), show_default=True,
              help="Paths to run, comma-separated: launch paths and the CUDA Graph cases "
                   f"({', '.join(CASES)}; docs/cases.md).")
@click.option("--repeat", "-r", default=1, show_default=True,
              help="Runs of each path under its range (median and spread in the table).")
@click.option("--device", type=click.IntRange(min=0), default=0, show_default=True, help="CUDA device index.")
@click.option("--kind", type=click.Choice(KERNEL_KINDS), default="spin", show_default=True,
              help="Micro-kernel: compute-bound spin, memory-bound stream, or empty.")
@click.option("--nsys", metavar="PATH", help="The nsys to use (else $GAPSCOPE_NSYS, PATH, "
                                              "the usual install places).")
@click.option("--graph-trace", type=click.Choice(["node", "graph"]), default="node",
              show_default=True, help="nsys --cuda-graph-trace mode.")
@click.option("--steps", default=32, show_default=True,
              help="Cases: requests (graph-pool), steps, updates, kernel/copy pairs.")
@click.option("--layers", default=8, show_default=True,
              help="Cases: kernels or layers per step (graph-pool, graph-update, piecewise, "
                   "multi-gpu).")
@click.option("--pool-sizes", default="vllm", show_default=True, metavar="N[,N...]|vllm[:MAX]",
              help="graph-pool: captured batch sizes; vllm = 1,2,4,8,16,...,512.")
@click.option("--seed", default=0, show_default=True, help="graph-pool: seed of the request sizes.")
@click.option("--output-dir", "-o", default="gapscope-run", show_default=True, metavar="DIR",
              help="Folder for the .nsys-rep, .sqlite, result JSON, command and environment.")
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json", "markdown"]),
              default="table", show_default=True, help="How to print the result.")
@click.option("--report", is_flag=True, help="Also print gapscope analyze's tables for the export.")
@click.option("--dry-run", is_flag=True, help="Print the nsys command and stop (no GPU needed).")
@click.option("--quiet", "-q", is_flag=True, help="No progress display.")
@click.option("--plot", "plot_dir", metavar="DIR",
              help="Also draw the timeline, histogram and crossover into DIR (needs matplotlib: pip install -e '.[plot]').")
def run_command(kernel_us: str, kernels: int, streams: int, paths: str, repeat: int, device: int,
                kind: str, nsys: str | None, graph_trace: str, steps: int, layers: int,
                pool_sizes: str, seed: int, output_dir: str, fmt: str, report: bool,
                dry_run: bool, quiet: bool, plot_dir: str | None) -> None:
    """Record CuPy micro-kernels down eager, multi-stream and graph paths (and the CUDA Graph
    cases of docs/cases.md) under nsys, then report the gap fraction of each path beside its
    untraced time per kernel, and each case's figures.
    """
    from gapscope.run.runner import RunOptions, run
    from gapscope.run.workload.ladder import parse_sizes

    opts = RunOptions(
        out_dir=Path(output_dir), kernel_us=parse_us_list(kernel_us), kernels=kernels,
        streams=streams, paths=[p.strip() for p in paths.split(",") if p.strip()],
        repeat=repeat, device=device, kind=kind, nsys=nsys, graph_trace=graph_trace,
        dry_run=dry_run, steps=steps, layers=layers, pool_sizes=parse_sizes(pool_sizes),
        seed=seed)
    result = run(opts, progress=not quiet and not dry_run)
    _print(result, fmt, report, dry_run)
    if plot_dir and not dry_run:
        from gapscope.plots import write_plots

        for path in write_plots(output_dir, plot_dir):
            click.echo(f"wrote {path}", err=True)


def _print(result, fmt: str, report: bool, dry_run: bool) -> None:
    out = sys.stdout
    if dry_run:
        for w in result.warnings:
            click.echo(f"warning: {w}", err=True)
        click.echo(result.command_line)
        return
    from gapscope.render import render

    if fmt in ("json", "markdown"):
        render(result, fmt, out)
        return
    if report:
        from gapscope.analysis.result import load_result

        render(load_result(result.files["analysis"]), "table", out)
    render(result, "table", out)
