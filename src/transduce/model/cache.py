"""The decoder's key/value cache: `DecoderCache`, the state `Transformer.decode_step` carries from one output
position to the next (encoder-decoder keys and values computed once, self-attention keys and values growing a
step at a time), and how beam search expands, reorders and narrows it. Not part of the paper's model: it spares
each decoding step the positions before it (cached decoding equals the full forward pass, tested). Axis legend as
in transformer.py; N the decoder rows (B * beams after `expand`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class DecoderCache:
    """State carried between `decode_step` calls.

    memory_kv: per layer, encoder-decoder keys and values (B, H, S, K), computed once from the encoder output.
    self_kv: per layer, decoder self-attention keys and values of the steps so far (N, H, t, K).
    After `expand(beams)` (beam search) each sentence has `beams` consecutive decoder rows, N = B * beams, which share
    its encoder keys and values: memory_kv and cross_mask keep one entry per sentence, the other fields one per row.
    """

    memory_kv: list[tuple[Tensor, Tensor]]
    self_kv: list[tuple[Tensor, Tensor] | None]
    src_pad_mask: Tensor  # (B, S)
    cross_mask: Tensor | None  # (B, 1, 1, S)
    step: int = 0
    beams: int = 1  # decoder rows per sentence (per entry of memory_kv and cross_mask)
    qkv_weights: list[tuple[Tensor, Tensor]] = field(default_factory=list)  # per layer, W^Q W^K W^V joined

    def expand(self, beams: int) -> None:
        """Before the first step: each sentence's row becomes `beams` consecutive rows. The encoder keys and values
        are not copied: each step's cross-attention reads them once for all the rows of a sentence."""
        assert self.step == 0 and self.beams == 1, "expand() comes once, before the first decoding step"
        rows = torch.arange(self.src_pad_mask.size(0), device=self.src_pad_mask.device).repeat_interleave(beams)
        self.src_pad_mask = self.src_pad_mask.index_select(0, rows)
        self.beams = beams

    def reorder(self, index: Tensor) -> None:
        """Keep the self-attention history of rows `index` (beam search: each beam's parent)."""
        reordered: list[tuple[Tensor, Tensor] | None] = []
        for kv in self.self_kv:
            assert kv is not None, "reorder follows a decoding step, which fills every layer's keys and values"
            k, v = kv
            reordered.append((k.index_select(0, index), v.index_select(0, index)))
        self.self_kv = reordered

    def select(self, index: Tensor) -> None:
        """Keep rows `index` everywhere (drop finished sentences). After `expand`, `index` keeps whole sentences:
        all `beams` rows of each, in order."""
        if self.step:
            self.reorder(index)
        shared = index if self.beams == 1 else index.view(-1, self.beams)[:, 0].div(self.beams, rounding_mode="floor")
        self.memory_kv = [(k.index_select(0, shared), v.index_select(0, shared)) for k, v in self.memory_kv]
        self.cross_mask = None if self.cross_mask is None else self.cross_mask.index_select(0, shared)
        self.src_pad_mask = self.src_pad_mask.index_select(0, index)
