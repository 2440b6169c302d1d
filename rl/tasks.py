"""Procedural inpainting tasks (image, centred mask, base prompt) for GRPO and Best-of-N runs on CPU.

    python rl/tasks.py out=DIR n=16 [size=64 seed=0 mask_fraction=0.6]      # writes DIR/tasks.jsonl

Settings: rl/commands/tasks.py (TasksSettings).
"""

from reward.core.cli import main
from rl.commands.tasks import TasksSettings, run

if __name__ == "__main__":
    main("tasks", run, schema=TasksSettings, doc=__doc__)
