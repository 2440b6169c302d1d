"""``loss.rating_weight``: extra weight on the rating-word token (Q-Align and DeQA-Score supervise it; the template's
other tokens are learned in a few steps): ``(sum_t nll_t + (w - 1) * nll_rating) / n_tokens``, ``w = 1`` trl's loss.
An override of ``compute_loss`` (trl's advice) that adds one term to trl's own loss from the per-token
log-probabilities of its forward: no extra forward pass, trl's normalisation and accumulation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def rating_term(log_probs: torch.Tensor, labels: torch.Tensor, rating_ids: torch.Tensor) -> torch.Tensor:
    """Summed negative log-likelihood of the rating-word tokens: ``log_probs[b, t]`` scores ``labels[b, t + 1]``.

    >>> lp = torch.log(torch.tensor([[0.5, 0.25, 0.1]]))
    >>> round(rating_term(lp, torch.tensor([[-100, 7, 3, 9]]), torch.tensor([3, 4])).item(), 4)  # token 3 at t=1
    1.3863
    """
    mask = torch.isin(labels[:, 1:], rating_ids.to(labels.device))
    return -(log_probs * mask).sum()


def weighted_trainer_class(rating_weight: float, rating_ids: Sequence[int]) -> type:
    """``trl.SFTTrainer`` itself for weight 1, else a subclass adding ``(w - 1)`` x the rating-word NLL."""
    from trl import SFTTrainer

    if rating_weight == 1.0:
        return SFTTrainer
    ids = torch.tensor(sorted(set(rating_ids)))

    class RatingWeightedSFTTrainer(SFTTrainer):
        def compute_loss(
            self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
        ) -> Any:
            fused: list[Any] = []  # trl's own forward (fused LM head: per-token log-probs), recorded on its way out

            def recording(*args: Any, **kwargs: Any) -> Any:
                fused.append(model(*args, **kwargs))
                return fused[-1]

            result = super().compute_loss(recording, inputs, return_outputs, num_items_in_batch)
            loss, rest = (result[0], result[1:]) if return_outputs else (result, ())
            out = fused[0]
            n = out.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
            extra = rating_term(out.log_probs, inputs["labels"], ids) / torch.as_tensor(n).clamp(min=1)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                extra = extra * self.accelerator.num_processes  # as trl scales its own loss
            loss = loss + (rating_weight - 1.0) * extra
            return (loss, *rest) if return_outputs else loss

    return RatingWeightedSFTTrainer
