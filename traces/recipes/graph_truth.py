"""Ground truth for gapscope's CUDA Graph prediction: programs whose cause of idle time is
injected by construction, each run eagerly and as a CUDA-graph replay of the same work, timed
without any profiler and recorded under nsys (node and graph level) and torch.profiler.

    python3 graph_truth.py time --out timings.json            # untraced: every case
    python3 graph_truth.py run --case sleep                   # one pass, NVTX ranges (for nsys)
    python3 graph_truth.py run --case sleep --tracer torch --trace-out sleep.pt.trace.json.gz

A case is the CUDA work of one step (`body`, captured once into a graph) and the host work around
it that a graph of the step would not capture (`before`, `after`: a sleep, a synchronize). The
eager step is before + body + after; the replayed step is before + graph.replay() + after. Cases
with their own replay rule (fallback, rerecord) say so.

`run` makes, per case, one range `eager` then one range `graph`, each holding `--steps` ranges
`step` (NVTX push/pop; with --tracer torch also record_function, so torch.profiler records them
as user annotations). Warm-up and capture run before the ranges. `time` runs each phase
`--repeats` times for `--time-steps` steps in steady state (after the same warm-up and capture)
and writes the median time per step, untraced, with every repeat's figure.

`--device cpu` is a dry run on a CPU build of torch (no graphs: the replay runs the body eagerly;
no NVTX), to check the program's plan without a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import shutil
import statistics
import sys
import time

import torch

# ------------------------------------------------------------------ ranges and device


class Ranges:
    """NVTX push/pop (CUDA) and, with torch.profiler on, record_function of the same name."""

    def __init__(self, cuda: bool, torch_tracer: bool) -> None:
        self.cuda = cuda
        self.torch_tracer = torch_tracer
        self.open: list = []
        self.counts: dict[str, int] = {}

    def push(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        if self.cuda:
            torch.cuda.nvtx.range_push(name)
        if self.torch_tracer:
            fn = torch.profiler.record_function(name)
            fn.__enter__()
            self.open.append(fn)

    def pop(self) -> None:
        if self.torch_tracer:
            self.open.pop().__exit__(None, None, None)
        if self.cuda:
            torch.cuda.nvtx.range_pop()

    @contextlib.contextmanager
    def range(self, name: str):
        self.push(name)
        try:
            yield
        finally:
            self.pop()


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def spin_python(n: int) -> int:
    """Pure-Python work between launches (the framework's own Python, as a model layer has)."""
    s = 0
    for i in range(n):
        s += i * i
    return s


# ------------------------------------------------------------------ cases


class Case:
    """One workload. Subclasses set up tensors and define body(); before()/after() are the host
    work of a step that a graph of the step would not capture."""

    name = "case"
    what = ""
    steps = 16          # traced steps per phase
    time_steps = 50     # untraced steps per timed repeat
    role = "validation"  # or "calibration", "coverage"
    #: Whether the case runs under torch.inference_mode (a training step needs autograd).
    inference = True

    def __init__(self, dev: torch.device) -> None:
        self.dev = dev
        self.graph = None

    def setup(self) -> None:
        pass

    def reset(self) -> None:
        """State put back before each phase (a decode position)."""

    def body(self) -> None:
        raise NotImplementedError

    def before(self) -> None:
        pass

    def after(self) -> None:
        pass

    def first_step_extra(self) -> None:
        """Work done once, in the first eager step of the traced pass only (one-off costs)."""

    def eager_step(self) -> None:
        self.before()
        self.body()
        self.after()

    def graph_step(self) -> None:
        self.before()
        self.replay()
        self.after()

    def replay(self) -> None:
        if self.graph is None:
            self.body()
        else:
            self.graph.replay()

    def capture(self) -> None:
        """Warm the body up on a side stream, then capture it (torch's recipe)."""
        if self.dev.type != "cuda":
            for _ in range(2):
                self.body()
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.body()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.body()
        torch.cuda.synchronize()
        for _ in range(3):
            self.graph.replay()
        torch.cuda.synchronize()

    def describe(self) -> dict:
        return {"what": self.what, "role": self.role, "steps": self.steps}


class Tiny(Case):
    name = "tiny"
    what = "200 tiny in-place adds per step (1,024 floats): launch-bound"
    role = "calibration"

    def setup(self) -> None:
        self.x = torch.zeros(1024, device=self.dev)

    def body(self) -> None:
        x = self.x
        for _ in range(200):
            x.add_(1.0)


class PyHost(Case):
    name = "pyhost"
    what = "60 tiny adds per step with ~25 us of Python between launches: host-bound"

    def setup(self) -> None:
        self.x = torch.zeros(1024, device=self.dev)

    def body(self) -> None:
        x = self.x
        for _ in range(60):
            x.add_(1.0)
            spin_python(400)


class Sleep(Case):
    name = "sleep"
    what = "a 3 ms host sleep then 200 tiny adds per step: stalls that graphs keep"

    def setup(self) -> None:
        self.x = torch.zeros(1024, device=self.dev)

    def before(self) -> None:
        time.sleep(0.003)

    def body(self) -> None:
        x = self.x
        for _ in range(200):
            x.add_(1.0)


class SyncEach(Case):
    name = "sync"
    what = "100 tiny adds then torch.cuda.synchronize() per step: a sync per step"

    def setup(self) -> None:
        self.x = torch.zeros(1024, device=self.dev)

    def body(self) -> None:
        x = self.x
        for _ in range(100):
            x.add_(1.0)

    def after(self) -> None:
        sync(self.dev)


class Gemm(Case):
    name = "gemm"
    what = "4 bf16 GEMMs of 4096^3 per step: GPU-bound"
    time_steps = 30

    def setup(self) -> None:
        n = 4096 if self.dev.type == "cuda" else 64
        dt = torch.bfloat16 if self.dev.type == "cuda" else torch.float32
        g = torch.Generator(device="cpu").manual_seed(0)
        self.a = torch.randn(n, n, generator=g).to(self.dev, dt)
        self.b = torch.randn(n, n, generator=g).to(self.dev, dt)
        self.c = torch.empty(n, n, device=self.dev, dtype=dt)

    def body(self) -> None:
        for _ in range(4):
            torch.matmul(self.a, self.b, out=self.c)


class Medium(Case):
    name = "medium"
    what = "100 adds on 2M floats per step (~4 us kernels): host and device near balance"

    def setup(self) -> None:
        self.x = torch.zeros(2 * 1024 * 1024, device=self.dev)

    def body(self) -> None:
        x = self.x
        for _ in range(100):
            x.add_(1.0)


class Streams(Case):
    name = "streams"
    what = "40 ping-pong rounds per step between two streams, an event wait each way"

    def setup(self) -> None:
        self.a = torch.zeros(1024, device=self.dev)
        self.b = torch.zeros(1024, device=self.dev)
        if self.dev.type == "cuda":
            self.s2 = torch.cuda.Stream()
            self.ev = [(torch.cuda.Event(), torch.cuda.Event()) for _ in range(40)]

    def body(self) -> None:
        if self.dev.type != "cuda":
            for _ in range(40):
                self.a.add_(1.0)
                self.b.add_(1.0)
            return
        cur = torch.cuda.current_stream()
        for e1, e2 in self.ev:
            self.a.add_(1.0)
            e1.record(cur)
            self.s2.wait_event(e1)
            with torch.cuda.stream(self.s2):
                self.b.add_(1.0)
                e2.record(self.s2)
            cur.wait_event(e2)


class Copies(Case):
    name = "copies"
    what = "per step: 1 MiB pinned host-to-device copy, 20 tiny kernels, 1 MiB device-to-host copy"

    def setup(self) -> None:
        pin = self.dev.type == "cuda"
        self.h_in = torch.ones(256 * 1024, pin_memory=pin)
        self.h_out = torch.empty(256 * 1024, pin_memory=pin)
        self.d = torch.empty(256 * 1024, device=self.dev)
        self.y = torch.zeros(1024, device=self.dev)

    def body(self) -> None:
        self.d.copy_(self.h_in, non_blocking=True)
        for _ in range(10):
            self.d.mul_(1.0001)
            self.y.add_(1.0)
        self.h_out.copy_(self.d, non_blocking=True)


class Decode(Case):
    """The transformer decode step of traces/recipes/torch_decode.py (static KV cache)."""

    name = "decode"
    what = ""

    def __init__(self, dev: torch.device, batch: int, d_model: int, name: str) -> None:
        super().__init__(dev)
        self.batch, self.d_model, self.name = batch, d_model, name
        self.what = (f"4-layer bf16 transformer decode step, batch {batch}, d_model {d_model}, "
                     "static KV cache of 128")

    def setup(self) -> None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from torch_decode import Decoder

        torch.manual_seed(0)
        cuda = self.dev.type == "cuda"
        dt = torch.bfloat16 if cuda else torch.float32
        d = self.d_model if cuda else 64
        self.model = Decoder(d, 16 if cuda else 4, 4, 128, self.batch, dt).to(self.dev, dt).eval()
        self.x = torch.randn(self.batch, 1, d, device=self.dev, dtype=dt)
        self.x0 = self.x.clone()
        self.pos = torch.zeros(1, dtype=torch.long, device=self.dev)

    def reset(self) -> None:
        self.x.copy_(self.x0)
        self.pos.zero_()

    def body(self) -> None:
        self.model.step(self.x, self.pos)

    def capture(self) -> None:
        super().capture()
        self.reset()


class TritonAdd(Case):
    name = "triton"
    what = "40 launches of a Triton elementwise kernel per step (64K floats)"

    def setup(self) -> None:
        self.x = torch.zeros(64 * 1024, device=self.dev)
        self.kernel = None
        if self.dev.type == "cuda":
            import triton
            import triton.language as tl

            @triton.jit
            def add_one(x_ptr, n, BLOCK: tl.constexpr):
                offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                m = offs < n
                tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)

            self.kernel = add_one
            self.grid = (triton.cdiv(self.x.numel(), 1024),)

    def body(self) -> None:
        if self.kernel is None:
            for _ in range(40):
                self.x.add_(1.0)
            return
        for _ in range(40):
            self.kernel[self.grid](self.x, self.x.numel(), BLOCK=1024)


