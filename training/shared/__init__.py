"""What SFT (``training/sft.py``) and GRPO (``rl/grpo.py``) share, and the only part of ``training`` besides
``training.procedural`` that ``rl`` imports: the model to train, loaded with one precision rule, LoRA and frozen parts
(``trainable``), resuming from the last complete checkpoint (``checkpoints``), DeepSpeed (``deepspeed``), the
memory and time plan of ``plan=true`` (``plan``, ``plan_models``), the
``trainer.report_to`` check (``reporting``) and what the model cards share (``cards``)."""
