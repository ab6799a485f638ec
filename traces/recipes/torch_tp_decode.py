"""A tensor-parallel decode loop on several GPUs (torch.distributed, NCCL, one process per GPU),
with an artificial host delay on one rank: the recording behind issue 19's quality bar.

Each layer holds a column-parallel projection and a row-parallel one for its attention stand-in
and for its MLP (Megatron's split), so every layer ends each half with an NCCL all-reduce of the
partial sums: 2 x --layers all-reduces per decode step, on the compute stream, in the same order
on every rank. Every step reads its token back (``torch.cuda.synchronize()``, as a decode loop's
sampling does), and on ``--delay-rank`` every ``--delay-every``-th step starts only after the
host slept ``--delay-ms``: that rank reaches the step's first all-reduce late, its peers wait
inside it, and the time it slept is a gap on its own GPU just before that collective.

Run under torchrun, one nsys per rank (traces/recipes/record_multi_gpu.sh):

    torchrun --standalone --nproc_per_node 2 --no-python nsys profile -t cuda,nvtx \
        --capture-range=cudaProfilerApi --capture-range-end=stop --export sqlite \
        -o rank%q{RANK} python3 traces/recipes/torch_tp_decode.py --delay-rank 1 --delay-ms 5

Only the measured steps are captured (cudaProfilerStart/Stop around them: the warm-up, NCCL's
communicator set-up and the barriers stay out). Each step is one NVTX range ``decode_step``.
``--summary PATH`` writes, from the delayed rank, what the test needs to check the report: the
steps it delayed, the time each sleep really took (time.perf_counter around time.sleep), the
all-reduces per step.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


def layer_weights(d: int, world: int, device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
    """One layer's shards: attention in (column-parallel, 2 x d / world), attention out
    (row-parallel, d / world x d), MLP in (column, 4d / world), MLP out (row, 4d / world x d)."""
    scale = d ** -0.5
    shapes = ((d, 2 * d // world), (d // world, d), (d, 4 * d // world), (4 * d // world, d))
    return [torch.randn(s, device=device, dtype=dtype) * scale for s in shapes]


def decode_step(x: torch.Tensor, layers: list[list[torch.Tensor]]) -> torch.Tensor:
    """One token through every layer: two all-reduces per layer."""
    d = x.shape[-1]
    for w_in, w_out, w_up, w_down in layers:
        h = F.layer_norm(x, (d,)) @ w_in
        gate, value = h.chunk(2, dim=-1)
        partial = (torch.sigmoid(gate) * value) @ w_out  # this rank's heads' share of the output
        dist.all_reduce(partial)
        x = x + partial
        partial = F.gelu(F.layer_norm(x, (d,)) @ w_up) @ w_down
        dist.all_reduce(partial)
        x = x + partial
    return F.layer_norm(x, (d,))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=32, help="measured (captured) decode steps")
    ap.add_argument("--warmup", type=int, default=4, help="steps before the capture")
    ap.add_argument("--delay-rank", type=int, default=1, help="the rank whose host is delayed (-1: none)")
    ap.add_argument("--delay-ms", type=float, default=5.0)
    ap.add_argument("--delay-every", type=int, default=4, help="delay steps delay_every-1, 2*delay_every-1, ...")
    ap.add_argument("--summary", help="write the delays (JSON) here, from the delayed rank")
    args = ap.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    torch.manual_seed(1234)  # the same weights' shapes everywhere; values need not match
    dtype = torch.bfloat16
    layers = [layer_weights(args.d_model, world, device, dtype) for _ in range(args.layers)]
    x = torch.randn(args.batch, args.d_model, device=device, dtype=dtype)

    with torch.no_grad():
        for _ in range(args.warmup):  # NCCL's communicator, cuBLAS handles, lazy module loading
            x = decode_step(x, layers)
            torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()

        delayed: list[int] = []
        slept_ns: list[int] = []
        torch.cuda.profiler.start()
        for step in range(args.steps):
            if rank == args.delay_rank and step % args.delay_every == args.delay_every - 1:
                t0 = time.perf_counter_ns()
                time.sleep(args.delay_ms / 1e3)
                slept_ns.append(time.perf_counter_ns() - t0)
                delayed.append(step)
            torch.cuda.nvtx.range_push("decode_step")
            x = decode_step(x, layers)
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()  # the token is read back every step
        torch.cuda.profiler.stop()

    if args.summary and rank == args.delay_rank:
        with open(args.summary, "w") as fh:
            json.dump({"world": world, "delay_rank": rank, "delay_ms": args.delay_ms, "steps": args.steps,
                       "allreduces_per_step": 2 * args.layers, "delayed_steps": delayed, "slept_ns": slept_ns},
                      fh, indent=2)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
