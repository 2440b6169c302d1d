"""Tiny dataset folders written in each public dataset's official format (a few rows, small generated images).

Each writer lays the files out as the official archive does (annotation file names, columns, line ends, folders),
per the research notes verified against the public sources (see the datasets table of docs/datasets.md). Image
content is noise whose brightness follows the MOS, so a scorer has something to rank.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from PIL import Image

SIZE = 56


def image(path: Path, level: float, seed: int = 0, fmt: str | None = None) -> None:
    """A small noise image at ``path`` whose brightness grows with ``level`` in [0, 1]."""
    rng = np.random.default_rng(seed)
    base = 40 + 180 * float(np.clip(level, 0, 1))
    pixels = np.clip(base + rng.normal(0, 25, (SIZE, SIZE, 3)), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, format=fmt)


def koniq_sets(root: Path, n: int = 10) -> list[dict]:
    """``koniq10k_distributions_sets.csv`` (fractions c1..c5, MOS 0-100, set) and ``1024x768/``."""
    rows = []
    sets = ["training"] * (n - 3) + ["validation", "test", "test"]
    for i in range(n):
        votes = np.zeros(5)
        votes[i % 5] = 0.75
        votes[(i + 1) % 5] = 0.25
        name = f"{1000 + i}.jpg"
        mean = float(votes @ np.arange(1, 6))
        image(root / "1024x768" / name, (mean - 1) / 4, seed=i, fmt="JPEG")
        rows.append(
            {"image_name": name, **{f"c{k + 1}": repr(float(v)) for k, v in enumerate(votes)}, "c_total": 100}
            | {"MOS": f"{(mean - 1) * 25:.4f}", "SD": "0.5", "set": sets[i]}
        )
    with (root / "koniq10k_distributions_sets.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, ["image_name", "c1", "c2", "c3", "c4", "c5", "c_total", "MOS", "SD", "set"])
        writer.writeheader()
        writer.writerows(rows)
    return rows


def spaq(root: Path, n: int = 10) -> list[list]:
    """``Annotations/MOS and Image attribute scores.xlsx`` (MOS and five attributes, 0-100) and ``TestImage/``."""
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["Image name", "MOS", "Brightness", "Colorfulness", "Contrast", "Noisiness", "Sharpness"])
    rows = []
    for i in range(1, n + 1):
        name = f"{i:05d}.jpg"
        mos = 5 + 90 * i // n  # an int, as openpyxl returns whole numbers; within SPAQ's 0-100 for any n
        image(root / "TestImage" / name, mos / 100, seed=i, fmt="JPEG")
        row = [name, mos, 100 - mos, 50.5 + i % 3, 40 + i, 30.0 + 2 * i, mos - 2.5]
        sheet.append(row)
        rows.append(row)
    (root / "Annotations").mkdir(parents=True, exist_ok=True)
    book.save(root / "Annotations" / "MOS and Image attribute scores.xlsx")
    return rows


def kadid(root: Path, refs: int = 6, types: int = 2) -> list[tuple[str, str, float]]:
    """``dmos.csv`` (``dist_img,ref_img,dmos,var``) and ``images/`` holding the references beside the distorted."""
    rows = []
    for r in range(1, refs + 1):
        image(root / "images" / f"I{r:02d}.png", 1.0, seed=100 + r)
        for t in range(1, types + 1):
            name = f"I{r:02d}_{t:02d}_01.png"
            mos = round(1 + (r * types + t) / (refs * types + types) * 3.9, 2)
            image(root / "images" / name, (mos - 1) / 4, seed=r * 10 + t)
            rows.append((name, f"I{r:02d}.png", mos))
    lines = ["dist_img,ref_img,dmos,var"] + [f"{d},{ref},{m},0.496" for d, ref, m in rows]
    (root / "dmos.csv").write_text("\n".join(lines) + "\n")
    return rows


def livec(root: Path, n: int = 8) -> tuple[list[str], list[float]]:
    """``Data/AllImages_release.mat`` and ``AllMOS_release.mat`` (+ std): t1-t7 first, then the test images."""
    from scipy.io import savemat

    names = [f"t{k}.bmp" for k in range(1, 8)] + [f"{100 + i}.{'JPG' if i % 2 else 'bmp'}" for i in range(n)]
    mos = [50.0] * 7 + [5.0 + 11 * i for i in range(n)]
    for k, (name, m) in enumerate(zip(names, mos, strict=True)):
        folder = root / "Images" / ("trainingImages" if name.startswith("t") else "")
        image(folder / name, m / 100, seed=k, fmt="JPEG" if name.endswith("JPG") else "BMP")
    cell = np.empty((len(names), 1), dtype=object)
    for i, name in enumerate(names):
        cell[i, 0] = np.array([name])
    (root / "Data").mkdir(parents=True, exist_ok=True)
    savemat(root / "Data" / "AllImages_release.mat", {"AllImages_release": cell})
    savemat(root / "Data" / "AllMOS_release.mat", {"AllMOS_release": np.array([mos])})
    savemat(root / "Data" / "AllStdDev_release.mat", {"AllStdDev_release": np.array([[12.5] * len(names)])})
    return names, mos


AGIQA_PROMPTS = ["statue of a man", "artwork with only triangles, anime style", "a red car", "a cat, photo"]


def agiqa3k(root: Path, per_prompt: int = 3) -> list[dict]:
    """``data.csv`` (CRLF, prompts with commas quoted) and the images somewhere below (archive layout unknown)."""
    rows = []
    for p, prompt in enumerate(AGIQA_PROMPTS):
        for k in range(per_prompt):
            name = f"sd1.5_normal_{p * per_prompt + k:03d}.jpg"
            q, a = round(0.3 + 1.3 * k + 0.1 * p, 4), round(4.2 - 1.1 * k, 4)
            image(root / "AGIQA-3K" / "database" / name, q / 5, seed=p * 7 + k, fmt="JPEG")
            style = "anime style" if "anime" in prompt else ""
            rows.append(
                {"name": name, "prompt": prompt, "adj1": "", "adj2": "", "style": style}
                | {"mos_quality": q, "std_quality": 0.2, "mos_align": a, "std_align": 0.3}
            )
    with (root / "data.csv").open("w", newline="") as f:  # csv writes CRLF line ends by default, as the file has
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return rows


def ava(root: Path, n: int = 12, test_ids: tuple[int, ...] = (2, 5)) -> list[tuple[int, list[int]]]:
    """``AVA.txt`` (index, id, ten vote counts, two tags, challenge), the test list and ``images/<id>.jpg``."""
    rows = []
    lines = []
    for i in range(n):
        votes = [0] * 10
        votes[i % 10] = 3 + i
        votes[(i + 3) % 10] = 2
        ident = 950000 + i
        rows.append((ident, votes))
        lines.append(" ".join(map(str, [i + 1, ident, *votes, 0, 15, 1396])))
        mean = sum((k + 1) * v for k, v in enumerate(votes)) / sum(votes)
        image(root / "images" / f"{ident}.jpg", (mean - 1) / 9, seed=i, fmt="JPEG")
    (root / "AVA.txt").write_text("\n".join(lines) + "\n")
    (root / "aesthetics_image_lists").mkdir(parents=True, exist_ok=True)
    (root / "aesthetics_image_lists" / "generic_test.jpgl").write_text("".join(f"{950000 + i}\n" for i in test_ids))
    return rows


def tid2013(root: Path, refs: int = 5) -> list[tuple[float, str, str]]:
    """``mos_with_names.txt`` (``<mos> <name>``), ``mos_std.txt`` and ``distorted_images/`` whose file names mix
    cases the way the archive does (``I01_01_1.bmp`` on disk, ``i01_01_1.bmp`` in the list, and the reverse)."""
    rows = []
    for r in range(1, refs + 1):
        for t in (1, 11):
            listed = f"i{r:02d}_{t:02d}_1.bmp"
            on_disk = listed.upper().replace(".BMP", ".bmp") if t == 1 else listed
            mos = round(0.5 + r * 1.1 + t * 0.05, 5)
            image(root / "distorted_images" / on_disk, mos / 9, seed=r * 3 + t, fmt="BMP")
            rows.append((mos, listed, on_disk))
        image(root / "reference_images" / f"I{r:02d}.BMP", 1.0, seed=r, fmt="BMP")
    (root / "mos_with_names.txt").write_text("".join(f"{m} {name}\n" for m, name, _ in rows))
    (root / "mos_std.txt").write_text("".join(f"{0.1 + i / 100}\n" for i in range(len(rows))))
    return rows


def live(root: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``dmos.mat`` (``dmos``, ``orgs``) and ``refnames_all.mat`` for LIVE's 982 entries, and ``<folder>/img<k>.bmp``
    (``img1.bmp`` exists in every folder). Every 5th entry is a reference copy (orgs = 1, DMOS 0)."""
    from scipy.io import savemat

    from reward.data.datasets.readers import LIVE_FOLDERS

    n = sum(k for _, k in LIVE_FOLDERS)
    orgs = np.array([1 if i % 5 == 0 else 0 for i in range(n)])
    dmos = np.where(orgs == 1, 0.0, 20 + (np.arange(n) % 60)).astype(float)
    refs = [f"ref{i % 29}.bmp" for i in range(n)]
    i = 0
    for folder, count in LIVE_FOLDERS:
        for k in range(1, count + 1):
            image(root / folder / f"img{k}.bmp", 1 - dmos[i] / 100, seed=i, fmt="BMP")
            i += 1
    cell = np.empty((1, n), dtype=object)
    for j, name in enumerate(refs):
        cell[0, j] = np.array([name])
    savemat(root / "dmos.mat", {"dmos": dmos[None, :], "orgs": orgs[None, :]})
    savemat(root / "refnames_all.mat", {"refnames_all": cell})
    return dmos, orgs, refs


