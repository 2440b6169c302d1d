"""The logic of rl's commands: ``rl/NAME.py`` runs ``rl.commands.NAME.run(settings)`` with its typed settings
(``grpo``, ``flow_grpo``, ``best_of_n``; the settings of the first two in ``*_settings.py`` modules)."""
