"""The seams the architecture promises (docs/architecture.md): one input resolver, a trace
handle that owns its connection, an immutable result, one key-packing module."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from gapscope.analysis import keys
from gapscope.analysis.pipeline import analyze, run_analysis
from gapscope.errors import GapscopeError
from gapscope.inputs import resolve
from gapscope.trace import ClosedTraceError, open_trace
from paths import ROOT, TRACES


def test_resolver_names_what_each_input_is(tmp_path, analyzed):
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(analyzed("case_multi_gpu").to_dict()))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text('{"schema": "gapscope-run/1"}')
    fleet = tmp_path / "f.json"
    fleet.write_text('{"schema": "gapscope.fleet/1", "files": []}')
    got = {p: (resolve(p).kind, resolve(p).format) for p in
           (str(TRACES / "torch_decode.sqlite"), str(saved), str(tmp_path / "run"), str(fleet))}
    assert list(got.values()) == [("trace", "nsys-sqlite"), ("analysis", "gapscope.analysis/3"),
                                  ("run", "gapscope-run folder"), ("fleet", "gapscope.fleet/1")]
    with pytest.raises(GapscopeError, match=r"r\.json: a saved analysis result \(JSON\); compare reads a trace"):
        resolve(saved).require("trace", command="compare")


@pytest.mark.parametrize("make,message", [
    (lambda d: d / "missing.sqlite", "missing.sqlite: no such file"),
    (lambda d: d, "is a directory, not an nsys export folder or a `gapscope run` output folder"),
])
def test_resolver_errors_start_with_the_path(tmp_path, make, message):
    with pytest.raises(GapscopeError) as info:
        resolve(make(tmp_path))
    assert info.value.message.startswith(str(make(tmp_path))) and message in info.value.message


def test_refusing_a_missing_file_imports_no_pandas(tmp_path):
    code = ("import sys; from gapscope.cli import main\n"
            "try:\n    main(['analyze', sys.argv[1]])\nexcept SystemExit as e:\n"
            "    print(e.code, 'pandas' in sys.modules, 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "none.sqlite")], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.stdout.split() == ["2", "False", "False"], out.stderr


def test_a_closed_trace_fails_loudly():
    with open_trace(TRACES / "case_multi_gpu.sqlite") as trace:
        frames = trace.frames(all_calls=True)
        kernel_id = int(frames.activities["name_id"].to_numpy()[0])
        assert frames.names.lookup([kernel_id])[kernel_id] == "init_curand"
        assert not trace.closed
    assert trace.closed and "closed" in repr(trace)
    with pytest.raises(ClosedTraceError, match="the trace is closed"):
        frames.names.lookup([kernel_id])
    with pytest.raises(ClosedTraceError):
        trace.kernel_shapes(frames)


def test_the_result_is_frozen_and_launch_statistics_need_no_attribution(analyzed):
    r = analyzed("torch_decode")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.launch = []  # type: ignore[misc]
    plain = analyze(TRACES / "torch_decode.sqlite", attribution=False)
    assert plain.launch == r.launch and plain.launch[0]["api"] == "cudaLaunchKernel"
    assert plain.payoff is None and plain.top_gaps is None and not plain.attributed


def test_pairs_roll_up_to_the_range_rows():
    """The (range, device) pairs computed once are what the range rows sum."""
    with open_trace(TRACES / "case_multi_gpu.sqlite") as trace:
        an = run_analysis(trace.frames())
    pairs = an.pairs
    for col in ("kernels", "gpu_span_ns", "busy_ns", "gap_ns", "gap_count"):
        per_range = np.bincount(pairs.range_of, weights=pairs.stats[col].to_numpy(), minlength=len(an.result.ranges))
        assert per_range.astype(np.int64).tolist() == [r[col] for r in an.result.ranges], col
    cats = pairs.categories.sum(axis=1)
    assert np.bincount(pairs.range_of, weights=cats).astype(np.int64).tolist() == [r["gap_ns"] for r in an.result.ranges]


def test_key_packing_round_trips_and_refuses_what_would_collide():
    pid = np.array([0, 5, (1 << 24) - 1])
    dev = np.array([0, 1, 255])
    stream = np.array([7, 0, (1 << 32) - 1])
    packed = keys.stream_key(pid, dev, stream)
    assert [a.tolist() for a in keys.unpack_stream_key(packed)] == [pid.tolist(), dev.tolist(), stream.tolist()]
    assert keys.stream_key_without_device(packed).tolist() == keys.pid_stream_key(pid, stream).tolist()
    with pytest.raises(GapscopeError, match="more than 256 GPUs"):
        keys.stream_key(np.array([0]), np.array([256]), np.array([0]))
    tk = keys.TimeKeys([np.array([10, 20]), np.array([15])], 3)
    k = tk.key(np.array([0, 1, 2]), np.array([10, 20, 15]))
    assert tk.width == 12 and k.tolist() == [0, 22, 29]  # 0*12 + 10-10, 1*12 + 20-10, 2*12 + 15-10
    with pytest.raises(GapscopeError, match="too wide a range"):
        keys.TimeKeys([np.array([0, 2**61])], 4)
