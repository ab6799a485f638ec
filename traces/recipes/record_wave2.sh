#!/usr/bin/env bash
# Record the wave-2 traces (the programs beside this script) on a CUDA machine with nsys.
#
#   source .devkit/setup.sh && bash traces/recipes/record_wave2.sh GROUP OUTDIR
#   DRYRUN=1 bash traces/recipes/record_wave2.sh GROUP OUTDIR   # CPU, no nsys, tiny sizes
#
# GROUP 1: torch_worker_thread, torch_dataload, torch_emit_nvtx, jax_train, torch_compile_graphs,
#          hf_generate_compile (cheap ones first, the cold compiles last).
# GROUP 2: torch_decode_small (one report, exported as .sqlite, parquetdir and arrowdir, the
#          .nsys-rep kept), the PyTorch profiler traces torch_decode_small.pt.trace.json.gz and
#          torch_decode_steps.pt.trace.json.gz (no nsys), cmp_base_{1,2,3}, cmp_sync, cmp_nograph,
#          cmp_split.
# Every recording is `nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none
# --cpuctxsw=none --export sqlite --force-overwrite true -o W/NAME PROGRAM`. An export over
# LIMIT_BYTES (2,500,000) is recorded once more with smaller sizes (the file kept is the one whose
# command is in provenance.txt). A failed recording prints "FAILED: NAME" and the tail of its log;
# the others go on. Each recording has a timeout, and the group stops starting new ones when
# BUDGET_S (520) seconds are spent, so a group fits one 600 s device call.
# Writes, in OUTDIR: wave2_groupN.tar.gz (folder wave2_groupN/: the exports, provenance.txt with
# versions and the exact command of every file, logs.txt with all nsys and program output,
# status.txt, summary.txt), repacked after every recording so a call cut short still returns what
# it finished, split into 15 MiB parts (wave2_groupN.tar.gz.part-NN) if it grows over 16 MiB;
# and wave2_groupN_summary.txt (status and the summary table, also printed at the end).
# ONLY="name1 name2" records only those of the group (a re-run after a failure); the files are then
# wave2_groupN_only.tar.gz and wave2_groupN_only_summary.txt. CAP_S=N replaces every per-recording
# timeout (e.g. ONLY=hf_generate_compile CAP_S=500 for one slow compile in a call of its own).
set -u
group=${1:-}
out=${2:-}
if [ -z "$out" ] || { [ "$group" != 1 ] && [ "$group" != 2 ]; }; then
  echo "usage: [DRYRUN=1] record_wave2.sh GROUP(1|2) OUTDIR" >&2
  exit 2
fi
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2   # the repository root
R=traces/recipes
dry=${DRYRUN:-0}
budget=${BUDGET_S:-520}
limit=${LIMIT_BYTES:-2500000}
only=${ONLY:-}
name=wave2_group$group${only:+_only}
work=$(mktemp -d /tmp/gapscope-wave2.XXXXXX)
pack=$work/$name   # what goes into the tarball
raw=$work/raw      # nsys reports and per-run output
mkdir -p "$pack" "$raw"
prov=$pack/provenance.txt
logs=$pack/logs.txt
status=$pack/status.txt
: >"$prov"; : >"$logs"; : >"$status"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1   # the GPU machine has no network; nothing is fetched
NSYS=(nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none)

say() { echo "$*" | tee -a "$status"; }
wanted() { [ -z "$only" ] || [[ " ${only//,/ } " == *" $1 "* ]]; }
qcmd() {  # the command as one shell line: plain words as they are, others quoted
  local a sep=""
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=,+@%-]+$ ]]; then printf '%s%s' "$sep" "$a"; else printf '%s%q' "$sep" "$a"; fi
    sep=" "
  done
}

pack_up() {  # repack the tarball (atomically: a cut-short call never leaves half a file)
  tar -czf "$out/$name.tar.gz.tmp" -C "$work" "$name" 2>>"$logs" &&
    mv -f "$out/$name.tar.gz.tmp" "$out/$name.tar.gz"
}

