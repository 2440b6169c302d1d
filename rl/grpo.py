"""GRPO training of a prompt-expansion policy against any registered reward of inpainted images (SA-IQA §4.4).

    accelerate launch rl/grpo.py reward=sa-iqa reward.path=DIR policy.path=PATH generator=NAME data=TASKS.jsonl \
        output_dir=DIR

Any trl.GRPOConfig field is set under ``trainer.`` (``trainer.use_vllm=true`` for vLLM generation on GPUs);
``lora.enabled=true`` trains LoRA adapters (the paper: Qwen2.5-VL-7B with LoRA); ``'eval_rewards=[qbench]'`` adds
held-out rewards the policy is not trained on. Writes checkpoints, ``DIR/policy/``, ``DIR/reward_curve.png``,
``DIR/samples_first_last.png`` and ``DIR/grpo_result.json``.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from rl.grpo_run import run_grpo


@hydra.main(config_path="../configs", config_name="grpo", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    return run_grpo(cfg)


if __name__ == "__main__":
    main()