class CupyTiny(Case):
    """CuPy kernels launched through the driver API (``cuLaunchKernel``), as CuPy, Triton and
    XLA launch; captured and replayed with CuPy's own stream capture."""

    name = "cupy_tiny"
    what = "200 tiny in-place CuPy adds per step (1,024 floats), driver-API launches: launch-bound"
    launches = 200
    python = 0

    def setup(self) -> None:
        self.cp = None
        if self.dev.type == "cuda":
            import cupy as cp

            self.cp = cp
            self.x = cp.zeros(1024, dtype=cp.float32)
            self.stream = cp.cuda.Stream(non_blocking=True)
        else:
            self.x = torch.zeros(1024)

    def body(self) -> None:
        x = self.x
        for _ in range(self.launches):
            x += 1.0
            if self.python:
                spin_python(self.python)

    def capture(self) -> None:
        if self.cp is None:
            super().capture()
            return
        with self.stream:  # warm-up, then capture, on a side stream (CuPy's recipe)
            for _ in range(3):
                self.body()
            self.stream.synchronize()
            self.stream.begin_capture()
            self.body()
            self.graph = CupyGraph(self.stream.end_capture(), self.stream)
        for _ in range(3):
            self.replay()
        self.cp.cuda.runtime.deviceSynchronize()


