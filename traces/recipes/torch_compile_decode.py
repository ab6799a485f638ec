"""torch_decode.py's decode step under torch.compile(mode="reduce-overhead"): Inductor's CUDA graph trees.

Recorded under nsys to make torch_compile_graphs.sqlite (traces/recipes/record_wave2.sh). The model
is torch_decode.py's Decoder (2 layers by default, to keep the cold compile short); its in-place
step (x <- f(x), pos <- pos + 1, K/V written into the cache buffers) is compiled whole
(fullgraph=True) with x and pos marked static (torch._dynamo.mark_static_address), so that the
graph trees may replay a step that mutates them (mutation of module buffers is allowed anyway).
torch.compiler.cudagraph_mark_step_begin() starts every call.

Ranges (torch.cuda.nvtx push/pop): `warmup` (the first --warmup-calls calls: compile, the
graph trees' eager warm-up run, the graph recording), then `decode` once, holding one
`decode_step` per step, which should be a cudaGraphLaunch replay each. At exit the program prints
Inductor's cudagraph skip counters: a non-zero count means the steps ran without graphs.

    nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none \
        --export sqlite -o torch_compile_graphs python3 traces/recipes/torch_compile_decode.py
"""

from __future__ import annotations

import argparse
import time

import torch

from torch_decode import Decoder
from wave2_util import Ranges, add_device_arg, sync, torch_device


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_arg(ap)
    ap.add_argument("--steps", type=int, default=16, help="decode steps in the `decode` range")
    ap.add_argument("--warmup-calls", type=int, default=3,
                    help="calls in the `warmup` range (graph trees: warm-up run, record, replay)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--mode", default="reduce-overhead", help="torch.compile mode")
    ap.add_argument("--no-pointwise-autotune", action="store_true",
                    help="torch._inductor.config.triton.autotune_pointwise = False: one config per "
                         "Triton kernel, no benchmark launches at the first call (a smaller trace)")
    args = ap.parse_args()
    if max(args.steps, args.warmup_calls) > args.max_len:
        ap.error("--steps and --warmup-calls must not exceed --max-len")

    dev = torch_device(args.device)
    dtype = torch.bfloat16
    torch.manual_seed(0)
    torch._logging.set_logs(recompiles=True)
    if args.no_pointwise_autotune:
        import torch._inductor.config as inductor_config

        inductor_config.triton.autotune_pointwise = False
    model = Decoder(args.d_model, args.heads, args.layers, args.max_len, args.batch, dtype)
    model = model.to(dev, dtype).eval()
    x = torch.randn(args.batch, 1, args.d_model, device=dev, dtype=dtype)
    x0 = x.clone()
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    torch._dynamo.mark_static_address(x)
    torch._dynamo.mark_static_address(pos)
    step = torch.compile(model.step, mode=args.mode, fullgraph=True)
    rng = Ranges.for_torch(dev)

    def call() -> None:
        torch.compiler.cudagraph_mark_step_begin()
        step(x, pos)

    with torch.no_grad():
        t0 = time.perf_counter()
        with rng.range("warmup"):
            for _ in range(args.warmup_calls):
                call()
            sync(dev)
        t_warm = time.perf_counter() - t0

        x.copy_(x0)
        pos.zero_()
        sync(dev)
        t0 = time.perf_counter()
        with rng.range("decode"):
            for _ in range(args.steps):
                with rng.range("decode_step"):
                    call()
            sync(dev)
        t_dec = time.perf_counter() - t0

    from torch._dynamo.utils import counters

    ind = counters["inductor"]
    print(f"torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0) if dev.type == 'cuda' else 'cpu'}, mode {args.mode}, "
          f"steps {args.steps}, warmup calls {args.warmup_calls}, layers {args.layers}, "
          f"batch {args.batch}, d_model {args.d_model}, final pos {int(pos.item())}")
    print(f"host seconds: warmup (compile, record) {t_warm:.2f}, decode {t_dec:.4f}")
    print(f"dynamo frames compiled {counters['stats'].get('unique_graphs', 0)}, "
          f"graph breaks {sum(counters['graph_break'].values())}, "
          f"cudagraph_skips {ind.get('cudagraph_skips', 0)} "
          f"(expected 0 on cuda; on cpu graphs are skipped), "
          f"cudagraph recorded/replayed counters: "
          + ", ".join(f"{k}={v}" for k, v in sorted(ind.items()) if "cudagraph" in k))
    print(rng.summary())
    try:  # end inductor's compile workers here, not in nsys's wait for the process tree
        from torch._inductor.async_compile import shutdown_compile_workers

        shutdown_compile_workers()
    except Exception as exc:  # noqa: BLE001 - best effort
        print("shutdown_compile_workers:", exc)


if __name__ == "__main__":
    main()
