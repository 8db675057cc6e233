"""Guided alignment (Garg et al. 2019, "Jointly Learning to Align and Translate with Transformer Models"): one
decoder layer's cross-attention, averaged over its first heads (model/alignment.py), is trained towards given word
links by a cross-entropy added to the translation loss, weighted by train.guided_alignment. With
model.alignment_head the term trains that head instead, alone (its inputs are detached), and train.alignment_only
freezes every other weight (`prepare_alignment`).

For each target position t whose word has links, p_t is uniform over the source pieces of the words linked to it
(data/alignments.py builds it at collation), and the term is L_align = -sum_t sum_s p_t[s] log a_t[s], a_t being
the attention of the decoder position that predicts target token t. Like the translation loss it is summed over the
batch and divided by the update's target tokens on all ranks (training/loop.py), so accumulation and DDP compute
the same update as one large batch (Garg et al. average it per target token too).

Axis legend: B pairs, T decoder positions, S source positions, K (target position, source position) targets.
"""

from __future__ import annotations

from typing import cast

from torch import Tensor, nn

from ..config import Config, ConfigError

TINY = 1e-9  # attention below this counts as this in the log: a link to a weight that underflowed stays finite


def guided_alignment_loss(attention: Tensor, index: Tensor, prob: Tensor) -> Tensor:
    """L_align summed over the batch: `attention` (B, T, S), `index` (K,) flat indices into it, `prob` (K,) p_t[s]."""
    picked = attention.reshape(-1).index_select(0, index)  # (K,) a_t[s] where p_t[s] > 0
    return -(prob * picked.clamp_min(TINY).log()).sum()


def prepare_alignment(model: nn.Module, config: Config) -> None:
    """A new model.alignment_head learns from guided alignment only: refused without it (a fine-tune that adds one:
    tasks/finetune.py); a head a run trains on without guidance stays as it is. train.alignment_only: every weight
    but the head's stops learning (the optimizer is given only what still learns, training/optim.py), so the run's
    translations stay those of the run it fine-tunes."""
    head, guided, init_from = config.model.alignment_head, config.train.guided_alignment, config.train.init_from
    if head and not guided and not init_from:
        raise ConfigError(
            "model.alignment_head learns from guided alignment only: set train.guided_alignment (and an align file)"
        )
    if head and not guided:
        cast(nn.Module, model.alignment_head).requires_grad_(False)
    if not config.train.alignment_only:
        return
    if not head:
        raise ConfigError("train.alignment_only trains the alignment head alone: set model.alignment_head = true")
    if not init_from:
        raise ConfigError("train.alignment_only keeps a trained run's translation: name it with --init-from RUN")
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith("alignment_head."))


class AlignmentWindow:
    """The alignment loss since the last log line (rank 0's batches, as the logged loss is): its sum on the device
    (read once per log line, no host sync per update) and the target positions with links."""

    def __init__(self) -> None:
        self.total: Tensor | None = None
        self.positions = 0

    def add(self, loss: Tensor, positions: int) -> None:
        loss = loss.detach()
        self.total = loss if self.total is None else self.total + loss
        self.positions += positions

    def take(self) -> dict[str, float]:
        """{"align_loss": per target position with links} since the last call (nothing when none had links)."""
        total, positions = self.total, self.positions
        self.total, self.positions = None, 0
        if total is None or not positions:
            return {}
        return {"align_loss": float(total) / positions}
