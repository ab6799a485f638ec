"""Verdicts and gap categories on real framework traces (traces/README.md, "Wave 2", and the
third-party exports), each row's categories checked against tests/reference.py: a plain-Python
walk over the launching thread's calls for every gap, sharing no code with gapscope.analysis.

The numbers asserted are what both computations give; the comments say what each one means.
"""

from __future__ import annotations

import re

import pytest

import reference
from gapscope.analysis import analyze, answer
from gapscope.analysis.verdicts import verdict
from paths import TRACES

# PyTorch's emit_nvtx tail, written again here (docs/metrics.md, "Range names").
OP_TAIL = re.compile(r"(, seq = \d+)?(, op_id = \d+)?(, sizes = \[.*\])?(, input_op_ids = \[.*\])?$")


class Ref:
    """The reference computation of one trace, built once."""

    def __init__(self, path) -> None:
        self.path = str(path)
        self.trace = reference.Trace(self.path)
        self.attr = reference.Attribution(self.trace)
        self.ranges = reference.ranges(self.path) if reference.has_nvtx(self.path) else []

    def device(self, device: int) -> dict[str, int]:
        return self.attr.categories([a for a in self.trace.acts if a["device"] == device])

    def name(self, name: str, process: bool = False) -> dict[str, int]:
        """Categories summed over the instances whose name, without op suffixes, is ``name``."""
        total = dict.fromkeys(reference.CATEGORIES, 0)
        for rng in self.ranges:
            if OP_TAIL.sub("", rng["name"], count=1) == name:
                for c, v in self.attr.categories(reference.range_acts(self.trace, rng, process)).items():
                    total[c] += v
        return total


_REFS: dict[str, Ref] = {}


def ref(path) -> Ref:
    if str(path) not in _REFS:
        _REFS[str(path)] = Ref(path)
    return _REFS[str(path)]


def row(result, name, domain=None):
    return next(r for r in result.by_name if r["name"] == name and r["domain"] == domain)


def nonzero(cats: dict[str, int]) -> dict[str, int]:
    return {c: v for c, v in cats.items() if v}


def checked(result, path, name, domain=None, process=False) -> dict:
    """The by-name row, after checking its categories against the reference."""
    r = row(result, name, domain)
    assert r["gap_by_category_ns"] == ref(path).name(name, process)
    assert sum(r["gap_by_category_ns"].values()) == r["gap_ns"]
    return r


@pytest.fixture(scope="module")
def hf():
    return analyze(TRACES / "hf_generate_compile.sqlite")


def steady_ceiling(r) -> float:
    """A row's graph ceiling from its own fields (docs/metrics.md, "Graph ceiling"; the
    reference computes it from the trace in tests/test_prediction.py)."""
    steady = {c: v - r["one_off_by_category_ns"][c] for c, v in r["gap_by_category_ns"].items()}
    return r["steady_span_ns"] / max(r["busy_ns"] + steady["memop"], steady["stall"])


