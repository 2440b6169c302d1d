"""Best-of-N reranking of inpainted candidates with any registered reward (SA-IQA §4.5).

    python rl/best_of_n.py reward=sa-iqa reward.model=SCORER generator=NAME data=TASKS.jsonl n=4 out=DIR

``judge=NAME`` (or ``'judge={name: qbench, model: PATH}'``) adds the win rate of the chosen over a random candidate
judged by a second reward. Writes ``DIR/chosen/``, ``DIR/random/``, ``DIR/sheets/`` (one file per task, named by it),
``DIR/scores.jsonl`` and ``DIR/summary.json``. Installed: ``perceptual-rewards best_of_n ...``; the settings are listed
below.
"""

from reward.core.cli import main
from rl.commands.best_of_n import BestOfNSettings, run

if __name__ == "__main__":
    main("best_of_n", run, schema=BestOfNSettings, doc=__doc__)
