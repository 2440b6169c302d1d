#!/usr/bin/env bash
# bash bench/rl_gpu_wheels.sh   (here, with network to the package index; after bench/gpu_wheels.sh; carry .whl)
# The wheels bench/rl_gpu_check.sh needs beyond bench/gpu_wheels.sh's: diffusers (the inpainting pipelines), the
# openai client and the loopback server (fastapi, uvicorn) with their small dependencies. All pure Python but jiter.
set -eu
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> "$(git rev-parse --git-common-dir)/info/exclude"
PY="${PYTHON:-python3}"
mkdir -p .whl
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps $PLAT -d .whl \
  diffusers==0.42.1 importlib_metadata==10.2.0 lazy-importer==0.1.0 zipp==4.1.2 \
  openai==3.57.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 jiter==0.19.0 sniffio==1.3.1 anyio==4.16.0 \
  idna==3.20 fastapi==0.165.0 starlette==1.10.0 annotated-doc==0.0.7 opentelemetry-api==1.45.2 uvicorn==0.54.0 \
  h11==0.16.0 click==8.5.1
ls -la .whl && du -sh .whl
