"""SA-IQA supervised fine-tuning of a VLM on rating words (trl SFTTrainer, loss on the completion only).

    accelerate launch training/sft.py model.path=PATH data.train=MANIFEST data.test=MANIFEST out=DIR
    accelerate launch --config_file configs/accelerate/zero2.yaml training/sft.py ...      # multi-GPU, DeepSpeed

Writes checkpoints, DIR/scorer/ (loadable with reward=sa-iqa reward.model=DIR/scorer) and DIR/metrics.json on the
test split. Settings: training/commands/sft.py (SftSettings); any trl.SFTConfig field under trainer.
"""

from reward.core.cli import main
from training.commands.sft import SftSettings, run

if __name__ == "__main__":
    main("sft", run, schema=SftSettings, doc=__doc__)
