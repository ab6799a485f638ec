#!/usr/bin/env bash
# Record the four shipped traces on a CUDA machine with nsys, CuPy and PyTorch.
#
#   source .devkit/setup.sh          # on the project's H200 machine: puts nsys on PATH
#   bash traces/recipes/record_all.sh OUTDIR
#
# Writes OUTDIR/{cupy_paths_node,cupy_paths_graph,torch_decode,torch_decode_sync}.sqlite,
# OUTDIR/provenance.txt (versions, META_DATA_EXPORT, the exact commands) and OUTDIR/logs.txt
# (nsys output and the CuPy calibration plan).
# Each export must stay under 2,000,000 bytes; a recording over that is redone with fewer
# kernels or steps (the command that made the kept file is the one in provenance.txt).
set -u
out=${1:?usage: record_all.sh OUTDIR}
mkdir -p "$out"
work=$(mktemp -d /tmp/gapscope-record.XXXXXX)
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
prov=$out/provenance.txt
logs=$out/logs.txt
limit=2000000
: >"$prov"; : >"$logs"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  echo "cuda (nvidia-smi): $(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1)"
  echo "nsys: $(nsys --version 2>&1 | head -1) at $(command -v nsys)"
  python3 - <<'EOF'
import sys
print("python:", sys.version.split()[0])
try:
    import cupy
    print("cupy:", cupy.__version__, "cuda runtime", cupy.cuda.runtime.runtimeGetVersion(),
          "driver", cupy.cuda.runtime.driverGetVersion())
except Exception as exc:
    print("cupy: unavailable", exc)
try:
    import torch
    print("torch:", torch.__version__, "cuda", torch.version.cuda)
except Exception as exc:
    print("torch: unavailable", exc)
try:
    import nvtx
    print("nvtx:", getattr(nvtx, "__version__", "?"))
except Exception as exc:
    print("nvtx: unavailable", exc)
EOF
} >>"$prov" 2>&1

# record NAME GRAPH_TRACE -- PROGRAM...   (one nsys run; sets last_cmd and size)
record() {
  local name=$1 gt=$2; shift 3
  local cmd=(nsys profile -t cuda,nvtx "--cuda-graph-trace=$gt" --sample=none --cpuctxsw=none
             --export sqlite --force-overwrite true -o "$work/$name" "$@")
  echo "== $name: ${cmd[*]}" >>"$logs"
  rm -f "$work/$name".{sqlite,nsys-rep}
  if ! "${cmd[@]}" >>"$logs" 2>&1; then echo "FAILED: $name" | tee -a "$logs"; fi
  last_cmd="${cmd[*]}"
  size=$(stat -c %s "$work/$name.sqlite" 2>/dev/null || echo 999999999)
}

keep() {  # keep NAME: copy the export out and write its provenance line
  cp "$work/$1.sqlite" "$out/$1.sqlite" && echo "command $1: $last_cmd" >>"$prov"
}

# CuPy micro-kernels: calibrate once outside nsys, then record with the saved plan.
python3 -m gapscope.run.workload --kernel-us 2,50 --save-plan "$work/plan.json" --no-trace \
  >>"$logs" 2>&1 || echo "FAILED: calibration" | tee -a "$logs"
cat "$work/plan.json" >>"$logs" 2>/dev/null
for gt in node graph; do
  for n in 300 150 80; do
    record "cupy_paths_$gt" "$gt" -- python3 -m gapscope.run.workload --plan "$work/plan.json" \
      --kernels "$n" --streams 4 --repeat 1
    echo "cupy_paths_$gt kernels=$n size=$size" | tee -a "$logs"
    [ "$size" -lt "$limit" ] && { keep "cupy_paths_$gt"; break; }
  done
done

# PyTorch decode loop, eager vs CUDA graph; then the same with a sync after every step.
for variant in torch_decode torch_decode_sync; do
  extra=(); [ "$variant" = torch_decode_sync ] && extra=(--sync-every-step)
  for steps in 32 16 8; do
    record "$variant" node -- python3 traces/recipes/torch_decode.py --steps "$steps" "${extra[@]}"
    echo "$variant steps=$steps size=$size" | tee -a "$logs"
    [ "$size" -lt "$limit" ] && { keep "$variant"; break; }
  done
done

python3 - "$out" >>"$prov" 2>&1 <<'EOF'
import pathlib, sqlite3, sys
out = pathlib.Path(sys.argv[1])
print(f"{'file':28} {'bytes':>9} {'kernels':>8} {'graph_nodes':>11} {'graph_trace':>11} {'nvtx':>6}  schema")
for f in sorted(out.glob("*.sqlite")):
    con = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    def count(t, where=""):
        return con.execute(f"select count(*) from {t} {where}").fetchone()[0] if t in tables else 0
    meta = dict(con.execute("select name, value from META_DATA_EXPORT")) if "META_DATA_EXPORT" in tables else {}
    print(f"{f.name:28} {f.stat().st_size:>9} {count('CUPTI_ACTIVITY_KIND_KERNEL'):>8} "
          f"{count('CUPTI_ACTIVITY_KIND_KERNEL', 'where graphNodeId is not null'):>11} "
          f"{count('CUPTI_ACTIVITY_KIND_GRAPH_TRACE'):>11} {count('NVTX_EVENTS'):>6}  "
          f"{meta.get('EXPORT_SCHEMA_VERSION', '?')}")
    if f.name.startswith("cupy_paths_node"):
        for k, v in meta.items():
            print(f"  META_DATA_EXPORT {k} = {v}")
    names = con.execute("select coalesce(e.text, s.value) n, count(*) from NVTX_EVENTS e "
                        "left join StringIds s on s.id = e.textId where e.eventType in (59, 60) "
                        "group by n order by n").fetchall() if "NVTX_EVENTS" in tables else []
    print("  ranges:", ", ".join(f"{n} x{c}" for n, c in names))
EOF
cat "$prov"
