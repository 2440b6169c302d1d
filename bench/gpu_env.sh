# Sourced by the GPU scripts (bench/gpu_check.sh, bench/rl_gpu_check.sh, bench/gpu_all.sh): `gpu_env NAME "$@"`
# installs the wheels in .whl/ (bash bench/gpu_wheels.sh) into /tmp/site, unless --dry-run is among the arguments,
# and sets the offline environment; then the script runs its Python part from the repository root.
gpu_env() {
  local name=$1 arg dry=0
  shift
  for arg in "$@"; do [ "$arg" = "--dry-run" ] && dry=1; done
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || return 1
  PY="${PYTHON:-python3}"
  if [ "$dry" = 0 ] && [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    echo "$(date -u +%H:%M:%S) installing $(ls .whl/*.whl | wc -l) wheels from .whl/ into /tmp/site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || echo "$(date -u +%H:%M:%S) WARNING: wheel install failed; continuing with the installed packages"
    export PYTHONPATH="/tmp/site:$PWD"
    "$PY" bench/checkout_metadata.py /tmp/site  # the checkout's entry point rewards (scene-proxy, pace), not installed
  else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  fi
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
  export DS_BUILD_OPS=0
  echo "$(date -u +%H:%M:%S) $name starts ($("$PY" --version 2>&1))"
}
