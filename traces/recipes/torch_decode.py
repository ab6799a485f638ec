"""A small transformer decode loop, eager vs torch.cuda.CUDAGraph replay, under NVTX ranges.

Recorded under nsys to make traces/torch_decode.sqlite (and, with --sync-every-step,
traces/torch_decode_sync.sqlite: the regression of a torch.cuda.synchronize() after every step).

Ranges (torch.cuda.nvtx push/pop): an outer `eager` and an outer `graph`, each holding one
`decode_step` range per step. One decode step runs every layer on one new token per sequence
(batch B) against a static KV cache: LayerNorm, fused QKV projection, K/V written into the cache
at the step's position (index_copy_ with a device-side position, so the step can be captured),
masked attention over the cache, output projection, MLP; the new hidden state is copied back into
the input buffer and the position is advanced on the device. Warm-up (including the graph
capture) runs before the ranges.

    nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none \
        --export sqlite -o torch_decode python3 traces/recipes/torch_decode.py --steps 32

Options added for the wave-2 recordings (traces/recipes/record_wave2.sh); without them the program
runs exactly as before:
  --device cpu       run on the CPU (a dry run: no streams, no graph; `graph` runs eagerly)
  --no-graph         the `graph` range runs its steps eagerly, nothing is captured (the regression
                     "a graph that stopped being captured")
  --unfused          every LayerNorm written out (mean, var, sub, rsqrt, mul, add) and GELU written
                     out (erf): the same math in more kernels (the regression "a fusion lost")
  --tracer torch     also run the PyTorch profiler (CPU+CUDA activities, record_shapes=False) around
                     the whole decode; every range is opened as NVTX and as record_function
  --tracer torch-steps  the profiler with schedule(wait=1, warmup=1, active=3, repeat=1) and
                     prof.step() after every decode step (ProfilerStep#N)
  --trace-out P      where the profiler's chrome trace goes (gzipped when P ends in .gz)
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import math
import os
import shutil

import torch
import torch.nn.functional as F
from torch import nn


def layer_norm_unfused(ln: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """nn.LayerNorm's math, one elementwise or reduction kernel at a time (in float32)."""
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    xc = xf - mu
    var = (xc * xc).mean(-1, keepdim=True)
    y = xc * torch.rsqrt(var + ln.eps)
    return (y * ln.weight + ln.bias).to(x.dtype)


def gelu_unfused(x: torch.Tensor) -> torch.Tensor:
    """F.gelu's exact (erf) formula, written out."""
    return 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))


class DecodeLayer(nn.Module):
    def __init__(self, d: int, heads: int, max_len: int, batch: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        shape = (batch, heads, max_len, self.dh)
        # Random cache contents (never zeros): positions beyond the step are masked anyway.
        self.register_buffer("k_cache", torch.randn(shape, dtype=dtype))
        self.register_buffer("v_cache", torch.randn(shape, dtype=dtype))
        self.register_buffer("arange", torch.arange(max_len))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).view(b, 1, 3, self.heads, self.dh).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, 1, dh]
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        scores = (q @ self.k_cache.transpose(-1, -2)) * (1.0 / math.sqrt(self.dh))
        scores = scores.masked_fill(self.arange > pos, float("-inf"))
        o = (scores.softmax(-1) @ self.v_cache).transpose(1, 2).reshape(b, 1, -1)
        x = x + self.out(o)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def forward_unfused(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """forward() with the layer norms and GELU written out (same math, more kernels);
        --unfused puts it in forward's place."""
        b = x.shape[0]
        q, k, v = self.qkv(layer_norm_unfused(self.ln1, x)).view(b, 1, 3, self.heads,
                                                                  self.dh).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, 1, dh]
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        scores = (q @ self.k_cache.transpose(-1, -2)) * (1.0 / math.sqrt(self.dh))
        scores = scores.masked_fill(self.arange > pos, float("-inf"))
        o = (scores.softmax(-1) @ self.v_cache).transpose(1, 2).reshape(b, 1, -1)
        x = x + self.out(o)
        return x + self.fc2(gelu_unfused(self.fc1(layer_norm_unfused(self.ln2, x))))