def test_torch_compile_warmup_is_a_stall_not_a_launch_gap(hf):
    """The issue: compile_warmup read 'launch-bound: graphs pay' with a ceiling in the
    thousands, its 14.4 s of compiling counted as launch. Now it is stall, and a replay would
    win under 1 %: of its 58 long stalls, 55 of about one length repeat (Inductor compiling one
    kernel after another: its steady state) and 3 are one-off."""
    path = TRACES / "hf_generate_compile.sqlite"
    warm = checked(hf, path, "compile_warmup")
    assert nonzero(warm["gap_by_category_ns"]) == {"launch": 12_750_363, "host": 53_867_768, "stall": 14_432_463_063,
                                                   "setup": 5_944_749, "sync": 604_670}
    assert (warm["verdict"], warm["reading"]) == ("stall", "host stalls: graphs won't (<=1.05x)")
    assert warm["one_off_stalls"] == 3
    assert warm["graph_ceiling_speedup"] == pytest.approx(steady_ceiling(warm)) and warm["graph_ceiling_speedup"] < 1.01
    # The compiled generate() calls: per-token Python between launches; graphs do pay there.
    compiled = checked(hf, path, "generate_compiled")
    assert nonzero(compiled["gap_by_category_ns"]) == {"launch": 18_945_730, "host": 59_032_011, "sync": 319_400}
    assert (compiled["verdict"], compiled["reading"], compiled["count"]) == ("host_bound", "host-bound: graphs ~17x", 2)
    # The eager generate(): the two first cuDNN attention calls plan for 70 ms on the host
    # (no CUDA call on any thread). They happen once: left out of the steady state, whose
    # per-token launch and host time is what a graph removes (the issue: it read "host stalls:
    # graphs won't", the stalls outweighing 1,131 gaps of launch and host time).
    eager = checked(hf, path, "generate_eager")
    assert nonzero(eager["gap_by_category_ns"]) == {"launch": 24_614_487, "host": 71_901_132, "stall": 139_168_715,
                                                    "setup": 141_122, "sync": 208_411}
    assert (eager["one_off_stalls"], eager["one_off_by_category_ns"]["stall"]) == (2, 139_168_715)
    assert (eager["verdict"], eager["reading"]) == ("host_bound", "host-bound: graphs ~21x")
    dev = hf.devices[0]
    assert dev["gap_by_category_ns"] == ref(path).device(0)
    assert (dev["verdict"], dev["gap_by_category_ns"]["stall"]) == ("stall", 18_628_650_163)


def test_one_off_stalls_are_named_by_the_library_of_the_kernel_they_ended_in(hf):
    """The eager generate()'s two one-off stalls (cuDNN planning its attention on first use)
    ended in cuDNN's kernels, so the row and the answer name cuDNN; the third longest gap is
    under the 1 ms stall threshold, so there are no others."""
    path = TRACES / "hf_generate_compile.sqlite"
    (g1, k1), (g2, k2), (g3, _) = reference.longest_gaps_end_in(path, "generate_eager", 3)
    assert (g1, g2) == (72_897_408, 67_297_201) and g3 < 1_000_000
    assert k1.startswith("cudnn_generated_") and k2.startswith("cudnn_generated_")
    eager = row(hf, "generate_eager")
    assert (eager["one_off_stalls"], eager["one_off_ns"], eager["one_off_libraries"]) == (2, g1 + g2, "cuDNN")
    entry = next(e for e in hf.answer if e["name"] == "generate_eager")
    assert "one-off gaps left out: 140 ms (2 long stalls, before cuDNN kernels)" in answer.lines(entry)[-1]
    # Ranges without one-off stalls name none.
    assert row(hf, "generate_compiled")["one_off_libraries"] is None


def test_cccl_ranges_keep_their_domain_and_fold_in_the_table(hf):
    from gapscope.render import sections

    scan = checked(hf, TRACES / "hf_generate_compile.sqlite", "cub::DeviceScan::InclusiveScan", "CCCL")
    assert (scan["count"], scan["kernels"]) == (5, 10)
    shown, left = sections.shown_names(hf, 20)
    # The most gap time first: the 14.5 s compile, the 236 ms eager loop, the compiled one.
    assert [r["name"] for r in shown] == ["compile_warmup", "generate_eager", "generate_compiled"] and left == 0
    folded = sections.domains(hf)
    assert [[str(c) for c in r] for r in folded.rows] == [["CCCL", "1", "5", "5"]]


