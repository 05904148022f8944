#!/usr/bin/env bash
# The GPU checks as one command, for a machine with a CUDA GPU whose image has torch but
# neither Ray nor DeepSpeed (the device tool's): run benchmarks/gpu/prepare.sh here first,
# then, there, with .whl .raypkg .gpudata carried:
#
#   bash benchmarks/gpu/session.sh mfu        # benchmarks/gpu_mfu.py: MFU of gpt2-small, seq 1024, bf16
#   bash benchmarks/gpu/session.sh pipeline   # configs/gpt-tiny.yaml end to end, training on the GPU
#                                             # through Ray Train (NCCL), DeepSpeed bf16, compile
#
# Results go to $OUT (the device tool's output folder; /tmp/gpu-out elsewhere).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu-out}
SITE=${SITE:-/tmp/gpu-site}
mkdir -p "$OUT" "$SITE"
if [ ! -f "$SITE/.installed" ]; then
  tar xJf .raypkg/ray-*.tar.xz -C "$SITE" || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    || exit 1
  touch "$SITE/.installed"
fi
export PYTHONPATH="$SITE:$PWD" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"

mfu() {  # most wanted first; each run appends its results to mfu.jsonl, and none starts past the budget
  local log="$OUT/mfu.log" results="$OUT/mfu.jsonl" deadline=$((SECONDS + ${MFU_BUDGET_S:-400}))
  run() {
    local limit=$(( $1 < deadline - SECONDS ? $1 : deadline - SECONDS ))
    if [ "$limit" -lt 30 ]; then echo "skipped (budget): ${*:2}" | tee -a "$log"; return; fi
    timeout "$limit" python3 benchmarks/gpu_mfu.py --out "$results" "${@:2}" 2>&1 | grep -v "^\[\|Warning" | tee -a "$log"
  }
  run 180 --micro-batch-size 32 --grad-accum 8 --variants bf16+compile bf16
  run 90 --micro-batch-size 32 --grad-accum 1 --variants bf16+compile fp16+compile
  run 80 --micro-batch-size 64 --grad-accum 4 --variants bf16+compile
  run 80 --micro-batch-size 32 --grad-accum 8 --variants bf16+compile --engine torch
  run 80 --micro-batch-size 32 --grad-accum 8 --variants bf16+compile --attention cudnn --profile
}

pipeline() {
  local workdir=/tmp/gpu-pipeline
  rm -rf "$workdir"
  DATA_DIR=.gpudata timeout "${PIPELINE_BUDGET_S:-300}" python3 -m cluster.cli run configs/gpt-tiny.yaml -o workdir=$workdir \
    -o pretrain.num_workers=1 -o pretrain.gpus_per_worker=1 -o pretrain.precision=bf16 -o pretrain.compile=true \
    -o finetune.num_workers=1 -o finetune.gpus_per_worker=1 -o finetune.precision=bf16 \
    -o evaluate.num_workers=1 -o evaluate.gpus_per_worker=1 2>&1 | tail -n 150 > "$OUT/pipeline.log"
  echo "pipeline exit ${PIPESTATUS[0]}" | tee -a "$OUT/pipeline.log"
  python3 -m cluster.cli status "$workdir" 2>&1 | tee "$OUT/status.txt"
  find "$workdir" -name metrics.jsonl -path "*pretrain*" -exec cp {} "$OUT/pretrain_metrics.jsonl" \; -quit
  find "$workdir" -name manifest.json -path "*pretrain*" -exec cp {} "$OUT/pretrain_manifest.json" \; -quit
}

for part in "${@:-mfu}"; do "$part"; done
