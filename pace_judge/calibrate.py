"""One-time human-in-the-loop calibration of a PACE protocol (§4.4): two rated anchor images.

    python pace_judge/calibrate.py protocol=FILE pipeline=SD_DIR model.path=VLM_DIR [scores=1,3,4,5] [memory=DIR]
    python pace_judge/calibrate.py protocol=FILE benchmark=CALIBRATION_MANIFEST [test=TEST_MANIFEST]

Generative mode: the Generator agent writes positive and negative text-to-image prompts from the protocol (or
take ``prompts.positive`` / ``prompts.negative``), a diffusers pipeline renders the candidates, they are saved with a
contact sheet, a person rates them 1-5 (asked interactively, or ``scores=...`` for scripts), and the highest and
lowest rated become the anchors. Benchmark mode: the anchors are the highest- and lowest-MOS images of a labelled
calibration split, which must be disjoint from the test split. The protocol is rewritten in place (or to
``output=FILE``) with its anchors in ``anchors/`` beside it. Settings: pace_judge/commands/calibrate.py.
"""

from pace_judge.commands.calibrate import CalibrateSettings, run
from reward.core.cli import main

if __name__ == "__main__":
    main("calibrate", run, schema=CalibrateSettings, doc=__doc__)
