#!/usr/bin/env bash
# Record the tensor-parallel decode loop of torch_tp_decode.py on two GPUs, one nsys report per
# rank, with a host delay on rank 1 (issue 19's quality bar; tests/gpu/test_multi_gpu_gpu.py
# runs this and checks the report). Needs two CUDA GPUs, PyTorch with NCCL, torchrun and nsys.
#
#   source .devkit/setup.sh          # on the project's GPU machine: puts nsys on PATH
#   bash traces/recipes/record_multi_gpu.sh OUTDIR [DELAY_MS] [DELAY_EVERY]
#
# Writes OUTDIR/rank0.sqlite and OUTDIR/rank1.sqlite (nsys's %q{RANK}: torchrun's RANK of each
# worker), OUTDIR/delays.json (the steps rank 1 delayed and how long each sleep took),
# OUTDIR/provenance.txt (versions and the exact command) and OUTDIR/logs.txt.
set -u
out=${1:?usage: record_multi_gpu.sh OUTDIR [DELAY_MS] [DELAY_EVERY]}
delay_ms=${2:-5}
every=${3:-4}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# NVLink multicast stays off (a rule of the project's multi-GPU machines): NCCL's NVLS
# algorithms and PyTorch's symmetric-memory multicast would both use it.
export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
prov=$out/provenance.txt
logs=$out/logs.txt
: >"$prov"; : >"$logs"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "gpus: $(nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1 | tr '\n' ';')"
  echo "topology:"; nvidia-smi topo -m 2>&1 | head -5
  echo "nsys: $(nsys --version 2>&1 | head -1) at $(command -v nsys)"
  python3 -c "import sys, torch; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
  echo "env: NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST"
} >>"$prov" 2>&1

rm -f "$out"/rank*.sqlite "$out"/rank*.nsys-rep "$out/delays.json"
cmd=(torchrun --standalone --nproc_per_node 2 --no-python
     nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi --capture-range-end=stop
     --sample=none --cpuctxsw=none --export sqlite --force-overwrite true -o "$out/rank%q{RANK}"
     python3 traces/recipes/torch_tp_decode.py --delay-rank 1 --delay-ms "$delay_ms" --delay-every "$every"
     --summary "$out/delays.json")
echo "command: ${cmd[*]}" >>"$prov"
if ! "${cmd[@]}" >>"$logs" 2>&1; then
  echo "FAILED: see $logs" | tee -a "$prov"
  exit 1
fi
for r in 0 1; do
  [ -s "$out/rank$r.sqlite" ] || { echo "FAILED: no $out/rank$r.sqlite (see $logs)" | tee -a "$prov"; exit 1; }
  echo "rank$r.sqlite: $(stat -c %s "$out/rank$r.sqlite") bytes" >>"$prov"
done
cat "$prov"
