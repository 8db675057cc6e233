"""What the training loop needs from a task, and nothing more: a new task is one module in tasks/ implementing
`Task`.

The loop (loop.py) never looks inside a batch or a model: it asks the task for batches of indices, collates them,
calls `loss`, and calls `validate` at validation time. Everything task-specific (the data and its cache, the model,
the loss, what "better" means on validation, the predictor a run directory loads) lives in the task.

A run's config is a frozen dataclass of sections (`model`, `data`, `train`, ...; see config/); its `train` section
is the shared `TrainConfig`. The tasks themselves and their registry are in tasks/, above this package.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from torch import Tensor, nn


class Batch(Protocol):
    """A collated micro-batch: tensors the task's loss reads, plus the counts the loop logs and normalises by."""

    n_tokens: int  # what the loss is summed over (target tokens, examples): the update divides by its total
    n_real: int  # real (non-pad) positions, for the padding efficiency
    n_padded: int  # all positions

    def to(self, device: torch.device) -> Batch: ...


class Task(Protocol):
    name: ClassVar[str]  # the recipe's `task`
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
