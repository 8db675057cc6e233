"""The encoder-only variant (not in the paper): the Transformer's §3.1 `Encoder` plus a classification head.

Data: TSV (`text<TAB>label`, the label in the last column) or JSONL (`{"text": ..., "label": ...}`), plain or
.gz. A SentencePiece vocabulary is trained on the training texts; sequences are cut to `data.max_len` tokens from
the start (or, with `data.truncate = "end"`, keep the end). Training runs through the same loop as every task
(training/loop.py: checkpoints, exact resume, progress, early stopping), with a `ClassificationTask`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, overload

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import (
    ClassifierRunConfig,
    ClassifyDataConfig,
    ConfigError,
    HeadConfig,
    ModelConfig,
    read_config,
    save_config,
)
from ..data import DataError, TokenArrays, file_digest, read_lines, resolve_path, reuse_or_build
from ..data.batching import make_batches
from ..data.tokenizer import BOS_ID, PAD_ID, Tokenizer
from ..decoding.translator import pick_device
from ..model import Encoder, init_parameters
from ..outputs import atomic_write_text
from ..training.checkpoint import find_weights, load_weights
from .base import has_trained

LABELS = "labels.json"  # RUN/labels.json: the class names, in the order of the model's outputs


class TransformerClassifier(nn.Module):
    """The same Encoder class as the translation model, then pooling and a two-layer head."""

    def __init__(self, config: ModelConfig, head: HeadConfig, *, max_len: int) -> None:
        super().__init__()
        self.config, self.head_config, self.max_len = config, head, max_len
        self.encoder = Encoder(config, nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_id))
        width = config.d_model * (max_len + (head.pooling == "cls")) if head.pooling == "flatten" else config.d_model
        hidden = head.hidden or config.d_model
        self.head = nn.Sequential(
            nn.Linear(width, hidden), nn.ReLU(), nn.Dropout(config.dropout), nn.Linear(hidden, head.n_classes)
        )
        init_parameters(self, config.d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (B, L), padded with pad_id -> class logits (B, n_classes)."""
        pad = tokens.eq(self.config.pad_id)  # (B, L)
        h = self.encoder(tokens, pad)  # (B, L, D)
        h = h.masked_fill(pad.unsqueeze(-1), 0.0)
        if self.head_config.pooling == "cls":
            pooled = h[:, 0]  # (B, D)
        elif self.head_config.pooling == "flatten":
            pooled = F.pad(h, (0, 0, 0, self.max_len - h.size(1))).flatten(1)  # (B, max_len * D)
        else:
            pooled = h.sum(1) / (~pad).sum(1, keepdim=True).clamp(min=1)  # (B, D)
        return self.head(pooled)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


# Data -------------------------------------------------------------------------------------------------------------
_TAG = re.compile(r"<[^>]{0,40}>")


def read_labelled(path: str | Path, config: ClassifyDataConfig) -> tuple[list[str], list[str], list[int]]:
    """(texts, labels as strings, line numbers) from TSV or JSONL; errors name the file and line."""
    path = resolve_path(path)
    lines = read_lines(path)
    is_json = ".json" in "".join(path.suffixes)
    texts, labels, numbers = [], [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if is_json:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict) or config.label_field not in row:
                raise DataError(f"{path}:{number}: no {config.label_field!r} field")
            text, label = row.get(config.text_field), row[config.label_field]
        else:
            if "\t" not in line:
                raise DataError(f"{path}:{number}: no label column (expected text<TAB>label)")
            text, label = line.rsplit("\t", 1)
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"{path}:{number}: a row with no text")
        if label is None or isinstance(label, (dict, list)) or not str(label).strip():
            raise DataError(f"{path}:{number}: the label is missing or empty ({json.dumps(label)})")
        if config.strip_html:
            text = _TAG.sub(" ", text)
        texts.append(text)
        labels.append(str(label).strip())
        numbers.append(number)
    if not texts:
        raise DataError(f"{path}: no rows")
    return texts, labels, numbers


