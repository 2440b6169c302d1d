#!/usr/bin/env bash
# bash bench/gpu_all.sh [--dry-run] [--out DIR] [--stages scoring,rl,photos|families] [--skip STAGES] [--budget-s 540]
# The one GPU run, at most 9 minutes with the wheel installation: bench/gpu_all.py (its docstring says what it runs)
# once the wheels in .whl/ are installed (bench/gpu_env.sh); --dry-run installs nothing and runs on the CPU.
set -u
STARTED=$(date +%s.%N)
source "$(dirname "$0")/gpu_env.sh"
gpu_env gpu_all "$@" || exit 1
exec "$PY" -u bench/gpu_all.py --started "$STARTED" "$@"
