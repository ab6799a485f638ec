"""A training loop that builds every batch on the CPU between steps: a real host stall, no CUDA call.

Recorded under nsys to make torch_dataload.sqlite (traces/recipes/record_wave2.sh). Each `step`
(x --steps, default 12; torch.cuda.nvtx push/pop, main thread) holds:
  load_batch  pure NumPy on the CPU: gather random uint8 images (3x64x64) from an in-memory set,
              random 56x56 crop and horizontal flip per sample, float32, per-channel normalize,
              then colour-jitter passes whose count is calibrated before the loop so that the
              range takes about --load-ms milliseconds (default 5). No CUDA call in it.
  (between)   torch.from_numpy(...).pin_memory().to("cuda", non_blocking=True) for images and labels
  compute     forward, cross entropy, backward, SGD step of a 3-layer MLP (9408 -> 1024 -> 1024 -> 10)
The GPU finishes `compute` long before the next batch is ready and sits idle while it loads.
Two warm-up steps and the calibration run before the ranges; no synchronize inside the loop.

    nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none \
        --export sqlite -o torch_dataload python3 traces/recipes/torch_dataload.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from wave2_util import Ranges, add_device_arg, sync, torch_device

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1) * 255


class Loader:
    def __init__(self, batch: int, images: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.data = self.rng.integers(0, 256, (images, 3, 64, 64), dtype=np.uint8)
        self.batch = batch
        self.passes = 0

    def load(self) -> tuple[np.ndarray, np.ndarray]:
        rng, b = self.rng, self.batch
        imgs = self.data[rng.integers(0, len(self.data), b)]
        out = np.empty((b, 3, 56, 56), np.float32)
        offs = rng.integers(0, 9, (b, 2))
        flips = rng.random(b) < 0.5
        for i in range(b):
            oy, ox = offs[i]
            crop = imgs[i, :, oy:oy + 56, ox:ox + 56]
            out[i] = crop[:, :, ::-1] if flips[i] else crop
        out -= MEAN
        out /= STD
        gain = (1.0 + 0.1 * (rng.random((b, 3, 1, 1), dtype=np.float32) - 0.5))
        for _ in range(self.passes):  # colour jitter: brightness/contrast, clipped
            out *= gain
            np.clip(out, -3.0, 3.0, out=out)
        labels = rng.integers(0, 10, b)
        return out.reshape(b, -1), labels

    def calibrate(self, target_ms: float) -> float:
        def ms(passes: int) -> float:
            self.passes = passes
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                self.load()
                best = min(best, (time.perf_counter() - t0) * 1e3)
            return best

        base, more = ms(0), ms(20)
        per_pass = max((more - base) / 20, 1e-3)
        self.passes = int(min(max(round((target_ms - base) / per_pass), 0), 400))
        return ms(self.passes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_arg(ap)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--images", type=int, default=1024, help="images held in memory")
    ap.add_argument("--load-ms", type=float, default=5.0, help="target time of one load_batch")
    ap.add_argument("--width", type=int, default=1024)
    args = ap.parse_args()

    dev = torch_device(args.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    loader = Loader(args.batch, args.images)
    model = nn.Sequential(nn.Linear(3 * 56 * 56, args.width), nn.ReLU(),
                          nn.Linear(args.width, args.width), nn.ReLU(),
                          nn.Linear(args.width, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rng = Ranges.for_torch(dev)

    def to_device(a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(a)
        return t.pin_memory().to(dev, non_blocking=True) if cuda else t

    def compute(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        return loss.detach()

    calibrated = loader.calibrate(args.load_ms)
    for _ in range(2):  # warm-up outside the ranges
        a, b = loader.load()
        first = compute(to_device(a), to_device(b))
    sync(dev)

    load_ms = []
    for _ in range(args.steps):
        with rng.range("step"):
            t0 = time.perf_counter()
            with rng.range("load_batch"):
                a, b = loader.load()
            load_ms.append((time.perf_counter() - t0) * 1e3)
            xb, yb = to_device(a), to_device(b)
            with rng.range("compute"):
                loss = compute(xb, yb)
    sync(dev)
    load_ms.sort()
    print(f"torch {torch.__version__}, numpy {np.__version__}, "
          f"{torch.cuda.get_device_name(0) if cuda else 'cpu'}, steps {args.steps}, "
          f"batch {args.batch}, mlp width {args.width}, loss {float(first):.4f} -> {float(loss):.4f}")
    print(f"load_batch: {loader.passes} jitter passes, calibrated {calibrated:.2f} ms "
          f"(target {args.load_ms}), in the loop median {load_ms[len(load_ms) // 2]:.2f} ms, "
          f"max {load_ms[-1]:.2f} ms")
    print(rng.summary())


if __name__ == "__main__":
    main()
