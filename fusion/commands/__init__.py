"""The logic of fusion's command: ``perceptual-rewards fit`` runs ``fusion.commands.fit.run(settings)``."""
