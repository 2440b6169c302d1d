#!/usr/bin/env bash
# bash bench/gpu_all.sh [--dry-run] [--out DIR] [--skip scoring,rl,photos] [--budget-s 540]
# The one GPU run in one go on one GPU, at most 9 minutes with the wheel installation: the scoring-loop profile
# and images/s (bench/gpu_check.py --skip lora,zero3), the RL GPU check (bench/rl_gpu_check.sh) and the real-photo
# recipe (bench/real_photos_gpu.py); one table (DIR/table.md) and the logs in DIR (default $OUT). See bench/gpu_all.py.
# Wheels in .whl/ (bash bench/gpu_wheels.sh) are installed first; --dry-run installs nothing and runs on the CPU.
set -u
STARTED=$(date +%s.%N)
# shellcheck source=bench/gpu_env.sh
source "$(dirname "$0")/gpu_env.sh"
gpu_env gpu_all "$@" || exit 1
exec "$PY" -u bench/gpu_all.py --started "$STARTED" "$@"
