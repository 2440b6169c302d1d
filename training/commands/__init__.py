"""The logic of training's commands, one module per entry script: ``training/NAME.py`` runs
``training.commands.NAME.run(cfg)`` (``sft``, ``photos``, ``synthetic``, ``perception_questions``)."""
