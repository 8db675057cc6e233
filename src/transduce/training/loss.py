"""Label-smoothed cross-entropy (the paper's §5.4, eps_ls = 0.1; Szegedy et al. 2016).

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

_CHUNK_ELEMENTS = 1 << 22  # elements of the (N, V) logits per log-sum-exp chunk (whole rows): 16 MB of float32


class _SmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, weight: Tensor, eps: float, reuse_logits: bool):
        n = logits.size(0)
        ctx.eps, ctx.reuse_logits = eps, reuse_logits
        if logits.dtype == torch.bfloat16:  # bfloat16 logits handed over (CPU autocast)
            return _forward_narrow(ctx, logits.detach(), target, weight, eps)
        z_target = logits.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
        z_mean = logits.mean(dim=-1) if eps else None
        # exp(z - row max) by row chunks: with reuse_logits into the logits themselves (the backward then turns
        # them into the gradient without a second exp), else through one scratch block (fresh temporaries per
        # chunk would be page-faulted in)
        rows = max(1, _CHUNK_ELEMENTS // logits.size(1))
        if reuse_logits:  # the same storage, without the autograd view history the in-place writes would trip on
            logits, scratch = logits.detach(), None
        else:
            scratch = logits.new_empty(min(rows, n), logits.size(1))
        top, total = logits.new_empty(n), logits.new_empty(n)
        for start in range(0, n, rows):
            chunk = logits[start : start + rows]
            row_max = chunk.amax(dim=1, keepdim=True)
            if scratch is None:  # reuse_logits: exponentiate in place
                block = chunk.sub_(row_max)
            else:
                block = torch.sub(chunk, row_max, out=scratch[: chunk.size(0)])
            total[start : start + rows] = block.exp_().sum(dim=1)
            top[start : start + rows] = row_max.squeeze(1)
        return _sums(ctx, logits, target, weight, eps, z_target, z_mean, top, total)

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        logits, target, weight, lse, total = ctx.saved_tensors
        eps, vocab = ctx.eps, logits.size(1)
        scale = weight * grad_loss  # (N,)
        if logits.dtype == torch.bfloat16:
            return _backward_narrow(logits, target, scale, total, eps), None, None, None, None
        # grad = scale * (softmax(z) - eps / V) - scale * (1 - eps) * onehot(target), written in place
        if ctx.reuse_logits:  # the logits now hold exp(z - row max): softmax is that over the row's total
            grad = logits
            if eps:  # one pass: grad = grad * (scale / total) - scale * eps / V
                torch.addcmul((scale * (-eps / vocab)).unsqueeze(1), grad, (scale / total).unsqueeze(1), out=grad)
            else:
                grad.mul_((scale / total).unsqueeze(1))
        else:
            grad = logits.clone().sub_(lse.unsqueeze(1)).exp_()
            if eps:
                grad.sub_(eps / vocab)
            grad.mul_(scale.unsqueeze(1))
        grad.scatter_add_(1, target.unsqueeze(1), (scale * (eps - 1.0)).unsqueeze(1))
        return grad, None, None, None, None


def _sums(ctx, logits, target, weight, eps: float, z_target, z_mean, top, total) -> tuple[Tensor, Tensor]:
    """Both forwards' end: lse = log(total) + row max, the weighted (loss, nll) sums; saves what backward reads."""
    lse = total.log().add_(top)
    nll = lse - z_target
    loss = nll if z_mean is None else (1.0 - eps) * nll + eps * (lse - z_mean)  # z_mean is None iff eps == 0
    ctx.save_for_backward(logits, target, weight, lse, total)
    nll_sum = (nll * weight).sum()
    ctx.mark_non_differentiable(nll_sum)
    return (loss * weight).sum(), nll_sum


# bfloat16 logits (train.precision = "bf16" on CPU, where the loop hands them over): the same arithmetic, each row
# chunk copied into one float32 block, reduced there, and its exponentials (forward) or gradient (backward) stored
# back rounded to bfloat16. Every reduction runs on float32 (torch's CPU reductions over bfloat16 are ~8x slower
# than a copy), no (N, V) float32 tensor is made, and no whole-tensor op touches the bfloat16 block.
def _forward_narrow(ctx, logits: Tensor, target: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    n, vocab = logits.shape
    rows = max(1, _CHUNK_ELEMENTS // vocab)
    block = torch.empty(min(rows, n), vocab, dtype=torch.float32, device=logits.device)
    z_target = logits.gather(1, target.unsqueeze(1)).squeeze(1).float()  # (N,)
    top, total, z_mean = (torch.empty(n, dtype=torch.float32, device=logits.device) for _ in range(3))
    for start in range(0, n, rows):
        chunk = logits[start : start + rows]
        wide = block[: chunk.size(0)].copy_(chunk)
        if eps:
            z_mean[start : start + rows] = wide.mean(dim=1)
        row_max = wide.amax(dim=1, keepdim=True)
        total[start : start + rows] = wide.sub_(row_max).exp_().sum(dim=1)
        top[start : start + rows] = row_max.squeeze(1)
        chunk.copy_(wide)
    return _sums(ctx, logits, target, weight, eps, z_target, z_mean if eps else None, top, total)


def _backward_narrow(logits: Tensor, target: Tensor, scale: Tensor, total: Tensor, eps: float) -> Tensor:
    """The logits hold exp(z - row max) in bfloat16: turned into the gradient in place, chunk by chunk."""
    n, vocab = logits.shape
    rows = max(1, _CHUNK_ELEMENTS // vocab)
    block = torch.empty(min(rows, n), vocab, dtype=torch.float32, device=logits.device)
    for start in range(0, n, rows):
        chunk, s = logits[start : start + rows], scale[start : start + rows]
        wide = block[: chunk.size(0)].copy_(chunk).mul_((s / total[start : start + rows]).unsqueeze(1))
        if eps:
            wide.sub_((s * (eps / vocab)).unsqueeze(1))
        wide.scatter_add_(1, target[start : start + rows].unsqueeze(1), (s * (eps - 1.0)).unsqueeze(1))
        chunk.copy_(wide)
    return logits


def label_smoothed_nll(
    logits: Tensor, target: Tensor, *, eps: float, pad_id: int, reuse_logits: bool = False
) -> tuple[Tensor, Tensor]:
    """logits (..., V), target (...) -> (loss, nll), both SUMMED over non-pad target tokens.

    Callers divide by the number of target tokens of the whole (accumulated, all-rank) batch.
    With eps = 0, loss == nll. Computed in float32 even under autocast. `reuse_logits=True` hands the logits over:
    the forward overwrites them with exp(z - row max) and the backward with their gradient (the training loop does
    this; the logits must not be read afterwards). Otherwise they are left untouched. bfloat16 logits handed over
    on CPU stay bfloat16 (no float32 copy of the whole (N, V) block): each row chunk is widened to float32 for the
    sums, and the gradient is bfloat16; elsewhere the logits are widened to float32 first.
    """
    target = target.reshape(-1)
    if not (reuse_logits and logits.dtype == torch.bfloat16 and logits.device.type == "cpu"):
        logits = logits.float()
    logits = logits.reshape(target.numel(), -1)
    weight = target.ne(pad_id).to(torch.float32)
    return _SmoothedCrossEntropy.apply(logits, target, weight, eps, reuse_logits)
