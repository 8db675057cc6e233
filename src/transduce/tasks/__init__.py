"""Tasks built on the shared trainer: translation, classification, constituency parsing.

Each module implements training/task.py's `Task` (data, model, batches, loss, validation, predictor) for one kind
of run. `TASKS` maps a recipe's `task` name (config.RUN_CONFIGS holds its config class) to the module that
implements it, imported on demand so that importing transduce loads no task it does not use; `train` picks the
task of a config and runs the shared loop (training/loop.py) on it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import ConfigError, task_name

if TYPE_CHECKING:
    from ..training.task import Task

# name -> "module:Class"
TASKS = {
    "translation": "transduce.tasks.translation:TranslationTask",
    "classification": "transduce.tasks.classification:ClassificationTask",
    "parsing": "transduce.tasks.parsing:ParsingTask",
}


def task_class(name: str) -> type[Task]:
    """The Task class of a recipe's `task` name (imported on demand)."""
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r} (known: {', '.join(TASKS)})")
    module, _, cls = TASKS[name].partition(":")
    found: type[Task] = getattr(importlib.import_module(module), cls)
    return found


def train(config: Any, run_dir: str | Path, *, quiet: bool = False) -> dict:
    """Train (or resume) the task of `config` (a Config, ClassifierRunConfig, ...) in `run_dir`.

    Returns the final step, why it stopped, the best validation value and the resolved config."""
    from ..training.loop import train_task

    return train_task(task_class(task_name(config)), config, run_dir, quiet=quiet)
