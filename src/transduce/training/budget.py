"""The run's time: training seconds across resumes, train.max_minutes (the time limit, and the clock that
train.lr_clock decays the learning rate by), and the forecast of where the budget ends the run."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from .distributed import broadcast_value
from .optim import FORECAST_AFTER, forecast
from .progress import save, validate

if TYPE_CHECKING:
    from .loop import Session


@dataclasses.dataclass(kw_only=True)
class TimeBudget:
    start_elapsed: float  # training seconds before this session (the restored state's), so resumes add up
    target: int  # the update the run ends at if no time limit or early stop comes first (the bar's and forecast's)
    started: float = dataclasses.field(default_factory=time.perf_counter)
    clock: float = 0.0  # rank 0's elapsed seconds after the last update (the same on every rank): train.lr_clock's
    forecast_from: tuple[int, float] | None = None  # (step, time) after the session's first update

    def __post_init__(self) -> None:
        self.clock = self.start_elapsed

    def elapsed(self) -> float:
        return self.start_elapsed + time.perf_counter() - self.started


def check_time_limit(run: Session, *, last: bool) -> None:
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


def log_forecast(run: Session) -> None:
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
