"""The result JSON of every shipped input, written into a folder, to check that a change leaves
every figure as it was (compare two such folders with tools/json_diff.py).

    python tools/json_snapshot.py OUT [--checkout DIR] [--traces DIR ...]

Runs ``gapscope analyze INPUT -f json --no-cache -o OUT/NAME.json`` in a fresh process for
every input: each ``*.sqlite`` and ``*.pt.trace.json.gz`` in the trace folders (this
checkout's traces/ and ../shared/thirdparty-traces by default), and each parquetdir or
arrowdir export folder there (``*_parquet``, ``*_arrow``). A ``.nsys-rep`` is left out (it is
read through nsys's export, which may be absent). A few option sets run on
traces/torch_decode.sqlite besides (``--threads process``, a range selection,
``--no-attribution``, ``--count-memops``), and every SQLite input once more with
``--gaps-csv`` (``NAME.tables.json`` and ``NAME.gaps.csv``): that analysis keeps every gap list
(the pipeline's other way through the levels) and writes the gaps too. Two many-trace
reports besides: ``cmp_base_*.sqlite`` together (``fleet.json``), and ``--ranks`` on
fsdp-2gpu-h100-nccl.sqlite when the third-party traces are there (``ranks.json``).

``--checkout`` names the gapscope checkout to run (its folder goes first on PYTHONPATH), so
that one base commit and the working tree analyze the same inputs, given by the same paths
(the JSON holds the path as given). A refused input writes ``NAME.error`` with the command's
exit status and its error line instead.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = (ROOT / "traces", ROOT.parent / "shared" / "thirdparty-traces")
#: Option sets run on one trace besides the plain analysis: (suffix of the output's name, flags).
VARIANTS = {
    "torch_decode.sqlite": (
        ("threads-process", ("--threads", "process")),
        ("range-decode", ("--range", "decode*")),
        ("no-attribution", ("--no-attribution",)),
        ("count-memops", ("--count-memops", "--top", "25")),
    ),
}


def inputs(folders: list[Path]) -> list[Path]:
    """Every input of the snapshot, in a fixed order."""
    out: list[Path] = []
    for folder in folders:
        if not folder.is_dir():
            print(f"skipped {folder}: not a folder", file=sys.stderr)
            continue
        for p in sorted(folder.iterdir()):
            if p.is_file() and (p.name.endswith(".sqlite") or p.name.endswith(".pt.trace.json.gz")):
                out.append(p)
            elif p.is_dir() and p.name.endswith(("_parquet", "_arrow")):
                out.append(p)
    return out


def run(checkout: Path, args: list[str], error: Path) -> None:
    """One ``gapscope analyze`` of ``checkout``; its exit status and last stderr line go to
    ``error`` when it fails."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "GAPSCOPE_NO_CACHE": "1", "COLUMNS": "100"}
    # Run in the checkout: ``python -m`` puts the working folder first on sys.path, before
    # PYTHONPATH, so another folder holding a gapscope would be the one imported.
    proc = subprocess.run([sys.executable, "-m", "gapscope", "analyze", *args], env=env, cwd=checkout,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        error.write_text(f"exit {proc.returncode}: {lines[-1] if lines else ''}\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="the folder to write (made; must be empty)")
    ap.add_argument("--checkout", type=Path, default=ROOT, help="the gapscope checkout to run")
    ap.add_argument("--traces", type=Path, nargs="*", default=list(DEFAULT_TRACES))
    args = ap.parse_args()
    args.out = args.out.resolve()
    args.traces = [folder.resolve() for folder in args.traces]
    args.out.mkdir(parents=True, exist_ok=True)
    if any(args.out.iterdir()):
        raise SystemExit(f"{args.out}: not empty")
    started = time.perf_counter()
    jobs: list[tuple[str, list[str]]] = []
    for p in inputs(args.traces):
        jobs.append((p.name, [str(p)]))
        for suffix, flags in VARIANTS.get(p.name, ()):
            jobs.append((f"{p.name}.{suffix}", [str(p), *flags]))
        if p.name.endswith(".sqlite"):
            csv = args.out / f"{p.name}.gaps.csv"
            jobs.append((f"{p.name}.tables", [str(p), "--gaps-csv", str(csv)]))
    found = {p.name: p for p in inputs(args.traces)}
    many = [str(found[n]) for n in ("cmp_base_1.sqlite", "cmp_base_2.sqlite", "cmp_base_3.sqlite") if n in found]
    if len(many) > 1:
        jobs.append(("fleet", [*many, "--jobs", "1"]))
    if "fsdp-2gpu-h100-nccl.sqlite" in found:
        jobs.append(("ranks", ["--ranks", str(found["fsdp-2gpu-h100-nccl.sqlite"])]))
    for name, given in jobs:
        out = args.out / f"{name}.json"
        run(args.checkout.resolve(), [*given, "-f", "json", "--no-cache", "-o", str(out)],
            args.out / f"{name}.error")
        print(f"{name}: {'written' if out.exists() else 'refused'}", file=sys.stderr)
    print(f"{len(jobs)} analyses of {args.checkout} into {args.out} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
