"""Every name gapscope gives, defined once, as data: the gap categories, the verdicts and their
rules' order, the trace formats and tracers (with the calibration of what a tracer costs), the
GPUs whose replay turnaround was measured, and the bit layout of process and thread ids.

Every layer reads its lists from here (attribution, verdicts, the schema check, compare, the
renderers, the figures, the Perfetto export, the readers' registry), so adding an entry is one
edit here plus the rule or reader that produces it; ``tests/test_catalog.py`` walks each list
and fails when a layer does not handle an entry. This module imports nothing but the standard
library (the result cache's hits and the renderers import it without numpy).
"""

from __future__ import annotations

from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------
# Gap categories: why the GPU was idle (docs/metrics.md, "Gap attribution")


@dataclass(frozen=True)
class Category:
    """One reason the GPU sat idle. ``name`` is its key in ``gap_by_category_ns`` and its label
    everywhere; the order of :data:`CATEGORIES` is the order of every table and array."""

    name: str
    #: the phrase a verdict reads when this category holds the most gap time
    cause: str
    #: what it is, in one line (tables' notes, the answer block, docs)
    meaning: str
    #: what a CUDA Graph replay of the same work does to it: "removes" (the host's per-kernel
    #: work), "shrinks" (device-side hand-offs become graph edges), "keeps"
    by_graph: str
    #: what to do about it (the answer block's "what next")
    remedy: str
    #: a figure's colour (Okabe-Ito, readable with colour-vision deficiencies)
    colour: str
    #: chrome://tracing's reserved colour name (Perfetto colours slices by name instead)
    perfetto: str
    #: the header on a narrow terminal (None: the name) and the column's priority there (0 is
    #: never dropped; higher goes first)
    short: str | None = None
    priority: int = 0
    #: compare gates a rise of it (``gap_by_category_ns.<name>``) with this word for the metric
    label: str = ""
    worse_means: str = ""


CATEGORIES: tuple[Category, ...] = (
    Category("launch", "launch-bound", "the host was inside a launch call, or the work was in flight after it",
             "removes", "capture the loop in a CUDA graph (torch.cuda.graphs, torch.compile "
             "mode=\"reduce-overhead\", vLLM/SGLang CUDA graphs) or fuse kernels",
             "#D55E00", "terrible", label="launch time", worse_means="the GPU waits longer on launch calls"),
    Category("host", "host-bound", "the host ran framework code between launches (short stretches without a CUDA call)",
             "removes", "capture the loop in a CUDA graph, or move Python work out of the loop",
             "#EDA27F", "olive", label="host time",
             worse_means="more host time between launches (framework overhead)"),
    Category("stall", "host stalls", "the host ran over 1 ms without any CUDA call (compiling, loading data, sleeping)",
             "keeps", "overlap the host work with the GPU (prefetch data on a worker, compile ahead of time)",
             "#F0E442", "rail_animation", priority=1, label="stall time",
             worse_means="the host stalls (compiling, loading data) while the GPU idles"),
    Category("setup", "setup (loading, allocs)", "module loading, allocations, stream/event/graph creation",
             "keeps", "warm up before the loop (CUDA_MODULE_LOADING=EAGER, a caching allocator, "
             "capture graphs once)", "#56B4E9", "rail_idle", priority=1, label="setup time",
             worse_means="module loading or allocations while the GPU idles"),
    Category("sync", "host syncs idle the GPU", "the host waited in a synchronizing call and then relaunched",
             "keeps", "drop the synchronize from the loop (.item(), .cpu(), torch.cuda.synchronize) "
             "or defer it a few steps", "#CC79A7", "bad", priority=1, label="sync time",
             worse_means="the host synchronizes longer"),
    Category("dependency", "waits on other streams",
             "queued work waited on another stream (an event wait, the legacy default stream)",
             "shrinks", "overlap independent streams, or capture the hand-offs in a graph",
             "#0072B2", "rail_load", short="dep", priority=2, label="dependency time",
             worse_means="longer waits on other streams"),
    Category("memop", "idle behind copies",
             "copies (not counted as busy) covered the gap, or the work waited on its own stream's copy or memset",
             "keeps", "overlap copies with compute on another stream (pinned memory, non_blocking=True)",
             "#E69F00", "yellow", short="mem", priority=2, label="time idle behind copies",
             worse_means="the GPU waits longer behind copies"),
    Category("pipeline", "device turnaround", "queued work with nothing to wait for: the device's own turnaround",
             "shrinks", "fuse small kernels; graphs shorten the turnaround a little",
             "#009E73", "good", short="pipe", priority=1, label="device turnaround",
             worse_means="more device turnaround between kernels"),
    Category("unknown", "gaps not attributable", "the next kernel has no launching call in the trace",
             "keeps", "record with CUDA API tracing on (nsys -t cuda; torch.profiler with CUDA activities)",
             "#8C8C8C", "grey", short="unk", priority=3, label="unattributed gap time",
             worse_means="more gap time without a launching call"),
)
CATEGORY_NAMES: tuple[str, ...] = tuple(c.name for c in CATEGORIES)
#: The categories a CUDA Graph replay removes: the host's per-kernel work.
REMOVED_BY_GRAPHS: tuple[str, ...] = tuple(c.name for c in CATEGORIES if c.by_graph == "removes")
#: The host-side categories a replay keeps; they name a replayed row's verdict when they dominate.
HOST_WAITS: tuple[str, ...] = ("stall", "setup", "sync")
#: A gap without attribution (--no-attribution): its colour and chrome://tracing name.
GAP_COLOUR, GAP_PERFETTO = "#B0B0B0", "grey"


