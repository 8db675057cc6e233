"""The attention that aligns words: one decoder layer's cross-attention, averaged over its first heads.

Which layer and heads are the model's settings (model.alignment_layer, model.alignment_heads), read the same way by
`translate --alignment` (documents/words.py turns the weights into word links), guided alignment in training
(training/guided.py trains these weights towards given links, Garg et al. 2019) and a CTranslate2 export (its
decoder's alignment_layer / alignment_heads, so `return_attention` gives the same weights).

With model.full_context_alignment the weights come from a pass of their own in which the decoder sees the whole
target, no future mask (Garg et al. 2019, "alignment training with full target context"): position t predicts
target token t as before but also sees the tokens after it. Training runs that pass beside the translation's, over
the same encoder output; decoding runs it over the finished translation. No engine step gives these weights.

Axis legend: B pairs, H heads, T decoder positions (BOS + target: position t predicts target token t), S source
positions (pieces + EOS).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TypeVar

from torch import Tensor

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


class _Reached(Exception):
    """Raised by a hook once the alignment layer's cross-attention has run: nothing after it is needed."""


def alignment_weights(model, tgt_in: Tensor, memory: Tensor, src_pad_mask: Tensor) -> Tensor:
    """The alignment attention (B, T, S) of decoder inputs `tgt_in` (B, T) over an encoder output `memory`
    (B, S, D), teacher-forced: the decoder runs up to the alignment layer's cross-attention and stops there (the
    layers above it, and its own feed-forward block, cannot change these weights)."""
    module = model.decoder.layers[layer_index(model.config)].cross_attn

    def stop(_module, _inputs, _output) -> None:
        raise _Reached

    with recording_alignment(model) as got:
        handle = module.register_forward_hook(stop)  # after recording_alignment's own hook: the weights are kept
        try:
            model.decoder(tgt_in, memory, src_pad_mask, full_context=model.config.full_context_alignment)
        except _Reached:
            pass
        finally:
            handle.remove()
    return got[0]


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
    cross-attention, or with model.full_context_alignment a second pass over the encoder output the first computed
    (one encoder pass, so the gradient of both reaches it), stopped at the alignment layer, under `autocast()`."""
    if not model.config.full_context_alignment:
        with recording_alignment(model) as got:
            result = forward()
        return result, got[-1]
    memories: list[Tensor] = []
    handle = model.encoder.register_forward_hook(lambda _module, _inputs, output: memories.append(output))
    try:
        result = forward()
    finally:
        handle.remove()
    with autocast():  # the precision the training pass runs in (training/precision.py)
        return result, alignment_weights(model, tgt_in, memories[-1], model.pad_mask(src))
