"""``loss.rating_weight``: extra weight on the rating-word token of each completion.

The SFT loss averages over every completion token, and all but one of them are the fixed response template
("The ... quality level of this image is ... ."), learned within a few steps; Q-Align and DeQA-Score supervise
the level token itself. With weight ``w`` the loss becomes ``(sum_t nll_t + (w - 1) * nll_rating) / n_tokens``:
``w = 1`` is trl's loss unchanged, larger ``w`` leans on the rating word.

trl 1.16 deprecates ``compute_loss_func`` (it costs a second forward pass per step) and recommends overriding
``compute_loss``; this override lets trl compute its loss as usual, records the per-token log-probabilities of
trl's own forward (its fused LM head returns them) and adds one term, so metrics, token normalisation and gradient
accumulation stay trl's and no extra forward pass runs.
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
