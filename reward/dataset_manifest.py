"""Write a public IQA dataset, read from its own files by name, as an editable JSONL ratings manifest.

    python reward/dataset_manifest.py data=NAME:FOLDER[:SPLIT] [out=FOLDER/NAME-SPLIT.jsonl]

e.g. ``data=kadid10k:/data/kadid10k:test``. Writes the manifest (one row per image and dimension, MOS on the
dataset's own scale, flipped for a DMOS) and a sidecar ``.json`` (scale, split rule and seed, file read, rows
skipped). Known names: reward/data/datasets/registry.py. Settings: reward/commands/dataset_manifest.py.
"""

from reward.commands.dataset_manifest import DatasetManifestSettings, run
from reward.core.cli import main

if __name__ == "__main__":
    main("dataset_manifest", run, schema=DatasetManifestSettings, doc=__doc__)
