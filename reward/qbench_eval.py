"""Q-Bench+ harness: A1 perception, A2 description, A3 assessment leaderboard.

    python reward/qbench_eval.py task=a1 model.path=PATH data=LLVISIONQA.json out=DIR
    python reward/qbench_eval.py task=a2 model.path=PATH data=LLDESCRIBE.json out=DIR a2.judge.base_url=URL
    python reward/qbench_eval.py task=a3 model.path=PATH data=[KONIQ.jsonl,SPAQ.jsonl] out=DIR a3.ensemble=true

Settings: reward/commands/qbench_eval.py (QbenchEvalSettings), which also says what each task writes.
"""

from reward.commands.qbench_eval import QbenchEvalSettings, run
from reward.core.cli import main

if __name__ == "__main__":
    main("qbench_eval", run, schema=QbenchEvalSettings, doc=__doc__)
