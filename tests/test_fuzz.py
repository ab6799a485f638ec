"""A seeded mutation loop over a small cut of a shipped trace and over its result JSON
(tests/mutations.py): every case must end refused with one line, or with figures equal to
tests/reference.py's recomputation (warned whenever something was damaged); never a traceback,
a hang, a changed input or a new file beside it. The same for mutated PyTorch profiler traces
(no recomputation: refused or analyzed) and mutated parquetdir and arrowdir exports (held to the
recomputation from a SQLite copy of their rows). tools/fuzz_campaign.py runs the same cases by
the thousand."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from clirun import gapscope
from damage import small_trace
from mutations import (
    Outcome, columnar_case, columnar_seed, json_case, kineto_case, kineto_seed, run_cli, tally, trace_case,
)

TRACE_CASES = 240
TRACE_CHUNKS = 6  # seeds 0-39, 40-79, ...: one test each, so that pytest-xdist spreads them over the cores
JSON_CASES = 60
#: PyTorch profiler and column export cases in the suite (the campaign runs thousands). The
#: PyTorch profiler slice leaves out the classes that are that reader's own bounds
#: (mutations.KINETO_READER_CLASSES: nesting depth, values past int64, huge names), which the
#: campaign counts apart until that reader's work is merged.
KINETO_CASES = 24
COLUMNAR_CASES = 24
BOUND_S = 20  # per case; the whole trace loop takes about 8-10 s on a 2-core machine


class _Hang(Exception):
    pass


def _bounded(run, *args) -> Outcome:
    """``run(*args)``, or a ``hang`` outcome after BOUND_S seconds."""
    def alarm(signum, frame):  # noqa: ARG001
        raise _Hang()

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(BOUND_S)
    try:
        return run(*args)
    except _Hang:
        return Outcome("hang", f"over {BOUND_S} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def seed_trace(tmp_path_factory) -> Path:
    return small_trace(tmp_path_factory.mktemp("seed"))


@pytest.mark.parametrize("chunk", range(TRACE_CHUNKS))
def test_mutated_traces(seed_trace, tmp_path, chunk):
    """Seeds ``chunk * 40`` to ``chunk * 40 + 39`` of the TRACE_CASES: all of them together are
    the whole loop, each chunk on its own exercises every outcome."""
    per = TRACE_CASES // TRACE_CHUNKS
    assert per * TRACE_CHUNKS == TRACE_CASES  # the chunks leave no seed out
    seeds = range(chunk * per, (chunk + 1) * per)
    outcomes = [_bounded(trace_case, seed_trace, tmp_path, seed) for seed in seeds]
    failures = [(seed, o.kind, o.detail, o.mutations) for seed, o in zip(seeds, outcomes) if o.failed]
    assert failures == []
    counts = tally(outcomes)
    # Each chunk of the loop must exercise every outcome, or it proves little.
    assert counts.get("refused", 0) and counts.get("warned", 0) and counts.get("correct", 0), counts


def test_mutated_result_jsons(seed_trace, tmp_path):
    base = gapscope("analyze", str(seed_trace), "-f", "json").stdout
    outcomes = [_bounded(json_case, base, tmp_path, seed) for seed in range(JSON_CASES)]
    failures = [(seed, o.kind, o.detail, o.mutations) for seed, o in enumerate(outcomes) if o.failed]
    assert failures == []
    counts = tally(outcomes)
    assert counts.get("refused", 0) and counts.get("correct", 0), counts


def _warnings(path: Path) -> set[str]:
    import json

    code, out, err = run_cli("analyze", str(path), "-f", "json")
    assert code == 0, err
    return set(json.loads(out)["warnings"])


def test_mutated_pytorch_profiler_traces(tmp_path):
    text = kineto_seed()
    seed = tmp_path / "seed.pt.trace.json"
    seed.write_text(text, encoding="utf-8")
    warnings = _warnings(seed)
    outcomes = [_bounded(kineto_case, text, warnings, tmp_path, s, False) for s in range(KINETO_CASES)]
    failures = [(s, o.kind, o.detail, o.mutations) for s, o in enumerate(outcomes) if o.failed]
    assert failures == []
    counts = tally(outcomes)
    assert counts.get("refused", 0) and counts.get("warned", 0) and counts.get("correct", 0), counts


def test_mutated_column_exports(tmp_path):
    seeds = {fmt: columnar_seed(tmp_path / "seeds", fmt) for fmt in ("parquet", "arrow")}
    warnings = {fmt: _warnings(path) for fmt, path in seeds.items()}
    outcomes = [_bounded(columnar_case, seeds, warnings, tmp_path, s) for s in range(COLUMNAR_CASES)]
    failures = [(s, o.kind, o.detail, o.mutations) for s, o in enumerate(outcomes) if o.failed]
    assert failures == []
    counts = tally(outcomes)
    assert counts.get("refused", 0) and counts.get("warned", 0) and counts.get("correct", 0), counts
