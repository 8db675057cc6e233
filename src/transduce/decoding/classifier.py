"""`Classifier`: raw texts in, labels (and probabilities) out, in input order (the classification predictor, as
translator.py is translation's): the encoder and its head (model/classifier.py) on batches by length."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import overload

import numpy as np
import torch
from torch import Tensor

from ..config import ClassifierRunConfig
from ..data.batching import make_batches
from ..data.labelled import HTML_TAG, LabelledSplit, collate_labelled, encode_texts
from ..data.tokenizer import Tokenizer
from ..device import pick_device
from ..model.classifier import TransformerClassifier
from ..runs import load_weights, open_run
from .front import check_sentences

LABELS = "labels.json"  # RUN/labels.json: the class names, in the order of the model's outputs


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


class Classifier:
    """A trained classifier: raw texts in, labels (and probabilities) out, in input order."""

    def __init__(
        self, model: TransformerClassifier, tokenizer: Tokenizer, labels: list[str], config: ClassifierRunConfig
    ) -> None:
        self.model, self.tokenizer, self.labels, self.config = model, tokenizer, labels, config

    @classmethod
    def from_run(cls, path: str | Path, *, device: str = "auto") -> Classifier:
        run = open_run(path, "classification")
        config = run.config
        model = TransformerClassifier(config.model, config.head, max_len=config.data.max_len)
        load_weights(model, run.weights)
        labels = json.loads((run.folder / LABELS).read_text(encoding="utf-8"))
        return cls(model.to(pick_device(device)).eval(), run.tokenizer(), labels, config)

    def predict_proba(self, texts: Sequence[str]) -> Tensor:
        """(len(texts), classes) probabilities; one string is one text (a (classes,) row comes back)."""
        if isinstance(texts, str):
            return self.predict_proba([texts])[0]
        texts = check_sentences(texts)
        d = self.config.data
        if d.strip_html:
            texts = [HTML_TAG.sub(" ", t) for t in texts]
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
