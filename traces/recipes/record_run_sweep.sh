#!/usr/bin/env bash
# On the GPU machine: the gapscope GPU tests, the H200 sweep for docs/run.md, and a small sweep
# recorded by `gapscope run` itself for traces/run_sweep_node.sqlite (kept under 2,000,000 bytes).
#
#   source .devkit/setup.sh && bash traces/recipes/record_run_sweep.sh OUTDIR
set -u
out=${1:?usage: record_run_sweep.sh OUTDIR}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
sweep=2,10,50,200,1000

echo "== GPU tests"
python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider 2>&1 | tail -25 | tee "$out/gpu_tests.txt"

echo "== full sweep: N=1000, repeat 3"
python3 -m gapscope run --kernel-us $sweep --kernels 1000 --streams 4 --repeat 3 -o /tmp/gs-sweep -q
cp /tmp/gs-sweep/run.json "$out/sweep_run.json"
cp /tmp/gs-sweep/analysis.json "$out/sweep_analysis.json"

echo "== small sweep for traces/"
for n in 150 100 60; do
  python3 -m gapscope run --kernel-us $sweep --kernels $n --streams 4 --repeat 1 -o /tmp/gs-small \
    --format markdown
  size=$(stat -c %s /tmp/gs-small/gapscope_run.sqlite 2>/dev/null || echo 999999999)
  echo "kernels=$n size=$size"
  [ "$size" -lt 2000000 ] && break
done
cp /tmp/gs-small/gapscope_run.sqlite "$out/run_sweep_node.sqlite"
cp /tmp/gs-small/run.json "$out/run_sweep_node_run.json"
python3 - "$out/run_sweep_node.sqlite" <<'PY'
import sqlite3, sys, os
f = sys.argv[1]
con = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
k = con.execute("select count(*), sum(graphNodeId is not null) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
print(f"{os.path.basename(f)}: {os.path.getsize(f)} bytes, {k[0]} kernels ({k[1]} from graphs)")
print(dict(con.execute("select name, value from META_DATA_EXPORT where name in "
                       "('EXPORT_PRODUCT_VERSION', 'EXPORT_SCHEMA_VERSION')")))
PY
