"""Score a ratings manifest with a reward and compare with the human MOS.

    perceptual-rewards evaluate reward=qbench reward.model=PATH data=MANIFEST out=DIR
    accelerate launch --num_processes N -m reward evaluate ...      # data-parallel: each process scores 1/N

Writes DIR/metrics.json ({dimension: {plcc, srcc, krcc, hor, n, ...}, "overall": ...}), DIR/scores.jsonl and a
scatter plot per dimension with the holistic-bias zone shaded; logs the table. Every setting: --help.
"""

from reward.commands.evaluate import EvaluateSettings, run
from reward.core.cli import main

if __name__ == "__main__":
    main("evaluate", run, schema=EvaluateSettings, doc=__doc__)