# run_cmd LABEL CAP_S CMD...: run with a timeout (CAP_S, cut to what is left of the budget),
# output to raw/LABEL.out and logs.txt. 0 ok, 1 failed, 2 skipped.
run_cmd() {
  local label=$1 cap=${CAP_S:-$2}; shift 2
  local left=$((budget - SECONDS)) t rc t0
  if [ "$left" -lt 30 ]; then
    say "SKIPPED: $label (${SECONDS}s of the ${budget}s budget spent)"
    return 2
  fi
  t=$cap; [ "$t" -gt "$left" ] && t=$left
  echo "== $label ($(date -u +%H:%M:%S), timeout ${t}s): $(qcmd "$@")" >>"$logs"
  t0=$SECONDS
  timeout -k 15 "$t" "$@" >"$raw/$label.out" 2>&1
  rc=$?
  cat "$raw/$label.out" >>"$logs"
  echo "== $label: rc $rc after $((SECONDS - t0))s" >>"$logs"
  if [ "$rc" -ne 0 ]; then
    local why="rc $rc"; [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && why="timed out after ${t}s (rc $rc)"
    say "FAILED: $label ($why); the tail of its log:"
    tail -n 25 "$raw/$label.out" | sed 's/^/    | /' | tee -a "$status"
    return 1
  fi
  echo "ok: $label ($((SECONDS - t0))s)" | tee -a "$status"
  # the program's own report lines (not nsys's progress)
  grep -v -E '^(Collecting data|Generating |Processing |Generated:|Exporting |    /|\[[0-9]/[0-9]\]|WARNING: CPU |USDT:)' \
    "$raw/$label.out" | grep -v '__recompiles\]     -' | tail -n 8 | cut -c1-300 | sed 's/^/    /'
  return 0
}

# record NAME CAP_S "DRY ARGS" "RETRY ARGS" -- PROGRAM...   (nsys + SQLite export; keep it)
# With FRESH_INDUCTOR=1 (FRESH_INDUCTOR=1 record ...), every try gets an empty
# TORCHINDUCTOR_CACHE_DIR (its own folder under W), so the compile is cold whatever ran before.
record() {
  local nm=$1 cap=$2 dryargs=$3 retry=$4; shift 5
  local args cmd extra size try pre
  wanted "$nm" || return 0
  for try in 1 2; do
    args=("$@")
    pre=()
    [ "${FRESH_INDUCTOR:-0}" = 1 ] && pre=(env "TORCHINDUCTOR_CACHE_DIR=$raw/inductor_${nm}_$try")
    if [ "$try" = 2 ]; then
      [ -n "$retry" ] || break
      read -ra extra <<<"$retry"; args+=("${extra[@]}")
      say "RETRY: $nm ($size bytes > $limit) with: $retry"
    fi
    if [ "$dry" = 1 ]; then
      read -ra extra <<<"$dryargs"
      cmd=("${pre[@]}" "${args[@]}" --device cpu "${extra[@]}")
      run_cmd "$nm" "$cap" "${cmd[@]}" && echo "dry command $nm: $(qcmd "${cmd[@]}")" >>"$prov"
      return
    fi
    rm -f "$raw/$nm.sqlite" "$raw/$nm.nsys-rep"
    cmd=("${pre[@]}" "${NSYS[@]}" --export sqlite --force-overwrite true -o "$raw/$nm" "${args[@]}")
    run_cmd "$nm" "$cap" "${cmd[@]}" || return
    if [ ! -s "$raw/$nm.sqlite" ]; then
      say "FAILED: $nm (nsys wrote no $nm.sqlite)"; tail -n 15 "$raw/$nm.out" | sed 's/^/    | /'
      return 1
    fi
    size=$(stat -c %s "$raw/$nm.sqlite")
    if [ "$size" -le "$limit" ] || [ -z "$retry" ] || [ "$try" = 2 ]; then
      cp "$raw/$nm.sqlite" "$pack/$nm.sqlite"
      echo "command $nm: $(qcmd "${cmd[@]}")" >>"$prov"
      [ "$size" -gt "$limit" ] && say "OVER LIMIT: $nm.sqlite is $size bytes (> $limit), kept anyway"
      echo "    $nm.sqlite: $size bytes"
      pack_up
      return 0
    fi
  done
}

# plain NAME CAP_S "DRY ARGS" -- PROGRAM...   (no nsys: the PyTorch profiler's own traces)
plain() {
  local nm=$1 cap=$2 dryargs=$3; shift 4
  local cmd=("$@") extra
  wanted "$nm" || return 0
  if [ "$dry" = 1 ]; then read -ra extra <<<"$dryargs"; cmd+=(--device cpu "${extra[@]}"); fi
  run_cmd "$nm" "$cap" "${cmd[@]}" || return
  echo "command $nm: $(qcmd "${cmd[@]}")" >>"$prov"
  pack_up
}

# ---------------------------------------------------------------- provenance header
{
  echo "wave-2 recordings, group $group$([ "$dry" = 1 ] && echo ' (DRYRUN: CPU, no nsys, tiny sizes; not traces)')"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname 2>/dev/null), $(nproc 2>/dev/null) cpus"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  echo "cuda (nvidia-smi): $(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1)"
  echo "nsys: $(nsys --version 2>&1 | head -1) at $(command -v nsys)"
  echo "repo: $(git rev-parse HEAD 2>/dev/null) (uncommitted recipe changes, if any, are hashed below)"
  echo "env: XLA_PYTHON_CLIENT_PREALLOCATE=$XLA_PYTHON_CLIENT_PREALLOCATE XLA_FLAGS=${XLA_FLAGS:-} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH=$PYTHONPATH"
  echo "work dir (W in the commands below): $work/raw"
  python3 - <<'EOF'
import sys
print("python:", sys.version.split()[0], "at", sys.executable)
from importlib import metadata
for dist in ("torch", "transformers", "jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda13-pjrt",
             "triton", "nvtx", "numpy", "cupy-cuda13x", "nvidia-cuda-cupti"):
    try:
        print(f"{dist}: {metadata.version(dist)}")
    except Exception:
        print(f"{dist}: not installed")
try:
    import torch
    print("torch.version.cuda:", torch.version.cuda, "cudnn:", torch.backends.cudnn.version(),
          "cuda available:", torch.cuda.is_available())
except Exception as exc:
    print("torch: unavailable", exc)
try:
    import nvtx
    print("nvtx module:", nvtx.__file__)
except Exception as exc:
    print("nvtx: unavailable", exc)
EOF
  echo "recipes (sha256):"
  (cd "$R" && sha256sum record_wave2.sh wave2_util.py wave2_summary.py torch_decode.py \
     torch_compile_decode.py hf_generate.py jax_train.py torch_emit_nvtx.py torch_dataload.py \
     torch_worker_thread.py | sed 's/^/  /')
  echo "budget ${budget}s, export limit ${limit} bytes${only:+, only: $only}"
} >>"$prov" 2>&1
head -8 "$prov"

