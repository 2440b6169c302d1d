"""SA-IQA supervised fine-tuning (``training/sft.py``): prompts, MOS targets, datasets, the trainer; what SFT and
GRPO share (``training.shared``); procedural data (``training.procedural``)."""
