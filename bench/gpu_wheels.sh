#!/usr/bin/env bash
# bash bench/gpu_wheels.sh   (here, with network to the package index; then carry .whl to the GPU machine)
# Downloads into .whl/ the wheels bench/gpu_check.sh and bench/gpu_all.sh need beyond the GPU image's own packages
# (which has torch, torchvision, accelerate, peft, huggingface-hub 1.x, tokenizers, safetensors, pyarrow, pandas,
# typer, scikit-image, opencv): a newer transformers, trl, datasets and hydra-core with their missing dependencies,
# for bench/rl_gpu_check.sh diffusers (the inpainting pipelines), the openai client and the loopback server (fastapi,
# uvicorn) with their small dependencies, and DeepSpeed (built here as a pure-Python wheel: its CUDA ops compile on
# first use there). BRISQUE's libsvm has no wheel for that machine: bench/real_photos_gpu.py reads the held-out set's
# BRISQUE from bench/brisque_heldout.json there (recorded here, checked image by image).
set -eu
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> "$(git rev-parse --git-common-dir)/info/exclude"
PY="${PYTHON:-python3}"
mkdir -p .whl
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps $PLAT -d .whl \
  transformers==5.24.0 trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 peft==0.21.2 \
  hydra-core==1.3.8 omegaconf==2.3.0 hjson==3.1.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 \
  diffusers==0.42.1 importlib_metadata==10.2.0 lazy-importer==0.1.0 zipp==4.1.2 \
  openai==3.57.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 jiter==0.19.0 sniffio==1.3.1 anyio==4.16.0 \
  idna==3.20 fastapi==0.165.0 starlette==1.10.0 annotated-doc==0.0.7 opentelemetry-api==1.45.2 uvicorn==0.54.0 \
  h11==0.16.0 click==8.5.1
"$PY" -m pip download -q --no-deps --no-binary=:all: -d /tmp/gpu_wheels_src antlr4-python3-runtime==4.9.3
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w .whl /tmp/gpu_wheels_src/antlr4-python3-runtime-4.9.3.tar.gz
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w .whl deepspeed==0.19.8
ls -la .whl && du -sh .whl
