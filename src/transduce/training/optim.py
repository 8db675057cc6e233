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
    params = [p for p in model.parameters() if p.requires_grad]  # all but what train.alignment_only freezes

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


FORECAST_AFTER = 50  # updates of a session after which `train` says what the time budget allows


def forecast(
    step: int, rate: float, elapsed: float, target: int, config: TrainConfig, d_model: int
) -> tuple[str, bool]:
    """What the run will reach at `rate` updates/s, `elapsed` seconds into it, at update `step` of `target`
    (max_steps, or fewer when max_epochs ends it first): the line to log and whether it is a warning (the time
    budget will end the run before its schedule does and nothing decays the rate by the clock). Validation and
    saving time are not counted."""
    left = max(0, target - step)
    if not config.max_minutes:
        return (
            f"at {rate:.2f} updates/s, the {left:,} updates left to {target:,} take about {_duration(left / rate)}",
            False,
        )
    budget = config.max_minutes * 60
    reached = step + int(rate * max(0.0, budget - elapsed))
    if reached >= target:
        return (
            f"at {rate:.2f} updates/s, update {target:,} comes in about {_duration(left / rate)}, within the budget "
            f"of train.max_minutes {config.max_minutes:g}",
            False,
        )
    line = (
        f"at {rate:.2f} updates/s, train.max_minutes {config.max_minutes:g} ends the run at about update "
        f"{reached:,} of the schedule's {target:,} ({100 * reached / target:.0f}%)"
    )
    if reached < config.warmup_steps:  # the rate is still rising when the run stops: no schedule decays it
        return (
            f"warning: {line}, inside the warm-up of train.warmup_steps {config.warmup_steps:,}: the learning rate "
            "is still rising when the run stops (train.lr_clock decays it only after the warm-up); lower "
            "train.warmup_steps to what fits or raise train.max_minutes",
            True,
        )
    if config.lr_clock:
        return line + "; train.lr_clock brings the learning rate to 0 by the clock all the same", False
    line = "warning: " + line
    left_lr = _by_steps(reached, config, d_model) / max(_peak(config, d_model), 1e-30)
    if config.lr_schedule == "linear":
        line += (
            f", with the learning rate still at {100 * left_lr:.0f}% of its peak: set train.lr_clock = true to decay "
            "it by the clock, or lower train.max_steps to what fits"
        )
    else:
        line += "; lower train.max_steps to what fits or raise train.max_minutes"
    return line, True


def _peak(config: TrainConfig, d_model: int) -> float:
    return max(_by_steps(s, config, d_model) for s in (config.warmup_steps, config.warmup_steps + 1))


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"
