"""Labelled text for the classifier: TSV (`text<TAB>label`, the label in the last column) or JSONL (`{"text": ...,
"label": ...}`), plain or .gz. A SentencePiece vocabulary is trained on the training texts; sequences are cut to
`data.max_len` tokens from the start (or, with `data.truncate`, keep the end, or the head and the tail). Prepared
data is cached like every task's (cache.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..config import ClassifierRunConfig, ClassifyDataConfig
from .cache import reuse_or_build
from .corpus import TokenArrays
from .text import DataError, file_digest, read_lines, resolve_path
from .tokenizer import BOS_ID, PAD_ID, Tokenizer

HTML_TAG = re.compile(r"<[^>]{0,40}>")


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
            text = HTML_TAG.sub(" ", text)
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