def category(name: str) -> Category:
    """The category called ``name`` (KeyError for any other)."""
    return _CATEGORY_BY_NAME[name]


_CATEGORY_BY_NAME = {c.name: c for c in CATEGORIES}

# ---------------------------------------------------------------------------------------------
# Verdicts (docs/metrics.md, "Verdicts")


@dataclass(frozen=True)
class Verdict:
    """One verdict code. ``reading`` is the cause the tables show; a row with a prediction adds
    the predicted win after it (``launch-bound: graphs ~4.4x``), one without reads ``plain``."""

    code: str
    reading: str
    #: compare's rank (``verdict:same``): 0 nothing to fix; 1 what a graph leaves or graphs
    #: already replayed; 2 some launch gaps; 3 gaps that matter
    rank: int
    #: the rule, in words (docs/metrics.md's table is this column)
    rule: str
    #: the reading of a row without a prediction (no attribution, or a result of schema 1 or 2)
    plain: str = ""


#: Every verdict, in the order its rule is tried (the first that matches wins). The codes of the
#: categories' own verdicts follow the category they name.
VERDICTS: tuple[Verdict, ...] = (
    Verdict("no_work", "no GPU work", 0, "no GPU span"),
    Verdict("too_small", "too few kernels to judge", 0, "fewer than MIN_KERNELS kernels, and not a graph replay"),
    Verdict("warmup", "warm-up (one-time)", 1,
            "a range (or a name of one instance) whose host work before its GPU work (its wall time less its "
            "GPU span) is at least a third of its wall time and WARMUP_NS: compiling, capturing graphs"),
    Verdict("graph_replay", "graphs", 1,
            "more than half of its kernels came from graph launches; the reading says what the replays "
            "leave: host waits (stall, setup, sync) when they hold the most, else host time between "
            "replays or the device's turnaround, whichever holds more; inside not traced at graph level"),
    Verdict("amortized", "gaps amortized", 0,
            "steady-state gap fraction below AMORTIZED and no predicted win above WONT"),
    Verdict("launch_bound", "launch-bound", 3,
            "launch and host gap time together hold the most (launch at least host)",
            "launch-bound: graphs pay"),
    Verdict("host_bound", "host-bound", 3, "launch and host gap time together hold the most (host more)",
            "host-bound: graphs pay"),
    Verdict("stall", "host stalls", 3, "stall gap time holds the most", "host stalls: graphs won't"),
    Verdict("setup", "setup (loading, allocs)", 3, "setup gap time holds the most"),
    Verdict("sync", "host syncs idle the GPU", 3, "sync gap time holds the most"),
    Verdict("dependency", "waits on other streams", 1, "dependency gap time holds the most"),
    Verdict("memop", "idle behind copies", 1, "memop gap time holds the most"),
    Verdict("pipeline", "device turnaround", 1, "pipeline gap time holds the most"),
    Verdict("unknown", "gaps not attributable", 1, "unknown gap time holds the most"),
    Verdict("some_launch_gaps", "some launch gaps", 2,
            "launch and host gap time hold the most, and a replay is predicted to win at most WONT (without "
            "a prediction: the gap fraction is below LAUNCH_BOUND)"),
)
VERDICT_CODES: tuple[str, ...] = tuple(v.code for v in VERDICTS)
VERDICT_RANK: dict[str, int] = {v.code: v.rank for v in VERDICTS}
READINGS: dict[str, str] = {v.code: v.reading for v in VERDICTS}
PLAIN_READINGS: dict[str, str] = {v.code: v.plain or v.reading for v in VERDICTS}
#: The replay readings: what the replays left, by where the gap time was.
REPLAY_READINGS = {
    "between": "graphs: host between",
    "inside": "graphs: device turnaround",
    "untraced": "graphs (inside not traced: record with --cuda-graph-trace=node)",
    "recorded": "graphs: re-recorded, not reused",
}