class CupyGraph:
    """A CuPy graph with torch.cuda.CUDAGraph's ``replay()``: a launch on its capture stream."""

    def __init__(self, graph, stream) -> None:
        self.graph, self.stream = graph, stream

    def replay(self) -> None:
        self.graph.launch(self.stream)


class CupyPyHost(CupyTiny):
    name = "cupy_pyhost"
    what = "60 tiny CuPy adds per step with ~25 us of Python between launches: host-bound"
    launches = 60
    python = 400


class OneOff(Case):
    name = "oneoff"
    what = ("150 tiny adds per step; the traced eager phase's first step also runs a first-use "
            "cuDNN convolution and cuBLAS GEMM of new shapes (one-off plan selection and loading)")

    def setup(self) -> None:
        self.x = torch.zeros(1024, device=self.dev)

    def body(self) -> None:
        x = self.x
        for _ in range(150):
            x.add_(1.0)

    def first_step_extra(self) -> None:
        dt = torch.float16 if self.dev.type == "cuda" else torch.float32
        img = torch.randn(8, 32, 56, 56, device=self.dev, dtype=dt)
        w = torch.randn(48, 32, 3, 3, device=self.dev, dtype=dt)
        torch.nn.functional.conv2d(img, w, padding=1)
        a = torch.randn(1000, 1500, device=self.dev, dtype=dt)
        (a @ a.T).sum()