@dataclass
class LabelledSplit:
    tokens: TokenArrays
    labels: np.ndarray  # (N,) int64 class ids


@dataclass
class ClassBatch:
    tokens: Tensor  # (B, L)
    labels: Tensor  # (B,)
    n_tokens: int  # the loss normaliser: examples
    n_real: int
    n_padded: int

    def to(self, device: torch.device) -> ClassBatch:
        return ClassBatch(self.tokens.to(device), self.labels.to(device), self.n_tokens, self.n_real, self.n_padded)


def truncate(ids: list[int], limit: int, how: str) -> list[int]:
    """At most `limit` ids: the start, the end, or the first quarter plus the last three quarters ("head_tail")."""
    if len(ids) <= limit:
        return ids
    if how == "start":
        return ids[:limit]
    if how == "end":
        return ids[len(ids) - limit :]
    head = limit // 4
    return ids[:head] + ids[len(ids) - (limit - head) :]


def encode_texts(tokenizer: Tokenizer, texts: list[str], config: ClassifyDataConfig, *, cls: bool) -> TokenArrays:
    limit = config.max_len - int(cls)
    ids = tokenizer.encode(texts)
    cut = [truncate(x, limit, config.truncate) for x in ids]
    return TokenArrays.from_lists([[BOS_ID] + x if cls else x for x in cut])


def _labelled_splits(config: ClassifierRunConfig) -> tuple[dict[str, tuple[list[str], list[str]]], list[str]]:
    """(texts, labels) of train, valid (read, or valid_fraction of the shuffled training rows) and test; the
    classes, sorted."""
    d = config.data
    texts, labels, _ = read_labelled(d.train, d)
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise DataError(f"{d.train}: needs at least two labels, found {classes}")
    splits = {}
    rng = np.random.default_rng(config.train.seed)
    order = rng.permutation(len(texts))  # rows may be ordered by label (IMDB is): shuffle before holding out
    if d.valid:
        splits["train"] = ([texts[i] for i in order], [labels[i] for i in order])
        splits["valid"] = read_labelled(d.valid, d)[:2]
    else:
        n_valid = int(round(d.valid_fraction * len(texts)))
        splits["valid"] = ([texts[i] for i in order[:n_valid]], [labels[i] for i in order[:n_valid]])
        splits["train"] = ([texts[i] for i in order[n_valid:]], [labels[i] for i in order[n_valid:]])
    if d.test:
        splits["test"] = read_labelled(d.test, d)[:2]
    return splits, classes


def _cache_key(config: ClassifierRunConfig) -> tuple[str, dict[str, str]]:
    """The data cache's key (options and the input files' contents) and each input file's digest."""
    d = config.data
    if not d.train:
        raise DataError("no training data: set data.train (a .tsv or .jsonl file, optionally .gz)")
    files = [resolve_path(p) for p in (d.train, d.valid, d.test) if p]
    for f in files:
        if not f.is_file():
            raise DataError(f"{f}: no such file")
    digests = {str(f): file_digest(f) for f in files}
    options = json.dumps([dataclasses.asdict(d), config.head.pooling, config.train.seed]).encode()
    return hashlib.sha256(options + "".join(digests.values()).encode()).hexdigest()[:16], digests


def prepare_classification(
    config: ClassifierRunConfig, out_dir: Path, log=print, frozen: bool = False
) -> tuple[Tokenizer, list[str], dict]:
    """Train the vocabulary, map labels to ids, encode train/valid(/test); cached like every task's data
    (data/cache.py: reused while unchanged; `frozen`, a run being resumed: a changed or missing cache is refused)."""
    key, digests = _cache_key(config)
    summary = reuse_or_build(out_dir, key, digests, lambda tmp: _encode_labelled(config, tmp), frozen=frozen, log=log)
    if summary is not None:
        log(
            "data: "
            + ", ".join(f"{k} {v['rows']:,} rows" for k, v in summary["splits"].items())
            + f"; labels {summary['labels']}; vocabulary {summary['vocab_size']}"
        )
    summary = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
    return Tokenizer(out_dir / "tokenizer.model"), summary["labels"], summary