#: The thresholds the rules name (docs/metrics.md, "Verdicts"): below AMORTIZED the gaps are
#: amortized; at LAUNCH_BOUND and above they matter (rules without a prediction); a predicted win
#: at or below WONT reads "graphs won't"; a row of fewer than MIN_KERNELS kernels gets no verdict.
AMORTIZED = 0.05
LAUNCH_BOUND = 0.20
WONT = 1.05
MIN_KERNELS = 10
#: A range whose wall time is host work before its GPU work by at least this much (and at
#: least half of it) is a warm-up.
WARMUP_NS = 100_000_000
#: Without attribution, gaps whose median is longer than this are host-side stalls.
LAUNCH_SCALE_NS = 100_000
#: A row is a graph replay when more than this share of its kernels came from graph launches.
GRAPH_SHARE = 0.5
#: The host's speed varied during the recording (a warning: docs/metrics.md, "Steady state") when a
#: range name's eager instances of the same work, at least HOST_SPEED_INSTANCES of them, have an
#: upper quartile of steady span at least HOST_SPEED_SPREAD times their lower quartile.
HOST_SPEED_SPREAD = 1.5
HOST_SPEED_INSTANCES = 8
#: The modes a range instance runs in, as `gapscope compare` names them (docs/ci.md, "Modes"):
#: replayed (more than GRAPH_SHARE of its kernels from graph launches) or eager, and one-off
#: when it holds one-off gaps (setup, a long stall that does not repeat), else steady.
INSTANCE_MODES: tuple[str, ...] = ("eager", "replayed", "eager one-off", "replayed one-off")


def verdict_of(code: str) -> Verdict:
    """The verdict ``code`` (KeyError for any other)."""
    return _VERDICT_BY_CODE[code]


_VERDICT_BY_CODE = {v.code: v for v in VERDICTS}

# ---------------------------------------------------------------------------------------------
# Trace formats (docs/formats.md)


@dataclass(frozen=True)
class TraceFormat:
    """One input format. ``name`` is its reader's key (``gapscope.trace.handle.READERS``) and
    the ``format`` of a resolved input; its reader is class ``cls`` of ``gapscope.trace.<module>``,
    opened with the path and ``args``."""

    name: str
    words: str
    module: str
    cls: str
    args: tuple[str, ...]
    #: the tracer that writes it (a key of :data:`TRACERS`)
    tracer: str
    #: a repeat of `gapscope analyze` keeps its result in the result cache
    result_cache: bool
    #: what its ranges are called in a report's titles
    ranges: str = "NVTX ranges"


FORMATS: tuple[TraceFormat, ...] = (
    TraceFormat("nsys-sqlite", "nsys SQLite export", "nsys_sqlite", "NsysSqlite", (), "nsys", True),
    TraceFormat("nsys-parquet", "nsys parquetdir export", "nsys_columnar", "NsysColumnar", ("nsys-parquet",),
                "nsys", False),
    TraceFormat("nsys-arrow", "nsys arrowdir export", "nsys_columnar", "NsysColumnar", ("nsys-arrow",), "nsys",
                False),
    TraceFormat("nsys-rep", "Nsight Systems report", "nsys_report", "NsysReport", (), "nsys", False),
    TraceFormat("kineto", "PyTorch profiler trace", "kineto", "Kineto", (), "torch", True, "ranges"),
)
FORMAT_NAMES: tuple[str, ...] = tuple(f.name for f in FORMATS)


def trace_format(name: str) -> TraceFormat:
    """The format called ``name`` (KeyError for any other)."""
    return _FORMAT_BY_NAME[name]


_FORMAT_BY_NAME = {f.name: f for f in FORMATS}

# ---------------------------------------------------------------------------------------------
# Tracers and what they cost the traced program (docs/metrics.md, "Predicted CUDA Graph speedup")


