#!/usr/bin/env bash
# bash bench/rl_gpu_check.sh [--dry-run] [--out DIR] [--reward-model DIR] [--steps N] [--budget-s S]
# GRPO on one GPU (<= 8 min on an H200): a random-weight policy, a random 7B-class Qwen2.5-VL reward, the tiny FLUX
# Fill pipeline; the reward in-process, then behind the loopback OpenAI-compatible server. One table (rows
# "section | metric | value" as they come, the whole table at the end, --out DIR/rl_gpu_check.json): weights changed,
# devices as configured, seconds per step in policy generation / inpainting / reward / update, peak memory, served
# vs in-process scores. Wheels in .whl/ are installed first (bench/gpu_wheels.sh and bench/rl_gpu_wheels.sh).
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
echo "$(date -u +%H:%M:%S) rl_gpu_check starts ($("$PY" --version 2>&1))"
exec "$PY" -u bench/rl_gpu_check.py "$@"
