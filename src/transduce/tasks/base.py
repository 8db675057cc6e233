"""What the training loop needs from a task, and nothing more: a new task is one module implementing `Task`.

The loop (training/loop.py) never looks inside a batch or a model: it asks the task for batches of indices, collates
them, calls `loss`, and calls `validate` at validation time. Everything task-specific (the data and its cache, the
model, the loss, what "better" means on validation, the predictor a run directory loads) lives in the task.

A run's config is a frozen dataclass of sections (`model`, `data`, `train`, ...; see config.py); its `train`
section is the shared `TrainConfig`. Which task a recipe trains is its top-level `task` key (default
"translation"); `TASKS` maps that name to the module that implements it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from torch import Tensor, nn

# name -> "module:Class" (imported on demand, so that importing transduce loads no task it does not use)
TASKS = {
    "translation": "transduce.tasks.translation:TranslationTask",
    "classification": "transduce.tasks.classification:ClassificationTask",
    "parsing": "transduce.tasks.parsing:ParsingTask",
}


class Batch(Protocol):
    """A collated micro-batch: tensors the task's loss reads, plus the counts the loop logs and normalises by."""

    n_tokens: int  # what the loss is summed over (target tokens, examples): the update divides by its total
    n_real: int  # real (non-pad) positions, for the padding efficiency
    n_padded: int  # all positions

    def to(self, device: torch.device) -> Batch: ...


class Task(Protocol):
    name: ClassVar[str]  # the recipe's `task`
    config_class: ClassVar[type]  # the frozen dataclass of the run's config
    metrics: ClassVar[dict[str, tuple[str, bool]]]  # early_stop_metric -> (validation key, higher is better)
    unit: ClassVar[str]  # what Batch.n_tokens counts, for the log ("target tokens", "examples")

    config: Any  # the resolved config (vocabulary sizes filled in)
    has_validation: bool
    description: str  # one line for the log: "29,000 training pairs"

    @classmethod
    def prepare(
        cls, config: Any, run_dir: Path, *, main: bool, log: Callable[[str], None], barrier: Callable[[], None]
    ) -> Task:
        """Prepare (rank 0) or load (after `barrier`) the data in RUN/data, write RUN/config.json and the tokenizer;
        refuse a resume whose model/data settings or input files changed. Returns the ready task."""
        ...

    def check(self) -> None:
        """Everything that can be known before step 1 (lengths against the model's positions, ...)."""

    def build_model(self) -> nn.Module: ...

    def batches(self, *, max_tokens: int, seed: int, epoch: int) -> list[np.ndarray]:
        """The epoch's batches as arrays of example indices: a pure function of (seed, epoch), for exact resume."""
        ...

    def collate(self, indices: np.ndarray) -> Batch | list[Batch]:
        """The padded batch of examples `indices`, or several batches when the task cuts it (see translation)."""
        ...

    def loss(self, net: nn.Module, batch: Any, autocast: Callable[[], AbstractContextManager]) -> tuple[Tensor, Tensor]:
        """(training loss, nll), both summed over the batch's n_tokens."""
        ...

    def validate(self, model: nn.Module, device: torch.device) -> dict[str, float]: ...

    def predictor(self, model: nn.Module) -> Any:
        """What a user calls on the trained model (Translator, Classifier, Parser), around this model."""
        ...


def task_class(name: str) -> type[Task]:
    """The Task class of a recipe's `task` name (imported on demand)."""
    import importlib

    from ..config import ConfigError

    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r} (known: {', '.join(TASKS)})")
    module, _, cls = TASKS[name].partition(":")
    found: type[Task] = getattr(importlib.import_module(module), cls)
    return found


# settings a resume may set otherwise: they do not change the data (data.prepared: the folder may move; its cache key
# is checked instead, translation.from_prepared)
FREE_TO_CHANGE = {("data", "workers"), ("data", "prepared")}


def same_run(saved: Any, new: Any, sections: tuple[str, ...] = ("model", "data")) -> None:
    """Resuming: the model and the data must be those the run started with (training and decoding settings may
    change). A vocabulary size left at 0 in the new config is filled in from the run's."""
    import dataclasses

    from ..config import ConfigError

    for section in sections:
        a, b = dataclasses.asdict(getattr(saved, section)), dataclasses.asdict(getattr(new, section))
        if section == "model" and not b["vocab_size"]:
            b["vocab_size"] = a["vocab_size"]
        changed = [k for k in a if a[k] != b.get(k) and (section, k) not in FREE_TO_CHANGE]
        if changed:
            raise ConfigError(
                f"this run directory was started with different {section} settings "
                f"({', '.join(f'{section}.{k}: {a[k]!r} -> {b[k]!r}' for k in changed)}); "
                "use a new --out to train a different model"
            )


def has_trained(run_dir: Path) -> bool:
    """Whether the run has saved a checkpoint: from then on its settings and data are frozen (a run refused before
    step 1 may still be started again with other settings)."""
    from ..training.checkpoint import checkpoint_dirs

    return bool(checkpoint_dirs(run_dir))
