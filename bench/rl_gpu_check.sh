#!/usr/bin/env bash
# bash bench/rl_gpu_check.sh [--dry-run] [--out DIR] [--reward-model DIR] [--steps N] [--budget-s S]
# bench/rl_gpu_check.py (what it measures: its docstring) once the wheels in .whl/ are installed (bench/gpu_env.sh).
set -u
source "$(dirname "$0")/gpu_env.sh"
gpu_env rl_gpu_check "$@" || exit 1
exec "$PY" -u bench/rl_gpu_check.py "$@"
