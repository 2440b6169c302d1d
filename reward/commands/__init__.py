"""The logic of reward's commands, one module per entry script.

``reward/evaluate.py`` runs :mod:`reward.commands.evaluate`; ``reward/qbench_eval.py`` runs
:mod:`reward.commands.qbench_eval`.
"""
