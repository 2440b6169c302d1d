"""The logic of PACE's commands, one module per entry script: ``pace_judge/NAME.py`` runs
``pace_judge.commands.NAME.run(settings)`` (``judge``, ``memory``, ``calibrate``)."""
