"""The attention that aligns words: one decoder layer's cross-attention, averaged over its first heads.

Which layer and heads are the model's settings (model.alignment_layer, model.alignment_heads), read the same way by
`translate --alignment` (documents/words.py turns the weights into word links), guided alignment in training
(training/guided.py trains these weights towards given links, Garg et al. 2019) and a CTranslate2 export (its
decoder's alignment_layer / alignment_heads, so `return_attention` gives the same weights).

With model.full_context_alignment the weights come from a pass of their own in which the decoder sees the whole
target, no future mask (Garg et al. 2019, "alignment training with full target context"): position t predicts
target token t as before but also sees the tokens after it. Training runs that pass beside the translation's, over
the same encoder output; decoding runs it over the finished translation. No engine step gives these weights.

With model.alignment_head the weights come from an attention of their own (`AlignmentHead`, after Zenkel et al.
2019's alignment layer over a translation model): its query is the alignment layer's decoder state (the query that
layer's cross-attention gets) with the embedding of the target token the position predicts, its keys the encoder
output with the source token's embedding. Its inputs are detached: guided alignment trains it and nothing else, so
a translation is the same with or without it (train.alignment_only fine-tunes it alone onto a trained run).

Axis legend: B pairs, H heads, T decoder positions (BOS + target: position t predicts target token t), S source
positions (pieces + EOS).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig


def layer_index(config: ModelConfig) -> int:
    """model.alignment_layer as an index from 0 (a negative setting counts from the last layer)."""
    return config.alignment_layer % config.decoder_layers


def head_count(config: ModelConfig) -> int:
    """How many heads (the first ones) are averaged: model.alignment_heads, 0 meaning all."""
    return config.alignment_heads or config.n_heads


@contextlib.contextmanager
def recording_alignment(model) -> Iterator[list[Tensor]]:
    """Within this block the alignment layer's cross-attention keeps its weights; the list yielded receives,
    after each forward pass, the (B, T, S) weights averaged over the alignment heads (with autograd's graph when
    gradients are on: guided alignment trains them). The other attention modules run as usual (fused kernels)."""
    module = model.decoder.layers[layer_index(model.config)].cross_attn
    heads = head_count(model.config)
    got: list[Tensor] = []

    def keep(_module, _inputs, _output) -> None:
        weights = module.weights  # (B, H, T, S), set because keep_weights is on
        got.append(weights[:, :heads].float().mean(dim=1))  # (B, T, S)
        module.weights = None

    module.keep_weights = True
    handle = module.register_forward_hook(keep)
    try:
        yield got
    finally:
        handle.remove()
        module.keep_weights = False
        module.weights = None


class AlignmentHead(nn.Module):
    """model.alignment_head: one attention that gives word alignments and nothing else (module docstring)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        width = config.d_model
        self.query = nn.Linear(2 * width, width)  # [decoder state; target token embedding] -> D
        self.key = nn.Linear(2 * width, width)  # [encoder output; source token embedding] -> D
        for layer in (self.query, self.key):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, state: Tensor, target: Tensor, memory: Tensor, source: Tensor, src_pad_mask: Tensor) -> Tensor:
        """state, target (B, T, D); memory, source (B, S, D); src_pad_mask (B, S), True = padding -> (B, T, S)."""
        query = self.query(torch.cat([state, target], dim=-1))  # (B, T, D)
        key = self.key(torch.cat([memory, source], dim=-1))  # (B, S, D)
        scores = torch.bmm(query, key.transpose(1, 2)).float() * query.size(-1) ** -0.5  # (B, T, S)
        return scores.masked_fill(src_pad_mask.unsqueeze(1), float("-inf")).softmax(dim=-1)


def head_weights(model, state: Tensor, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
    """The alignment head's weights (B, T, S) from the alignment layer's decoder `state` (B, T, D) of decoder inputs
    `tgt_in` (B, T) over the encoder output `memory` (B, S, D) of `src` (B, S); every input detached."""
    # (B, T): the token position t predicts; pad at the position that predicts EOS (never linked, never read)
    following = F.pad(tgt_in[:, 1:], (0, 1), value=model.config.pad_id)
    decoder, encoder = model.decoder.embed, model.encoder.embed
    target = decoder.tokens(following) * decoder.scale  # (B, T, D)
    source = encoder.tokens(src) * encoder.scale  # (B, S, D)
    inputs = (state, target, memory, source)
    return model.alignment_head(*(x.detach() for x in inputs), model.pad_mask(src))


@contextlib.contextmanager
def recording_state(model) -> Iterator[list[Tensor]]:
    """Within this block the list yielded receives, at each forward pass, the alignment layer's decoder state: the
    query its cross-attention is given (B, T, D)."""
    got: list[Tensor] = []
    module = model.decoder.layers[layer_index(model.config)].cross_attn
    handle = module.register_forward_pre_hook(lambda _module, inputs: got.append(inputs[0]))
    try:
        yield got
    finally:
        handle.remove()


class _Reached(Exception):
    """Raised by a hook once the alignment layer's cross-attention has run: nothing after it is needed."""


def alignment_weights(model, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
    """The alignment attention (B, T, S) of decoder inputs `tgt_in` (B, T) over the encoder output `memory`
    (B, S, D) of `src` (B, S), teacher-forced: the decoder runs up to the alignment layer's cross-attention and stops
    there (the layers above it, and its own feed-forward block, cannot change these weights)."""
    module = model.decoder.layers[layer_index(model.config)].cross_attn
    head = model.config.alignment_head

    def stop(_module, _inputs, _output) -> None:
        raise _Reached

    # the head's inputs are detached (head_weights): the pass that gives its state keeps no graph
    with (
        recording_state(model) if head else recording_alignment(model) as got,
        torch.no_grad() if head else contextlib.nullcontext(),
    ):
        handle = module.register_forward_hook(stop)  # after the recording hook: what it keeps is kept
        try:
            model.decoder(tgt_in, memory, model.pad_mask(src), full_context=model.config.full_context_alignment)
        except _Reached:
            pass
        finally:
            handle.remove()
    return head_weights(model, got[0], tgt_in, memory, src) if head else got[0]


Result = TypeVar("Result")


def trained_alignment(
    model,
    forward: Callable[[], Result],
    tgt_in: Tensor,
    src: Tensor,
    autocast: Callable[[], AbstractContextManager],
) -> tuple[Result, Tensor]:
    """`forward()`, the training pass of the pairs `src` (B, S) and decoder inputs `tgt_in` (B, T), and the
    alignment weights (B, T, S) of those pairs with autograd's graph (guided alignment trains them): the pass's own
    cross-attention; with model.full_context_alignment a second pass over the encoder output the first computed
    (one encoder pass, so the gradient of both reaches it), stopped at the alignment layer; with model.alignment_head
    the head over that pass's (or the second pass's) decoder state. Under `autocast()`."""
    config = model.config
    if not config.full_context_alignment and not config.alignment_head:
        with recording_alignment(model) as got:
            result = forward()
        return result, got[-1]
    memories: list[Tensor] = []
    handle = model.encoder.register_forward_hook(lambda _module, _inputs, output: memories.append(output))
    recording: AbstractContextManager[list[Tensor]] = (
        contextlib.nullcontext([]) if config.full_context_alignment else recording_state(model)
    )
    try:
        with recording as states:
            result = forward()
    finally:
        handle.remove()
    with autocast():  # the precision the training pass runs in (training/precision.py)
        if config.full_context_alignment:
            return result, alignment_weights(model, tgt_in, memories[-1], src)
        return result, head_weights(model, states[-1], tgt_in, memories[-1], src)
