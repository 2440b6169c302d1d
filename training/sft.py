"""SA-IQA supervised fine-tuning of a VLM on rating words.

    accelerate launch training/sft.py model.path=PATH data.train=MANIFEST data.test=MANIFEST output_dir=DIR

Any trl.SFTConfig field is set under ``trainer.`` (e.g. ``trainer.max_steps=200 trainer.learning_rate=1e-3``);
``lora.enabled=true`` trains LoRA adapters instead of the full language model. Writes ``DIR/scorer/`` (load it
with ``reward=sa-iqa reward.path=DIR/scorer``) and ``DIR/metrics.json``.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from training.sft_run import run_sft


@hydra.main(config_path="../configs", config_name="sft", version_base="1.3")
def main(cfg: DictConfig) -> dict:
    return run_sft(cfg)


if __name__ == "__main__":
    main()
