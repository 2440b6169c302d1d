"""The logic of fusion's command: ``fusion/fit.py`` runs ``fusion.commands.fit.run(cfg)``."""
