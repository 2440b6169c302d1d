"""Flow-GRPO: any registered reward trains a LoRA adapter on a flow-matching generator (FLUX Fill, SD3.5).

Flow-GRPO: Training Flow Matching Models via Online RL (arXiv:2505.05470): the generator itself is trained.

    accelerate launch rl/flow_grpo.py generator=flux-fill generator.path=DIR reward=sa-iqa reward.model=SCORER \\
        data=TASKS.jsonl judge=qbench out=DIR

``generator=flux-fill`` trains FLUX.1 Fill on inpainting tasks; ``generator=sd3`` Stable Diffusion 3.5 on prompts
(``{"prompt"}`` rows). ``more_rewards=[...]`` with ``trainer.reward_weights`` adds rewards; ``judge=`` a held-out
judge the generator is not trained on. ``+recipe=flow-grpo-flux-fill`` holds flow_grpo's published hyperparameters;
``plan=true`` prints the memory and time of a run before anything loads. Writes checkpoints, ``DIR/lora/`` (diffusers'
LoRA format with its model card), ``DIR/reward_curve.png``, ``DIR/sample_sheets.png``, ``DIR/heldout/`` and
``DIR/flow_grpo_result.json``. Installed: ``perceptual-rewards flow-grpo ...`` (``accelerate launch -m reward flow-grpo
...``); the settings are listed below.
"""

from reward.core.cli import main
from rl.commands.flow_grpo import run
from rl.commands.flow_grpo_settings import FlowGrpoSettings

if __name__ == "__main__":
    main("flow_grpo", run, schema=FlowGrpoSettings, doc=__doc__)
