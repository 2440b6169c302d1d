"""loss.rating_weight: the rating-word token's NLL counts w times, everything else as in trl."""

from __future__ import annotations

import pytest
import torch

from training.rating_loss import rating_term, weighted_trainer_class


def test_rating_term_sums_the_nll_of_rating_tokens_only_with_the_causal_shift():
    log_probs = torch.log(torch.tensor([[0.5, 0.25, 0.1], [0.2, 0.4, 0.8]]))
    labels = torch.tensor([[-100, 7, 3, 9], [-100, 4, 4, 5]])  # log_probs[b, t] scores labels[b, t + 1]
    expected = -(torch.log(torch.tensor(0.25)) + torch.log(torch.tensor(0.2)) + torch.log(torch.tensor(0.4)))
    assert rating_term(log_probs, labels, torch.tensor([3, 4])).item() == pytest.approx(expected.item())
    assert weighted_trainer_class(1.0, [3]).__name__ == "SFTTrainer"  # weight 1: trl's trainer untouched


@pytest.mark.slow
def test_weighted_loss_is_trl_loss_plus_extra_rating_nll_checked_against_full_logits(tiny_vlm_path, tmp_path):
    import datasets
    from transformers import AutoModelForImageTextToText
    from trl import SFTTrainer

    from conftest import cpu_sft_args, random_images
    from reward.vlm import load_processor
    from reward.vlm.tokens import resolve_candidates
    from training.sft_data import conversation

    processor = load_processor(tiny_vlm_path)
    words = ["excellent", "good", "fair", "poor", "bad"]
    ids = resolve_candidates(processor.tokenizer, "The quality is", words)
    rows = [conversation("Rate the quality.", f"The quality is {w}.") for w in words[:4]]
    ds = datasets.Dataset.from_dict(
        {
            "images": [[im] for im in random_images(4)],
            "prompt": [r["prompt"] for r in rows],
            "completion": [r["completion"] for r in rows],
        }
    )
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_path)
    args = cpu_sft_args(tmp_path)  # one batch of 4 on the CPU, the extra columns kept
    trainer = weighted_trainer_class(3.0, ids)(model=model, args=args, train_dataset=ds, processing_class=processor)
    batch = next(iter(trainer.get_train_dataloader()))
    weighted = trainer.compute_loss(trainer.model, dict(batch)).item()
    plain = SFTTrainer.compute_loss(trainer, trainer.model, dict(batch)).item()
    with torch.no_grad():
        logits = trainer.model(**{k: v for k, v in batch.items() if k != "labels"}).logits[:, :-1].float()
    labels = batch["labels"][:, 1:]
    mask = labels != -100
    nll = -torch.log_softmax(logits, -1).gather(-1, labels.clamp(min=0)[..., None])[..., 0] * mask
    rating = torch.isin(labels, torch.tensor(ids))
    assert int(rating.sum()) == 4  # one rating word per completion, none in the template
    assert plain == pytest.approx((nll.sum() / mask.sum()).item(), rel=1e-4)
    assert weighted == pytest.approx(((nll.sum() + 2.0 * nll[rating].sum()) / mask.sum()).item(), rel=1e-4)
