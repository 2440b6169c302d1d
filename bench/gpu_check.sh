#!/usr/bin/env bash
# bash bench/gpu_check.sh [--dry-run] [--out DIR] [--skip scoring,lora,zero3]
# One GPU check of the toolkit on a random-weight 7B-class Qwen2.5-VL (no download): the scoring loop's profile
# before and after issue 18, bf16 images/s per batch size (unoptimised vs fast), TFLOP/s against the peak, peak
# memory, prefix-reuse ratio, score differences (fast vs unoptimised, batch 16 vs 1, GPU vs PIL processor, bf16 vs
# fp32), LoRA SFT steps on the 7B config and full fine-tuning under ZeRO-3 on a smaller one; one table.
# Wheels in .whl/ (e.g. a newer transformers, trl, datasets, hydra-core, deepspeed) are installed first.
set -u
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  echo "$(date -u +%H:%M:%S) installing $(ls .whl/*.whl | wc -l) wheels from .whl/ into /tmp/site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "$(date -u +%H:%M:%S) WARNING: wheel install failed; continuing with the installed packages"
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export DS_BUILD_OPS=0
echo "$(date -u +%H:%M:%S) gpu_check starts ($("$PY" --version 2>&1))"
exec "$PY" -u bench/gpu_check.py "$@"
