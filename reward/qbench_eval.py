"""Q-Bench+ harness: A1 perception, A2 description, A3 assessment leaderboard.

    perceptual-rewards qbench-eval task=a1 model.path=PATH data=LLVISIONQA.json out=DIR
    perceptual-rewards qbench-eval task=a2 model.path=PATH data=LLDESCRIBE.json out=DIR a2.judge.base_url=URL
    perceptual-rewards qbench-eval task=a3 model.path=PATH data=[KONIQ.jsonl,SPAQ.jsonl] out=DIR a3.ensemble=true

Every setting: perceptual-rewards qbench-eval --help; what each task writes: docs/qbench.md.
"""

from reward.commands.qbench_eval import QbenchEvalSettings, run
from reward.core.cli import main

if __name__ == "__main__":
    main("qbench_eval", run, schema=QbenchEvalSettings, doc=__doc__)