@dataclass(frozen=True)
class Tracer:
    """A profiler that writes traces, with the calibration of what it adds to the traced program
    per eager launch (docs/metrics.md, "Predicted CUDA Graph speedup"):

    * ``launch_call_ns``: what an untraced launch call costs the host, the rest of a traced call's
      duration being the tracer's (None: the tracer's cost is not read from the calls' duration);
    * ``per_launch_ns``, ``per_op_ns`` and ``per_call_ns``: what the tracer adds per kernel launch,
      per recorded framework operator and per recorded CUDA call other than a launch (an event
      record, a stream wait, a copy), on a host whose traced launch call lasts
      ``reference_call_ns`` (None: the same on every host); on another host they scale with its
      traced launch call;
    * ``*_low``/``*_high``: the bounds of the prediction's range (the untraced call's; the
      per-launch and per-operator cost as a multiple of its value);
    * ``per_inductor_launch_ns``: what it adds, on the same terms, per launch of torch.compile's
      Triton code (a record function Inductor wraps each launch in while the tracer runs)."""

    name: str
    words: str
    launch_call_ns: float | None
    launch_call_low_ns: float | None
    launch_call_high_ns: float | None
    per_launch_ns: float
    per_op_ns: float
    per_call_ns: float
    reference_call_ns: float | None
    cost_low: float
    cost_high: float
    per_inductor_launch_ns: float = 0.0


TRACERS: dict[str, Tracer] = {
    # nsys: the traced launch call less an untraced one's 2 us (the H200's tiny loop).
    "nsys": Tracer("nsys", "Nsight Systems", 2_000.0, 1_000.0, 3_000.0, 0.0, 0.0, 0.0, None, 1.0, 1.0),
    # torch.profiler: 0.88 us per operator and 1.41 us per kernel launch where the traced launch
    # call lasts 4.27 us: traced and untraced passes alternated in one process on the H100 host
    # (traces/truth/h100_profiler_cost_h.json, 11 programs; each measured 0.89-1.58x the fit);
    # 0.275 us per other CUDA call: what the streams program's 320 event calls a step cost beyond
    # its launches there (the same on two other hosts: 0.21-0.30 us); 6.4 us per launch of
    # torch.compile's Triton code (Inductor's record function around it): what compiled_b1's 26
    # such launches a step cost beyond the rest of the model, traced and untraced alternated on
    # another H100 host (traces/truth/h100_profiler_cost_v.json; compiled_cnn there: 5.0 us).
    "torch": Tracer("torch", "torch.profiler", None, None, None, 1_409.5, 881.5, 275.0, 4_271.2, 0.85, 1.6,
                    6_400.0),
}

# ---------------------------------------------------------------------------------------------
# GPUs: what a CUDA Graph replay costs per kernel boundary and per launch


@dataclass(frozen=True)
class GraphCosts:
    """A replay's device turnaround per kernel boundary (when the trace holds no replay to
    measure it from) and the untraced host cost of one graph launch call: ``launch_ns`` plus
    ``launch_per_node_ns`` per kernel node."""

    turnaround_ns: float
    turnaround_low_ns: float
    turnaround_high_ns: float
    launch_ns: float
    launch_per_node_ns: float


#: By GPU name as the trace records it (a case-insensitive substring match, first wins); the
#: last entry is the default for any other GPU, with a wider range. The H200's from the ground
#: truth's node-level replays, the H100's from traces/recipes/graph_sizes.py's untraced chains
#: (docs/metrics.md, "Calibration").
GPU_GRAPH_COSTS: tuple[tuple[str, GraphCosts], ...] = (
    ("H200", GraphCosts(260.0, 180.0, 600.0, 5_000.0, 7.0)),
    ("H100", GraphCosts(140.0, 80.0, 400.0, 5_000.0, 7.0)),
    ("", GraphCosts(300.0, 150.0, 1_000.0, 5_000.0, 10.0)),
)


#: What CUPTI reads inside a traced replay per kernel boundary whatever the GPU's own turnaround:
#: 250-267 ns on an H100 for chains whose untraced turnaround is 89-345 ns (traces/truth/
#: h100_graph_sizes.json), 250-273 ns in the node-level truth traces of both GPUs' tiny loops.
#: A trace's own replays that turn around in no more than this tell the tracer's reading more
#: than the GPU's: the prediction takes the GPU's calibration where that is lower, and the range
#: spans both (docs/metrics.md, "Predicted CUDA Graph speedup").
TRACED_REPLAY_GAP_NS = 300.0


