#!/usr/bin/env bash
# bash bench/gpu_all.sh [--dry-run] [--out DIR] [--skip scoring,rl,photos] [--budget-s 540]
# Issue 18's GPU run in one go on one GPU, at most 9 minutes with the wheel installation: the scoring-loop profile
# and images/s (bench/gpu_check.py --skip lora,zero3), the RL GPU check (bench/rl_gpu_check.sh) and the real-photo
# recipe (bench/real_photos_gpu.py); one table (DIR/table.md) and the logs in DIR (default $OUT). See bench/gpu_all.py.
# Wheels in .whl/ (bash bench/gpu_wheels.sh) are installed first; --dry-run installs nothing and runs on the CPU.
set -u
STARTED=$(date +%s.%N)
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DRY=0
for arg in "$@"; do [ "$arg" = "--dry-run" ] && DRY=1; done
if [ "$DRY" = 0 ] && [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  echo "$(date -u +%H:%M:%S) installing $(ls .whl/*.whl | wc -l) wheels from .whl/ into /tmp/site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "$(date -u +%H:%M:%S) WARNING: wheel install failed; continuing with the installed packages"
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export DS_BUILD_OPS=0
echo "$(date -u +%H:%M:%S) gpu_all starts ($("$PY" --version 2>&1))"
exec "$PY" -u bench/gpu_all.py --started "$STARTED" "$@"