class Decoder(nn.Module):
    def __init__(self, d: int, heads: int, layers: int, max_len: int, batch: int,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecodeLayer(d, heads, max_len, batch, dtype)
                                    for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def step(self, x: torch.Tensor, pos: torch.Tensor) -> None:
        """One decode step, in place: x <- f(x), pos <- pos + 1 (capturable)."""
        h = x
        for layer in self.layers:
            h = layer(h, pos)
        x.copy_(self.ln_f(h))
        pos.add_(1)

    def step_unfused(self, x: torch.Tensor, pos: torch.Tensor) -> None:
        """step() with the final layer norm written out; --unfused puts it in step's place."""
        h = x
        for layer in self.layers:
            h = layer(h, pos)
        x.copy_(layer_norm_unfused(self.ln_f, h))
        pos.add_(1)


class _NoNvtx:
    """torch.cuda.nvtx's push/pop on a CPU build (a dry run): counts the ranges instead."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.depth = 0

    def range_push(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1
        self.depth += 1

    def range_pop(self) -> None:
        self.depth -= 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=32, help="decode steps per path")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--sync-every-step", action="store_true",
                    help="torch.cuda.synchronize() at the end of every decode step (the regression)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: a dry run without streams or graphs (`graph` runs eagerly)")
    ap.add_argument("--no-graph", action="store_true",
                    help="the `graph` range runs its steps eagerly, nothing captured (the regression)")
    ap.add_argument("--unfused", action="store_true",
                    help="layer norms and GELU written out: the same math in more kernels")
    ap.add_argument("--tracer", choices=("nvtx", "torch", "torch-steps"), default="nvtx",
                    help="torch: also the PyTorch profiler around the decode; torch-steps: with a "
                         "schedule(wait=1, warmup=1, active=3) and prof.step() per decode step")
    ap.add_argument("--trace-out", default="torch_decode.pt.trace.json.gz",
                    help="the profiler's chrome trace (with --tracer torch*; .gz: gzipped)")
    args = ap.parse_args()
    if args.steps > args.max_len:
        ap.error("--steps must not exceed --max-len")
    cuda = args.device == "cuda"
    use_graph = cuda and not args.no_graph
    if args.unfused:  # the written-out versions take the place of forward() and step()
        DecodeLayer.forward = DecodeLayer.forward_unfused
        Decoder.step = Decoder.step_unfused

    torch.manual_seed(0)
    dev, dtype = torch.device(args.device), torch.bfloat16
    model = Decoder(args.d_model, args.heads, args.layers, args.max_len, args.batch, dtype)
    model = model.to(dev, dtype).eval()
    x = torch.randn(args.batch, 1, args.d_model, device=dev, dtype=dtype)
    x0 = x.clone()
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    nvtx = torch.cuda.nvtx if cuda else _NoNvtx()
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    # --tracer torch*: the PyTorch profiler, and every range also a record_function.
    prof, tracer_ctx, open_fns = None, contextlib.nullcontext(), []
    trace_json = args.trace_out[:-3] if args.trace_out.endswith(".gz") else args.trace_out
    if args.tracer != "nvtx":
        from torch.profiler import ProfilerActivity, profile, record_function, schedule
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        if args.tracer == "torch":
            prof = profile(activities=activities, record_shapes=False)
        else:
            prof = profile(activities=activities, record_shapes=False,
                           schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                           on_trace_ready=lambda p: p.export_chrome_trace(trace_json))
        tracer_ctx = prof

    def range_push(name: str) -> None:
        nvtx.range_push(name)
        fn = record_function(name)
        fn.__enter__()
        open_fns.append(fn)

    def range_pop() -> None:
        open_fns.pop().__exit__(None, None, None)
        nvtx.range_pop()

    if prof is None:  # NVTX only, the calls of the original recordings
        range_push, range_pop = nvtx.range_push, nvtx.range_pop

    with torch.inference_mode():
        # Warm-up and capture, outside every range (on a side stream, as torch asks).
        if cuda:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model.step(x, pos)
            torch.cuda.current_stream().wait_stream(side)
        else:
            for _ in range(3):
                model.step(x, pos)
        if use_graph:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                model.step(x, pos)
        sync()

        def decode(path: str, run_step) -> None:
            x.copy_(x0)
            pos.zero_()
            sync()
            range_push(path)
            for _ in range(args.steps):
                range_push("decode_step")
                run_step()
                if args.sync_every_step:
                    sync()
                range_pop()
                if args.tracer == "torch-steps":
                    prof.step()
            sync()
            range_pop()

        with tracer_ctx:
            decode("eager", lambda: model.step(x, pos))
            decode("graph", graph.replay if use_graph else (lambda: model.step(x, pos)))

    if prof is not None:
        if args.tracer == "torch":
            prof.export_chrome_trace(trace_json)
        if trace_json != args.trace_out:
            with open(trace_json, "rb") as src, gzip.open(args.trace_out, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(trace_json)
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    print(f"torch {torch.__version__}, {name}, steps {args.steps}, "
          f"layers {args.layers}, batch {args.batch}, d_model {args.d_model}, "
          f"sync_every_step {args.sync_every_step}, final pos {int(pos.item())}")
    if not cuda or args.no_graph or args.unfused or args.tracer != "nvtx":
        print(f"device {args.device}, no_graph {args.no_graph}, unfused {args.unfused}, "
              f"tracer {args.tracer}" + (f", trace {args.trace_out}" if prof is not None else ""))
    if not cuda:
        print("ranges: " + ", ".join(f"{k} x{v}" for k, v in nvtx.counts.items())
              + f" (open at exit: {nvtx.depth})")


if __name__ == "__main__":
    main()
