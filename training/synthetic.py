"""Write the procedural interior benchmark (images, MOS, raw ratings, preference pairs, inpainting tasks).

    python -m training.synthetic out=DIR n=200 [size=64 seed=0 variants=1 annotators=5 pairs=N]

Settings: training/commands/synthetic.py (SyntheticSettings).
"""

from reward.core.cli import main
from training.commands.synthetic import SyntheticSettings, run

if __name__ == "__main__":
    main("synthetic", run, schema=SyntheticSettings, doc=__doc__)
