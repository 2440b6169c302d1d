#!/usr/bin/env bash
# bash bench/rl_gpu_check.sh   (on the GPU machine, with .whl carried: bench/gpu_wheels.sh's wheels plus
#   `python3 -m pip download --no-deps -d .whl diffusers==0.42.1`); DRY=1 runs it here on CPU without installing.
# rl/ on a GPU: the three tiny diffusers inpainting pipelines in bf16 (dtype=auto) and fp16 (candidate reproduced
# alone, time per call), Best-of-N with the SD1.5 pipeline, and 3 GRPO steps (bf16 policy, SD1.5 generator,
# held-out rewards). Results go to $OUT (or /tmp/rl_gpu_check).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/rl_gpu_check}"; mkdir -p "$OUT"
if [ "${DRY:-0}" != 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  export PYTHONPATH="/tmp/site:$PWD"
fi
PY="${PYTHON:-python3}"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:-$PWD}"
W=$(mktemp -d)
"$PY" - "$W" <<'PY' 2>&1 | grep -E "^RESULT|Error"
import sys, time, numpy as np, torch
from PIL import Image
from rl.generators import build_generator
from rl.testing import make_tiny_inpaint_pipeline
work = sys.argv[1]
img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (96, 128, 3), dtype=np.uint8))
mask = Image.new("L", (128, 96), 0)
mask.paste(255, (20, 20, 100, 80))
for kind in ["sd15-inpaint", "sdxl-inpaint", "flux-fill"]:
    path = make_tiny_inpaint_pipeline(f"{work}/{kind}", kind)
    extra = {"size_multiple": 16} if kind == "flux-fill" else {}
    for dtype in ["auto", "float16"] if torch.cuda.is_available() else ["auto"]:
        gen = build_generator({"name": kind, "path": str(path), "steps": 3, "dtype": dtype, **extra})
        start = time.perf_counter()
        out = gen.inpaint([img, img], [mask, mask], ["a bright room", "a dark room"], n=4, seed=5)
        took = time.perf_counter() - start
        alone = gen.inpaint([img], [mask], ["a dark room"], n=1, seed=7)[0][0]
        diff = np.abs(np.asarray(alone, float) - np.asarray(out[1][2], float)).max()
        print("RESULT", kind, dtype, gen.pipe.device, gen.pipe.dtype, "alone-vs-batched max diff", diff, "s", round(took, 3))
PY
"$PY" -m rl.inpaint_tasks out="$W/tasks" n=16 size=64 mask_fraction=0.8 >/dev/null 2>&1
"$PY" rl/best_of_n.py reward=scene-proxy generator=sd15-inpaint generator.path="$W/sd15-inpaint" generator.steps=4 \
  generator.dtype=auto data="$W/tasks/tasks.jsonl" out="$OUT/bon" judge=scene-proxy 2>&1 | grep -E "^best-of|Error"
"$PY" -c "from reward.testing import make_tiny_lm; make_tiny_lm('$W/lm')"
"$PY" rl/grpo.py reward=scene-proxy policy.path="$W/lm" data="$W/tasks/tasks.jsonl" output_dir="$W/grpo" \
  generator=sd15-inpaint generator.path="$W/sd15-inpaint" generator.steps=2 trainer.max_steps=3 \
  trainer.num_generations=4 trainer.per_device_train_batch_size=8 trainer.max_completion_length=16 eval.every=2 \
  eval_tasks=4 2>&1 | grep -E "held-out|Error"
"$PY" -c "import json; r = json.load(open('$W/grpo/grpo_result.json')); print('RESULT grpo', r['global_step'], r['timing'])"
cp "$W/grpo/reward_curve.png" "$OUT/" 2>/dev/null
true
