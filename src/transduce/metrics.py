"""sacreBLEU and chrF, with their signatures (Post 2018: report the signature with the score)."""

from __future__ import annotations

from dataclasses import dataclass

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
