"""A small jitted JAX MLP training step (jax.grad + plain SGD), one NVTX range per step.

Recorded under nsys to make jax_train.sqlite (traces/recipes/record_wave2.sh). Ranges come from the
nvtx package (nvtx.push_range("train_step") / pop_range, default domain, main thread), one per step;
the first step compiles (XLA's compile and autotuning fall inside it). Each step ends with
jax.block_until_ready on the new parameters and the loss, inside the range. XLA emits NVTX ranges
of its own in its own domains, and JAX dispatches asynchronously, launching from XLA's threads:
both are kept. XLA_PYTHON_CLIENT_PREALLOCATE=false (set here unless already set).

    nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none \
        --export sqlite -o jax_train python3 traces/recipes/jax_train.py
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None,
                    help="default: JAX's default backend (the GPU when there is one)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--in-dim", type=int, default=512)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=3, help="hidden layers")
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--autotune-level", type=int, default=None,
                    help="adds --xla_gpu_autotune_level=N to XLA_FLAGS (default: XLA's own)")
    args = ap.parse_args()

    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if args.device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    elif args.device == "cuda":
        os.environ["JAX_PLATFORMS"] = "cuda"
    if args.autotune_level is not None:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_gpu_autotune_level={args.autotune_level}").strip()

    import jax
    import jax.numpy as jnp
    import nvtx

    dims = [args.in_dim] + [args.width] * args.depth + [args.classes]
    key = jax.random.key(0)
    keys = jax.random.split(key, len(dims) + 1)
    params = [(jax.random.normal(k, (a, b), jnp.float32) * (2.0 / a) ** 0.5,
               jnp.zeros((b,), jnp.float32))
              for k, a, b in zip(keys[:-2], dims[:-1], dims[1:])]
    x = jax.random.normal(keys[-2], (args.batch, args.in_dim), jnp.float32)
    y = jax.random.randint(keys[-1], (args.batch,), 0, args.classes)
    jax.block_until_ready((params, x, y))

    def loss_fn(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        logits = h @ w + b
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    tree_map = jax.tree.map if hasattr(jax, "tree") else jax.tree_util.tree_map

    @jax.jit
    def train_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        params = tree_map(lambda p, g: p - args.lr * g, params, grads)
        return params, loss

    losses, times = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        nvtx.push_range("train_step")
        params, loss = train_step(params, x, y)
        jax.block_until_ready((params, loss))
        nvtx.pop_range()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))

    print(f"jax {jax.__version__}, backend {jax.default_backend()}, devices {jax.devices()}, "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}, "
          f"preallocate={os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE')}")
    print(f"mlp {dims}, batch {args.batch}, steps {args.steps}, "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    print(f"step seconds: first (compile) {times[0]:.3f}, later median "
          f"{sorted(times[1:])[len(times[1:]) // 2] if len(times) > 1 else float('nan'):.5f}")
    print(f"ranges (nvtx): train_step x{args.steps} (open at exit: 0)")


if __name__ == "__main__":
    main()