# ---------------------------------------------------------------- group 1
if [ "$group" = 1 ]; then
  record torch_worker_thread 90 "" "" -- python3 $R/torch_worker_thread.py
  record torch_dataload 90 "--steps 3" "" -- python3 $R/torch_dataload.py
  record torch_emit_nvtx 120 "--steps 1" "--steps 2" -- python3 $R/torch_emit_nvtx.py
  record jax_train 150 "--steps 3 --width 128 --batch 32" "--autotune-level 0" -- \
    python3 $R/jax_train.py --device cuda
  # cold compiles; an export over the limit (Inductor's first-call benchmark launches of Triton
  # kernels with two configs) is redone with one config per kernel
  FRESH_INDUCTOR=1 record torch_compile_graphs 200 "--steps 4 --d-model 256 --heads 4" \
    "--no-pointwise-autotune" -- python3 $R/torch_compile_decode.py
  FRESH_INDUCTOR=1 record hf_generate_compile 240 "--max-new-tokens 4" \
    "--no-pointwise-autotune --max-new-tokens 16" -- python3 $R/hf_generate.py
fi

# ---------------------------------------------------------------- group 2
if [ "$group" = 2 ]; then
  tiny="--layers 2 --d-model 256 --heads 4 --steps 4"
  # 7. one report, exported three ways
  nm=torch_decode_small
  prog=(python3 $R/torch_decode.py --steps 8)
  if ! wanted $nm; then
    :
  elif [ "$dry" = 1 ]; then
    run_cmd $nm 90 "${prog[@]}" --device cpu $tiny &&
      echo "dry command $nm: $(qcmd "${prog[@]}" --device cpu $tiny) (exports skipped)" >>"$prov"
  else
    rm -rf "$raw/$nm".*
    cmd=("${NSYS[@]}" --force-overwrite true -o "$raw/$nm" "${prog[@]}")
    if run_cmd $nm 90 "${cmd[@]}"; then
      echo "command $nm.nsys-rep: $(qcmd "${cmd[@]}")" >>"$prov"
      cp "$raw/$nm.nsys-rep" "$pack/" && echo "    $nm.nsys-rep: $(stat -c %s "$pack/$nm.nsys-rep") bytes"
      for spec in "sqlite $nm.sqlite" "parquetdir ${nm}_parquet" "arrowdir ${nm}_arrow"; do
        set -- $spec
        cmd=(nsys export --type "$1" -o "$raw/$2" "$raw/$nm.nsys-rep")
        if run_cmd "export_$1" 120 "${cmd[@]}"; then
          got=$(ls -d "$raw/$2"* 2>/dev/null | head -1)   # nsys may add its own suffix
          if [ -n "$got" ]; then
            cp -r "$got" "$pack/" && echo "export $(basename "$got") (from $nm.nsys-rep): $(qcmd "${cmd[@]}")" >>"$prov"
          else
            say "FAILED: export $2 (nsys exited 0 but wrote nothing at $raw/$2)"
          fi
        fi
      done
      pack_up
    fi
  fi
  # 8. the PyTorch profiler, same program and args (no nsys: both profilers use CUPTI)
  plain torch_decode_small.pt.trace.json.gz 120 "$tiny" -- \
    python3 $R/torch_decode.py --steps 8 --tracer torch --trace-out "$pack/torch_decode_small.pt.trace.json.gz"
  plain torch_decode_steps.pt.trace.json.gz 120 "$tiny" -- \
    python3 $R/torch_decode.py --steps 8 --tracer torch-steps --trace-out "$pack/torch_decode_steps.pt.trace.json.gz"
  # 9. compare pairs: three unchanged baselines, three regressions with the same range names
  for i in 1 2 3; do
    record cmp_base_$i 90 "$tiny" "" -- python3 $R/torch_decode.py --steps 16
  done
  record cmp_sync 90 "$tiny" "" -- python3 $R/torch_decode.py --steps 16 --sync-every-step
  record cmp_nograph 90 "$tiny" "" -- python3 $R/torch_decode.py --steps 16 --no-graph
  record cmp_split 90 "$tiny" "--steps 8" -- python3 $R/torch_decode.py --steps 16 --unfused
  cat >>"$prov" <<'EOF'
