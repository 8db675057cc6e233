"""Adam(beta1 0.9, beta2 0.98, eps 1e-9) and the learning-rate schedules (§5.3, Eq. 3), as pure functions."""

from __future__ import annotations

import math

import torch

from ..config import TrainConfig


def noam_lr(step: int, *, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """Eq. 3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), times `scale`. Steps count from 1."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def inverse_sqrt_lr(step: int, *, peak_lr: float, warmup_steps: int) -> float:
    """fairseq's inverse_sqrt: linear warm-up to peak_lr, then peak_lr * sqrt(warmup_steps / step)."""
    step = max(step, 1)
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    return peak_lr * math.sqrt(warmup_steps / step)


def linear_decay_lr(step: int, *, peak_lr: float, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up to peak_lr, then a straight line down to 0 at total_steps (BERT's fine-tuning schedule)."""
    step = max(step, 1)
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    return peak_lr * max(0.0, total_steps - step) / max(1, total_steps - warmup_steps)


def clock_decay(elapsed: float, *, decay_start: float | None, budget: float) -> float:
    """train.lr_clock: the fraction of peak_lr the wall clock allows, falling in a straight line from 1 when the
    warm-up ended (`decay_start` seconds into the run; None: not yet) to 0 at the end of the budget (seconds)."""
    if decay_start is None:
        return 1.0
    if budget <= decay_start:
        return 0.0
    return min(1.0, max(0.0, (budget - elapsed) / (budget - decay_start)))


def learning_rate(
    step: int, config: TrainConfig, d_model: int, *, elapsed: float = 0.0, decay_start: float | None = None
) -> float:
    """The rate of update `step`; with train.lr_clock, `elapsed` and `decay_start` are the run's clock (seconds)."""
    if config.lr_clock:  # whichever budget runs out first, updates or minutes, sets the rate
        by_clock = config.peak_lr * clock_decay(elapsed, decay_start=decay_start, budget=config.max_minutes * 60)
        return min(_by_steps(step, config, d_model), by_clock)
    return _by_steps(step, config, d_model)


def _by_steps(step: int, config: TrainConfig, d_model: int) -> float:
    if config.lr_schedule == "constant":  # linear warm-up, then peak_lr (IMDB: Adam at 1e-3)
        return config.peak_lr * min(1.0, max(step, 1) / config.warmup_steps)
    if config.lr_schedule == "inverse_sqrt":
        return inverse_sqrt_lr(step, peak_lr=config.peak_lr, warmup_steps=config.warmup_steps)
    if config.lr_schedule == "linear":
        return linear_decay_lr(
            step, peak_lr=config.peak_lr, warmup_steps=config.warmup_steps, total_steps=config.max_steps
        )
    return noam_lr(step, d_model=d_model, warmup_steps=config.warmup_steps, scale=config.lr_scale)


def build_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.Adam:
    """Adam with torch's fused kernel (one pass over each parameter) where this torch build has it for the
    parameters' device (CUDA; CPU since torch 2.4), else the multi-tensor one. Same update either way."""
    params = list(model.parameters())

    def adam(*, fused: bool | None = None, foreach: bool | None = None) -> torch.optim.Adam:
        betas = (config.adam_beta1, config.adam_beta2)
        return torch.optim.Adam(
            params,
            lr=0.0,
            betas=betas,
            eps=config.adam_eps,
            weight_decay=config.weight_decay,
            fused=fused,
            foreach=foreach,
        )

    try:
        return adam(fused=True)
    except RuntimeError:  # no fused kernel for this device in this torch
        return adam(foreach=True)