class Fallback(Case):
    name = "fallback"
    what = ("an 8-layer MLP (1024 wide) decode step whose batch follows 1,2,4,8,16,2,16,8: graphs "
            "captured for batch 1, 2, 4, 8; a batch of 16 falls back to eager")
    role = "coverage"
    SIZES = (1, 2, 4, 8)
    SCHEDULE = (1, 2, 4, 8, 16, 2, 16, 8)

    def setup(self) -> None:
        torch.manual_seed(0)
        cuda = self.dev.type == "cuda"
        dt = torch.bfloat16 if cuda else torch.float32
        w = 1024 if cuda else 64
        self.layers = [torch.nn.Linear(w, w).to(self.dev, dt) for _ in range(8)]
        self.inputs = {b: torch.randn(b, w, device=self.dev, dtype=dt) for b in self.SIZES + (16,)}
        self.graphs: dict[int, object] = {}
        self.i = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for lin in self.layers:
            x = torch.nn.functional.gelu(lin(x))
        return x

    def reset(self) -> None:
        self.i = 0

    def batch(self) -> int:
        b = self.SCHEDULE[self.i % len(self.SCHEDULE)]
        self.i += 1
        return b

    def body(self) -> None:
        self.out = self.forward(self.inputs[self.batch()])

    def capture(self) -> None:
        with torch.inference_mode():
            for b in self.SIZES + (16,):
                for _ in range(3):
                    self.forward(self.inputs[b])
            sync(self.dev)
            if self.dev.type == "cuda":
                pool = None
                for b in sorted(self.SIZES, reverse=True):
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, pool=pool):
                        self.forward(self.inputs[b])
                    pool = g.pool()
                    self.graphs[b] = g
                sync(self.dev)
        self.reset()

    def graph_step(self) -> None:
        b = self.batch()
        g = self.graphs.get(b)
        if g is None:
            self.out = self.forward(self.inputs[b])  # no graph of this size: eager fallback
        else:
            g.replay()


class Rerecord(Case):
    name = "rerecord"
    what = "50 tiny adds per step; the graph phase captures a new graph every step, then replays it"
    role = "coverage"

    def setup(self) -> None:
        self.x = torch.zeros(1024, device=self.dev)

    def body(self) -> None:
        for _ in range(50):
            self.x.add_(1.0)

    def graph_step(self) -> None:
        if self.dev.type != "cuda":
            self.body()
            return
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self.body()
        g.replay()


class BigGraph(Case):
    name = "biggraph"
    what = "one step of 4,000 tiny adds: a large graph (4,000 kernel nodes)"
    role = "coverage"
    steps = 2
    time_steps = 5

    def setup(self) -> None:
        self.x = torch.zeros(1024, device=self.dev)

    def body(self) -> None:
        x = self.x
        for _ in range(4000):
            x.add_(1.0)

    def capture(self) -> None:
        """One warm-up and one replay, not three (the trace stays a few MB)."""
        if self.dev.type != "cuda":
            self.body()
            return
        self.body()
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.body()
        self.graph.replay()
        torch.cuda.synchronize()


def hf_what(model: str, heads: str, dims: str = "4 layers, hidden 1024", vocab: str = "32,000") -> str:
    """What a Hugging Face decode case runs: ``model`` (its class) with ``heads`` (its attention),
    ``dims`` (its layers and widths) and ``vocab`` (its vocabulary)."""
    return (f"Hugging Face {model} (random init: {dims}, {heads}, vocab {vocab}, bf16), "
            "one token per step, batch 1, against a StaticCache of 256 (its forward, the next token's "
            "argmax, the position advanced on the device)")


