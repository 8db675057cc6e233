"""Ensembles: several models of one vocabulary decoded as one (`transduce translate RUN --ensemble RUN2`, and
`transduce parse RUN --ensemble RUN2` for parsing runs).

At each step the next-token distribution is the mean of the members' distributions, P(y | ...) = 1/M sum_m P_m(y |
...), as in fairseq's and OpenNMT's ensembles; its log is handed to the search, so greedy and beam search, the length
penalty and n-best work unchanged. Each member keeps its own encoder output and cache; beam search reorders and
selects them together. The members must share the tokenizer (the same SentencePiece model), the vocabulary and the
languages: models trained from the same data with different seeds, or checkpoints of one run (decoding/parser.py
checks what else parsers must share).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from ..model import Transformer
from ..model.transformer import DecoderCache


@dataclass
class EnsembleCache:
    """One DecoderCache per member, reordered and selected together."""

    caches: list[DecoderCache]

    def expand(self, beams: int) -> None:
        for cache in self.caches:
            cache.expand(beams)

    def reorder(self, index: Tensor) -> None:
        for cache in self.caches:
            cache.reorder(index)

    def select(self, index: Tensor) -> None:
        for cache in self.caches:
            cache.select(index)


class Ensemble(nn.Module):
    """The decoding interface of a Transformer (encode, start_decoding, decode_step, pad_mask, config) over several
    Transformers. `decode_step` returns log of the mean probability, which log_softmax leaves unchanged."""

    def __init__(self, members: Sequence[Transformer]) -> None:
        super().__init__()
        if len(members) < 2:
            raise ValueError("an ensemble needs at least two models")
        first = members[0].config
        for c in (m.config for m in members[1:]):
            if (c.vocab_size, c.pad_id) != (first.vocab_size, first.pad_id):
                raise ValueError(f"ensemble members differ in vocabulary: {c.vocab_size} and {first.vocab_size} pieces")
        self.members = nn.ModuleList(members)
        # positions: the shortest member's limit bounds the ensemble's
        self.config = min((m.config for m in members), key=lambda c: c.max_len)

    def pad_mask(self, tokens: Tensor) -> Tensor:
        return tokens.eq(self.config.pad_id)

    def encode(self, src: Tensor) -> list[Tensor]:
        return [cast(Transformer, m).encode(src) for m in self.members]

    def start_decoding(self, memories: list[Tensor], src_pad_mask: Tensor) -> EnsembleCache:
        pairs = zip(self.members, memories)
        return EnsembleCache([cast(Transformer, m).start_decoding(x, src_pad_mask) for m, x in pairs])

    def decode_step(self, tokens: Tensor, cache: EnsembleCache) -> Tensor:
        members = cast(list[Transformer], list(self.members))
        lprobs = torch.stack(
            [torch.log_softmax(m.decode_step(tokens, c).float(), dim=-1) for m, c in zip(members, cache.caches)]
        )  # (M, B, V)
        return torch.logsumexp(lprobs, dim=0) - math.log(len(self.members))  # (B, V)
