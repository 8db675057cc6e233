"""Scores of outputs against references: sacreBLEU and chrF with their signatures (Post 2018: report the signature
with the score) for translation; accuracy, per-class figures and the confusion matrix for classification. (Parses
are scored by tasks/evalb.py.)"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sacrebleu.metrics import BLEU, CHRF


@dataclass
class Scores:
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    bleu_detail: str

    def format(self) -> str:
        return (
            f"BLEU = {self.bleu:.2f}  ({self.bleu_detail})\n  signature: {self.bleu_signature}\n"
            f"chrF = {self.chrf:.2f}\n  signature: {self.chrf_signature}"
        )


def score(hypotheses: list[str], references: list[str], *, lowercase: bool = False, tokenize: str = "13a") -> Scores:
    """Corpus BLEU (default: cased, 13a tokenization, as sacreBLEU's default) and chrF.

    `tokenize` accepts sacreBLEU's tokenizers ("13a", "intl", "none" for already-tokenized text, ...).
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu = BLEU(lowercase=lowercase, tokenize=tokenize)
    chrf = CHRF(lowercase=lowercase)
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    detail = str(b).split("=", 1)[1].strip().split(" ", 1)[1] if "=" in str(b) else ""
    return Scores(b.score, c.score, str(bleu.get_signature()), str(chrf.get_signature()), detail)


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
