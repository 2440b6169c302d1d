#!/usr/bin/env bash
# bash bench/gpu_check.sh [--dry-run] [--out DIR] [--skip scoring,lora,zero3]
# bench/gpu_check.py (what it measures: its docstring) once the wheels in .whl/ are installed (bench/gpu_env.sh).
set -u
source "$(dirname "$0")/gpu_env.sh"
gpu_env gpu_check "$@" || exit 1
exec "$PY" -u bench/gpu_check.py "$@"
