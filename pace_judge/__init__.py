"""PACE (training-free judge of any dimension named in words): protocols, agents, memory bank and routing,
calibration with two anchors, and the dual-track score (``reward=pace``, ``pace_judge/judge.py``)."""

# the pace reward, registered with reward's registry through the entry point in pyproject.toml (read on first use)
PACE_REWARD = {
    "factory": "pace_judge.pace:build",
    "higher_is_better": True,
    "score_range": (1.0, 5.0),
    "description": "PACE training-free judge of any dimension named in words: protocol probes + anchor comparison",
    "config": "pace_judge.config:PaceConfig",
}