class HFLlama(Case):
    """A Hugging Face model's own forward as a decode step: a workload outside the injected
    causes, to check the prediction on (issue 37: other real workloads, the same way)."""

    name = "hf_llama"
    what = hf_what("LlamaForCausalLM", "16 heads")
    START = 64  # the decode begins after a prompt of this many positions

    #: The transformers config and model classes, and the key-value heads (on CUDA, on the CPU).
    ARCH = ("LlamaConfig", "LlamaForCausalLM")
    KV_HEADS = (16, 4)
    #: Whether the config is told its head size (hidden / heads; an architecture whose default
    #: is a size of its own), and any other settings of the architecture's config.
    HEAD_DIM = False
    CONFIG: dict = {}
    #: On CUDA: hidden size, layers, attention heads, MLP width and vocabulary; and whether the
    #: model is built on the device (a large one: no minutes of initialisation on the CPU).
    DIMS = (1024, 4, 16, 1024 * 11 // 4, 32000)
    BUILD_ON_DEVICE = False

    def setup(self) -> None:
        import transformers
        from transformers import StaticCache

        config_class, model_class = (getattr(transformers, name) for name in self.ARCH)
        torch.manual_seed(0)
        cuda = self.dev.type == "cuda"
        dt = torch.bfloat16 if cuda else torch.float32
        hidden, layers, heads, width, vocab = self.DIMS if cuda else (64, 2, 4, 64 * 11 // 4, 512)
        extra = {"head_dim": hidden // heads} if self.HEAD_DIM else {}
        cfg = config_class(vocab_size=vocab, hidden_size=hidden,
                           intermediate_size=width, num_hidden_layers=layers,
                           num_attention_heads=heads,
                           num_key_value_heads=self.KV_HEADS[0] if cuda else self.KV_HEADS[1],
                           max_position_embeddings=512, **extra, **self.CONFIG)
        if self.BUILD_ON_DEVICE and cuda:
            with torch.device(self.dev):
                self.model = model_class(cfg).to(dt).eval()
        else:
            self.model = model_class(cfg).to(self.dev, dt).eval()
        try:  # transformers 5: the cache is sized on its first update
            self.cache = StaticCache(config=cfg, max_cache_len=256)
        except TypeError:  # transformers 4
            self.cache = StaticCache(config=cfg, max_batch_size=1, max_cache_len=256, device=self.dev,
                                     dtype=dt)
        self.what += f"; transformers {transformers.__version__}"
        self.tok = torch.randint(3, cfg.vocab_size, (1, 1), device=self.dev)
        self.pos = torch.full((1,), self.START, dtype=torch.long, device=self.dev)

    def reset(self) -> None:
        self.pos.fill_(self.START)
        # transformers 5.2x keeps each static layer's write position in a tensor of its own (it
        # ignores cache_position): put it back in place, so a captured graph sees the same address.
        for layer in getattr(self.cache, "layers", ()):
            n = getattr(layer, "cumulative_length", None)
            if isinstance(n, torch.Tensor):
                n.fill_(self.START)

    def body(self) -> None:
        out = self.model(input_ids=self.tok, past_key_values=self.cache, cache_position=self.pos,
                         position_ids=self.pos.unsqueeze(0), use_cache=True)
        self.tok.copy_(out.logits[:, -1:].argmax(-1))
        self.pos.add_(1)

    def capture(self) -> None:
        super().capture()
        self.reset()


class HFQwen2(HFLlama):
    """Another Hugging Face architecture's forward as the decode step (biased q/k/v projections,
    grouped-query attention with 4 key-value heads): a second workload outside the suite's
    injected causes, recorded after the prediction was fitted."""

    name = "hf_qwen2"
    what = hf_what("Qwen2ForCausalLM", "16 heads, 4 key-value heads")

    ARCH = ("Qwen2Config", "Qwen2ForCausalLM")
    KV_HEADS = (4, 2)


class HFGemma(HFLlama):
    """A third Hugging Face architecture, recorded after the model and its calibration were fixed
    (part q): Gemma's GeGLU MLP (tanh GELU), RMSNorm of (1 + weight), embeddings scaled by the
    square root of the hidden size, one key-value head (multi-query attention)."""

    name = "hf_gemma"
    what = hf_what("GemmaForCausalLM", "16 heads of 64, one key-value head")

    ARCH = ("GemmaConfig", "GemmaForCausalLM")
    KV_HEADS = (1, 1)
    HEAD_DIM = True  # Gemma's own default is 256


class HFPhi3(HFLlama):
    """A fourth Hugging Face architecture, recorded after the model and its calibration were fixed
    (part r): Phi-3's fused q/k/v projection and fused gate/up projection (fewer, larger GEMMs a
    layer than Llama's)."""

    name = "hf_phi3"
    what = hf_what("Phi3ForCausalLM", "16 heads, 16 key-value heads, fused qkv and gate-up projections")

    ARCH = ("Phi3Config", "Phi3ForCausalLM")
    KV_HEADS = (16, 4)
    CONFIG = {"pad_token_id": 0, "eos_token_id": 2}  # Phi-3's defaults (32,000) lie outside the vocabulary


class HFLlama3Slice(HFLlama):
    """A decode step of a real model's size (part w): Llama-3-8B's layer dimensions and
    vocabulary, 4 of its 32 layers, so that the device's work a step (some 4 GB of weights read)
    is about as long as the host's launches: the regime between launch-bound and amortized, where
    the predicted speedup is neither large nor 1x. Recorded after the model was fixed."""

    name = "hf_llama3_slice"
    what = hf_what("LlamaForCausalLM", "32 heads of 128, 8 key-value heads",
                   "4 of Llama-3-8B's 32 layers, hidden 4096, MLP 14,336", "128,256")

    KV_HEADS = (8, 2)
    DIMS = (4096, 4, 32, 14336, 128256)
    CONFIG = {"rope_theta": 500000.0}
    BUILD_ON_DEVICE = True


class HFLlama70BSlice(HFLlama3Slice):
    """A decode step whose device work outlasts its host's (part w): Llama-3-70B's layer
    dimensions and vocabulary, 2 of its 80 layers (some 5.5 GB of weights read a step), the
    regime where a replay wins little and the prediction must say so."""

    name = "hf_llama70b_slice"
    what = hf_what("LlamaForCausalLM", "64 heads of 128, 8 key-value heads",
                   "2 of Llama-3-70B's 80 layers, hidden 8192, MLP 28,672", "128,256")

    DIMS = (8192, 2, 64, 28672, 128256)


class ConvNet(Case):
    """A small residual convolutional network's inference at batch 1 (cuDNN convolutions): a
    workload of another kind than the decoders, recorded after the model and its calibration
    were fixed (part t)."""

    name = "cnn_b1"
    what = ("ResNet-style CNN (a 3x3 stem, 8 residual blocks of two 3x3 convolutions with batch "
            "norm and ReLU, 64 channels, global pooling, a 1,000-way classifier), batch 1, 56x56 "
            "input, bf16, eval; the class's argmax kept on the device")
    BATCH = 1

    def setup(self) -> None:
        from torch import nn

        class Block(nn.Module):
            def __init__(self, c: int) -> None:
                super().__init__()
                self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
                self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                y = torch.relu(self.b1(self.c1(x)))
                return torch.relu(self.b2(self.c2(y)) + x)

        torch.manual_seed(0)
        cuda = self.dev.type == "cuda"
        dt = torch.bfloat16 if cuda else torch.float32
        c, side = (64, 56) if cuda else (8, 16)
        self.model = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                                   nn.ReLU(), *[Block(c) for _ in range(8)],
                                   nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                   nn.Linear(c, 1000)).to(self.dev, dt).eval()
        self.x = torch.randn(self.BATCH, 3, side, side, device=self.dev, dtype=dt)
        self.cls = torch.zeros(self.BATCH, dtype=torch.long, device=self.dev)

    def body(self) -> None:
        self.cls.copy_(self.model(self.x).argmax(-1))


class ConvNet32(ConvNet):
    """cnn_b1's network at batch 32: the device's work about as long as the host's launches, the
    middle ground between launch-bound and GPU-bound (part u)."""

    name = "cnn_b32"
    what = ConvNet.what.replace("batch 1,", "batch 32,")
    BATCH = 32


class CompiledDecode(Decode):
    """decode_b1's step compiled by torch.compile in Inductor's default mode (its own Triton
    kernels and cuBLAS calls, launched by its generated wrapper code, no graphs of its own),
    then captured and replayed as the other cases are: host work per kernel of another kind than
    eager PyTorch's (part u). On the CPU (a dry run) the step runs uncompiled."""

    def __init__(self, dev: torch.device) -> None:
        super().__init__(dev, 1, 1024, "compiled_b1")
        self.what = ("decode_b1's step (4-layer bf16 transformer decode step, batch 1, d_model "
                     "1024, static KV cache of 128) under torch.compile(mode='default', "
                     "fullgraph=True)")

    def setup(self) -> None:
        super().setup()
        self.fn = self.model.step
        if self.dev.type == "cuda":
            self.fn = torch.compile(self.model.step, mode="default", fullgraph=True, dynamic=False)

    def body(self) -> None:
        self.fn(self.x, self.pos)


class CompiledConvNet(ConvNet):
    """cnn_b1's step (the network and the class's argmax) compiled by torch.compile in Inductor's
    default mode (cuDNN's convolutions as extern kernels, the batch norms, ReLUs and adds fused
    into Triton kernels): a second compiled program, recorded after the compiled decoder (part v).
    On the CPU (a dry run) the step runs uncompiled."""

    name = "compiled_cnn"
    what = ConvNet.what + "; the step under torch.compile(mode='default', fullgraph=True)"

    def setup(self) -> None:
        super().setup()

        def step(x: torch.Tensor, cls: torch.Tensor) -> None:
            cls.copy_(self.model(x).argmax(-1))

        self.fn = step
        if self.dev.type == "cuda":
            self.fn = torch.compile(step, mode="default", fullgraph=True, dynamic=False)

    def body(self) -> None:
        self.fn(self.x, self.cls)


class TrainMLP(Case):
    """One training step (forward, loss, backward, optimizer) of a small MLP, captured whole as
    torch's documentation captures a network: the backward pass is launched from autograd's own
    device thread, not the thread that opened the step's range (gapscope: ``--threads process``).
    Recorded after the model and its calibration were fixed (part t)."""

    name = "train_mlp"
    what = ("one training step of a 4-layer MLP (Linear 1,024 x 1,024 and GELU, batch 32, fp32): "
            "forward, MSE loss, backward (autograd's device thread), AdamW (foreach, capturable)")
    inference = False

    def setup(self) -> None:
        from torch import nn

        torch.manual_seed(0)
        cuda = self.dev.type == "cuda"
        d = 1024 if cuda else 64
        self.model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(d, d), nn.GELU())]).to(self.dev)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, foreach=True, capturable=cuda)
        self.x = torch.randn(32, d, device=self.dev)
        self.y = torch.randn(32, d, device=self.dev)

    def body(self) -> None:
        # zero_grad(set_to_none) is host work only; inside the capture it lets backward allocate
        # the gradients from the graph's own pool (torch's whole-network capture).
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()


