"""GRPO on the scorer itself (Q-Insight, VisualQuality-R1): trl's GRPOTrainer with the VLM as the policy.

    accelerate launch training/grpo_scorer.py model.path=PATH data.train=MANIFEST data.test=MANIFEST out=DIR
    accelerate launch --config_file configs/accelerate/zero3.yaml training/grpo_scorer.py +recipe=q-insight-koniq

Writes checkpoints, DIR/scorer/ (loadable with reward=reasoning-iqa reward.model=DIR/scorer, by sampling or in one
forward pass) and DIR/grpo_scorer_result.json. Settings: training/commands/grpo_scorer_settings.py
(GrpoScorerSettings); any trl.GRPOConfig field under trainer.
"""

from reward.core.cli import main
from training.commands.grpo_scorer import GrpoScorerSettings, run

if __name__ == "__main__":
    main("grpo_scorer", run, schema=GrpoScorerSettings, doc=__doc__)