def pipal(root: Path, refs: int = 5) -> list[tuple[str, float]]:
    """``Train_Label/*.txt`` (``<name>,<Elo>`` lines, no header) and ``Distortion_1/``, ``Train_Ref/``."""
    rows = []
    for r in range(1, refs + 1):
        image(root / "Train_Ref" / f"A{r:04d}.bmp", 1.0, seed=r, fmt="BMP")
        for k in range(2):
            name = f"A{r:04d}_0{k}_0{k}.bmp"
            elo = round(950 + 170 * r + 30 * k, 4)
            image(root / "Distortion_1" / name, (elo - 900) / 950, seed=10 * r + k, fmt="BMP")
            rows.append((name, elo))
    (root / "Train_Label").mkdir(parents=True, exist_ok=True)
    for r in range(1, refs + 1):
        mine = [f"{n},{e}" for n, e in rows if n.startswith(f"A{r:04d}")]
        (root / "Train_Label" / f"A{r:04d}.txt").write_text("\n".join(mine) + "\n")
    return rows


def flive(root: Path, n: int = 10) -> list[tuple[str, float]]:
    """``database/labels_image.csv`` (``name,mos``, names with their subfolder), the official test list
    ``labels640.csv`` (``name_image``) and ``labels=640_padded.csv`` (``name_image,is_valid``)."""
    rows = []
    for i in range(n):
        name = f"{'blur_dataset' if i % 2 else 'voc_emotic_ava'}/img{i:03d}.jpg"
        mos = 10.0 + 8 * i
        image(root / "database" / name, mos / 100, seed=i, fmt="JPEG")
        rows.append((name, mos))
    db = root / "database"
    (db / "labels_image.csv").write_text("name,mos\n" + "".join(f"{a},{b}\n" for a, b in rows))
    (db / "labels640.csv").write_text("name_image,mos_image\n" + "".join(f"{a},{b}\n" for a, b in rows[:2]))
    padded = "".join(f"{a},{b},{'True' if i == 2 else 'False'}\n" for i, (a, b) in enumerate(rows[2:], start=2))
    (db / "labels=640_padded.csv").write_text("name_image,mos_image,is_valid\n" + padded)
    return rows


