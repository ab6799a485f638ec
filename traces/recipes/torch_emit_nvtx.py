"""A small transformer training loop under torch.autograd.profiler.emit_nvtx: PyTorch's per-op NVTX ranges.

Recorded under nsys to make torch_emit_nvtx.sqlite (traces/recipes/record_wave2.sh). A 2-layer
nn.TransformerEncoder (d_model 256, 4 heads, batch 8, sequence 64) with a linear head, cross
entropy, AdamW; one warm-up step outside every range, then --steps steps (default 3) under
emit_nvtx(record_shapes=True), each inside a user range `train_step` (torch.cuda.nvtx push/pop).
emit_nvtx adds one range per op, named like
`aten::mul, seq = 46174, op_id = 993406, sizes = [[8, 256], []]`; the backward ops' ranges are
opened on autograd's own thread. No synchronize inside the steps (one after the loop).

    nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none \
        --export sqlite -o torch_emit_nvtx python3 traces/recipes/torch_emit_nvtx.py
"""

from __future__ import annotations

import argparse
import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from wave2_util import Ranges, add_device_arg, sync, torch_device


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_arg(ap)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--classes", type=int, default=16)
    args = ap.parse_args()

    dev = torch_device(args.device)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(args.d_model, args.heads, 4 * args.d_model,
                                       batch_first=True)
    model = nn.ModuleDict(dict(
        encoder=nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False),
        head=nn.Linear(args.d_model, args.classes))).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.seq, args.d_model, device=dev)
    y = torch.randint(0, args.classes, (args.batch,), device=dev)
    rng = Ranges.for_torch(dev)

    def train_step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        h = model["encoder"](x)
        loss = F.cross_entropy(model["head"](h.mean(1)), y)
        loss.backward()
        opt.step()
        return loss.detach()

    first = train_step()  # warm-up: cuBLAS, allocator, AdamW state; outside every range
    sync(dev)
    if dev.type == "cuda":
        per_op = torch.autograd.profiler.emit_nvtx(record_shapes=True)
    else:  # a CPU build has no NVTX: the dry run runs the loop without the per-op ranges
        per_op = contextlib.nullcontext()
    with per_op:
        for _ in range(args.steps):
            with rng.range("train_step"):
                loss = train_step()
    sync(dev)
    print(f"torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0) if dev.type == 'cuda' else 'cpu (no emit_nvtx)'}, "
          f"encoder layers {args.layers}, d_model {args.d_model}, batch {args.batch}, "
          f"seq {args.seq}, steps {args.steps}, loss {float(first):.4f} -> {float(loss):.4f}")
    print(rng.summary())


if __name__ == "__main__":
    main()
