"""Label-smoothed cross-entropy (PAPER.md §4, eps_ls = 0.1; Szegedy et al. 2016).

Convention for the smoothing mass: the target distribution is (1 - eps) on the reference token plus eps spread
uniformly over the whole vocabulary (eps / V on every token, the reference included) — the form of Szegedy et al.
and of torch's `cross_entropy(label_smoothing=eps)`. fairseq instead spreads eps over the V - 1 other tokens; the
difference is O(eps / V). Padding positions of the target contribute nothing.

With -log p_i = lse - z_i (lse = logsumexp of the logits z), per token:
    nll  = lse - z_target
    loss = (1 - eps) * nll + eps * (lse - mean(z))
and the gradient is softmax(z) - ((1 - eps) * onehot(target) + eps / V). `_SmoothedCrossEntropy` computes exactly
that, reading the (N, V) logits a few times instead of materialising log-probabilities and their gradient
separately (the loss is ~15% of a training step on CPU otherwise).
"""

from __future__ import annotations

import torch
from torch import Tensor


_CHUNK_ELEMENTS = 1 << 22  # rows of the (N, V) logits per logsumexp chunk: 16 MB of float32


class _SmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, weight: Tensor, eps: float, reuse_logits: bool):
        # logsumexp by row chunks through one scratch block: fresh temporaries per chunk would be page-faulted in
        rows = max(1, _CHUNK_ELEMENTS // logits.size(1))
        scratch = logits.new_empty(min(rows, logits.size(0)), logits.size(1))
        lse = logits.new_empty(logits.size(0))  # (N,)
        for start in range(0, logits.size(0), rows):
            chunk = logits[start : start + rows]
            top = chunk.amax(dim=1, keepdim=True)
            block = torch.sub(chunk, top, out=scratch[: chunk.size(0)]).exp_()
            lse[start : start + rows] = block.sum(dim=1).log_().add_(top.squeeze(1))
        nll = lse - logits.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
        loss = nll if eps == 0.0 else (1.0 - eps) * nll + eps * (lse - logits.mean(dim=-1))
        ctx.save_for_backward(logits, target, weight, lse)
        ctx.eps, ctx.reuse_logits = eps, reuse_logits
        nll_sum = (nll * weight).sum()
        ctx.mark_non_differentiable(nll_sum)
        return (loss * weight).sum(), nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        logits, target, weight, lse = ctx.saved_tensors
        eps, vocab = ctx.eps, logits.size(1)
        # softmax(z) = exp(z - lse), computed in place: a fresh (N, V) tensor costs more than the arithmetic
        grad = logits if ctx.reuse_logits else logits.clone()
        grad.sub_(lse.unsqueeze(1)).exp_()
        if eps:
            grad.sub_(eps / vocab)
        grad.scatter_add_(1, target.unsqueeze(1), torch.full_like(lse, eps - 1.0).unsqueeze(1))
        grad.mul_((weight * grad_loss).unsqueeze(1))
        return grad, None, None, None, None


def label_smoothed_nll(logits: Tensor, target: Tensor, *, eps: float, pad_id: int,
                       reuse_logits: bool = False) -> tuple[Tensor, Tensor]:
    """logits (..., V), target (...) -> (loss, nll), both SUMMED over non-pad target tokens.

    Callers divide by the number of target tokens of the whole (accumulated, all-rank) batch (DESIGN.md rule 6).
    With eps = 0, loss == nll. Computed in float32 even under autocast. `reuse_logits=True` lets the backward
    overwrite the logits with their gradient (the training loop does; the logits must not be read afterwards).
    """
    target = target.reshape(-1)
    logits = logits.float().reshape(target.numel(), -1)
    weight = target.ne(pad_id).to(logits.dtype)
    return _SmoothedCrossEntropy.apply(logits, target, weight, eps, reuse_logits)
