"""Label-smoothed cross-entropy (PAPER.md §4, eps_ls = 0.1; Szegedy et al. 2016).

Convention for the smoothing mass: the target distribution is (1 - eps) on the reference token plus eps spread
uniformly over the whole vocabulary (eps / V on every token, the reference included) — the form of Szegedy et al.
and of torch's `cross_entropy(label_smoothing=eps)`. fairseq instead spreads eps over the V - 1 other tokens; the
difference is O(eps / V). Padding positions of the target contribute nothing.
"""

from __future__ import annotations

import torch
from torch import Tensor


def label_smoothed_nll(logits: Tensor, target: Tensor, *, eps: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """logits (..., V), target (...) -> (loss, nll), both SUMMED over non-pad target tokens.

    Callers divide by the number of target tokens of the whole (accumulated, all-rank) batch (DESIGN.md rule 6).
    With eps = 0, loss == nll.
    """
    lprobs = torch.log_softmax(logits.float(), dim=-1)  # (N, V), float32 even under autocast
    target = target.reshape(-1)
    lprobs = lprobs.reshape(target.numel(), -1)
    keep = target.ne(pad_id)
    nll = -lprobs.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
    nll_sum = nll.masked_fill(~keep, 0.0).sum()
    if eps == 0.0:
        return nll_sum, nll_sum
    smooth = -lprobs.mean(dim=-1)  # (N,): cross-entropy against the uniform distribution
    loss = (1.0 - eps) * nll + eps * smooth
    return loss.masked_fill(~keep, 0.0).sum(), nll_sum
