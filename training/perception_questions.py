"""A1-format multiple-choice questions with known answers over procedural scenes and distorted photos.

    python training/perception_questions.py out=DIR n=200 seed=1 photos=heldout [size=64 fmt=json families=[...]]

Settings: training/commands/perception_questions.py (QuestionsSettings).
"""

from reward.core.cli import main
from training.commands.perception_questions import QuestionsSettings, run

if __name__ == "__main__":
    main("perception_questions", run, schema=QuestionsSettings, doc=__doc__)
