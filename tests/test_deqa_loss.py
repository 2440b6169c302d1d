"""loss.kind=deqa: DeQA-Score's loss (KL at the level word over the whole vocabulary + CE of the other tokens, x 0.05
per side, + the fidelity loss of the pairs), against the formulas written out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from training.deqa_loss import deqa_loss, deqa_trainer_class, fidelity_loss, level_kl

WORDS = ["excellent", "good", "fair", "poor", "bad"]
VALUES = [5.0, 4.0, 3.0, 2.0, 1.0]


def phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def fidelity_by_hand(s_a: float, s_b: float, mu_a: float, mu_b: float, sd_a: float, sd_b: float) -> float:
    """DeQA's rating_loss of one pair: Thurstone's P(A > B) with unit std predicted, with the MOS and std as target."""
    pred, gt = phi((s_a - s_b) / math.sqrt(2)), phi((mu_a - mu_b) / math.sqrt(sd_a**2 + sd_b**2 + 1e-8))
    return 1 - math.sqrt(pred * gt + 1e-8) - math.sqrt((1 - pred) * (1 - gt) + 1e-8)


def test_fidelity_loss_of_a_pair_by_hand():
    # pred = Phi(1/sqrt2) = 0.760250, gt = Phi(1/sqrt(0.5)) = 0.921350: 1 - 0.836933 - 0.137318 = 0.025749
    t = torch.tensor
    loss = fidelity_loss(t([4.0]), t([3.0]), t([3.5]), t([2.5]), t([0.5]), t([0.5]))
    assert loss.item() == pytest.approx(0.025749, abs=2e-6)
    assert loss.item() == pytest.approx(fidelity_by_hand(4.0, 3.0, 3.5, 2.5, 0.5, 0.5), abs=1e-7)


def test_kl_is_over_the_whole_vocabulary_with_an_unnormalised_target():
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0]])  # token 3 is no level word but takes probability mass
    target = torch.tensor([[0.7, 0.4, 0.0]])  # sums to 1.1, as DeQA's clipped labels may; a zero adds nothing
    p = torch.softmax(logits[0], 0)
    by_hand = 0.7 * math.log(0.7 / p[0]) + 0.4 * math.log(0.4 / p[1])
    assert level_kl(logits, target, torch.tensor([0, 1, 2])).item() == pytest.approx(by_hand, rel=1e-6)


def test_the_loss_of_a_batch_by_hand_with_an_odd_example_out():
    """Three examples: pair (0, 1), example 2 in side A's CE and KL only; the level word's CE left out."""
    torch.manual_seed(0)
    ids = torch.tensor([10, 11, 12, 13, 14])  # excellent .. bad
    labels = torch.tensor([[-100, -100, 3, 11, 4, 5], [-100, 3, 12, 4, 5, -100], [-100, -100, -100, 3, 14, 4]])
    log_probs = -torch.rand(3, 5)
    log_probs = log_probs * (labels[:, 1:] != -100)  # trl's fused head: zero where the label is ignored
    logits = torch.randn(3, 20)
    target = torch.tensor([[0.1, 0.6, 0.3, 0.0, 0.0], [0.0, 0.2, 0.7, 0.15, 0.0], [0.0, 0.0, 0.0, 0.3, 0.72]])
    mos, std = torch.tensor([3.9, 3.1, 1.4]), torch.tensor([0.5, 0.6, 0.4])
    loss, parts = deqa_loss(
        log_probs, labels, logits, target, mos, std, ids, torch.tensor(VALUES), deqa_weight=0.05, fidelity_weight=1.0
    )

    def ce(rows: list[int]) -> float:  # mean NLL of the non-level completion tokens of these rows
        kept = [(b, t) for b in rows for t in range(1, 6) if labels[b, t] >= 0 and labels[b, t] not in ids]
        nll = [-log_probs[b, t - 1].item() for b, t in kept]
        return sum(nll) / len(nll)

    def kl(b: int) -> float:
        p = torch.softmax(logits[b], 0)
        return sum(t * math.log(t / p[i]) for t, i in zip(target[b].tolist(), ids.tolist(), strict=True) if t > 0)

    def score(b: int) -> float:
        q = torch.softmax(logits[b, ids], 0)
        return float(q @ torch.tensor(VALUES))

    side_a = ce([0, 2]) + (kl(0) + kl(2)) / 2
    side_b = ce([1]) + kl(1)
    fid = fidelity_by_hand(score(0), score(1), 3.9, 3.1, 0.5, 0.6)
    assert parts["fidelity"].item() == pytest.approx(fid, abs=1e-6)
    assert loss.item() == pytest.approx(fid + 0.05 * (side_a + side_b), rel=1e-5)
    with pytest.raises(ValueError, match=r"rows \[1\] of the batch have no level word"):
        deqa_loss(log_probs, labels.masked_fill(labels == 12, 4), logits, target, mos, std, ids, torch.tensor(VALUES))


@pytest.mark.slow
def test_the_trainers_loss_is_deqas_from_the_full_logits_in_one_forward_pass(tiny_vlm_path, tmp_path):
    import datasets
    from transformers import AutoModelForImageTextToText

    from conftest import cpu_sft_args, random_images
    from reward.vlm import load_processor
    from reward.vlm.tokens import resolve_candidates
    from training.sft_data import conversation

    processor = load_processor(tiny_vlm_path)
    prefix = "The quality of the image is"
    ids = resolve_candidates(processor.tokenizer, prefix, WORDS)
    words = ["good", "fair", "excellent", "bad"]
    rows = [conversation("Rate the quality of this image.", f"{prefix} {w}.") for w in words]
    target = [[0.1, 0.6, 0.3, 0.0, 0.0], [0.0, 0.2, 0.7, 0.15, 0.0], [0.5, 0.48, 0.05, 0.0, 0.0], [0, 0, 0, 0.3, 0.7]]
    mos, std = [3.9, 3.1, 4.4, 1.4], [0.5, 0.6, 0.55, 0.4]
    ds = datasets.Dataset.from_dict(
        {
            "images": [[im] for im in random_images(4)],
            "prompt": [r["prompt"] for r in rows],
            "completion": [r["completion"] for r in rows],
            "level_target": target,
            "level_mos": mos,
            "level_std": std,
        }
    )
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_path)
    args = cpu_sft_args(tmp_path)  # one batch of 4 on the CPU, the extra columns kept
    trainer = deqa_trainer_class(ids, VALUES)(model=model, args=args, train_dataset=ds, processing_class=processor)
    batch = next(iter(trainer.get_train_dataloader()))  # unshuffled order is not promised: read it from the batch
    order = [words.index(processor.tokenizer.decode(int(t)).strip()) for t in _level_tokens(batch["labels"], ids)]
    calls = []
    handle = trainer.model.register_forward_hook(lambda *_: calls.append(1))
    loss = trainer.compute_loss(trainer.model, dict(batch))
    handle.remove()
    assert len(calls) == 1  # one forward pass
    loss.backward()
    assert trainer.model.lm_head.weight.grad is not None and trainer.model.lm_head.weight.grad.abs().sum() > 0

    inputs = {k: v for k, v in batch.items() if k not in ("labels", "level_target", "level_mos", "level_std")}
    with torch.no_grad():
        logits = trainer.model(**inputs).logits.float()  # the full [B, T, V] logits
    labels = batch["labels"]
    pos = [int(torch.isin(labels[b], torch.tensor(ids)).nonzero()[0]) for b in range(4)]
    logp = torch.log_softmax(logits, -1)

    def ce(rows: list[int]) -> float:
        kept = [(b, t) for b in rows for t in range(1, labels.size(1)) if labels[b, t] != -100 and t != pos[b]]
        nll = [-logp[b, t - 1, labels[b, t]].item() for b, t in kept]
        return sum(nll) / len(nll)

    def kl(b: int) -> float:
        t = target[order[b]]
        return sum(ti * (math.log(ti) - logp[b, pos[b] - 1, i].item()) for ti, i in zip(t, ids, strict=True) if ti > 0)

    def score(b: int) -> float:
        return float(torch.softmax(logits[b, pos[b] - 1, ids], 0) @ torch.tensor(VALUES))

    fid = (
        sum(
            fidelity_by_hand(score(a), score(b), mos[order[a]], mos[order[b]], std[order[a]], std[order[b]])
            for a, b in ((0, 1), (2, 3))
        )
        / 2
    )
    by_hand = fid + 0.05 * ((ce([0, 2]) + (kl(0) + kl(2)) / 2) + (ce([1, 3]) + (kl(1) + kl(3)) / 2))
    assert loss.item() == pytest.approx(by_hand, rel=1e-4)


def _level_tokens(labels: torch.Tensor, ids: list[int]) -> list[int]:
    hits = torch.isin(labels, torch.tensor(ids))
    return [int(labels[b][hits[b]][0]) for b in range(labels.size(0))]


@pytest.mark.slow
def test_sft_with_deqas_labels_and_loss_lowers_the_kl_to_the_soft_labels(tiny_vlm_path, tmp_path):
    """training/sft.py with data.soft_targets=deqa and loss.kind=deqa (deqa-koniq's settings) on a manifest with a
    std per row: the logged KL to the soft labels falls over the steps, and the run writes a scorer."""
    import json

    from conftest import random_images
    from reward.core.cli import compose
    from reward.core.config import parse
    from training.commands.sft import SftSettings, run

    rows = []
    for i, image in enumerate(random_images(8, seed=3)):
        image.save(tmp_path / f"{i}.png")
        rows.append({"image": f"{i}.png", "dimension": "quality", "mos": 1.2 + 0.5 * i, "std": 0.4 + 0.05 * i})
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [
        f"model.path={tiny_vlm_path}",
        f"data.train={tmp_path / 'train.jsonl'}",
        "data.test=null",
        f"out={tmp_path / 'run'}",
        "prompt.type=1",
        "prompt.dimensions=[quality]",
        "prompt.response_prefix=The quality of the image is",
        "data.soft_targets=deqa",
        "data.level_range=[1,5]",
        "loss.kind=deqa",
        "trainer.max_steps=6",
        "trainer.save_steps=6",
        "trainer.per_device_train_batch_size=4",
        "trainer.learning_rate=2e-3",
        "trainer.logging_steps=1",
    ]
    result = run(parse(SftSettings, compose("sft", overrides, schema=SftSettings)))
    assert result["global_step"] == 6 and (tmp_path / "run" / "scorer" / "sa_iqa.json").exists()
    state = json.loads((tmp_path / "run" / "checkpoint-6" / "trainer_state.json").read_text())
    kl = [e["deqa_kl"] for e in state["log_history"] if "deqa_kl" in e]
    assert len(kl) == 6 and all(math.isfinite(k) for k in kl)
    assert kl[-1] < 0.7 * kl[0], kl  # the level word's distribution moved towards the soft labels (11.2 -> 6.6 here)