#: How much shorter an eager kernel can run inside a replay, for the graph ceiling (an upper
#: bound): 1 us kernels took 91-116 ns less per node inside a 4,000-node replay than eager,
#: turnaround included (three H100 recordings on two hosts, traced at graph level); CUPTI timed
#: them 50 ns shorter (docs/metrics.md, "Graph ceiling"). The ceiling takes at most half of a
#: row's busy time off this way.
REPLAY_KERNEL_SAVING_NS = 150.0


def graph_costs(gpu: str | None) -> GraphCosts:
    """The replay costs of the GPU named ``gpu`` (the default for an unknown or absent name)."""
    text = (gpu or "").lower()
    for key, costs in GPU_GRAPH_COSTS:
        if key.lower() in text:
            return costs
    return GPU_GRAPH_COSTS[-1][1]

# ---------------------------------------------------------------------------------------------
# Libraries by their kernels (docs/metrics.md, "Steady state": what a one-off stall ended in)

#: A library and the lower-case substrings that name its kernels; the first library whose
#: substring a kernel's name holds is the kernel's (Triton before cuBLAS: Inductor's matmuls are
#: named ``triton_..._mm``, cuBLAS's kernels ``nvjet_...``, ``..._gemm...``, ``gemv...``).
KERNEL_LIBRARIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cuDNN", ("cudnn", "nchwtonhwc", "nhwctonchw")),  # and its layout transforms around convolutions
    ("Triton", ("triton_",)),
    ("NCCL", ("nccl",)),
    ("FlashAttention", ("flash_fwd", "flash_bwd")),
    ("cuBLAS", ("cublas", "nvjet", "gemm", "gemv")),
)
#: A kernel of none of those libraries (a library the answer does not name).
OTHER_KERNELS = "other kernels"


def kernel_library(name: str) -> str:
    """The library of the kernel called ``name`` (KERNEL_LIBRARIES), else OTHER_KERNELS."""
    text = name.lower()
    for library, marks in KERNEL_LIBRARIES:
        if any(m in text for m in marks):
            return library
    return OTHER_KERNELS


# ---------------------------------------------------------------------------------------------
# Stream kinds (docs/metrics.md, "Gap attribution": the legacy default stream's implicit
# synchronization)

#: What a stream was created as, indexed by CUPTI's stream flag (nsys's ENUM_CUPTI_STREAM_TYPE,
#: the ``flag`` of TARGET_INFO_CUDA_STREAM): 0 unknown, 1 created with default flags (it
#: synchronizes with the legacy default stream), 2 created non-blocking, 3 the legacy default
#: (NULL) stream itself. The ``kind`` column of the streams frame holds these codes.
STREAM_KINDS: tuple[str, ...] = ("unknown", "blocking", "non-blocking", "null")
STREAM_UNKNOWN, STREAM_BLOCKING, STREAM_NON_BLOCKING, STREAM_NULL = range(len(STREAM_KINDS))

# ---------------------------------------------------------------------------------------------
# Process and thread ids


#: nsys's globalPid/globalTid keep the process id above bit 24 and the thread id in the low
#: 24 bits; every format's thread keys are packed so (the PyTorch profiler's too).
PROCESS_SHIFT = 24
THREAD_MASK = (1 << PROCESS_SHIFT) - 1


def process_of(global_id):  # type: ignore[no-untyped-def]
    """The process key of nsys global ids (an int or a numpy integer array): ``id >> 24``."""
    return global_id >> PROCESS_SHIFT


def thread_of(global_id):  # type: ignore[no-untyped-def]
    """The thread id inside its process (an int or a numpy integer array): the low 24 bits."""
    return global_id & THREAD_MASK


def pid_of(global_id):  # type: ignore[no-untyped-def]
    """The operating system's process id of a global id: the process key's low 24 bits."""
    return (global_id >> PROCESS_SHIFT) & THREAD_MASK


def global_id(process, thread):  # type: ignore[no-untyped-def]
    """A thread key from its process key and thread id, as nsys packs them."""
    return (process << PROCESS_SHIFT) | thread


def process_key(pid, vm=0, hw=0):  # type: ignore[no-untyped-def]
    """The process key of a process named by its parts, as tables such as
    TARGET_INFO_CUDA_STREAM name it (``processId``, ``vmId``, ``hwId``): nsys's globalPid holds
    the process id in bits 24-47, the VM id in bits 48-55 and the hardware id in bits 56-63, so
    the key (``globalPid >> 24``) holds them from bits 0, 24 and 32."""
    return (hw << 32) | (vm << PROCESS_SHIFT) | pid
