"""PACE (training-free judge of any dimension named in words): protocols, agents, memory bank and routing,
calibration with two anchors, and the dual-track score (``reward=pace``, ``pace_judge/judge.py``)."""
