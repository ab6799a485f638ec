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
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch import nn


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
    args = ap.parse_args()
    if args.steps > args.max_len:
        ap.error("--steps must not exceed --max-len")

    torch.manual_seed(0)
    dev, dtype = torch.device("cuda"), torch.bfloat16
    model = Decoder(args.d_model, args.heads, args.layers, args.max_len, args.batch, dtype)
    model = model.to(dev, dtype).eval()
    x = torch.randn(args.batch, 1, args.d_model, device=dev, dtype=dtype)
    x0 = x.clone()
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    nvtx = torch.cuda.nvtx

    with torch.inference_mode():
        # Warm-up and capture, outside every range (on a side stream, as torch asks).
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model.step(x, pos)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model.step(x, pos)
        torch.cuda.synchronize()

        def decode(path: str, run_step) -> None:
            x.copy_(x0)
            pos.zero_()
            torch.cuda.synchronize()
            nvtx.range_push(path)
            for _ in range(args.steps):
                nvtx.range_push("decode_step")
                run_step()
                if args.sync_every_step:
                    torch.cuda.synchronize()
                nvtx.range_pop()
            torch.cuda.synchronize()
            nvtx.range_pop()

        decode("eager", lambda: model.step(x, pos))
        decode("graph", graph.replay)

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, steps {args.steps}, "
          f"layers {args.layers}, batch {args.batch}, d_model {args.d_model}, "
          f"sync_every_step {args.sync_every_step}, final pos {int(pos.item())}")


if __name__ == "__main__":
    main()