def make_cases(dev: torch.device) -> dict[str, Case]:
    cases = [Tiny(dev), PyHost(dev), Sleep(dev), SyncEach(dev), Gemm(dev), Medium(dev),
             Streams(dev), Copies(dev), Decode(dev, 1, 1024, "decode_b1"),
             Decode(dev, 256, 2048, "decode_b256"), TritonAdd(dev), OneOff(dev), Fallback(dev),
             Rerecord(dev), BigGraph(dev), HFLlama(dev), HFQwen2(dev), HFGemma(dev), HFPhi3(dev),
             CupyTiny(dev), CupyPyHost(dev), ConvNet(dev), TrainMLP(dev), ConvNet32(dev),
             CompiledDecode(dev), CompiledConvNet(dev), HFLlama3Slice(dev),
             HFLlama70BSlice(dev)]
    return {c.name: c for c in cases}


# ------------------------------------------------------------------ the two modes


def prepare(case: Case) -> None:
    case.setup()
    with torch.inference_mode(case.inference):
        case.reset()
        case.capture()
        case.reset()
    sync(case.dev)


def run_pass(case: Case, ranges: Ranges, steps: int, one_off: bool) -> dict:
    """The traced pass: `eager` then `graph`, each with `steps` ranges `step`. Returns each
    phase's host wall time per step under the tracer (the first eager step excluded, as the
    one-off work of `first_step_extra` runs in it)."""
    dev = case.dev
    wall = {}
    with torch.inference_mode(case.inference):
        for phase, step in (("eager", case.eager_step), ("graph", case.graph_step)):
            case.reset()
            sync(dev)
            with ranges.range(phase):
                for i in range(steps):
                    if i == 1:
                        t1 = time.perf_counter()
                    with ranges.range("step"):
                        if one_off and phase == "eager" and i == 0:
                            case.first_step_extra()
                        step()
                sync(dev)
                wall[phase + "_traced_step_s"] = (time.perf_counter() - t1) / max(1, steps - 1)
    return wall