def _encode_labelled(config: ClassifierRunConfig, tmp: Path) -> dict[str, Any]:
    """Write the tokenizer, each split's token ids and label ids into `tmp`; returns the summary."""
    d = config.data
    splits, classes = _labelled_splits(config)
    tokenizer = Tokenizer.train(
        iter(splits["train"][0]),
        tmp / "tokenizer.model",
        vocab_size=d.vocab_size,
        model_type=d.model_type,
        lowercase=d.lowercase,
        max_sentences=200_000,
    )
    summary: dict[str, Any] = {"labels": classes, "vocab_size": tokenizer.vocab_size, "splits": {}}
    index = {c: i for i, c in enumerate(classes)}
    for name, (split_texts, split_labels) in splits.items():
        unknown = sorted(set(split_labels) - set(index))
        if unknown:
            raise DataError(f"{name} data has labels not seen in training: {unknown}")
        tokens = encode_texts(tokenizer, split_texts, d, cls=config.head.pooling == "cls")
        tokens.save(tmp / name)
        np.save(tmp / f"{name}.labels.npy", np.array([index[x] for x in split_labels]), allow_pickle=False)
        summary["splits"][name] = {
            "rows": len(split_texts),
            "tokens": int(tokens.offsets[-1]),
            "per_label": {c: split_labels.count(c) for c in classes},
        }
    return summary


def load_split(root: Path, name: str) -> LabelledSplit:
    return LabelledSplit(TokenArrays.load(root / name), np.load(root / f"{name}.labels.npy", allow_pickle=False))


def collate_labelled(split: LabelledSplit, indices: np.ndarray, *, pad_to: int | None = None) -> ClassBatch:
    lengths = split.tokens.lengths[indices]
    width = pad_to or int(lengths.max())
    tokens = np.full((len(indices), width), PAD_ID, dtype=np.int64)
    for row, i in enumerate(indices):
        seq = split.tokens[i]
        tokens[row, : len(seq)] = seq
    return ClassBatch(
        torch.from_numpy(tokens),
        torch.from_numpy(split.labels[indices].astype(np.int64)),
        n_tokens=len(indices),
        n_real=int(lengths.sum()),
        n_padded=tokens.size,
    )


class ClassificationTask:
    """The classifier's batches, loss and validation, for the shared training loop (tasks/base.py's Task)."""

    name: ClassVar[str] = "classification"
    config_class: ClassVar[type] = ClassifierRunConfig
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


@torch.no_grad()
def predict_split(model, split: LabelledSplit, device, *, max_tokens: int, pad_to=None) -> tuple[Tensor, Tensor]:
    """Logits (N, C) in input order, and the labels."""
    was_training = model.training
    model.eval()
    lengths = np.full(len(split.labels), pad_to) if pad_to else split.tokens.lengths
    out = torch.empty(len(split.labels), model.head_config.n_classes)
    for indices in make_batches(lengths, np.ones_like(lengths), max_tokens=max_tokens, seed=0, epoch=0, shuffle=False):
        batch = collate_labelled(split, indices, pad_to=pad_to).to(device)
        out[torch.from_numpy(indices)] = model(batch.tokens).float().cpu()
    model.train(was_training)
    return out, torch.from_numpy(split.labels.astype(np.int64))


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


