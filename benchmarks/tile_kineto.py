"""Build a large SYNTHETIC PyTorch profiler trace by tiling a real one, byte for byte in Kineto's
own layout: every tile is the source's ``traceEvents`` text again, each ``ts`` shifted by one
source span (exact decimal arithmetic in integer nanoseconds) and each ``correlation``,
``External id`` and flow ``id`` by the source's largest id, so that every tile's kernels match
their own launches. The events without a ``cat`` (the process and thread metadata, the profiler's
"Iteration Start" and "Record Window End"), which Kineto writes once at the end of a trace, are
written once, after the last tile, as the source has them. The top-level fields are the source's,
``traceName`` says SYNTHETIC. The output never goes in traces/.

    python benchmarks/tile_kineto.py traces/torch_decode_small.pt.trace.json.gz /tmp/k1m.pt.trace.json.gz --kernels 1000000
"""

from __future__ import annotations

import argparse
import gzip
import math
import re
from pathlib import Path

import msgspec

_FIELD = re.compile(rb'"(ts|correlation|id|External id)": (-?\d+(?:\.\d+)?)')


def _ns(text: bytes) -> int:
    whole, _, frac = text.partition(b".")
    return int(whole) * 1000 + int((frac + b"000")[:3] or b"0")


def tile(source: Path, out: Path, kernels: int) -> tuple[int, int]:
    """Write ``out`` (gzipped when its name ends in .gz) with at least ``kernels`` kernel events;
    returns (tiles, kernels written)."""
    raw = source.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    top = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    events = msgspec.json.decode(top["traceEvents"], type=list[msgspec.Raw])
    parsed = msgspec.json.decode(top["traceEvents"])
    tiled = [isinstance(e, dict) and "cat" in e for e in parsed]
    once = [bytes(r) for r, t in zip(events, tiled) if not t]
    events = [r for r, t in zip(events, tiled) if t]
    parsed = [e for e, t in zip(parsed, tiled) if t]
    n_kernels = sum(1 for e in parsed if e.get("cat") == "kernel")
    body = b",\n  ".join(bytes(e) for e in events)
    pieces = _FIELD.split(body)  # text, key, value, text, key, value, ...
    texts, keys, values = pieces[0::3], pieces[1::3], pieces[2::3]
    is_ts = [k == b"ts" for k in keys]
    ts = [_ns(v) for v, t in zip(values, is_ts) if t]
    ids = [int(v) for v, t in zip(values, is_ts) if not t]
    durs = [round(float(e["dur"]) * 1000) for e in parsed if "dur" in e]
    shift = max(ts) + max(durs, default=0) - min(ts) + 1_000_000
    id_shift = max(ids, default=0) + 1
    n_tiles = math.ceil(kernels / max(n_kernels, 1))
    head = [b"{"]
    for key, value in top.items():
        if key == "traceName":
            value = msgspec.json.encode(f"SYNTHETIC: {source.name} tiled x{n_tiles}")
        if key != "traceEvents":
            head.append(b"  " + msgspec.json.encode(key) + b": " + bytes(value) + b",\n")
    opener = gzip.open if out.name.endswith(".gz") else open
    kwargs = {"compresslevel": 6} if out.name.endswith(".gz") else {}
    with opener(out, "wb", **kwargs) as fh:
        fh.write(b"\n".join(head[:1]) + b"\n" + b"".join(head[1:]) + b'  "traceEvents": [\n  ')
        for k in range(n_tiles):
            if k:
                fh.write(b",\n  ")
            chunks = [texts[0]]
            for i, key in enumerate(keys):
                if is_ts[i]:
                    v = _ns(values[i]) + k * shift
                    number = f"{v // 1000}.{v % 1000:03d}".encode() if b"." in values[i] else str(v // 1000).encode()
                else:
                    number = str(int(values[i]) + k * id_shift).encode()
                chunks += [b'"', key, b'": ', number, texts[i + 1]]
            fh.write(b"".join(chunks))
        if once:
            fh.write(b",\n  " + b",\n  ".join(once))
        fh.write(b"\n  ]\n}\n")
    return n_tiles, n_tiles * n_kernels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    a = ap.parse_args()
    tiles, kernels = tile(a.source, a.out, a.kernels)
    print(f"{a.out}: {tiles} tiles, {kernels:,} kernel events, {a.out.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