def test_reduce_overhead_graph_trees_read_as_graph_replays():
    """The issue: the decode loop replayed by Inductor's CUDA graph trees read 'launch-bound:
    graphs pay'. Its gaps are host time between the replays (launch and Python per step) and
    the device's turnaround inside them."""
    path = TRACES / "torch_compile_graphs.sqlite"
    r = analyze(path)
    decode = checked(r, path, "decode")
    assert nonzero(decode["gap_by_category_ns"]) == {"launch": 978_128, "host": 873_814, "memop": 73_184,
                                                     "pipeline": 48_961}
    assert (decode["graph_kernels"], decode["kernels"], decode["graph_replays"]) == (480, 480, 16)
    assert (decode["gap_between_replays_ns"], decode["gap_inside_replays_ns"]) == (1_851_942, 122_145)
    decode_range = next(x for x in ref(path).ranges if x["name"] == "decode")
    assert decode["gap_inside_replays_ns"] == ref(path).attr.inside_replays(
        reference.range_acts(ref(path).trace, decode_range))
    assert (decode["verdict"], decode["reading"]) == ("graph_replay", "graphs: host between")
    step = checked(r, path, "decode_step")
    assert nonzero(step["gap_by_category_ns"]) == {"memop": 73_184, "pipeline": 48_961}
    assert (step["verdict"], step["reading"]) == ("graph_replay", "graphs: device turnaround")
    # The warm-up range compiles and records the graphs: 5.77 s of its 13.07 s wall time is host
    # work before its first kernel, outside its GPU span (the issue: it read "host-bound: graphs
    # pay", 4.07x).
    warm = checked(r, path, "warmup")
    assert warm["gap_by_category_ns"]["stall"] == 6_629_376_070
    (warm_range,) = [x for x in ref(path).ranges if x["name"] == "warmup"]
    wall = warm_range["end"] - warm_range["start"]
    assert (warm["wall_ns"], warm["verdict"], warm["reading"]) == (wall, "warmup", "warm-up (one-time)")
    assert 3 * (wall - warm["gpu_span_ns"]) >= wall
    replays = [x for x in (*r.ranges, *r.by_name, *r.devices) if x["graph_kernels"] * 2 > x["kernels"]]
    assert len(replays) == 16 + 1 + 2  # the decode_step instances and name, decode instance and name
    assert not any("graphs pay" in x["reading"] for x in replays)


def test_jax_xla_ranges_are_their_own_domain_and_compile_is_a_stall():
    """The issue: XLA's XlaModule range (compile plus first run) read 'launch-bound' and XLA's
    TSL ranges filled the by-name table. In this recording every launch (cuGraphLaunch of the
    command buffers, cuLaunchKernelEx) comes from the main thread."""
    from gapscope.render import sections

    path = TRACES / "jax_train.sqlite"
    r = analyze(path)
    stage = checked(r, path, "XlaModule:#prefix=args[0],hlo_module=jit_stage,program_id=0#", "TSL")
    assert nonzero(stage["gap_by_category_ns"]) == {"launch": 1_188_912, "host": 12_347_522, "stall": 2_196_458_468,
                                                    "setup": 2_998_847}
    assert stage["verdict"] == "stall"
    step = checked(r, path, "train_step")
    assert nonzero(step["gap_by_category_ns"]) == {"launch": 4_160, "pipeline": 51_460}
    # Replayed (XLA's command buffers): a replay first, even with its gaps amortized.
    assert (step["graph_kernels"], step["graph_replays"], step["verdict"]) == (396, 12, "graph_replay")
    # Its first instance compiles before its first kernel: a warm-up.
    first = next(x for x in r.ranges if x["name"] == "train_step")
    assert (first["verdict"], first["wall_ns"] - first["gpu_span_ns"] >= 100_000_000) == ("warmup", True)
    assert len(r.by_name) == 1_680 and sum(1 for x in r.by_name if x["domain"] == "TSL") == 1_679
    shown, left = sections.shown_names(r, 20)
    assert [x["name"] for x in shown] == ["train_step"] and left == 0
    assert [[str(c) for c in x] for x in sections.domains(r).rows] == [["TSL", "1,679", "2,766", "34"]]
    # --domain TSL: XLA's ranges as the table's rows, no folding.
    tsl = analyze(path, domains=["tsl"], attribution=False)
    assert {x["domain"] for x in tsl.by_name} == {"TSL"} and sections.domains(tsl) is None
    assert len(sections.shown_names(tsl, 5)[0]) == 5


