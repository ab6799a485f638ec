"""Graph-pool batch sizes: the capture ladder, padding a request to it, and request sizes.

A graph pool holds one captured graph per batch size of its ladder; a request of `n` tokens runs
the graph of the smallest captured size >= n (padded), or eagerly when n is above the ladder.
vLLM V1's default ladder (`_set_cudagraph_sizes()`, vllm 0.8.5) is [1, 2, 4] + [8, 16, ..., 512].
"""

from __future__ import annotations

import bisect
import math
import random
from typing import Sequence

from gapscope.errors import GapscopeError

MAX_TOKENS = 4096  # the token kernel stages one float per token in 16 KiB of shared memory


def vllm_ladder(largest: int = 512) -> list[int]:
    """vLLM V1's default capture sizes up to `largest`: 1, 2, 4, then multiples of 8."""
    return [s for s in (1, 2, 4) if s <= largest] + list(range(8, largest + 1, 8))


def parse_sizes(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]; 'vllm' or 'vllm:256' -> vLLM's ladder (up to 256)."""
    text = text.strip()
    if text.startswith("vllm"):
        _, _, top = text.partition(":")
        try:
            largest = int(top) if top else 512
        except ValueError:
            raise GapscopeError(f"--pool-sizes: 'vllm:N' wants an integer N, got {text!r}") from None
        if not 1 <= largest <= MAX_TOKENS:
            raise GapscopeError(f"--pool-sizes: vllm:N wants 1 <= N <= {MAX_TOKENS}, got {largest}")
        return vllm_ladder(largest)
    try:
        sizes = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise GapscopeError(f"--pool-sizes wants integers separated by commas, got {text!r}") from None
    if not sizes or sizes[0] < 1 or sizes[-1] > MAX_TOKENS:
        raise GapscopeError(f"--pool-sizes wants sizes from 1 to {MAX_TOKENS}, got {text!r}")
    return sizes


def pad(n: int, ladder: Sequence[int]) -> int | None:
    """The smallest size in the sorted `ladder` that holds n tokens; None when n is above it."""
    i = bisect.bisect_left(ladder, n)
    return ladder[i] if i < len(ladder) else None


def request_sizes(count: int, largest: int, seed: int = 0) -> list[int]:
    """`count` request sizes from 1 to `largest`, log-uniform (as many small batches as large
    ones, the way decode batch sizes spread), from a seeded generator: the same list each run."""
    if count < 1 or largest < 1:
        raise GapscopeError(f"need at least one request of at least one token, got {count} x {largest}")
    rng = random.Random(seed)
    top = math.log(largest + 1)
    return [min(largest, max(1, int(math.exp(rng.uniform(0.0, top))))) for _ in range(count)]
