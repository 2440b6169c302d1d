"""The logic of reward's commands, one module per entry script: ``reward/NAME.py`` runs
``reward.commands.NAME.run(cfg)`` (``evaluate``, ``qbench_eval``)."""
