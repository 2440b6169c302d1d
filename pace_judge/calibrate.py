"""One-time human-in-the-loop calibration of a PACE protocol (§4.4): two rated anchor images.

    python pace_judge/calibrate.py protocol=FILE pipeline=SD_DIR model.path=VLM_DIR [scores=1,3,4,5] [memory=DIR]
    python pace_judge/calibrate.py protocol=FILE benchmark=CALIBRATION_MANIFEST [test=TEST_MANIFEST]

Generative mode: the Generator agent's prompts rendered by a diffusers pipeline, rated 1-5 by a person (or
``scores=...``); benchmark mode: the highest- and lowest-MOS images of a calibration split disjoint from the test
split. The protocol is rewritten in place (or to ``output=FILE``), its anchors in ``anchors/`` beside it.
"""

from pace_judge.commands.calibrate import CalibrateSettings, run
from reward.core.cli import main

if __name__ == "__main__":
    main("calibrate", run, schema=CalibrateSettings, doc=__doc__)