def time_phase(case: Case, step, steps: int) -> float:
    """Seconds per step of `steps` steps, the queue drained before and after."""
    case.reset()
    sync(case.dev)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync(case.dev)
    return (time.perf_counter() - t0) / steps


def time_case(case: Case, repeats: int) -> dict:
    out = {"eager_s": [], "graph_s": []}
    with torch.inference_mode(case.inference):
        for _ in range(2):  # warm the paths up (first-use costs, allocator, the CPU's caches)
            time_phase(case, case.eager_step, 3)
            time_phase(case, case.graph_step, 3)
        for _ in range(repeats):
            out["eager_s"].append(time_phase(case, case.eager_step, case.time_steps))
            out["graph_s"].append(time_phase(case, case.graph_step, case.time_steps))
        if case.graph is not None:
            # The host cost of one cudaGraphLaunch: five launches timed on the host after the
            # queue drained (the GPU work of five replays outlasts them, so none waits).
            launches = []
            for _ in range(repeats):
                sync(case.dev)
                t0 = time.perf_counter()
                for _ in range(5):
                    case.graph.replay()
                launches.append((time.perf_counter() - t0) / 5)
                sync(case.dev)
            out["graph_launch_host_s"] = statistics.median(launches)
            out["graph_launch_host_all_s"] = launches
    e, g = statistics.median(out["eager_s"]), statistics.median(out["graph_s"])
    out.update(eager_step_s=e, graph_step_s=g, speedup=e / g, time_steps=case.time_steps,
               repeats=repeats)
    return out