pairs:
  torch_decode_small.{nsys-rep,sqlite,_parquet/,_arrow/}: ONE nsys recording of
    `torch_decode.py --steps 8`, exported three ways (the export commands above).
  torch_decode_small.pt.trace.json.gz: `torch_decode.py --steps 8 --tracer torch` (the same
    program and arguments, not under nsys: nsys and the PyTorch profiler both take CUPTI); its
    nsys counterpart is torch_decode_small.* (every range is NVTX there, NVTX + record_function
    here; the profiler runs around both the eager and the graph decode).
  torch_decode_steps.pt.trace.json.gz: `--tracer torch-steps`, schedule(wait=1, warmup=1,
    active=3, repeat=1), prof.step() after every decode_step across both paths: the active window
    is ProfilerStep#2..#4, the eager path's 3rd to 5th steps; nsys counterpart torch_decode_small.*.
  cmp_base_{1,2,3}: `torch_decode.py --steps 16`, three unchanged runs (run-to-run noise).
  cmp_sync: + --sync-every-step; cmp_nograph: + --no-graph (the graph range runs eagerly, nothing
    captured); cmp_split: + --unfused (LayerNorm and GELU written out: more kernels, same math).
    Same range names as the baselines: eager x1, graph x1, decode_step x32.
EOF
fi

# ---------------------------------------------------------------- summary, pack
{
  echo
  echo "summary (group $group, ${SECONDS}s):"
  python3 $R/wave2_summary.py "$pack" 2>&1
} | tee "$pack/summary.txt"
cat "$pack/summary.txt" >>"$prov"
pack_up
tb=$(stat -c %s "$out/$name.tar.gz" 2>/dev/null || echo 0)
if [ "$tb" -gt 16777216 ]; then
  split -b 15M -d -a 2 "$out/$name.tar.gz" "$out/$name.tar.gz.part-" && rm -f "$out/$name.tar.gz"
  say "NOTE: $name.tar.gz was $tb bytes (> 16 MiB): split into $(ls "$out" | grep -c "$name.tar.gz.part-") parts; cat $name.tar.gz.part-* > $name.tar.gz"
fi
{
  echo "status (group $group):"
  cat "$status"
  cat "$pack/summary.txt"
} >"$out/${name}_summary.txt"
echo
echo "status (group $group, ${SECONDS}s):"
grep -E '^(FAILED|SKIPPED|RETRY|OVER LIMIT|NOTE)' "$status" || echo "  all recordings ok"
ls -l "$out" | sed 's/^/  /'
rm -rf "$work"
