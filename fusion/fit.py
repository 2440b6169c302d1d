"""Fit Bradley–Terry fusion weights for dimension scores (SA-IQA §3.2.2) and write them as JSON + a bar chart.

    perceptual-rewards fit pairs=PAIRS.jsonl scores=SCORES.jsonl out=WEIGHTS.json
    perceptual-rewards fit pairs=PAIRS.jsonl reward=sa-iqa reward.model=SCORER_DIR out=SCORER_DIR/fusion_weights.json

Every setting with its default and its one-line help: perceptual-rewards fit --help.
"""

import os

# The fit's BLAS calls are tiny (L-BFGS-B's own algebra; the big products use einsum), so BLAS threads only add
# overhead, badly so on a busy machine. Must be set before numpy/scipy load OpenBLAS; an explicit value wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from fusion.commands.fit import FusionSettings, run  # noqa: E402
from reward.core.cli import main  # noqa: E402

if __name__ == "__main__":
    main("fit", run, schema=FusionSettings, doc=__doc__)
