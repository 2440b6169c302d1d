"""The rewards and their registry: the Reward contract, the scoring rules (SA-IQA eq. 6-7, Q-Bench+ eq. 1-2),
qbench, sa-iqa and the fusion weights file."""
