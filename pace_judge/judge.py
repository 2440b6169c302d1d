"""Judge a folder of images on one quality dimension with PACE.

    python pace_judge/judge.py protocol=FILE images=DIR out=DIR model=PATH
    python pace_judge/judge.py dimension="tactile satisfaction" images=DIR out=DIR model=PATH memory=DIR

Writes OUT/scores.jsonl (image, score, alpha1, alpha2, sub-dimension scores, per-probe option probabilities) and
logs a table. Settings: pace_judge/commands/judge.py (JudgeSettings).
"""

from pace_judge.commands.judge import JudgeSettings, run
from reward.core.cli import main

if __name__ == "__main__":
    main("judge", run, schema=JudgeSettings, doc=__doc__)
