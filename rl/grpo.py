"""GRPO training of a prompt-expansion policy against any registered reward of inpainted images (SA-IQA §4.4).

    accelerate launch rl/grpo.py reward=sa-iqa reward.model=DIR policy.path=PATH generator=NAME data=TASKS.jsonl \\
        out=DIR

Any trl.GRPOConfig field is set under ``trainer.`` (``trainer.use_vllm=true`` for vLLM generation on GPUs;
``trainer.loss_type=grpo`` by default, eq. 8); ``lora.enabled=true`` trains LoRA adapters (the paper fine-tunes
Qwen2.5-VL-7B with LoRA in stage 1, before GRPO); ``'eval_rewards=[qbench]'`` adds held-out rewards the policy is
not trained on. Writes checkpoints, ``DIR/policy/`` (with its model card, ``README.md``), ``DIR/reward_curve.png``,
``DIR/samples_first_last.png`` and ``DIR/grpo_result.json``. Installed: ``perceptual-rewards grpo ...`` (``accelerate
launch -m reward grpo ...``); the settings are listed below.
"""

from reward.core.cli import main
from rl.commands.grpo import run
from rl.commands.grpo_settings import GrpoSettings

if __name__ == "__main__":
    main("grpo", run, schema=GrpoSettings, doc=__doc__)
