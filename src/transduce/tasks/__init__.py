"""Tasks built on the shared trainer: translation, classification, constituency parsing.

Each module implements training/task.py's `Task` (data, model, batches, loss, validation, predictor) for one kind
of run. The task registry (config/registry.py; `TASKS` here is the same table) names, per recipe `task` name, its
run config, its Task class and what the server needs; a Task is imported on demand, so importing transduce loads no
task it does not use. `train` picks the task of a config and runs the shared loop (training/loop.py) on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import task_name
from ..config.registry import TASKS, entry, load

if TYPE_CHECKING:
    from ..training.task import Task

__all__ = ["TASKS", "task_class", "train"]


def task_class(name: str) -> type[Task]:
    """The Task class of a recipe's `task` name (imported on demand)."""
    found: type[Task] = load(entry(name).task)
    return found


def train(config: Any, run_dir: str | Path, *, quiet: bool = False) -> dict:
    """Train (or resume) the task of `config` (a Config, ClassifierRunConfig, ...) in `run_dir`.

    Returns the final step, why it stopped, the best validation value and the resolved config."""
    from ..training.loop import train_task

    return train_task(task_class(task_name(config)), config, run_dir, quiet=quiet)
