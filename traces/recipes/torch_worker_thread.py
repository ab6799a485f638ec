"""Ranges whose GPU work another thread launches: a main thread that hands requests to a worker.

Recorded under nsys to make torch_worker_thread.sqlite (traces/recipes/record_wave2.sh). The main
thread opens `request` (x --requests, default 8; torch.cuda.nvtx push/pop), puts the request on a
queue.Queue and waits, inside the range, for the reply. A worker thread (threading.Thread) takes
it, launches --kernels small elementwise kernels (default 50: in-place mul_/add_ pairs on a 4096-
element float32 tensor, default stream), calls torch.cuda.synchronize() and replies. The worker
opens no range. Then `inline` (x --inline, default 4): the main thread launches the same kernels
itself and synchronizes, for contrast. One untraced-by-range request and one inline run warm up.

    nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none \
        --export sqlite -o torch_worker_thread python3 traces/recipes/torch_worker_thread.py
"""

from __future__ import annotations

import argparse
import queue
import threading

import torch

from wave2_util import Ranges, add_device_arg, sync, torch_device


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_arg(ap)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--inline", type=int, default=4)
    ap.add_argument("--kernels", type=int, default=50, help="kernels per request (even)")
    ap.add_argument("--numel", type=int, default=4096)
    args = ap.parse_args()

    dev = torch_device(args.device)
    torch.manual_seed(0)
    x = torch.randn(args.numel, device=dev)
    rng = Ranges.for_torch(dev)
    requests: queue.Queue = queue.Queue()
    replies: queue.Queue = queue.Queue()
    worker_idents: set[int] = set()

    def work() -> None:
        for _ in range(args.kernels // 2):
            x.mul_(0.999)
            x.add_(0.001)
        sync(dev)

    def worker() -> None:
        while True:
            job = requests.get()
            if job is None:
                return
            worker_idents.add(threading.get_ident())
            work()
            replies.put(job)

    t = threading.Thread(target=worker, name="gpu-worker", daemon=True)
    t.start()

    def request(i: int) -> None:
        requests.put(i)
        assert replies.get(timeout=60) == i

    request(-1)  # warm-up, no range
    work()
    for i in range(args.requests):
        with rng.range("request"):
            request(i)
    for _ in range(args.inline):
        with rng.range("inline"):
            work()
    requests.put(None)
    t.join(timeout=60)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0) if dev.type == 'cuda' else 'cpu'}, "
          f"requests {args.requests} on worker thread(s) {sorted(worker_idents)} "
          f"(main {threading.get_ident()}), inline {args.inline}, kernels per request "
          f"{args.kernels // 2 * 2}, x[0] {float(x[0]):.6f}")
    print(rng.summary())


if __name__ == "__main__":
    main()