class Classifier:
    """A trained classifier: raw texts in, labels (and probabilities) out, in input order."""

    def __init__(
        self, model: TransformerClassifier, tokenizer: Tokenizer, labels: list[str], config: ClassifierRunConfig
    ) -> None:
        self.model, self.tokenizer, self.labels, self.config = model, tokenizer, labels, config

    @classmethod
    def from_run(cls, path: str | Path, *, device: str = "auto") -> Classifier:
        run_dir, weights = find_weights(path)
        config = read_config(run_dir / "config.json", ClassifierRunConfig)
        model = TransformerClassifier(config.model, config.head, max_len=config.data.max_len)
        load_weights(model, weights)
        labels_file = run_dir / LABELS  # runs made before it existed: the data cache's summary
        labels = json.loads(
            labels_file.read_text() if labels_file.is_file() else (run_dir / "data" / "summary.json").read_text()
        )
        labels = labels if isinstance(labels, list) else labels["labels"]
        return cls(model.to(pick_device(device)).eval(), Tokenizer(run_dir / "tokenizer.model"), labels, config)

    def predict_proba(self, texts: Sequence[str]) -> Tensor:
        """(len(texts), classes) probabilities; one string is one text (a (classes,) row comes back)."""
        if isinstance(texts, str):
            return self.predict_proba([texts])[0]
        texts = list(texts)
        d = self.config.data
        if d.strip_html:
            texts = [_TAG.sub(" ", t) for t in texts]
        tokens = encode_texts(self.tokenizer, texts, d, cls=self.config.head.pooling == "cls")
        split = LabelledSplit(tokens, np.zeros(len(texts), dtype=np.int64))
        pad_to = d.max_len if self.config.head.pooling == "flatten" else None
        device = next(self.model.parameters()).device
        logits, _ = predict_split(self.model, split, device, max_tokens=self.config.train.max_tokens, pad_to=pad_to)
        return logits.softmax(-1)

    @overload
    def predict(self, texts: str) -> str: ...  # type: ignore[overload-overlap]  # (a str is also a Sequence[str])

    @overload
    def predict(self, texts: Sequence[str]) -> list[str]: ...

    def predict(self, texts):
        """The most probable label of each text; one string is one text (its label comes back as a string)."""
        if isinstance(texts, str):
            return self.predict([texts])[0]
        return [self.labels[i] for i in self.predict_proba(texts).argmax(-1).tolist()]


def classification_report(gold: list[int], predicted: list[int], labels: list[str]) -> str:
    """Accuracy, per-class precision / recall / F1, and the confusion matrix (rows: gold, columns: predicted)."""
    n = len(labels)
    confusion = np.zeros((n, n), dtype=np.int64)
    np.add.at(confusion, (np.asarray(gold), np.asarray(predicted)), 1)
    tp = np.diag(confusion).astype(float)
    precision = tp / np.maximum(confusion.sum(0), 1)
    recall = tp / np.maximum(confusion.sum(1), 1)
    f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
    width = max(8, *(len(x) for x in labels))
    lines = [
        f"accuracy: {tp.sum() / max(1, confusion.sum()):.4f} ({int(tp.sum())} of {confusion.sum()})",
        "",
        f"{'label':<{width}}  precision  recall      f1  support",
    ]
    for i, label in enumerate(labels):
        lines.append(f"{label:<{width}}  {precision[i]:9.4f}  {recall[i]:6.4f}  {f1[i]:6.4f}  {confusion[i].sum():7d}")
    lines += [
        "",
        "confusion matrix (rows: gold, columns: predicted)",
        " " * width + "  " + "  ".join(f"{x:>{width}}" for x in labels),
    ]
    for i, label in enumerate(labels):
        lines.append(f"{label:<{width}}  " + "  ".join(f"{v:>{width}d}" for v in confusion[i]))
    return "\n".join(lines)


def evaluate_file(classifier: Classifier, path: str, out=sys.stdout) -> float:
    """Print the classification report of `path` (labelled like the training data); returns the accuracy."""
    texts, gold, numbers = read_labelled(path, classifier.config.data)
    index = {c: i for i, c in enumerate(classifier.labels)}
    for label, number in zip(gold, numbers):
        if label not in index:
            raise DataError(
                f"{path}:{number}: label {label!r} is not one the model knows ({', '.join(classifier.labels)})"
            )
    predicted = classifier.predict_proba(texts).argmax(-1).tolist()
    print(classification_report([index[g] for g in gold], predicted, classifier.labels), file=out)
    return float(np.mean([index[g] == p for g, p in zip(gold, predicted)]))
