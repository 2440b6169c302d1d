"""``plan=true``'s model states (weights, gradients, optimizer) per GPU against DeepSpeed's own estimators.

DeepSpeed's ``estimate_zero2_model_states_mem_needs`` and ``estimate_zero3_model_states_mem_needs`` (without
offload) are arithmetic on two numbers, the parameters and the largest layer's: 2 bytes of bf16 weights, plus 18 per
parameter sharded over the GPUs (bf16 and fp32 gradients, the fp32 master copy and Adam's two moments), plus under
ZeRO-3 the largest layer gathered whole with its gradient (4 bytes per parameter). The plan counts the same terms,
so it never says "fits" where DeepSpeed's estimate does not; activations (checked against a GPU measurement in
tests/test_recipes.py) come on top.
"""

from __future__ import annotations

import pytest

from reward.core.cli import compose
from reward.core.config import parse
from training.commands.sft import SftSettings
from training.shared.plan import GIB
from training.shared.plan_models import model_shape

QWEN25_7B = "Qwen/Qwen2.5-VL-7B-Instruct"


def _full_fine_tuning_plan(stage: int, gpus: int, machines: int = 1, gpu_memory_gib: float = 139.0):
    """The plan of full fine-tuning of every parameter (vision tower and aligner too: DeepSpeed's estimators assume
    every parameter is trained) of Qwen2.5-VL-7B."""
    from training.commands.sft_plan import sft_plan

    overrides = [
        f"model.path={QWEN25_7B}",
        "data.train=synthetic",
        "out=unused",
        "trainer.max_steps=1",
        "model.freeze_vision=false",
        "model.freeze_aligner=false",
        f"plan_for.zero_stage={stage}",
        f"plan_for.processes={gpus}",
        f"plan_for.machines={machines}",
        f"plan_for.gpu_memory_gib={gpu_memory_gib}",
        "trainer.per_device_train_batch_size=1",
        "trainer.gradient_accumulation_steps=1",
    ]
    return sft_plan(parse(SftSettings, compose("sft", overrides, schema=SftSettings)))


def _deepspeed_gpu_bytes(stage: int, gpus: int, machines: int) -> int:
    """DeepSpeed's estimate of the model states per GPU (no offload) for Qwen2.5-VL-7B."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    shape = model_shape(QWEN25_7B)
    largest = 152064 * 3584  # the input embedding (vocab x hidden), as large as the untied LM head: 545M
    if stage == 2:
        return estimate_zero2_model_states_mem_needs(shape.total, gpus, machines, cpu_offload=False)[1]
    return estimate_zero3_model_states_mem_needs(shape.total, largest, gpus, machines, cpu_offload=False)[1]


def _model_states(plan) -> float:
    return sum(p.weights + p.gradients + p.optimizer for p in plan.parts)


LAUNCHES = [(2, 1, 1), (2, 8, 1), (3, 1, 1), (3, 8, 1), (3, 8, 2)]  # (ZeRO stage, GPUs per machine, machines)


@pytest.mark.parametrize(("stage", "gpus", "machines"), LAUNCHES)
def test_model_states_equal_deepspeeds_estimators(stage: int, gpus: int, machines: int):
    plan = _full_fine_tuning_plan(stage, gpus, machines)
    deepspeed = _deepspeed_gpu_bytes(stage, gpus, machines)
    assert _model_states(plan) == pytest.approx(deepspeed, abs=16), (_model_states(plan) / GIB, deepspeed / GIB)


@pytest.mark.parametrize(("stage", "gpus", "machines"), LAUNCHES)
def test_the_plan_never_says_fits_where_deepspeed_does_not(stage: int, gpus: int, machines: int):
    """On a GPU just too small for DeepSpeed's estimate of the model states alone, the plan does not fit."""
    memory = deepspeed_gib = _deepspeed_gpu_bytes(stage, gpus, machines) / GIB
    memory = round(deepspeed_gib - 0.05, 2)
    plan = _full_fine_tuning_plan(stage, gpus, machines, gpu_memory_gib=memory)
    assert not plan.fits and plan.total_gib > deepspeed_gib


def test_the_largest_layer_is_counted_as_deepspeed_counts_it(tiny_vlm25_path):
    """DeepSpeed's ``model_to_params`` of a real (tiny) model gives the counts the plan reads from its config."""
    from deepspeed.runtime.zero.stage3 import model_to_params
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm25_path)
    shape = model_shape(str(tiny_vlm25_path))
    assert (shape.total, shape.largest_layer) == model_to_params(model)
    assert model_shape(QWEN25_7B).largest_layer == 152064 * 3584
