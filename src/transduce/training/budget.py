"""The run's time: training seconds across resumes, train.max_minutes (the time limit, and the clock that
train.lr_clock decays the learning rate by), and the forecast of where the budget ends the run."""

from __future__ import annotations

import time

from .distributed import broadcast_value
from .optim import FORECAST_AFTER, forecast
from .progress import save, validate
from .session import RunContext


def check_time_limit(run: RunContext, *, last: bool) -> None:
    """Past train.max_minutes (rank 0's clock decides, for every rank): validate and save the final weights, unless
    this step already did. With train.lr_clock, the clock decay starts when the warm-up ends."""
    state, tc, budget = run.state, run.tc, run.budget
    if not tc.max_minutes or state.stopped:
        return
    budget.clock = broadcast_value(run.elapsed(), run.ranks, run.device)
    if tc.lr_clock and state.decay_start is None and state.step >= tc.warmup_steps:
        state.decay_start = budget.clock
    if budget.clock < tc.max_minutes * 60:
        return
    if run.task.has_validation and state.step % tc.valid_every and not last:
        validate(run)
    state.stopped = "max_minutes"
    if state.step % tc.save_every and not last:
        save(run, "time limit")


def log_forecast(run: RunContext) -> None:
    """FORECAST_AFTER updates into the session, say where the time budget ends the run against the schedule (a
    warning when it cuts it). Timed from the end of the first update, so its warm-up does not count."""
    budget, now, step = run.budget, time.perf_counter(), run.state.step
    if budget.forecast_from is None:
        budget.forecast_from = (step, now)
        return
    first, then = budget.forecast_from
    if step - first != FORECAST_AFTER or run.state.stopped:
        return
    rate = FORECAST_AFTER / max(now - then, 1e-9)
    line, _ = forecast(step, rate, run.elapsed(), budget.target, run.tc, run.d_model)
    run.runlog.text(line)
