"""The logic of reward's commands, one module per entry script: ``reward/NAME.py`` runs
``reward.commands.NAME.run(settings)`` (``evaluate``, ``qbench_eval``)."""
