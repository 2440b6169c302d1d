"""Real photos with synthetic distortions: held-out set, the BRISQUE peer, KADID-10k calibration.

    python training/photos.py heldout out=HELDOUT [photos=DIR crop=112 side=224 crops=2 seed=0]
    python training/photos.py brisque data=HELDOUT/ratings.jsonl [out=DIR]
    python training/photos.py calibrate dmos=KADID/dmos.csv out=calibration.json

Settings: training/commands/photos.py (PhotosSettings).
"""

from reward.core.cli import main
from training.commands.photos import SUBCOMMANDS, PhotosSettings, run

if __name__ == "__main__":
    main("photos", run, schema=PhotosSettings, doc=__doc__, subcommands=SUBCOMMANDS)
