"""What a new user trips on in the first minutes: each fix checked on a real trace of traces/ (or
the third-party FSDP export) against an independent reading of the file, or on a SYNTHETIC export
made for the edge case."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3

from clirun import gapscope
from gapscope.analysis import analyze
from gapscope.analysis.range_names import group_name
from gapscope.analysis.ranges import group_names
from paths import TRACES
from synthetic import Synthetic

DECODE = TRACES / "torch_decode.sqlite"
STEPS = TRACES / "torch_decode_steps.pt.trace.json.gz"


def nvtx_in_start_order(path) -> list[str]:
    """The names of an export's push/pop and start/end ranges in start order, the enclosing one
    first on a tie (it ends later): read with sqlite3, not gapscope."""
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as conn:
        rows = conn.execute("SELECT n.start, n.end, COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
                            "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType IN (59, 60) "
                            "AND n.end >= n.start").fetchall()
    return [name for _, _, name in sorted(rows, key=lambda r: (r[0], -r[1]))]


# ---------------------------------------------------------------------------------------------
# instance ids


def test_an_instance_keeps_its_id_under_a_range_filter(tmp_path):
    names = nvtx_in_start_order(DECODE)
    expected = [i for i, n in enumerate(names) if n == "decode_step"]
    assert len(expected) == 64
    whole = analyze(DECODE, attribution=False)
    narrowed = analyze(DECODE, ranges=["decode_step"], attribution=False)
    assert [r["id"] for r in whole.ranges if r["name"] == "decode_step"] == expected
    assert [r["id"] for r in narrowed.ranges] == expected
    # The per-kernel table names the same instance (--format parquet's range_id).
    out = tmp_path / "tables"
    proc = gapscope("analyze", str(DECODE), "--range", "decode_step", "-f", "parquet", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    import pyarrow.parquet as pq

    ids = pq.read_table(out / "kernels.parquet", columns=["range_id"]).column("range_id").drop_null()
    assert set(ids.to_pylist()) == set(expected)
    # The report's instance table shows them too (the one with the most gap time first).
    table = gapscope("analyze", str(DECODE), "--range", "decode_step", "--limit", "1").stdout
    top = max(narrowed.ranges, key=lambda r: r["gap_ns"])
    row = table.split("Range instances")[1].splitlines()[3]
    assert row.split()[:2] == [str(top["id"]), "decode_step"] and top["id"] in expected


# ---------------------------------------------------------------------------------------------
# step markers and what the ranges are called


def kineto_annotations(path) -> list[str]:
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return [e["name"] for e in events if e.get("cat") == "user_annotation"]


def test_profiler_steps_group_as_one_name():
    steps = sorted({n for n in kineto_annotations(STEPS) if n.startswith("ProfilerStep#")})
    assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    r = analyze(STEPS)
    rows = {x["name"]: x for x in r.by_name}
    assert set(rows) == {"ProfilerStep#*", "decode_step"}
    assert rows["ProfilerStep#*"]["count"] == 3
    assert sorted(x["name"] for x in r.ranges if x["name"].startswith("Profiler")) == steps  # instances keep theirs
    # The group name is the glob that selects them all.
    assert len(analyze(STEPS, ranges=["ProfilerStep#*"]).ranges) == 3
    assert {x["name"] for x in analyze(STEPS, normalize=False).by_name} == {*steps, "decode_step"}


def test_step_marker_names():
    assert group_names(["ProfilerStep#551", "step 12", "Iteration_3", "epoch:2", "blocks.15", "layer 3",
                        "decode_step", "aten::mm, seq = 1, op_id = 2", "a#b"]).tolist() == [
        "ProfilerStep#*", "step *", "Iteration_*", "epoch:*", "blocks.15", "layer 3", "decode_step", "aten::mm",
        "a#b"]
    assert group_name("ProfilerStep#12") == "ProfilerStep#*"  # the renderers' (numpy-free) rule agrees


def test_tables_are_titled_by_what_the_ranges_are():
    kineto = gapscope("analyze", str(STEPS), "--limit", "5").stdout
    assert "\nRanges by name (2 of 2 launched GPU work)\n" in kineto and "NVTX" not in kineto
    instances = kineto.split("Range instances")[1].split("\n\n")[0]
    assert re.search(r"\n +0 +ProfilerStep#2 ", instances)  # an instance shows its step
    nsys = gapscope("analyze", str(DECODE), "--limit", "5").stdout
    assert "\nNVTX ranges by name (3 of 3 launched GPU work)\n" in nsys


# ---------------------------------------------------------------------------------------------
# --threads process


def two_workers(tmp_path, kernels: int = 3):
    """SYNTHETIC: threads 1 and 2 each open `step` over the same 100 us and launch ``kernels``
    kernels inside it; thread 3 (no range of its own) launches one kernel inside both."""
    t = Synthetic()
    t.range(0, 100_000, "step", tid=1).range(0, 100_000, "step", tid=2)
    corr = 0
    for tid, base in ((1, 1_000), (2, 1_500)):
        for k in range(kernels):
            corr += 1
            at = base + 10_000 * k
            t.launch(at, at + 2_000, at + 3_000, corr, tid=tid, stream=tid)
    t.launch(60_000, 61_000, 62_000, 99, tid=3, stream=3)
    return t.write(tmp_path / "workers.sqlite")


def test_process_mode_counts_each_threads_work_once(tmp_path):
    path = two_workers(tmp_path)
    same = analyze(path)
    assert [r["kernels"] for r in same.ranges] == [3, 3]
    proc = analyze(path, threads="process")
    # Each step: its own thread's 3 kernels and thread 3's one, not the other worker's 3.
    assert [r["kernels"] for r in proc.ranges] == [4, 4]
    assert proc.by_name[0]["kernels"] == 8
    # The hint names only what --threads process would add: thread 3's kernel.
    assert same.warnings == ["2 NVTX ranges (step x2) miss GPU work that other threads of their process launched "
                             "inside them (PyTorch's autograd thread launches the backward pass), so their gaps "
                             "hold that work's time; `--threads process` counts it"]


def test_process_mode_without_concurrent_workers_is_unchanged(tmp_path):
    """The worker_thread trace: `request` on the main thread, a worker without ranges launching
    50 kernels per request; every one of the 400 still counts."""
    proc = analyze(TRACES / "torch_worker_thread.sqlite", threads="process")
    assert next(r for r in proc.by_name if r["name"] == "request")["kernels"] == 400


# ---------------------------------------------------------------------------------------------
# warnings, times


def test_warnings_go_to_stderr_in_every_format():
    for args in ((), ("-f", "json"), ("-f", "csv"), ("-f", "markdown")):
        proc = gapscope("analyze", str(STEPS), "--no-cache", *args)
        assert proc.returncode == 0, proc.stderr
        lines = proc.stderr.splitlines()
        assert lines[0].startswith("gapscope: warning: read from a PyTorch profiler trace: ranges are its "
                                   "user_annotation events"), args
        assert len(lines) == 2, (args, lines)
        if not args:
            assert "warning" not in proc.stdout
    cached = gapscope("analyze", str(STEPS), "-f", "json")  # a result cache hit says them too
    assert len(cached.stderr.splitlines()) == 2


def first_times(path) -> int:
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as conn:
        return min(conn.execute(f"SELECT MIN(start) FROM {t}").fetchone()[0] for t in (
            "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS") if conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone())


def test_the_longest_gaps_are_shown_from_the_traces_start():
    r = analyze(DECODE)
    start = first_times(DECODE)
    assert r.trace["start_ns"] == start
    top = r.top_gaps[0]
    from gapscope.render.units import fmt_ns

    out = gapscope("analyze", str(DECODE)).stdout
    row = out.split("Longest gaps")[1].splitlines()[3]
    assert row.split()[:6] == ["115", "ms", "stall", "0", "13", *fmt_ns(top["start_ns"] - start).split()[:1]]
    # A PyTorch profiler trace's clock is the machine's: its gaps are at milliseconds, not 5,268,316 s.
    kineto = gapscope("analyze", str(STEPS)).stdout.split("Longest gaps")[1].splitlines()[3:]
    assert all(line.split()[6] in ("us", "ms") for line in kineto), kineto


# ---------------------------------------------------------------------------------------------
# the GPU, and several traces


def test_the_gpu_is_named_from_the_system_facts_when_no_table_names_it(tmp_path):
    """SYNTHETIC: an export without TARGET_INFO_GPU whose TARGET_INFO_SYSTEM_ENV has a GpuInfo row."""
    path = Synthetic().range(0, 10_000, "step").launch(100, 1_000, 2_000, 1).write(tmp_path / "gpuinfo.sqlite")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, "
                     "nameEnum INTEGER, value TEXT)")
        conn.executemany("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (1, 'Local', ?, 0, ?)", [
            ("CpuCores", "18"), ("GpuInfo", '{"Gpus":[{"Id":0,"Name":"NVIDIA H100 80GB HBM3","IsDiscrete":true}]}')])
    assert analyze(path).trace["gpus"] == {"0": "NVIDIA H100 80GB HBM3"}
    assert "  GPU: NVIDIA H100 80GB HBM3" in gapscope("analyze", str(path)).stdout.splitlines()[0]


def test_an_export_that_names_no_gpu_says_how_many_it_used(fsdp):
    with sqlite3.connect(f"file:{fsdp}?immutable=1", uri=True) as conn:
        devices = conn.execute("SELECT COUNT(DISTINCT deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        info = conn.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'GpuInfo'").fetchone()[0]
    assert (devices, info) == (2, "{}")
    head = gapscope("analyze", str(fsdp)).stdout.splitlines()[0]
    assert head.endswith("  GPU: not recorded (2 devices)")


def test_nested_ranges_around_the_same_collectives_are_shown_once(fsdp):
    out = gapscope("analyze", str(fsdp)).stdout
    table = out.split("Communication and compute")[1].split("\n\n")[0].splitlines()[3:]
    # FSDP's all-to-all: AllToAll4D holds compute too; c10d::alltoall_base_ > record_param_comms >
    # nccl:all_to_all > ncclGroupEnd hold the same 64 kernels and nothing else: one row.
    assert [line.split("  ")[0] for line in table] == [
        "device 0", "device 1", "AllToAll4D (x66)", "c10d::alltoall_base_ (x66) +3 nested"]
    from gapscope.render import sections

    note = sections.communication(analyze(fsdp), 20).note
    assert ("c10d::alltoall_base_ also stands for record_param_comms, nccl:all_to_all, [domain 1] ncclGroupEnd"
            in note)


def test_several_traces_of_different_programs_say_so():
    paths = [str(DECODE), str(STEPS)]
    proc = gapscope("analyze", *paths, "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    head = proc.stdout.splitlines()[0]
    assert head == "gapscope 2 traces (0 failed), 2 ranks  nsys 2025.3.2.0, PyTorch profiler  graphs traced: node, none"
    warned = [line for line in proc.stderr.splitlines() if "different programs" in line]
    assert warned == ["gapscope: warning: these 2 traces look like different programs, not ranks of one job (they "
                      "come from 2 trace formats): the figures across ranks compare unrelated work"]
    assert "warning" not in proc.stdout
    # Three recordings of one program are ranks of one job: nothing said.
    same = gapscope("analyze", *(str(TRACES / f"cmp_base_{i}.sqlite") for i in (1, 2, 3)), "--jobs", "1")
    assert "different programs" not in same.stderr and same.returncode == 0
    # Same format, no range name in common.
    other = gapscope("analyze", str(DECODE), str(TRACES / "jax_train.sqlite"), "--jobs", "1")
    assert "(no range name is in all of them)" in other.stderr


# ---------------------------------------------------------------------------------------------
# a missing package


def test_a_missing_package_is_one_line_naming_it_and_its_extra(tmp_path):
    """A folder first on the module path whose msgspec (which the PyTorch profiler reader needs)
    fails to import as a missing package does (a SYNTHETIC stand-in)."""
    for name in ("msgspec",):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(
            f'raise ModuleNotFoundError("No module named {name}", name={name!r})\n')
    from clirun import assert_one_line_error, gapscope_process

    proc = gapscope_process("analyze", str(STEPS), "--no-cache", pythonpath=str(tmp_path))
    assert_one_line_error(proc, "msgspec is missing: pip install -e . in the gapscope checkout brings it")
    assert proc.stderr.count("\n") == 1 and "internal error" not in proc.stderr
    # A package of an extra names the extra (commands that need one say so before they start:
    # `gapscope plot`, `gapscope mcp`; this is the line for any other import of it).
    from gapscope.errors import missing_dependency_line

    assert missing_dependency_line(ModuleNotFoundError("No module named 'distributed'", name="distributed")) == (
        "gapscope: error: dask is missing: pip install -e '.[dask]' in the gapscope checkout brings it "
        "(the dask extra)")
    assert missing_dependency_line(ModuleNotFoundError("No module named 'foo'", name="foo")) is None


# ---------------------------------------------------------------------------------------------
# the timeline figure


def test_the_timeline_opens_on_the_range_with_the_most_to_win_not_the_compile():
    """hf_generate_compile: a 14.5 s compile_warmup, then generate_eager (the answer's first
    entry). The default view is generate_eager's GPU work, from its first kernel to its last
    (by the plain merge of tests/reference.py), not the whole 19 s."""
    import reference
    from gapscope.plots.source import load_source
    from gapscope.plots.timeline import timeline_data, timeline_figure

    path = TRACES / "hf_generate_compile.sqlite"
    src = load_source(path)
    assert src.result.answers()[0]["name"] == "generate_eager"
    (eager,) = [r for r in reference.ranges(str(path)) if r["name"] == "generate_eager"]
    ks = reference.kernels(str(path))
    mine = [k for k in ks if k["call"] and k["call"][0] == eager["tid"]
            and eager["start"] <= k["call"][1] <= eager["end"]]
    window, _ = timeline_data(src, (None, None))
    # The window spans the range's work, kernels and copies (the reference counts kernels only).
    assert window.start <= min(k["start"] for k in mine) and window.end >= max(k["end"] for k in mine)
    assert window.end - window.start < 300_000_000  # 239 ms, not the 19 s of the whole trace
    fig = timeline_figure(src)
    assert fig.texts[0].get_text() == "hf_generate_compile.sqlite: GPU timeline of generate_eager"
    # An explicit window keeps the old origin: every range's work.
    assert timeline_data(src, (0, 1_000_000))[0].end - timeline_data(src, (0, 1_000_000))[0].start == 1_000_000


def test_timeline_rows_one_nvtx_row_per_process_and_labels_that_fit(fsdp):
    from gapscope.plots.source import load_source
    from gapscope.plots.timeline import timeline_figure

    fig = timeline_figure(load_source(fsdp))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["NVTX · pid 144", "NVTX (nested) · pid 144", "NVTX · pid 145", "NVTX (nested) · pid 145",
                      "pid 144 · GPU 0 · stream 7", "pid 145 · GPU 1 · stream 15"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for t in ax.get_yticklabels():  # inside the figure: nothing clipped at its left edge
        assert t.get_window_extent(renderer).x0 >= 0, t.get_text()


def test_the_histograms_panels_are_the_names_with_the_most_gap_time_most_first(fsdp):
    from gapscope.plots.histogram import MAX_PANELS, histogram_data
    from gapscope.plots.source import load_source

    src = load_source(fsdp)
    data = histogram_data(src)
    gaps = [r["gap_ns"] for r in data.rows]
    every = sorted((r["gap_ns"] for r in src.result.by_name if r["gap_count"] > 0), reverse=True)
    assert gaps == every[:MAX_PANELS]  # most first: blocks.15 (2.63 ms), not aten::cat (47 us)
    assert data.names[0] == "FSDP::pre_forward (blocks.15._checkpoint_wrapped_module)"
