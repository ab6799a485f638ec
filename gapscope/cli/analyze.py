"""`gapscope analyze`: parse options, analyze, render."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO

import click

from gapscope.cli import cli
from gapscope.errors import GapscopeError


@contextmanager
def output_file(path: str | None) -> Iterator[TextIO]:
    """stdout, or the named file (written whole, parent folder must exist)."""
    if path in (None, "-"):
        yield sys.stdout
        return
    p = Path(path)
    if not p.parent.exists():
        raise GapscopeError(f"{p.parent}: no such folder for the output file")
    try:
        fh = p.open("w", encoding="utf-8", newline="")
    except OSError as exc:
        raise GapscopeError(f"{p}: cannot write ({exc.strerror})") from None
    with fh:
        yield fh


def load_or_analyze(path: str, ranges: tuple[str, ...] = (), count_memops: bool = False,
                    attribution: bool = True, top: int = 10):
    """An AnalysisResult from a trace (.sqlite) or a saved result (.json)."""
    from gapscope.analysis import analyze
    from gapscope.result import load_result

    if path.endswith(".json"):
        if ranges:
            raise GapscopeError("--range applies to traces, not to a saved result JSON")
        return load_result(path)
    return analyze(path, ranges=ranges, count_memops=count_memops, attribution=attribution, top=top)


@cli.command("analyze")
@click.argument("trace", type=click.Path(dir_okay=True, path_type=str))
@click.option("--range", "-r", "ranges", multiple=True, metavar="NAME",
              help="Only NVTX ranges with this name (exact or glob, e.g. 'decode*'); repeatable.")
@click.option("--format", "-f", "fmt", type=click.Choice(["table", "json", "csv"]), default="table",
              show_default=True, help="Output format.")
@click.option("--output", "-o", "output", metavar="FILE", help="Write the report to FILE instead of stdout.")
@click.option("--count-memops", is_flag=True, help="Count memcpy/memset time as busy GPU time.")
@click.option("--limit", default=20, show_default=True, metavar="N",
              help="Range instances shown in the table (0: none).")
@click.option("--top", default=10, show_default=True, metavar="N", help="Longest gaps listed.")
@click.option("--attribution/--no-attribution", default=True, show_default=True,
              help="Classify every gap (launch, sync, dependency, memop, pipeline).")
def analyze_command(trace: str, ranges: tuple[str, ...], fmt: str, output: str | None,
                    count_memops: bool, limit: int, top: int, attribution: bool) -> None:
    """Share of GPU time lost to gaps between kernels, per NVTX range, device and stream.

    TRACE is an nsys SQLite export (`nsys export --type sqlite`, or `nsys profile
    --export sqlite`) or a result JSON saved by `gapscope analyze --format json`.
    """
    result = load_or_analyze(trace, ranges, count_memops, attribution, top)
    with output_file(output) as fh:
        if fmt == "json":
            from gapscope.render.json import render_json

            render_json(result, fh)
        elif fmt == "csv":
            from gapscope.render.csv import render_csv

            render_csv(result, fh)
        else:
            from gapscope.render.table import render_table

            render_table(result, fh, limit=limit)
