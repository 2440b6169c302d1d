"""SA-IQA supervised fine-tuning of a VLM on rating words (trl SFTTrainer, loss on the completion only).

    perceptual-rewards sft model.path=PATH data.train=MANIFEST data.test=MANIFEST out=DIR
    accelerate launch --config_file CONFIGS/accelerate/zero2.yaml -m reward sft ...     # multi-GPU, DeepSpeed

CONFIGS: the folder ``perceptual-rewards --configs`` prints; from a clone: ``accelerate launch training/sft.py ...``.
Writes checkpoints, DIR/scorer/ (loadable with reward=sa-iqa reward.model=DIR/scorer) and DIR/metrics.json on the
test split. Any trl.SFTConfig field is set under trainer.
"""

from reward.core.cli import main
from training.commands.sft import SftSettings, run

if __name__ == "__main__":
    main("sft", run, schema=SftSettings, doc=__doc__)