SA_BENCH = {"distortion": "2k", "harmony": "7k", "layout": "6k", "lighting": "3k"}  # as the release names its files


def sa_bench(root: Path, n: int = 6) -> dict[str, list[dict]]:
    """SA-BENCH as published: ``annotations/{dimension}_{2k|7k|6k|3k}_{train|test|full}.csv`` (``id``, the
    annotators' ``{dimension}_score_{name}`` columns, some left empty, ``_score_mos``, ``_score_mos_int``, ``model``
    for two dimensions only) and ``images/{dimension}/{id}.jpg``; ``n`` images per dimension, the last third in test.
    Returns each file's rows by ``{dimension}_{split}``."""
    written: dict[str, list[dict]] = {}
    for d, (dim, subset) in enumerate(SA_BENCH.items()):
        raters = ["ann1", "ann2", "ann3", "ann4"]
        columns = ["id", *(f"{dim}_score_{a}" for a in raters), f"{dim}_score_mos", f"{dim}_score_mos_int"]
        columns += ["model"] if dim in ("harmony", "layout") else []
        rows = []
        for i in range(n):
            ident = 1000 * (d + 1) + i  # ids differ across dimensions, as SA-BENCH's images do
            scores = [1 + (i + k) % 5 for k in range(len(raters))]
            if i % 3 == 1:
                scores[-1] = None  # an image rated by three annotators
            given = [s for s in scores if s is not None]
            mos = sum(given) / len(given)
            row = {
                "id": ident,
                **{f"{dim}_score_{a}": "" if s is None else s for a, s in zip(raters, scores, strict=True)},
            }
            row |= {f"{dim}_score_mos": round(mos, 4), f"{dim}_score_mos_int": int(mos + 0.5), "model": "flux-inpaint"}
            rows.append({k: v for k, v in row.items() if k in columns})
            image(root / "images" / dim / f"{ident}.jpg", (mos - 1) / 4, seed=ident, fmt="JPEG")
        cut = n - n // 3
        for split, part in (("train", rows[:cut]), ("test", rows[cut:]), ("full", rows)):
            path = root / "annotations" / f"{dim}_{subset}_{split}.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w", newline="") as f:
                writer = csv.DictWriter(f, columns)
                writer.writeheader()
                writer.writerows(part)
            written[f"{dim}_{split}"] = part
    return written
