"""What the loop's steps share, as data: `RunContext` (the run's context, the model, the optimizer, the state a
checkpoint holds, the log window, the time budget) and its parts `TimeBudget` and the log window (`new_window`).

The loop (loop.py: `Session`, a RunContext with its start and its update) and the steps after an update
(progress.py, budget.py) all read this module, which reads none of them: no import runs in a circle.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import torch

from ..config import ConfigError, TrainConfig
from .distributed import Ranks
from .runlog import RunLog
from .state import TrainerState
from .task import Task


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


def new_window(device: torch.device) -> dict:
    """The sums of a log window (the updates since the last log line); the losses stay on `device` (no host sync
    per update: they are read once, when the window is logged)."""
    zero = torch.zeros((), device=device)
    return {
        "loss": zero,
        "nll": zero.clone(),
        "tokens": 0,
        "real": 0,
        "padded": 0,
        "lr": 0.0,
        "time": time.perf_counter(),
    }


@dataclasses.dataclass(kw_only=True)
class RunContext:
    """What the loop's steps share (one plain class, not a trainer hierarchy): the run's context, the model as built
    and as trained, the optimizer, the state a checkpoint holds, the log window and the time budget."""

    task: Task
    tc: TrainConfig
    run_dir: Path
    ranks: Ranks
    device: torch.device
    runlog: RunLog
    model: torch.nn.Module
    net: torch.nn.Module  # the model as trained: under DDP and torch.compile when they apply
    autocast: Any  # the run's precision (precision.py), for the task's loss
    optimizer: torch.optim.Optimizer
    state: TrainerState
    budget: TimeBudget
    window: dict = dataclasses.field(default_factory=dict)  # new_window: the sums since the last log line
    recent_losses: list[tuple[int, torch.Tensor]] = dataclasses.field(default_factory=list)  # since the NaN check
    consecutive_oom: int = 0

    def elapsed(self) -> float:
        """Training seconds across resumes (train.max_minutes, the log)."""
        return self.budget.elapsed()

    @property
    def d_model(self) -> int:
        """The model width in the learning-rate schedule (Eq. 3); every task's model carries its ModelConfig."""
        config = getattr(self.model, "config", None)
        if config is None:
            raise ConfigError(f"{type(self.model).__name__} has no ModelConfig (.config): the schedule needs d_model")
        return int(config.d_model)