def environment() -> dict:
    env = {"python": sys.version.split()[0], "torch": torch.__version__,
           "cuda": torch.version.cuda, "argv": sys.argv,
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        try:
            import triton
            env["triton"] = triton.__version__
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            env["triton"] = f"unavailable: {exc}"
    try:
        with open("/proc/cpuinfo") as f:
            env["cpu"] = next((line.split(":", 1)[1].strip() for line in f
                               if line.startswith("model name")), "?")
    except OSError:
        env["cpu"] = "?"
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("time", "run", "list"))
    ap.add_argument("--case", default="all", help="case names, comma-separated, or all")
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None)
    ap.add_argument("--steps", type=int, default=None, help="traced steps per phase (run)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per phase (time)")
    ap.add_argument("--time-steps", type=int, default=None, help="override steps per repeat")
    ap.add_argument("--out", default="timings.json", help="time: the JSON written")
    ap.add_argument("--tracer", choices=("nvtx", "torch"), default="nvtx")
    ap.add_argument("--timed", type=int, default=0, metavar="REPEATS",
                    help="run: also time the phases untraced, REPEATS times, before and after the "
                         "traced pass, in this process")
    ap.add_argument("--profiler-api", action="store_true",
                    help="run: the traced pass between cudaProfilerStart and cudaProfilerStop "
                         "(for nsys --capture-range=cudaProfilerApi)")
    ap.add_argument("--wall-out", default=None,
                    help="run: a JSON of each phase's traced wall time per step; {case} is replaced")
    ap.add_argument("--trace-out", default=None,
                    help="run --tracer torch: the chrome trace (.gz gzips it); {case} is replaced")
    args = ap.parse_args()
    name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    cases = make_cases(dev)
    if args.mode == "list":
        for c in cases.values():
            print(f"{c.name:12} {c.role:12} {c.what}")
        return 0
    chosen = list(cases) if args.case == "all" else args.case.split(",")
    unknown = [c for c in chosen if c not in cases]
    if unknown:
        ap.error(f"unknown case(s): {', '.join(unknown)}")

    if args.mode == "time":
        result = {"environment": environment(), "cases": {}}
        for nm in chosen:
            case = cases[nm]
            if args.time_steps:
                case.time_steps = args.time_steps
            t0 = time.perf_counter()
            prepare(case)
            r = time_case(case, args.repeats)
            r.update(case.describe())
            result["cases"][nm] = r
            print(f"{nm:12} eager {r['eager_step_s'] * 1e6:10.1f} us/step  graph "
                  f"{r['graph_step_s'] * 1e6:10.1f} us/step  speedup {r['speedup']:6.2f}x  "
                  f"({time.perf_counter() - t0:.1f} s)", flush=True)
            del case
            cases[nm] = None
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        return 0

    # run: one traced pass per case (usually one case per process)
    prof = None
    if args.tracer == "torch":
        acts = [torch.profiler.ProfilerActivity.CPU]
        if dev.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
    for nm in chosen:
        case = cases[nm]
        prepare(case)
        ranges = Ranges(dev.type == "cuda", args.tracer == "torch")
        steps = args.steps or case.steps
        untraced = {}
        if args.timed:
            # Untraced timings in this same process, before and after the traced pass: a
            # process's host speed differs from another's by up to 2x on a shared machine, so
            # only timings of the same process tell the tracer's cost apart from that.
            untraced["before"] = time_case(case, args.timed)
        if args.tracer == "torch":
            prof = torch.profiler.profile(activities=acts, record_shapes=False)
            with prof:
                wall_torch = run_pass(case, ranges, steps, one_off=True)
            out = (args.trace_out or "{case}.pt.trace.json.gz").replace("{case}", nm)
            plain = out[:-3] if out.endswith(".gz") else out
            prof.export_chrome_trace(plain)
            if plain != out:
                with open(plain, "rb") as src, gzip.open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.remove(plain)
        elif args.profiler_api:
            # nsys --capture-range=cudaProfilerApi: only the traced pass is recorded.
            cuda = dev.type == "cuda"
            sync(dev)
            if cuda:
                torch.cuda.profiler.start()
            wall = run_pass(case, ranges, steps, one_off=True)
            sync(dev)
            if cuda:
                torch.cuda.profiler.stop()
        else:
            wall = run_pass(case, ranges, steps, one_off=True)
        if args.tracer == "torch":
            wall = wall_torch
        if args.timed:
            untraced["after"] = time_case(case, args.timed)
            both = [untraced["before"], untraced["after"]]
            wall["untraced"] = untraced
            for key in ("eager_step_s", "graph_step_s"):
                wall["untraced_" + key] = statistics.mean(u[key] for u in both)
            wall["untraced_speedup"] = wall["untraced_eager_step_s"] / wall["untraced_graph_step_s"]
            wall["untraced_eager_spread"] = (max(u["eager_step_s"] for u in both)
                                             / min(u["eager_step_s"] for u in both) - 1)
        print(f"{nm}: ranges " + ", ".join(f"{k} x{v}" for k, v in ranges.counts.items())
              + "; per step: " + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in wall.items()
                                           if k.endswith("_s")), flush=True)
        if args.timed:
            print(f"{nm}: untraced speedup {wall['untraced_speedup']:.2f}x, eager before/after "
                  f"spread {wall['untraced_eager_spread'] * 100:.0f}%", flush=True)
        if args.wall_out:
            path = args.wall_out.replace("{case}", nm)
            with open(path, "w") as f:
                json.dump({"case": nm, "tracer": args.tracer, "steps": steps, **wall}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
