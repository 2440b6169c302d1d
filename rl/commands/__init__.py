"""The logic of rl's commands, one module per entry script: ``rl/NAME.py`` runs ``rl.commands.NAME.run(cfg)``
(``grpo``, ``best_of_n``, ``tasks``)."""
