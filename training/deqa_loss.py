"""``loss.kind=deqa``: DeQA-Score's training loss (github.com/zhiyuanyou/DeQA-Score @ 8e4abc8,
``src/model/modeling_mplug_owl2.py``, ``scripts/train.sh``), from trl's one forward pass. For a batch paired in
order, (0, 1), (2, 3), ... (a random matching within the shuffled batch; an odd last example is in no pair):

- per side S: ``CE_S``, the next-token cross-entropy of every completion token but the level word, and ``KL_S``, the
  exact KL from each example's soft label ``t`` (not renormalised) to the softmax over the whole vocabulary at the
  level word's position;
- the fidelity loss of each pair, ``1 - sqrt(pred gt + eps) - sqrt((1 - pred)(1 - gt) + eps)``, ``pred =
  Phi((s_A - s_B) / sqrt 2)`` from the scores of the level words' softmax, ``gt = Phi((mu_A - mu_B) / sqrt(sd_A^2 +
  sd_B^2 + eps))``;
- ``loss = fidelity_weight * fidelity + deqa_weight * [(CE_A + KL_A) + (CE_B + KL_B)]`` (1.0 and 0.05 in
  scripts/train.sh).

Each image is seen once per epoch where DeQA shows it as A and on average once as B: twice the epochs give DeQA's
steps. The level position's logits come from the backbone's last hidden state (a forward hook) times the LM head,
called as a module so that ZeRO-3 gathers it; no second forward pass runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

LEVEL_COLUMNS = ("level_target", "level_mos", "level_std")  # the rows' soft label, MOS and std (training.sft_data)
FIDELITY_EPS = 1e-8  # DeQA-Score's rating_loss: "eps=1e-8 is important"


def level_positions(labels: torch.Tensor, level_ids: torch.Tensor) -> torch.Tensor:
    """The index in ``labels`` of each row's level word: its first label that is one of ``level_ids``.

    >>> level_positions(torch.tensor([[-100, 5, 9, 7], [-100, -100, 8, 2]]), torch.tensor([8, 9]))
    tensor([2, 2])
    """
    hits = torch.isin(labels, level_ids.to(labels.device))
    if not bool(hits.any(dim=1).all()):
        rows = (~hits.any(dim=1)).nonzero().flatten().tolist()
        raise ValueError(
            f"loss.kind=deqa: rows {rows} of the batch have no level word in their completion; every completion must "
            "be the response prefix followed by one of levels.words"
        )
    return hits.int().argmax(dim=1)


def level_kl(logits: torch.Tensor, target: torch.Tensor, level_ids: torch.Tensor) -> torch.Tensor:
    """Per row: sum_k t_k (log t_k - log softmax(logits)[level_k]) over the full vocabulary (zero targets give 0, as
    ``F.kl_div``)."""
    log_p = torch.log_softmax(logits.float(), dim=-1)[:, level_ids]
    t = target.to(log_p)
    return (torch.xlogy(t, t) - t * log_p).sum(dim=-1)


def level_scores(logits: torch.Tensor, level_ids: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The predicted score of each row: the softmax over the level words' logits only, dotted with their values."""
    return torch.softmax(logits.float()[:, level_ids], dim=-1) @ values.to(logits.device, torch.float32)


def fidelity_loss(
    s_a: torch.Tensor,
    s_b: torch.Tensor,
    mu_a: torch.Tensor,
    mu_b: torch.Tensor,
    sd_a: torch.Tensor,
    sd_b: torch.Tensor,
    eps: float = FIDELITY_EPS,
) -> torch.Tensor:
    """DeQA-Score's ``rating_loss`` with ``use_fix_std`` (the mean over pairs; the target ``gt`` is not trained).

    >>> one = torch.tensor([3.0])  # equal scores and equal MOS: pred = gt = 1/2, the minimum 1 - 2 sqrt(1/4) = 0
    >>> round(fidelity_loss(one, one, one, one, one, one).item(), 6)
    0.0
    """
    pred = 0.5 * (1 + torch.erf((s_a - s_b) / 2))  # Phi((s_A - s_B) / sqrt(1 + 1))
    gt = 0.5 * (1 + torch.erf((mu_a - mu_b) / torch.sqrt(2 * (sd_a**2 + sd_b**2 + eps)))).detach()
    return (1 - (pred * gt + eps).sqrt() - ((1 - pred) * (1 - gt) + eps).sqrt()).mean()


