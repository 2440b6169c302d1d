#!/usr/bin/env bash
# bash bench/gpu_check.sh [--dry-run] [--out DIR] [--skip scoring,lora,zero3]
# One GPU check of the toolkit on a random-weight 7B-class Qwen2.5-VL (no download): the scoring loop's profile
# before and after its faster path, bf16 images/s per batch size (unoptimised vs fast), TFLOP/s against the peak, peak
# memory, prefix-reuse ratio, score differences (fast vs unoptimised, batch 16 vs 1, GPU vs PIL processor, bf16 vs
# fp32), LoRA SFT steps on the 7B config and full fine-tuning under ZeRO-3 on a smaller one; one table.
# Wheels in .whl/ (e.g. a newer transformers, trl, datasets, hydra-core, deepspeed) are installed first.
set -u
# shellcheck source=bench/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh"
gpu_env gpu_check "$@" || exit 1
exec "$PY" -u bench/gpu_check.py "$@"
