"""Minimum Bayes risk (MBR) selection among a beam's finished hypotheses.

Beam search returns the translation the model finds most probable; MBR returns the one that agrees best with the
others: the hypothesis with the highest mean utility against the rest of the beam's n best, which stand in for
samples of the model's distribution (Kumar and Byrne 2004; Eikema and Aziz 2020; Freitag et al. 2022). Utility:
sentence-level BLEU or chrF from sacreBLEU. Each pseudo-reference counts the same: weighting them by their model
probability scored lower on Multi30k validation in every setting tried (docs/experiments.md). Cost: n(n-1) sentence
scores per input.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from ..config import MBR_UTILITIES


class _Text(Protocol):
    text: str


H = TypeVar("H", bound=_Text)


def _sentence_metric(utility: str):
    from sacrebleu.metrics import BLEU, CHRF

    if utility == "bleu":
        return BLEU(effective_order=True)  # sentence BLEU: orders without matches do not zero the score
    if utility == "chrf":
        return CHRF()
    raise ValueError(f"MBR utility must be one of {', '.join(MBR_UTILITIES[1:])}, got {utility!r}")


def expected_utilities(hypotheses: list[H], utility: str) -> list[float]:
    """Per hypothesis, its mean utility against each of the others as the reference."""
    n = len(hypotheses)
    if n < 2:
        return [0.0] * n
    metric = _sentence_metric(utility)
    texts = [h.text for h in hypotheses]
    return [
        sum(metric.sentence_score(text, [texts[j]]).score for j in range(n) if j != i) / (n - 1)
        for i, text in enumerate(texts)
    ]


def mbr_rerank(hypotheses: list[H], utility: str) -> list[H]:
    """The hypotheses in order of expected utility, highest first (ties keep the beam's order)."""
    if utility == "none" or len(hypotheses) < 2:
        return list(hypotheses)
    gains = expected_utilities(hypotheses, utility)
    order = sorted(range(len(hypotheses)), key=lambda i: -gains[i])  # sorted() is stable
    return [hypotheses[i] for i in order]
