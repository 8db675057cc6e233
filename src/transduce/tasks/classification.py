"""The encoder-only variant (not in the paper): the Transformer's §3.1 `Encoder` plus a classification head.

Data: TSV (`text<TAB>label`, the label in the last column) or JSONL (`{"text": ..., "label": ...}`), plain or
.gz. A SentencePiece vocabulary is trained on the training texts; sequences are cut to `data.max_len` tokens from
the start (or, with `data.truncate = "end"`, keep the end). Training runs through the same loop as every task
(training/loop.py: checkpoints, exact resume, progress, early stopping), with a `ClassificationTask`.

The parts, by role: the run config in config/classification.py, the model in model/classifier.py, the data in
data/labelled.py, the `Classifier` in decoding/classifier.py, the `classify` commands in cli/training.py.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..config import ClassifierRunConfig, ConfigError, read_config, save_config
from ..data.batching import make_batches
from ..data.labelled import ClassBatch, collate_labelled, load_split, prepare_classification
from ..data.tokenizer import Tokenizer
from ..decoding.classifier import LABELS, Classifier, predict_split
from ..model.classifier import TransformerClassifier
from ..outputs import atomic_write_text
from .base import has_trained


class ClassificationTask:
    """The classifier's batches, loss and validation, for the shared training loop (training/task.py's Task)."""

    name: ClassVar[str] = "classification"
    metrics: ClassVar[dict[str, tuple[str, bool]]] = {
        "loss": ("valid_loss", False),
        "accuracy": ("valid_accuracy", True),
    }
    unit: ClassVar[str] = "examples"

    @classmethod
    def prepare(
        cls,
        config: ClassifierRunConfig,
        run_dir: Path,
        *,
        main: bool,
        log: Callable[[str], None],
        barrier: Callable[[], None],
    ) -> ClassificationTask:
        """Check a resumed run's settings, prepare the data (rank 0, then the others read its cache), fill in the
        vocabulary size and the classes, write config.json and the tokenizer."""
        saved = run_dir / "config.json"
        frozen = has_trained(run_dir)
        if frozen:
            _same_classifier_run(read_config(saved, ClassifierRunConfig), config)
        if main:
            prepare_classification(config, run_dir / "data", log=log, frozen=frozen)
        barrier()
        tokenizer, classes, _ = prepare_classification(config, run_dir / "data", log=lambda _: None, frozen=True)
        if config.model.vocab_size and config.model.vocab_size != tokenizer.vocab_size:
            raise ConfigError(
                f"model.vocab_size is {config.model.vocab_size} but the tokenizer has {tokenizer.vocab_size} pieces"
            )
        config = dataclasses.replace(
            config,
            model=dataclasses.replace(
                config.model, vocab_size=tokenizer.vocab_size, max_len=max(config.model.max_len, config.data.max_len)
            ),
            head=dataclasses.replace(config.head, n_classes=len(classes)),
        )
        if main:
            save_config(config, saved)
            if not frozen:
                tokenizer.copy_to(run_dir / "tokenizer.model")
                atomic_write_text(run_dir / LABELS, json.dumps(classes) + "\n")  # the run loads without data/
        return cls(config, run_dir / "data")

    def predictor(self, model: TransformerClassifier) -> Classifier:
        return Classifier(model, self.tokenizer, self.labels, self.config)

    def __init__(self, config: ClassifierRunConfig, data_dir: Path) -> None:
        self.config = config
        self.tokenizer = Tokenizer(data_dir / "tokenizer.model")
        self.labels: list[str] = json.loads((data_dir / "summary.json").read_text(encoding="utf-8"))["labels"]
        self.train_split = load_split(data_dir, "train")
        self.valid_split = load_split(data_dir, "valid")
        self.has_validation = len(self.valid_split.labels) > 0
        self.pad_to = config.data.max_len if config.head.pooling == "flatten" else None
        self.description = f"{len(self.train_split.labels):,} training rows, {config.head.n_classes} classes"

    def build_model(self) -> TransformerClassifier:
        return TransformerClassifier(self.config.model, self.config.head, max_len=self.config.data.max_len)

    def batches(self, *, max_tokens: int, seed: int, epoch: int) -> list[np.ndarray]:
        lengths = np.full(len(self.train_split.labels), self.pad_to) if self.pad_to else self.train_split.tokens.lengths
        return make_batches(lengths, np.ones_like(lengths), max_tokens=max_tokens, seed=seed, epoch=epoch)

    def collate(self, indices: np.ndarray) -> ClassBatch:
        return collate_labelled(self.train_split, indices, pad_to=self.pad_to)

    def loss(self, net, batch: ClassBatch, autocast) -> tuple[Tensor, Tensor]:
        with autocast():
            logits = net(batch.tokens)
        logits = logits.float()
        loss = F.cross_entropy(logits, batch.labels, reduction="sum", label_smoothing=self.config.train.label_smoothing)
        return loss, F.cross_entropy(logits, batch.labels, reduction="sum")

    def check(self) -> None:
        """Token sequences were cut to data.max_len at preparation and model.max_len was raised to fit them."""
        longest = int(self.train_split.tokens.lengths.max(initial=0))
        if longest > self.config.model.max_len:
            raise ConfigError(
                f"the prepared training data has {longest} tokens per row, more than "
                f"model.max_len {self.config.model.max_len}"
            )

    @torch.no_grad()
    def validate(self, model, device: torch.device) -> dict:
        logits, labels = predict_split(
            model, self.valid_split, device, max_tokens=self.config.train.max_tokens, pad_to=self.pad_to
        )
        return {
            "valid_loss": F.cross_entropy(logits, labels).item(),
            "valid_accuracy": (logits.argmax(-1) == labels).float().mean().item(),
        }


def train_classifier(config: ClassifierRunConfig, run_dir: str | Path, *, quiet: bool = False) -> dict:
    """Train (or resume) a classifier: the shared loop (training/loop.py) with a ClassificationTask."""
    from . import train

    return train(config, run_dir, quiet=quiet)


def _same_classifier_run(old: ClassifierRunConfig, new: ClassifierRunConfig) -> None:
    for section in ("model", "head", "data"):
        a, b = dataclasses.asdict(getattr(old, section)), dataclasses.asdict(getattr(new, section))
        changed = [
            k
            for k in a
            if a[k] != b[k]
            and not (k in ("vocab_size", "n_classes", "max_len") and not b[k])
            and not (section == "model" and k == "max_len")
        ]
        if changed:
            raise ConfigError(
                f"this run directory was started with different {section} settings "
                f"({', '.join(changed)}); use a new --out"
            )