def test_emit_nvtx_op_ranges_group_by_op_name():
    path = TRACES / "torch_emit_nvtx.sqlite"
    r = analyze(path)
    assert (len(r.ranges), len(r.by_name)) == (3_675, 115)
    groups = {OP_TAIL.sub("", x["name"], count=1) for x in reference.ranges(str(path))}
    assert {x["name"] for x in r.by_name} == groups
    mm = checked(r, path, "aten::mm")
    assert (mm["count"], mm["kernels"], nonzero(mm["gap_by_category_ns"])) == (57, 96, {"launch": 107_265,
                                                                                       "pipeline": 20_064})
    assert r.ranges[next(i for i, x in enumerate(r.ranges) if x["name"].startswith("aten::mm,"))]["name"].startswith(
        "aten::mm, seq = ")  # an instance keeps its full name
    raw = analyze(path, normalize=False, attribution=False)
    assert len(raw.by_name) == 3_673 and raw.options["normalize_names"] is False
    # The backward pass is launched from PyTorch's autograd thread: train_step misses it.
    assert r.warnings == ["3 NVTX ranges (train_step x3) miss GPU work that other threads of their process "
                          "launched inside them (PyTorch's autograd thread launches the backward pass), so their "
                          "gaps hold that work's time; `--threads process` counts it"]
    both = analyze(path, threads="process")
    step = checked(both, path, "train_step", process=True)
    assert (step["kernels"], step["verdict"]) == (447, "host_bound")  # 153 of its own


def test_data_loading_between_steps_is_a_stall_on_the_device():
    """Each step builds its batch on the CPU first (no CUDA call on any thread for 6 to 17
    ms): the device's idle time is stall. The steps' own spans start after the loading."""
    path = TRACES / "torch_dataload.sqlite"
    r = analyze(path)
    dev = r.devices[0]
    assert dev["gap_by_category_ns"] == ref(path).device(0)
    assert nonzero(dev["gap_by_category_ns"]) == {"launch": 6_910_914, "host": 32_150_288, "stall": 293_385_490,
                                                  "setup": 191_916_231, "sync": 25_304, "pipeline": 81_537}
    assert dev["verdict"] == "stall"
    assert row(r, "load_batch")["verdict"] == "no_work"
    step = checked(analyze(path, threads="process"), path, "step", process=True)
    assert nonzero(step["gap_by_category_ns"]) == {"launch": 4_473_337, "host": 16_785_200, "stall": 8_309_919,
                                                   "pipeline": 73_761}


def test_work_launched_from_a_worker_thread():
    path = TRACES / "torch_worker_thread.sqlite"
    same = analyze(path)
    assert row(same, "request")["kernels"] == 0
    assert same.warnings == ["8 NVTX ranges (request x8) launched no GPU work on their own thread while other "
                             "threads of their process launched work inside them; `--threads process` gives them "
                             "that work"]
    proc = analyze(path, threads="process")
    req = checked(proc, path, "request", process=True)
    assert (req["kernels"], nonzero(req["gap_by_category_ns"])) == (400, {"launch": 3_294_214, "host": 1_485_061})
    assert (req["verdict"], proc.warnings, proc.options["threads"]) == ("launch_bound", [], "process")
    # The ranges that launch from their own thread are the same either way.
    assert row(proc, "inline") == row(same, "inline")


def test_lazy_module_loading_is_setup_on_the_device():
    """The issue: torch_decode's device row counted 291 ms inside cuLibraryLoadData as launch."""
    path = TRACES / "torch_decode.sqlite"
    dev = analyze(path).devices[0]
    assert dev["gap_by_category_ns"] == ref(path).device(0)
    assert nonzero(dev["gap_by_category_ns"]) == {"launch": 32_041_785, "host": 91_871_706, "stall": 196_476_693,
                                                  "setup": 289_257_599, "sync": 127_244, "memop": 308_096,
                                                  "pipeline": 1_257_121}
    # Loading happens once: left out of the device's steady state as one-off (with the one long
    # stall that does not repeat), which then reads by its launch and host gaps.
    one_off, stalls = reference.one_off(ref(path).attr, [a for a in ref(path).trace.acts if a["device"] == 0])
    assert (dev["one_off_by_category_ns"], dev["one_off_stalls"]) == (one_off, stalls)
    assert (one_off["setup"], stalls, dev["verdict"]) == (287_371_841, 1, "host_bound")


