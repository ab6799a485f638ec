"""The PyTorch profiler (Kineto) reader on inputs the shipped traces do not hold: bombs and
numbers past int64 (issue 41), other epochs, categories and layouts (issue 39). Every input here
is SYNTHETIC, made by the test in tmp_path; expected values are worked out in the test."""

from __future__ import annotations

import gzip
import json
import os
import re
import time
import zlib
from pathlib import Path

import pytest

from clirun import assert_one_line_error, gapscope
from gapscope.trace import open_trace
from gapscope.trace.kineto_json import MAX_DEPTH, MAX_ITEM, exact_ns


def kernel(ts: str, dur: str, corr: int, stream: int = 7, name: str = "k", cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": corr}}


def call(ts: str, dur: str, corr: int, name: str = "cudaLaunchKernel", cat: str = "cuda_runtime",
         pid: object = 7, tid: object = 8) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": {"correlation": corr}}


def steps(n: int, t0: int = 1_000_000) -> list[dict]:
    """SYNTHETIC: n launches (2 us each, every 10 us from t0 us) and their 1.5 us kernels
    starting 3 us after each launch began."""
    out = []
    for i in range(n):
        t = t0 + 10 * i
        out += [call(f"{t}.000", "2.000", i + 1), kernel(f"{t + 3}.000", "1.500", i + 1)]
    return out


def write(path: Path, events: list[dict], head: dict | None = None, tail: dict | None = None,
          indent: int | None = None) -> Path:
    """A SYNTHETIC trace: ``head`` fields, then traceEvents, then ``tail`` fields; ``ts`` and
    ``dur`` strings written as JSON numbers digit for digit."""
    body = {**(head if head is not None else {"schemaVersion": 1,
                                              "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}),
            "traceEvents": events, **(tail or {})}
    text = re.sub(r'"(ts|dur)": "(-?[0-9.e]+)"', r'"\1": \2', json.dumps(body, indent=indent))
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def analyzed(path: Path, *extra: str) -> dict:
    proc = gapscope("analyze", str(path), "--format", "json", "--no-cache", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def refused(path: Path, *words: str, seconds: float = 20) -> str:
    started = time.monotonic()
    proc = gapscope("analyze", str(path), "--no-cache")
    took = time.monotonic() - started
    assert_one_line_error(proc, words[0], 2)
    for w in words:
        assert w in proc.stderr, proc.stderr
    assert took < seconds, took
    return proc.stderr


# -- exact times ------------------------------------------------------------------------------

def test_exact_ns_reads_kineto_decimals_and_rounds_the_rest_half_to_even():
    texts = [b"5268304414243.273", b"0.768", b"7", b"12.3456", b"0.0005", b"0.0015", b"2.5e-3",
             b"1712195495406752.8", b"1695835542481129", b"9223372036854775.807", b"-0.001"]
    values, bad, _ = exact_ns(texts)
    assert values.tolist() == [5268304414243273, 768, 7000, 12346, 0, 2, 2, 1712195495406752800,
                               1695835542481129000, 2**63 - 1, -1]
    assert not bad.any()
    values, bad, missing = exact_ns([b"1e30", b"9223372036854775.808", b"-9223372036854775808", b'"1"', None])
    assert bad.tolist() == [True] * 5 and values.tolist() == [0] * 5
    assert missing.tolist() == [False] * 4 + [True]


def test_exact_ns_bulk_path_for_kineto_decimals_and_plain_integers():
    """All values as Kineto writes them (read in bulk), all plain integers (legacy traces), and
    one of another form among them (every value then read column-wise): the same exact values."""
    kineto = [b"5268304414243.273", b"0.768", b"0.000", b"1712195495406752.800", b"10.001"]
    want = [5268304414243273, 768, 0, 1712195495406752800, 10001]
    assert exact_ns(kineto)[0].tolist() == want
    assert exact_ns([b"1695835542481129", b"0", b"7"])[0].tolist() == [1695835542481129000, 0, 7000]
    mixed, bad, _ = exact_ns(kineto + [b"7", b"1.5", b"2.25"])
    assert mixed.tolist() == want + [7000, 1500, 2250] and not bad.any()


# -- bounds (issue 41) ---------------------------------------------------------------------------

def test_a_key_nested_30000_deep_is_refused_in_one_line(tmp_path):
    """SYNTHETIC: 60 KB, an unused top-level key nested 30,000 deep after valid events."""
    path = tmp_path / "deep.pt.trace.json"
    text = json.dumps({"schemaVersion": 1, "traceEvents": steps(3)})
    path.write_text(text[:-1] + ', "unused": ' + "[" * 30_000 + "]" * 30_000 + "}")
    assert 60_000 < path.stat().st_size < 62_000
    refused(path, f"nested more than {MAX_DEPTH} levels deep", seconds=10)


def test_an_event_nested_100000_deep_in_a_gzip_is_refused_in_one_line(tmp_path):
    """SYNTHETIC: a .json.gz with one event whose args nest 100,000 objects deep."""
    path = tmp_path / "deep.pt.trace.json.gz"
    deep = '{"a": ' * 100_000 + "1" + "}" * 100_000
    text = json.dumps({"schemaVersion": 1, "traceEvents": steps(3)})
    text = text.replace('"traceEvents": [', '"traceEvents": [{"ph": "X", "cat": "cpu_op", "args": ' + deep + '}, ')
    path.write_bytes(gzip.compress(text.encode(), 9))
    assert path.stat().st_size < 200_000
    refused(path, f"nested more than {MAX_DEPTH} levels deep", seconds=10)


def test_a_4_gib_name_in_a_4_mb_gzip_is_refused_in_seconds(tmp_path):
    """SYNTHETIC: gzip members concatenated (as gzip allows): a header, 64 copies of one member
    holding 64 MiB of 'a', the rest: one kernel name of 4 GiB."""
    member = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = member.compress(b"a" * (64 << 20)) + member.flush()
    path = tmp_path / "name.pt.trace.json.gz"
    with open(path, "wb") as fh:
        fh.write(gzip.compress(b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "'))
        for _ in range(64):
            fh.write(block)
        fh.write(gzip.compress(b'", "ts": 1.0, "dur": 1.0, "args": {"device": 0, "stream": 7}}]}'))
    assert path.stat().st_size < 5 << 20
    refused(path, f"longer than {MAX_ITEM >> 20} MiB", seconds=30)


def test_a_sparse_50_gb_json_is_refused_before_it_is_read(tmp_path):
    """SYNTHETIC: a trace's first bytes, then holes to 50 GB (st_blocks far below st_size)."""
    path = tmp_path / "sparse.pt.trace.json"
    with open(path, "wb") as fh:
        fh.write(b'{"schemaVersion": 1, "traceEvents": [')
        fh.truncate(50 * 10**9)
    st = os.stat(path)
    if st.st_blocks * 512 >= st.st_size // 256:
        pytest.skip("this file system does not keep holes")
    refused(path, "a sparse file", "50.0 GB long", seconds=10)


def test_numbers_past_int64_are_damage_counted_not_an_exception(tmp_path):
    """SYNTHETIC: 20 good launch/kernel pairs, then a kernel at ts 1e30, a kernel of dur
    -2**63 us, a call of pid 2**70 and one of tid 2**70: each row left out and counted."""
    events = steps(20) + [
        kernel("1e30", "1.000", 900), kernel("1000300.000", f"{-2**63}", 901),
        call("1000301.000", "1.000", 902, pid=2**70), call("1000302.000", "1.000", 903, tid=2**70),
    ]
    r = analyzed(write(tmp_path / "int64.pt.trace.json", events))
    warnings = r["warnings"]
    # the 1e30 kernel has neither start nor end in int64, the -2**63 us one no end
    assert ("left out 2 of 22 GPU activity rows as damaged (start not an integer: 1, end not an integer: 2); "
            "every figure covers the other rows") in warnings
    assert ("left out 2 of 22 CUDA API call rows as damaged (tid not an integer: 2); every figure covers the "
            "other rows") in warnings
    assert r["devices"][0]["kernels"] == 20


def test_a_range_of_pid_minus_2_63_is_counted_as_damage(tmp_path):
    """SYNTHETIC: 20 ranges on thread 7/8 and one whose pid is -2**63."""
    events = steps(20) + [{"ph": "X", "cat": "user_annotation", "name": f"r{i}", "pid": 7, "tid": 8,
                           "ts": f"{1_000_000 + 10 * i}.000", "dur": "9.000"} for i in range(20)]
    events.append({"ph": "X", "cat": "user_annotation", "name": "bad", "pid": -2**63, "tid": 8,
                   "ts": "1000000.000", "dur": "300.000"})
    r = analyzed(write(tmp_path / "range.pt.trace.json", events))
    assert any("left out 1 of 21 NVTX rows as damaged (tid out of range: 1)" in w for w in r["warnings"]), r["warnings"]
    assert "bad" not in {x["name"] for x in r["ranges"]}


# -- layouts and epochs (issue 39) ---------------------------------------------------------------

def test_unix_epoch_microseconds_are_rebased_by_whole_seconds_exactly(tmp_path):
    """SYNTHETIC: Kineto before baseTimeNanoseconds: ts in microseconds since 1970 (about
    1.66e15 us, 1.66e18 ns: past 2**53). Rebased by the earliest time rounded down to a million
    seconds, every time keeps its nanoseconds."""
    t0 = 1_661_203_462_584_767  # us, as HTA's control trace's first event
    events = []
    for i in range(5):
        t = t0 + 10 * i
        events += [call(f"{t}.125", "2.000", i + 1), kernel(f"{t + 3}.250", "1.500", i + 1)]
    path = write(tmp_path / "epoch.pt.trace.json", events)
    base = (t0 * 1000) // 10**15 * 10**15  # 1,661,000,000 s
    with open_trace(path) as trace:
        f = trace.frames()
        assert f.activities["start"].tolist() == [(t0 + 10 * i + 3) * 1000 + 250 - base for i in range(5)]
        assert f.api["start"].tolist() == [(t0 + 10 * i) * 1000 + 125 - base for i in range(5)]
        assert any("taken 1,661,000,000 s earlier" in w for w in f.warnings)
    r = analyzed(path)
    assert r["devices"][0]["kernels"] == 5
    assert r["devices"][0]["gpu_span_ns"] == 40 * 1000 + 1500


def test_legacy_2022_categories_are_read(tmp_path):
    """SYNTHETIC: libkineto's 2022 names, Kernel and Runtime (and a Memcpy), read as kernel and
    cuda_runtime."""
    events = []
    for i in range(4):
        t = 1_000_000 + 10 * i
        events += [call(f"{t}.000", "2.000", i + 1, cat="Runtime"),
                   kernel(f"{t + 3}.000", "1.500", i + 1, cat="Kernel")]
    events.append({**kernel("1000100.000", "1.000", 99, cat="Memcpy"), "name": "Memcpy HtoD"})
    r = analyzed(write(tmp_path / "legacy.pt.trace.json", events), "--count-memops")
    assert r["devices"][0]["kernels"] == 4
    assert [(x["api"], x["calls"], x["latency_median_ns"]) for x in r["launch"]] == [("cudaLaunchKernel", 4, 1000.0)]


def test_metadata_after_trace_events_is_read(tmp_path):
    """SYNTHETIC: the TraceLens Hugging Face layout: traceEvents first, then schemaVersion and
    deviceProperties."""
    path = write(tmp_path / "after.pt.trace.json", steps(4), head={},
                 tail={"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X"}],
                       "hip_runtime_version": 60342})
    r = analyzed(path)
    assert r["trace"]["export_schema"] == "1"
    assert r["trace"]["gpus"] == {"0": "AMD Instinct MI300X"}


def test_an_event_holding_braces_between_objects_is_read_through_the_scan(tmp_path):
    """SYNTHETIC: compact JSON whose events hold '}, {' inside nested arrays and strings: the
    guessed piece ends are wrong and the scan finds the true ones; every kernel is read."""
    events = []
    for i, e in enumerate(steps(50)):
        e["args"]["shapes"] = [{"a": 1}, {"b": "}, {"}]
        e["name"] = e["name"] + "}, {" if e["cat"] == "cuda_runtime" else e["name"]
        events.append(e)
    r = analyzed(write(tmp_path / "braces.pt.trace.json", events))
    assert r["devices"][0]["kernels"] == 50


def test_pieces_of_any_size_give_the_same_frames(tmp_path, monkeypatch):
    """SYNTHETIC: the same trace read in 64-byte chunks (every event split across reads) and
    whole: the same frames."""
    import gapscope.trace.kineto_json as kj

    path = write(tmp_path / "chunks.pt.trace.json.gz", steps(30), indent=2)
    with open_trace(path) as trace:
        whole = trace.frames()
    monkeypatch.setattr(kj, "CHUNK", 64)
    monkeypatch.setattr(kj, "WINDOW", 16)
    with open_trace(path) as trace:
        small = trace.frames()
    for name in ("activities", "api", "nvtx"):
        assert getattr(whole, name).equals(getattr(small, name)), name
    assert len(small.activities) == 30


def test_ids_past_32_bits_in_one_piece_and_damage_in_another_are_kept_exact(tmp_path, monkeypatch):
    """SYNTHETIC: 300 launch/kernel pairs read in 4 KiB chunks (many pieces, whose ids are kept
    in 32 bits where they fit); the last 20 pairs' correlation ids are 2**39 + i and their stream
    2**31 + 5 (in the ranges gapscope.trace.validation takes, past 32 bits' signed ids), and a
    first-piece kernel's ``dur`` is text: the joined columns hold every id exactly, each kernel
    still finds its launch, and the damaged row alone is left out."""
    import numpy as np

    import gapscope.trace.kineto_json as kj

    events = steps(300)
    for e in events[-40:]:
        e["args"]["correlation"] += 2**39
        if e["cat"] == "kernel":
            e["args"]["stream"] = e["tid"] = 2**31 + 5
    events[1]["dur"] = "x"  # the first kernel: a string where a number belongs
    path = write(tmp_path / "wide.pt.trace.json.gz", events, indent=2)
    monkeypatch.setattr(kj, "CHUNK", 4096)
    with open_trace(path) as trace:
        f = trace.frames()
        corr = f.activities["corr"].to_numpy()
        assert corr.dtype == np.int64  # a piece held ids past 32 bits: the column is as wide
        expected = [i + 1 for i in range(1, 280)] + [2**39 + i + 1 for i in range(280, 300)]
        assert corr.tolist() == expected
        assert f.activities["stream"].tolist() == [7] * 279 + [2**31 + 5] * 20
        assert sorted(f.api["corr"].tolist()) == [i + 1 for i in range(280)] + [2**39 + i + 1 for i in range(280, 300)]
    r = analyzed(path)
    assert "left out 1 of 300 GPU activity rows as damaged (end not an integer: 1); every figure covers the other rows" \
        in r["warnings"]
    launch = {row["api"]: row for row in r["launch"]}["cudaLaunchKernel"]
    # calls that launched a kept kernel (docs/metrics.md): all but the damaged kernel's, the 20
    # wide ids' included (each linked by its correlation id, as the 279 narrow ones)
    assert launch["calls"] == 299
    assert launch["latency_median_ns"] == 1000.0  # kernel start 3 us after the call's, which lasts 2 us


def test_a_comma_after_the_last_event_is_refused_in_one_line(tmp_path):
    """SYNTHETIC: ``[{...},]`` is not JSON (the scan that finds the last events took it)."""
    path = write(tmp_path / "comma.pt.trace.json", steps(3))
    path.write_text(path.read_text().replace("}]}", "},]}"))
    refused(path, "a comma before the end of traceEvents")


def test_a_truncated_trace_is_refused_in_one_line(tmp_path):
    path = write(tmp_path / "cut.pt.trace.json", steps(20))
    path.write_bytes(path.read_bytes()[:-200])
    refused(path, "truncated")


def test_fields_of_other_types_are_damage_counted_by_category(tmp_path):
    """SYNTHETIC: among 20 good pairs, a kernel whose ts is text (a damaged start, under the
    validation rules), one whose args.device is an object (left out, counted as a kernel
    event), and an event whose cat is a list (found by a mutation campaign: an unhashable cat
    raised TypeError; left out, counted without a category)."""
    events = steps(20) + [kernel('"5"', "1.000", 900), {**kernel("1000400.000", "1.000", 901),
                                                         "args": {"device": {}, "stream": 7}},
                          {**kernel("1000500.000", "1.000", 902), "cat": ["kernel"]}]
    r = analyzed(write(tmp_path / "types.pt.trace.json", events))
    fields = "without the fields gapscope reads (ts, dur, args.device, args.stream, pid, tid) were left out"
    assert f"1 kernel events {fields}" in r["warnings"] and f"1 ? events {fields}" in r["warnings"]
    assert ("left out 1 of 21 GPU activity rows as damaged (start not an integer: 1, end not an integer: 1); "
            "every figure covers the other rows") in r["warnings"]
    assert r["devices"][0]["kernels"] == 20


def test_bytes_after_the_gzip_stream_are_refused_in_one_line(tmp_path):
    """SYNTHETIC: a gzipped trace with bytes after its gzip member that are no gzip member
    (ISA-L's IsalError, which is no zlib.error, went up as an internal error)."""
    path = write(tmp_path / "tail.pt.trace.json.gz", steps(5))
    path.write_bytes(path.read_bytes() + b"garbage after the member")
    refused(path, "cannot read the PyTorch profiler trace")


def _mutated(seed: int, values: list[bytes], kinds: int = 6, most: int = 10) -> bytes:
    """SYNTHETIC: a seeded mutation of the shipped steps trace's JSON, by ``seed % kinds``: bytes
    flipped (0), cut (1), up to ``most`` numbers (2) or strings (3, and 6) replaced by ``values``,
    a range deleted (4) or repeated (5)."""
    import random

    from paths import TRACES

    src = gzip.decompress((TRACES / "torch_decode_steps.pt.trace.json.gz").read_bytes())
    rng = random.Random(seed)
    data = bytearray(src)
    kind = seed % kinds
    if kind == 0:
        for _ in range(rng.randrange(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:
        data = data[: rng.randrange(len(data))]
    elif kind in (2, 3, 6):
        pattern = re.compile(rb'": (-?[0-9.]+)' if kind == 2 else rb'": ("[^"]*")')
        for _ in range(rng.randrange(1, most)):
            m = rng.choice(list(pattern.finditer(data)))
            data[m.start(1):m.end(1)] = rng.choice(values)
    elif kind == 4:
        i = rng.randrange(len(data))
        del data[i:i + rng.randrange(1, 400)]
    else:
        i = rng.randrange(len(data))
        data[i:i] = data[i:i + rng.randrange(1, 400)]
    return bytes(data)


@pytest.mark.parametrize("seed", range(24))
def test_mutated_traces_are_read_or_refused_never_a_traceback(tmp_path, seed):
    """SYNTHETIC: a seeded mutation of the shipped steps trace (bytes flipped, cut, a range
    deleted or repeated, numbers and strings replaced by hostile values, half of them gzipped):
    the reader and the analysis give frames or one GapscopeError, nothing else."""
    from gapscope.analysis.pipeline import run_analysis
    from gapscope.errors import GapscopeError

    data = _mutated(seed, [b"1e30", b"-1", b"null", b'"x"', b"[]", b"{}", b"true", b"-9223372036854775808",
                           b"18446744073709551616", b"1e999", b'"\\ud800"', b"123456789012345678901234567890"])
    path = tmp_path / ("m.pt.trace.json.gz" if seed % 2 else "m.pt.trace.json")
    path.write_bytes(gzip.compress(data, 1) if seed % 2 else data)
    try:
        with open_trace(path, "kineto") as trace:
            run_analysis(trace.frames())
    except GapscopeError:
        pass


def test_a_name_past_64_k_characters_is_cut_and_counted(tmp_path):
    """SYNTHETIC: a range and a kernel named by 10 MB strings (the campaign's seed 41672: such
    names made a 480 MiB table of names and a MemoryError). Each is cut to 65,536 characters,
    counted in a warning, and the figures are those of the same trace with short names."""
    long = "x" * 10_000_000
    events = steps(20)
    events[1] = {**events[1], "name": long}
    annotation = {"ph": "X", "cat": "user_annotation", "name": long, "pid": 7, "tid": 8, "ts": 999_000,
                  "dur": 300}
    got = analyzed(write(tmp_path / "long.json", [annotation, *events]))
    short = analyzed(write(tmp_path / "short.json", [{**annotation, "name": "r"}, {**events[0]}, *events[1:]]))
    assert "2 event names longer than 65,536 characters were cut to that length" in got["warnings"]
    (rng,) = got["by_name"]
    assert rng["name"] == "x" * 65_536 + "…" and len(rng["name"]) == 65_537
    for field in ("kernels", "gpu_span_ns", "gap_ns", "gap_by_category_ns"):
        assert rng[field] == short["by_name"][0][field]


# -- the tagged decode (events told by their cat) ----------------------------------------------

def _operator(ts: int, shapes: bool = False) -> dict:
    args = {"External id": ts, "Record function id": 0, **({"Input Dims": [[4, 4]]} if shapes else {})}
    return {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 7, "tid": 8, "ts": f"{ts}.250",
            "dur": "3.125", "args": args}


def _mixed(n: int, t0: int = 1_000_000) -> list[dict]:
    """SYNTHETIC: 1,000 operators (no shapes: the sample that decides record_shapes), then ``n``
    launch/kernel pairs each with an operator, a flow, a Python event, an instant event, and a
    user_annotation range beside every tenth."""
    out = [_operator(t0 - 5000 + i) for i in range(1000)]
    for i, e in enumerate(steps(n, t0)):
        out.append(e)
        if e["cat"] == "kernel":
            t = t0 + 10 * (i // 2)
            out += [_operator(t), {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 7, "tid": 8,
                                   "ts": f"{t}.000"},
                    {"ph": "X", "cat": "python_function", "name": "f", "pid": 7, "tid": 8, "ts": f"{t}.000",
                     "dur": "1.000", "args": {"Python id": i}},
                    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 7, "tid": 8,
                     "ts": f"{t}.500", "s": "t"}]
            if i % 20 == 1:
                out.append({"ph": "X", "cat": "user_annotation", "name": "step", "pid": 7, "tid": 8,
                            "ts": f"{t}.000", "dur": "9.000"})
    return out


def _both_ways(path: Path, monkeypatch) -> tuple:
    """The trace read with the tagged decode (and, per piece or event it was tried on, whether
    it decoded it) and with every piece decoded in full (as while the operators' sample is
    taken)."""
    import msgspec

    import gapscope.trace.kineto as kineto
    import gapscope.trace.kineto_json as kj

    monkeypatch.setattr(kj, "CHUNK", 4096)  # many pieces
    tagged, used = kineto._TAGGED, []

    class Counting:
        def decode(self, data):
            try:
                out = tagged.decode(data)
            except msgspec.ValidationError:
                used.append(False)
                raise
            used.append(True)
            return out

    monkeypatch.setattr(kineto, "_TAGGED", Counting())
    k = kineto.Kineto(path)
    out = [k.load(syncs=True), k._events]
    k.close()
    monkeypatch.setattr(kineto, "_TAGGED", tagged)
    monkeypatch.setattr(kineto._Reader, "wants_op_args", lambda self: True)
    k = kineto.Kineto(path)
    out += [k.load(syncs=True), k._events]
    k.close()
    return (*out, used)


def test_the_tagged_decode_gives_the_frames_of_the_full_decode(tmp_path, monkeypatch):
    """SYNTHETIC: with the operators' sample taken, pieces are decoded by category (the skipped
    ones without fields): the same frames and counts as decoding every event's fields, and the
    counts are those written (1,000 + 300 operators, 300 Python events, 300 kernels, 30 ranges)."""
    path = write(tmp_path / "mixed.pt.trace.json.gz", _mixed(300), indent=1)
    fast, fm, full, um, used = _both_ways(path, monkeypatch)
    assert sum(used) > 20 and all(used), used  # every piece after the sample: tagged
    for name in ("activities", "api", "nvtx"):
        assert getattr(fast, name).equals(getattr(full, name)), name
    assert (fm.operators, fm.python_functions, fm.shapes_recorded) == (um.operators, um.python_functions, False)
    assert (fm.operators, fm.python_functions) == (1300, 300)
    assert (len(fast.activities), len(fast.api), len(fast.nvtx)) == (300, 300, 30)


def test_a_piece_the_tagged_decode_refuses_is_decoded_in_full(tmp_path, monkeypatch):
    """SYNTHETIC: an unknown category, an event without one, two cat keys that disagree, a
    call's pid that is a float, operators whose (unread) pid or tid are of other types, one inside
    the operators' sample: each piece holding one goes through the full decode, and the frames,
    counts and damage are those of the full decode everywhere (the call left out as damaged, the
    operators counted)."""
    events = _mixed(200)
    events.insert(1500, {"ph": "X", "cat": "mystery", "name": "m", "pid": 7, "tid": 8, "ts": "1000100.000",
                         "dur": "1.000"})
    events.insert(1800, {"ph": "M", "name": "thread_name", "pid": 7, "tid": 8, "args": {"name": "main"}})
    events.insert(2100, {**call("1000900.000", "2.000", 5000), "pid": 7.5})
    events.insert(2400, {**kernel("1001200.000", "1.000", 5001), "name": "DUPLICATE_CAT"})
    events.insert(2700, {**_operator(1001500), "tid": 8.5})  # an operator's field (never read) damaged
    events.insert(10, {**_operator(999000), "pid": [7]})  # the same, inside the operators' sample
    path = write(tmp_path / "odd.pt.trace.json", events)
    text = path.read_text()
    assert text.count('"name": "DUPLICATE_CAT"') == 1
    path.write_text(text.replace('"cat": "kernel", "name": "DUPLICATE_CAT"',
                                 '"cat": "kernel", "name": "DUPLICATE_CAT", "cat": "cpu_op"'))
    fast, fm, full, um, used = _both_ways(path, monkeypatch)
    assert used.count(False) >= 4 and used.count(True) > 10, used
    for name in ("activities", "api", "nvtx"):
        assert getattr(fast, name).equals(getattr(full, name)), name
    assert fast.warnings == full.warnings
    assert (fm.operators, fm.python_functions, fm.skipped) == (um.operators, um.python_functions, um.skipped)
    # msgspec keeps the last of two keys: the duplicate is an operator, not a kernel; the two
    # operators whose unread fields are damaged are operators too, and no damage
    assert fm.operators == 1000 + 200 + 1 + 2
    assert not any("cpu_op" in w for w in fast.warnings), fast.warnings
    assert fm.skipped == {"cuda_runtime": 1}, fm.skipped
    assert len(fast.activities) == 200


@pytest.mark.parametrize("seed", range(21))
def test_mutated_traces_read_the_same_tagged_or_in_full(tmp_path, monkeypatch, seed):
    """SYNTHETIC: a seeded mutation of the shipped steps trace (bytes flipped, cut, a range
    deleted or repeated, numbers or strings replaced, categories among them), read with the
    tagged decode after a sample of 10 operators and with every piece decoded in full: the same
    frames, warnings and counts, or the same error line."""
    import gapscope.trace.kineto as kineto
    import gapscope.trace.kineto_json as kj
    from gapscope.errors import GapscopeError

    data = _mutated(seed, [b"1e30", b"-1", b"null", b'"x"', b"[]", b"{}", b"-9223372036854775808", b'"\\ud800"',
                           b'"cpu_op"', b'"kernel"', b'"mystery"'], kinds=7, most=30)
    path = tmp_path / "m.pt.trace.json"
    path.write_bytes(data)
    monkeypatch.setattr(kj, "CHUNK", 16384)
    monkeypatch.setattr(kineto, "_SHAPES_SAMPLE", 10)
    tagged_sample = kineto._Reader.wants_op_args

    def read(full: bool):
        monkeypatch.setattr(kineto._Reader, "wants_op_args", (lambda self: True) if full else tagged_sample)
        try:
            k = kineto.Kineto(path)
            frames, ev = k.load(syncs=True), k._events
            k.close()
        except GapscopeError as exc:
            return str(exc)
        return frames, (ev.operators, ev.python_functions, ev.skipped)

    tagged, full = read(False), read(True)
    if isinstance(tagged, str) or isinstance(full, str):
        assert tagged == full
        return
    for name in ("activities", "api", "nvtx", "syncs"):
        assert getattr(tagged[0], name).equals(getattr(full[0], name)), name
    assert tagged[0].warnings == full[0].warnings and tagged[1] == full[1]


def test_after_a_load_names_answer_and_a_second_load_reads_again(tmp_path, monkeypatch):
    """SYNTHETIC: once its frames are built a trace keeps only what name lookups read (the
    analysis does not hold the events twice): lookups and kernels' name ids answer without a
    read, a second load reads the file again and gives the same frames, and a closed trace
    answers nothing."""
    import numpy as np

    import gapscope.trace.kineto as kineto
    from gapscope.trace.frames import ActivityKind, ClosedTraceError

    path = write(tmp_path / "twice.pt.trace.json", steps(30))
    reads = []
    real = kineto._read
    monkeypatch.setattr(kineto, "_read", lambda p, head_only=False: reads.append(head_only) or real(p, head_only))
    k = kineto.Kineto(path)
    first = k.load(syncs=True)
    assert reads == [True, False] and not k._events.whole
    ids = first.activities["name_id"].to_numpy()
    assert set(k.lookup(ids).values()) == {"k"}
    assert (k.activity_name_ids(ActivityKind.KERNEL, np.arange(30)) == ids).all()
    assert reads == [True, False]  # names answered from what was kept
    second = k.load(syncs=True)
    assert reads == [True, False, False]
    for name in ("activities", "api", "nvtx", "syncs"):
        assert getattr(first, name).equals(getattr(second, name)), name
    k.close()
    with pytest.raises(ClosedTraceError):
        k.lookup([0])
