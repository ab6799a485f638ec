#!/usr/bin/env bash
# Record the seed's cases (docs/cases.md) with `gapscope run`, one export per case.
#
#   source .devkit/setup.sh && bash traces/recipes/record_cases.sh OUTDIR [single|multi|CASE,...] [gpu-tests]
#
# single: default_stream, graph_pool, graph_update, piecewise, instantiate on one GPU;
# multi: multi_gpu on two GPUs; or a comma list of those names. Each case is its own `gapscope run -o /tmp/gs-cases/<case>`; its
# gapscope_run.sqlite (renamed case_<case>.sqlite), run.json (case_<case>_run.json) and the
# markdown the run printed are packed into OUTDIR/cases_<mode>.tar.gz after every case, so a
# run cut short still returns what it finished. A probe first runs every case untraced, tiny,
# to show the CUDA graph API of this machine's cuda-bindings works. An export over 2,000,000
# bytes is recorded again with half the steps. With gpu-tests, the GPU tests run last.
set -u
out=${1:?usage: record_cases.sh OUTDIR [single|multi|CASE,...] [gpu-tests]}
mode=${2:-single}
case $mode in
  single) todo="default_stream graph_pool graph_update piecewise instantiate" ;;
  multi) todo="multi_gpu" ;;
  *) todo=${mode//,/ }; mode=some ;;
esac
mkdir -p "$out"
work=/tmp/gs-cases
rm -rf "$work"; mkdir -p "$work/pack"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
limit=2000000
status=$out/status_$mode.txt
: >"$status"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  echo "nsys: $(nsys --version 2>&1 | head -1)"
  python3 - <<'PY'
import sys
print("python", sys.version.split()[0])
import cupy
print("cupy", cupy.__version__, "runtime", cupy.cuda.runtime.runtimeGetVersion(),
      "driver", cupy.cuda.runtime.driverGetVersion(), "gpus", cupy.cuda.runtime.getDeviceCount())
try:
    from importlib.metadata import version
    print("cuda-bindings", version("cuda-bindings"))
except Exception as exc:
    print("cuda-bindings: version unknown", exc)
PY
} >"$out/env_$mode.txt" 2>&1
cat "$out/env_$mode.txt"

if [ "$mode" != multi ]; then
  echo "== probe: every single-GPU case, untraced, tiny"
  python3 -m gapscope.run.workload --kernel-us 5 --paths default-stream,graph-pool,graph-update,piecewise,instantiate \
    --steps 4 --layers 2 --kernels 10 --pool-sizes 1,2,4,8 --summary "$work/probe.json" 2>&1 | tail -15
  echo "probe rc=${PIPESTATUS[0]}" | tee -a "$status"
fi

record() {  # record NAME STEPS -- gapscope run options...
  local name=$1 steps=$2; shift 3
  local dir=$work/$name size rc
  for try in 1 2; do
    rm -rf "$dir"
    python3 -m gapscope run -q --format markdown -o "$dir" --steps "$steps" "$@" >"$work/pack/case_${name}.md" 2>&1
    rc=$?
    size=$(stat -c %s "$dir/gapscope_run.sqlite" 2>/dev/null || echo 0)
    echo "$name try=$try steps=$steps rc=$rc bytes=$size" | tee -a "$status"
    [ "$rc" -ne 0 ] && { tail -5 "$work/pack/case_${name}.md"; break; }
    [ "$size" -lt "$limit" ] && break
    steps=$((steps / 2))
  done
  [ -f "$dir/gapscope_run.sqlite" ] && cp "$dir/gapscope_run.sqlite" "$work/pack/case_${name}.sqlite"
  [ -f "$dir/run.json" ] && cp "$dir/run.json" "$work/pack/case_${name}_run.json"
  [ -f "$dir/command.txt" ] && cp "$dir/command.txt" "$work/pack/case_${name}_command.txt"
  tar czf "$out/cases_$mode.tar.gz" -C "$work/pack" .
}

for name in $todo; do
  case $name in
    default_stream) record default_stream 64 -- --paths default-stream --kernel-us 20 ;;
    graph_pool) record graph_pool 48 -- --paths graph-pool --kernel-us 10 --layers 8 ;;
    graph_update) record graph_update 32 -- --paths graph-update --kernel-us 5 --layers 8 ;;
    piecewise) record piecewise 24 -- --paths piecewise --kernel-us 5 --layers 6 ;;
    instantiate) record instantiate 32 -- --paths instantiate --kernel-us 2 --kernels 100 ;;
    multi_gpu) record multi_gpu 32 -- --paths multi-gpu --kernel-us 20 --layers 4 ;;
    *) echo "unknown case $name" | tee -a "$status" ;;
  esac
done

echo "== table"
python3 - "$work/pack" <<'PY' | tee -a "$status"
import json, os, sqlite3, sys
pack = sys.argv[1]
print(f"{'export':28} {'bytes':>9} {'kernels':>8} {'memops':>7} {'ranges':>7}  figures")
for f in sorted(os.listdir(pack)):
    if not f.endswith(".sqlite"):
        continue
    path = os.path.join(pack, f)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    n = lambda t: con.execute(f"select count(*) from {t}").fetchone()[0] if t in tables else 0
    run = json.load(open(path.replace(".sqlite", "_run.json")))
    summ = {k: v.get("summary") for k, v in run.get("cases", {}).items()}
    print(f"{f:28} {os.path.getsize(path):>9} {n('CUPTI_ACTIVITY_KIND_KERNEL'):>8} "
          f"{n('CUPTI_ACTIVITY_KIND_MEMCPY'):>7} {n('NVTX_EVENTS'):>7}  {json.dumps(summ)[:300]}")
    for w in run.get("warnings", []):
        print("   warning:", w[:200])
PY

if [ "${3:-}" = gpu-tests ]; then
  echo "== GPU tests"
  python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider 2>&1 | tail -30 | tee "$out/gpu_tests_$mode.txt"
fi
