"""The PyTorch profiler (Kineto) reader against the candidates it was chosen from and its floor,
on one trace, each in a fresh process (CPU time: user + sys; peak RSS), printed per million
kernels:

* floor: the bare gunzip (zlib, ISA-L) and gunzip + msgspec's skip pass (decoding every event
  into a struct without fields: the fastest validating tokenizer pass over the same bytes);
* candidates: ijson (yajl2_c) ``items`` over ``traceEvents`` (the reader before issue 42),
  ijson ``kvitems``-free ``basic_parse`` (its bare tokenizer), orjson and msgspec (untyped
  dicts, and typed structs: gapscope's choice) on the same bounded pieces gapscope cuts,
  simdjson's parse (whole file: only below 1 GiB decompressed);
* gapscope's reader: ``Kineto(path).load()``, the frames an analysis reads; with ``--baseline
  DIR`` also the reader of another gapscope checkout (DIR holding its ``gapscope`` package: the
  ijson reader before issue 42, ``git archive 5aa0f9b gapscope | tar -x -C DIR``).

The candidates gapscope does not depend on need their packages (``pip install ijson orjson
pysimdjson``); a candidate whose package is missing prints its error in the table. Run it on a
SYNTHETIC tiling of a real trace (``benchmarks/tile_kineto.py``):

    python benchmarks/tile_kineto.py traces/torch_decode_small.pt.trace.json.gz /tmp/k200k.pt.trace.json.gz --kernels 200000
    python benchmarks/bench_kineto.py /tmp/k200k.pt.trace.json.gz
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_PRELUDE = """
import gc, resource, sys, json
from pathlib import Path
sys.path.insert(0, {root!r})
path = Path({path!r})
import numpy, msgspec, gapscope.trace.kineto_json  # imports are not the candidates' cost
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def chunks():
    from gapscope.trace.kineto_json import open_source
    fh, read = open_source(path)
    while True:
        data = read(2 << 20)
        if not data:
            break
        yield data
def pieces():
    # gapscope's own cutting of traceEvents into pieces of whole events, as bytes
    from gapscope.trace import kineto_json as kj
    from gapscope.trace.kineto_json import Stream, open_source
    fh, read = open_source(path)
    s = Stream(path, read)
    s.top()
    out = []
    real = kj._PIECE
    class Grab:
        def decode(self, b):
            out.append(bytes(b))  # a copy: the stream restores its buffer after the decode
            return []
    kj._PIECE = Grab()
    try:
        for _ in s.pieces():
            while out:
                yield out.pop()
    finally:
        kj._PIECE = real
"""

CANDIDATES = {
    "gunzip (zlib)": """
import zlib
t = cpu(); d = zlib.decompressobj(31); n = 0
with open(path, 'rb') as fh:
    while True:
        b = fh.read(1 << 20)
        if not b:
            break
        n += len(d.decompress(b))
""",
    "gunzip (ISA-L)": """
t = cpu(); n = sum(len(c) for c in chunks())
""",
    "gunzip (ISA-L) + msgspec skip pass": """
import msgspec
class E(msgspec.Struct, gc=False):
    pass
dec = msgspec.json.Decoder(list[E])
gc.disable()
t = cpu(); n = sum(len(dec.decode(p)) for p in pieces())
""",
    "ijson items (yajl2_c)": """
import ijson
from gapscope.trace.kineto_json import open_source
t = cpu()
fh, read = open_source(path)
class F:
    def read(self, k):
        return read(k)
n = sum(1 for _ in ijson.items(F(), 'traceEvents.item', use_float=False))
""",
    "ijson basic_parse (yajl2_c tokens)": """
import ijson
from gapscope.trace.kineto_json import open_source
t = cpu()
fh, read = open_source(path)
class F:
    def read(self, k):
        return read(k)
n = sum(1 for _ in ijson.basic_parse(F()))
""",
    "orjson on pieces (dicts)": """
import orjson
gc.disable()
t = cpu(); n = sum(len(orjson.loads(p)) for p in pieces())
""",
    "msgspec on pieces (dicts)": """
import msgspec
dec = msgspec.json.Decoder()
gc.disable()
t = cpu(); n = sum(len(dec.decode(p)) for p in pieces())
""",
    "msgspec on pieces (typed structs)": """
from gapscope.trace.kineto_json import _PIECE
gc.disable()
t = cpu(); n = sum(len(_PIECE.decode(p)) for p in pieces())
""",
    "simdjson parse (whole file)": """
import simdjson, gzip
raw = b''.join(chunks())
if len(raw) > (1 << 30):
    print(json.dumps({'skip': 'over 1 GiB decompressed'})); raise SystemExit
t = cpu(); doc = simdjson.Parser().parse(raw); n = len(doc['traceEvents'])
""",
    "gapscope Kineto reader (frames)": """
from gapscope.heap import tune_for_analysis
tune_for_analysis()
from gapscope.trace.kineto import Kineto
t = cpu(); k = Kineto(path); f = k.load(syncs=True); n = len(f.activities)
""",
}

_REPORT = """
took = cpu() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({'cpu': took, 'peak_mib': peak, 'n': n}))
"""


BASELINE = """
sys.path.insert(0, {baseline!r})
for m in [m for m in sys.modules if m == 'gapscope' or m.startswith('gapscope.')]:
    del sys.modules[m]
from gapscope.heap import tune_for_analysis
tune_for_analysis()
from gapscope.trace.kineto import Kineto
t = cpu(); k = Kineto(path); f = k.load(syncs=True); n = len(f.activities)
"""


def run(name: str, path: Path, baseline: Path | None = None) -> dict:
    body = BASELINE.format(baseline=str(baseline)) if baseline else CANDIDATES[name]
    code = _PRELUDE.format(root=str(ROOT), path=str(path)) + body + _REPORT
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def kernels_of(path: Path) -> int:
    """The trace's kernel events (memcpyNN_post ones included), counted in a process of its own
    (a child inherits its parent's peak RSS)."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from gapscope.trace.kineto import Kineto\n"
            f"k = Kineto({str(path)!r}); f = k.load()\n"
            "print(int((f.activities['kind'] == 0).sum()) + k._events.copy_kernels)")
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--only", nargs="*", help="candidates to run (names as printed)")
    ap.add_argument("--baseline", type=Path, help="a folder holding another gapscope package to time too")
    a = ap.parse_args()
    results = {name: run(name, a.trace) for name in CANDIDATES if not a.only or name in a.only}
    if a.baseline:
        results[f"gapscope Kineto reader of {a.baseline}"] = run("", a.trace, a.baseline)
    kernels = kernels_of(a.trace)
    floor = None
    print(f"{a.trace.name}: {kernels:,} kernel events, {a.trace.stat().st_size:,} bytes on disk\n")
    print("| candidate | CPU s | CPU s per 1M kernels | x floor | peak MiB |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, r in results.items():
        if "cpu" not in r:
            print(f"| {name} | {r.get('skip') or r.get('error')} | | | |")
            continue
        per = r["cpu"] / kernels * 1e6
        if name == "gunzip (ISA-L) + msgspec skip pass":
            floor = per
        ratio = f"{per / floor:.2f}" if floor else ""
        print(f"| {name} | {r['cpu']:.2f} | {per:.2f} | {ratio} | {r['peak_mib']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
