#!/usr/bin/env bash
# bash bench/rl_gpu_check.sh [--dry-run] [--out DIR] [--reward-model DIR] [--steps N] [--budget-s S]
# GRPO on one GPU (<= 8 min on an H200): a random-weight policy, a random 7B-class Qwen2.5-VL reward, the tiny FLUX
# Fill pipeline; the reward in-process, then behind the loopback OpenAI-compatible server. One table (rows
# "section | metric | value" as they come, the whole table at the end, --out DIR/rl_gpu_check.json): weights changed,
# devices as configured, seconds per step in policy generation / inpainting / reward / update, peak memory, served
# vs in-process scores; then GRPO with the default KL term under DeepSpeed ZeRO-3 (accelerate launch
# --use_deepspeed --zero_stage 3), a full and a LoRA policy. Wheels in .whl/ are installed first (bash bench/gpu_wheels.sh).
set -u
# shellcheck source=bench/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh"
gpu_env rl_gpu_check "$@" || exit 1
exec "$PY" -u bench/rl_gpu_check.py "$@"