def test_fsdp_per_op_ranges_domains_and_a_host_stall(fsdp):
    r = analyze(fsdp, top=1)
    assert (len(r.ranges), len(r.by_name)) == (19_118, 93)
    assert sum(1 for x in r.by_name if x["domain"] == "domain 1") == 5  # NCCL's, its name not in the window
    for d in r.devices:
        assert d["gap_by_category_ns"] == ref(fsdp).device(d["device"])
    assert [(d["verdict"], d["reading"], d["gap_by_category_ns"]["stall"]) for d in r.devices] == [
        ("some_launch_gaps", "some launch gaps: graphs won't (<=1.05x)", 8_253_959),
        ("some_launch_gaps", "some launch gaps: graphs won't (<=1.05x)", 3_420_465)]
    # The longest gap: 4.49 ms in which the launching process made no CUDA call.
    (top,) = r.top_gaps
    assert (top["gap_ns"], top["category"], nonzero(top["gap_by_category_ns"])) == (
        4_492_845, "stall", {"launch": 15_421, "stall": 4_477_424})


def test_cloverleaf_matches_the_reference(cloverleaf):
    d = analyze(cloverleaf).devices[0]
    assert d["gap_by_category_ns"] == ref(cloverleaf).device(0)
    assert d["verdict"] == "sync"


@pytest.mark.parametrize("name", ["torch_decode", "torch_compile_graphs", "jax_train", "torch_dataload"])
def test_every_row_carries_its_verdict(analyzed, name):
    r = analyzed(name)
    for x in (*r.ranges, *r.by_name, *r.devices):
        assert (x["verdict"], x["reading"]) == verdict(x)


def no_call_stretches(path, name: str) -> list[int]:
    """The stretches in which the process of each ``name`` range made no (read) CUDA call, inside
    the range: a plain walk over the calls (docs/metrics.md, "The stall threshold")."""
    tr, out = ref(path).trace, []
    for rng in (r for r in ref(path).ranges if r["name"] == name):
        cur = None
        for s, e in sorted((c[0], c[1]) for c in tr.calls if c[2] >> 24 == rng["tid"] >> 24):
            if cur is not None and s > cur and cur >= rng["start"] and s <= rng["end"]:
                out.append(s - cur)
            cur = e if cur is None else max(cur, e)
    return out


def test_the_stall_threshold_sits_above_running_loops_host_stretches():
    """The numbers docs/metrics.md quotes for the 1 ms default: steady loops never go 0.43 ms
    without a CUDA call; a batch build does for 6 ms and more."""
    longest = {(t, n): max(no_call_stretches(TRACES / f"{t}.sqlite", n)) for t, n in (
        ("torch_decode", "eager"), ("hf_generate_compile", "generate_compiled"), ("torch_compile_graphs", "decode"))}
    assert longest == {("torch_decode", "eager"): 194_397, ("hf_generate_compile", "generate_compiled"): 429_429,
                       ("torch_compile_graphs", "decode"): 193_198}
    path = TRACES / "torch_dataload.sqlite"
    tr = ref(path).trace
    builds = []
    for rng in (r for r in ref(path).ranges if r["name"] == "load_batch"):
        mine = [c for c in tr.calls if c[2] >> 24 == rng["tid"] >> 24]
        assert not any(c[0] < rng["end"] and c[1] > rng["start"] for c in mine)  # no CUDA call inside
        builds.append(min(c[0] for c in mine if c[0] >= rng["end"]) - max(c[1] for c in mine if c[1] <= rng["start"]))
    assert len(builds) == 12 and (min(builds), max(builds)) == (5_978_522, 17_202_312)