def deqa_loss(
    log_probs: torch.Tensor,
    labels: torch.Tensor,
    level_logits: torch.Tensor,
    target: torch.Tensor,
    mos: torch.Tensor,
    std: torch.Tensor,
    level_ids: torch.Tensor,
    values: torch.Tensor,
    *,
    deqa_weight: float = 0.05,
    fidelity_weight: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of the module docstring and its parts (``ce``, ``kl``: sums over the two sides; ``fidelity``).

    ``log_probs[b, t]`` is the log-probability of ``labels[b, t + 1]`` (zero where it is -100), ``level_logits[b]``
    the logits at the position predicting the level word, ``target`` the soft labels over the level words in the
    order of ``level_ids``."""
    positions = level_positions(labels, level_ids)
    rows = torch.arange(labels.size(0), device=labels.device)
    mask = labels[:, 1:] != -100
    mask[rows, positions - 1] = False  # the level word: its KL, not its cross-entropy
    nll = -(log_probs * mask)
    kl = level_kl(level_logits, target, level_ids.to(level_logits.device))
    n = labels.size(0)
    side_a = torch.arange(0, n, 2, device=labels.device)  # with an odd last example, which is in no pair
    side_b = torch.arange(1, n, 2, device=labels.device)
    ce_sum, kl_sum = log_probs.new_zeros(()), log_probs.new_zeros(())
    for side in (side_a, side_b):
        if len(side):
            ce_sum = ce_sum + nll[side].sum() / mask[side].sum().clamp(min=1)
            kl_sum = kl_sum + kl[side.to(kl.device)].mean()
    scores = level_scores(level_logits, level_ids.to(level_logits.device), values)
    pairs = n // 2
    if pairs:
        a, b = side_a[:pairs].to(scores.device), side_b[:pairs].to(scores.device)
        mu, sd = mos.to(scores), std.to(scores)
        fid = fidelity_loss(scores[a], scores[b], mu[a], mu[b], sd[a], sd[b])
    else:
        fid = scores.new_zeros(())
    loss = fidelity_weight * fid + deqa_weight * (ce_sum + kl_sum.to(ce_sum))
    return loss, {"ce": ce_sum.detach(), "kl": kl_sum.detach(), "fidelity": fid.detach()}


class _LevelCollator:
    """trl's collator, with each example's soft label, MOS and std added to the batch as tensors."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        missing = [c for c in LEVEL_COLUMNS if c not in examples[0]]
        if missing:
            raise ValueError(
                f"loss.kind=deqa: the training rows lack {missing}; they come from a ratings manifest or a dataset "
                "(not a stream) read with trainer.remove_unused_columns=false"
            )
        extra = {c: torch.tensor([ex.pop(c) for ex in examples], dtype=torch.float32) for c in LEVEL_COLUMNS}
        if not bool(torch.isfinite(extra["level_std"]).all()):
            raise ValueError("loss.kind=deqa: a training row has no std; the fidelity loss needs each row's std")
        batch = self.inner(examples)
        batch.update(extra)
        return batch


def _backbone_and_head(model: Any) -> tuple[Any, Any]:
    """The module whose output trl's fused LM head projects (its ``last_hidden_state``) and the LM head."""
    import transformers
    from packaging.version import Version

    hf = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT model's own
    attr = "base_model"  # as trl's add_fused_lm_head looks it up
    if hf.config.get_text_config() is not hf.config and Version(transformers.__version__) < Version("5.0.0"):
        attr = "model"
    return getattr(hf, attr), hf.get_output_embeddings()


def deqa_trainer_class(
    level_ids: Sequence[int], values: Sequence[float], *, deqa_weight: float = 0.05, fidelity_weight: float = 1.0
) -> type:
    """A ``trl.SFTTrainer`` subclass whose loss is :func:`deqa_loss` (``level_ids`` and ``values`` best first, in
    the order of the rows' soft labels)."""
    from trl import SFTTrainer

    ids = torch.tensor(list(level_ids))
    vals = torch.tensor([float(v) for v in values])
    if len(ids) != len(vals) or len(set(ids.tolist())) != len(ids):
        raise ValueError(f"need one distinct token id per level value, got {ids.tolist()} and {vals.tolist()}")

    class DeqaSFTTrainer(SFTTrainer):
        loss_is_scaled_for_ga = False  # a per-batch mean: the Trainer divides it by the accumulation steps

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.data_collator = _LevelCollator(self.data_collator)

        def compute_loss(
            self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
        ) -> Any:
            extra = {c: inputs.pop(c) for c in LEVEL_COLUMNS}
            labels = inputs["labels"]
            positions = level_positions(labels, ids)
            backbone, head = _backbone_and_head(self.accelerator.unwrap_model(model))
            caught: list[torch.Tensor] = []

            def level_logits(module: Any, args: Any, output: Any) -> None:  # inside trl's forward
                hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
                rows = torch.arange(hidden.size(0), device=hidden.device)
                caught.append(head(hidden[rows, positions.to(hidden.device) - 1].to(head.weight.device)))

            fused: list[Any] = []

            def recording(*a: Any, **k: Any) -> Any:
                fused.append(model(*a, **k))
                return fused[-1]

            handle = backbone.register_forward_hook(level_logits)
            try:  # trl's loss is not used; its metrics (entropy, token accuracy, tokens) are kept
                super().compute_loss(recording, inputs, False, num_items_in_batch)
            finally:
                handle.remove()
            loss, parts = deqa_loss(
                fused[0].log_probs,
                labels,
                caught[0],
                extra["level_target"],
                extra["level_mos"],
                extra["level_std"],
                ids.to(labels.device),
                vals,
                deqa_weight=deqa_weight,
                fidelity_weight=fidelity_weight,
            )
            mode = "train" if self.model.training else "eval"
            for name, value in parts.items():
                self._metrics[mode][f"deqa_{name}"].append(self.accelerator.gather_for_metrics(value).mean().item())
            return (loss, fused[0]) if return_outputs else loss

    return DeqaSFTTrainer
