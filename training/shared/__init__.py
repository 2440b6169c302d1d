"""What SFT (``training/sft.py``) and GRPO (``rl/grpo.py``) share, and the only part of ``training`` besides
``training.procedural`` that ``rl`` imports: model loading for training with LoRA and freezing (``models``), the
stall watchdog (``watchdog``), the memory and time plan of ``plan=true`` (``plan``, ``plan_models``) and the
``trainer.report_to`` check (``reporting``)."""
