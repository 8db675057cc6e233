"""The training loop's state: everything a checkpoint must hold (besides weights, Adam moments and the RNG) to
resume exactly where it stopped, in one dataclass instead of a dict of loose keys."""

from __future__ import annotations

import dataclasses
from typing import ClassVar


@dataclasses.dataclass
class TrainerState:
    step: int = 0  # optimizer updates done
    epoch: int = 0  # passes over the training data completed
    update_in_epoch: int = 0  # updates done in the current epoch (batches are a pure function of seed and epoch)
    best: float | None = None  # best validation value of train.early_stop_metric so far
    best_metric: str | None = None  # the train.early_stop_metric `best` is a value of
    bad_validations: int = 0  # validations in a row without improvement (for train.patience)
    elapsed: float = 0.0  # training seconds, across resumes (for train.max_minutes)
    oom_skips: int = 0  # updates skipped because the GPU ran out of memory
    target_tokens: int = 0  # what the loss was summed over, in all
    decay_start: float | None = None  # train.lr_clock: `elapsed` when the warm-up ended (the clock decay's start)
    precision: str | None = None  # train.precision 'auto' on a CPU with native bf16: the trial's pick, kept
    stopped: str | None = None  # why training stopped: max_steps, max_epochs, max_minutes, early_stop (not saved)

    SAVED: ClassVar[tuple[str, ...]] = (
        "epoch",
        "update_in_epoch",
        "best",
        "best_metric",
        "bad_validations",
        "elapsed",
        "oom_skips",
        "target_tokens",
        "decay_start",
        "precision",
    )

    def to_checkpoint(self) -> dict:
        return {name: getattr(self, name) for name in self.SAVED}

    @classmethod
    def from_checkpoint(cls, trainer: dict) -> TrainerState:
        return cls(step=int(trainer["step"]), **{k: trainer[k] for k in cls.SAVED if k in trainer})

    def finish_epoch(self) -> None:
        self.epoch += 1
        self.update_in_epoch = 0
