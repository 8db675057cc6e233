"""The parser's Transformer: the paper's model (transformer.py) plus the word pointer (not in the paper).

With leaves that are tags only, the decoder has to count the leaves it wrote to know which word comes next, and a
small model trained on GUM's 3.7k trees does not learn to (docs/parsing.md). With `model.word_pointer` each decoder
input also gets W_p . (the encoder state of the next word to cover); with `word_pointer_output` that state is also
added, through its own W_o, to the decoder output before the pre-softmax projection; with `word_pointer_last` the
pointer reads the word's last piece (through W_l) as well as its first. What it reads, per decoder input, is given:
in training by data/pointers.py (off the target), in decoding by the tree constraint (decoding/parser.py hands the
positions over in the cache before each step). Without `word_pointer` this model is the Transformer.

Axis legend as in transformer.py; C the pointer's reads per step (ParserModelConfig.pointer_reads).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor, nn

from ..config import ParserModelConfig
from .transformer import DecoderCache, Transformer


@dataclass
class PointerCache(DecoderCache):
    """A DecoderCache that also holds the projected encoder states the pointer reads, and the positions it reads at
    the next step (set by the caller before each `decode_step`: decoding/parser.py, from the tree constraint)."""

    pointer_memory: Tensor | None = None  # (N, S, C' D) the projections of the encoder output (_pointer_memory)
    word_pos: Tensor | None = None  # (N,) or (N, C): the source positions the next step reads

    def expand(self, beams: int) -> None:
        super().expand(beams)
        if self.pointer_memory is not None:
            rows = torch.arange(self.pointer_memory.size(0), device=self.pointer_memory.device)
            self.pointer_memory = self.pointer_memory.index_select(0, rows.repeat_interleave(beams))

    def select(self, index: Tensor) -> None:
        super().select(index)
        if self.pointer_memory is not None:
            self.pointer_memory = self.pointer_memory.index_select(0, index)


class PointerTransformer(Transformer):
    """The Transformer with parsing's word pointer (`ParserModelConfig`). `forward(src, tgt_in, positions, word_pos)`:
    `word_pos` (B, T), or (B, T, C) with more reads than one, the source positions read at each decoder input."""

    config: ParserModelConfig

    def __init__(self, config: ParserModelConfig) -> None:
        super().__init__(config)

    def add_modules(self) -> None:
        # decoder input += W_p . (state of the next word); with word_pointer_output also decoder output += W_o . that
        # state: one matrix [W_p; W_o], split after the gather
        config = self.config
        width = config.d_model * (2 if config.word_pointer_output else 1)
        self.word_proj = nn.Linear(config.d_model, width, bias=False) if config.word_pointer else None
        # with word_pointer_last, + W_l . (the word's last piece's state): a word cut into pieces keeps its ending
        # (-s, -ed, -ly: what a tag depends on) in its last one
        self.word_last_proj = nn.Linear(config.d_model, width, bias=False) if config.word_pointer_last else None

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        src_pad_mask: Tensor,
        positions: Tensor | None = None,
        word_pos: Tensor | None = None,
    ) -> Tensor:
        early, late = self._split(self._pointed(self._pointer_memory(memory), word_pos))
        h = self.decoder(tgt_in, memory, src_pad_mask, early)  # (B, T, D)
        return self.logits(h if late is None else h + late, positions)

    def forward(
        self, src: Tensor, tgt_in: Tensor, positions: Tensor | None = None, word_pos: Tensor | None = None
    ) -> Tensor:
        return self.decode(tgt_in, self.encode(src), self.pad_mask(src), positions, word_pos)

    def start_decoding(self, memory: Tensor, src_pad_mask: Tensor) -> PointerCache:
        cache = super().start_decoding(memory, src_pad_mask)
        shared = {f.name: getattr(cache, f.name) for f in fields(cache)}
        return PointerCache(**shared, pointer_memory=self._pointer_memory(memory))

    def decode_step(self, tokens: Tensor, cache: DecoderCache) -> Tensor:
        """As the Transformer's, reading `cache.word_pos` (N,) or (N, C) when the model has the pointer."""
        assert isinstance(cache, PointerCache), "start_decoding makes the cache"
        step_pos = None if cache.word_pos is None else cache.word_pos.unsqueeze(1)  # (N, 1) or (N, 1, C): one step
        early, late = self._split(self._pointed(cache.pointer_memory, step_pos))  # (N, 1, D) each
        h = self.decoder.step(tokens, cache, early)  # (N, D)
        return self.output(h if late is None else h + late[:, 0])

    def _pointer_memory(self, memory: Tensor) -> Tensor | None:
        """W_p . memory (B, S, D) ([W_p; W_o] . memory, (B, S, 2D), with word_pointer_output), projected once per
        batch, then W_l . memory (word_pointer_last) after it on the last axis; None without the word pointer."""
        projections = [p for p in (self.word_proj, self.word_last_proj) if p is not None]
        if not projections:
            return None
        return torch.cat([p(memory) for p in projections], dim=-1) if len(projections) > 1 else projections[0](memory)

    def _pointed(self, projected: Tensor | None, word_pos: Tensor | None) -> Tensor | None:
        """The word pointer's input: (W_p . memory)[b, word_pos[b, t]] -> (B, T, D); None without a pointer. With
        two reads (word_pointer_last), `word_pos` has a last axis of two positions, one gather per read, added."""
        reads = self.config.pointer_reads
        if not reads:
            if word_pos is not None:
                raise ValueError("word positions given to a model without model.word_pointer")
            return None
        if word_pos is None or projected is None:
            raise ValueError("a model with model.word_pointer needs the word positions (word_pos)")
        if len(reads) == 1:
            if word_pos.dim() != 2:
                raise ValueError(f"word positions must be (B, T) for this model, got {tuple(word_pos.shape)}")
            word_pos = word_pos.unsqueeze(-1)
        elif word_pos.dim() != 3 or word_pos.size(-1) != len(reads):
            raise ValueError(
                f"this model reads {len(reads)} values per step ({', '.join(reads)}): word positions must "
                f"be (B, T, {len(reads)}), got {tuple(word_pos.shape)}"
            )
        pointed = None
        for i, states in enumerate(projected.chunk(len(reads), dim=-1)):  # (B, S, D) each
            read = states.gather(1, word_pos[..., i].unsqueeze(-1).expand(-1, -1, states.size(-1)))  # (B, T, D)
            pointed = read if pointed is None else pointed + read
        return pointed

    def _split(self, pointed: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
        """The pointed states -> (added to the decoder input, added to the decoder output); None where unused."""
        if pointed is None or not self.config.word_pointer_output:
            return pointed, None
        early, late = pointed.chunk(2, dim=-1)
        return early, late
