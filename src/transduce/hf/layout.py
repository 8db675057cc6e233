"""Our Transformer's weights <-> transformers' MarianMTModel / PegasusForConditionalGeneration: the one mapping both
directions use (`export huggingface` and `import huggingface`). Pure tensors: transformers is not imported here.

What differs between the two networks, and how it is absorbed exactly:
    - positions (§3.5): ours interleave, PE[:, 2i] = sin, PE[:, 2i+1] = cos (`model.sinusoidal_encoding`);
      Marian's and Pegasus' tables put all sines first, then all cosines, of the same frequencies. One fixed
      permutation P of the model width (`width_permutation`: the even coordinates, then the odd ones) maps our table
      onto theirs, and applied to every weight that touches the residual stream's width it maps our whole network
      onto theirs: the hidden state of theirs is ours reindexed, h[P]. Embedding and output rows: columns permuted;
      projections reading the width (attention Q, K, V; the FFN's first layer): input columns permuted; projections
      writing it (attention out, the FFN's second layer): output rows and biases permuted; LayerNorm's gain and bias:
      permuted (LayerNorm does not depend on the order of its axis). The attention's own space (H heads of d_k) is
      not touched: every head keeps its block, and its scores and outputs are the same numbers.
    - names: ours `encoder.layers.i.sublayer1.norm`, theirs `model.encoder.layers.i.self_attn_layer_norm`, ...
      (`_LAYER_NAMES`); the pre-LN stacks' final LayerNorms are Pegasus' `model.{encoder,decoder}.layer_norm`.
    - embeddings: tied (`tie_embeddings`, one matrix for the encoder's input, the decoder's input and the pre-softmax
      projection) is `model.shared.weight` aliased by the encoder's and decoder's `embed_tokens` and `lm_head`;
      untied (three matrices) is Marian's `share_encoder_decoder_embeddings=False, tie_word_embeddings=False`.
    - the output bias: theirs is `final_logits_bias` (1, V); ours has none (zeros are written); a model setting that
      gives ours one (`output_bias`, when the model config has it) maps it to `output.bias`.

`to_marian(state, config)` gives every tensor of the HF model's state_dict (aliases included, the position tables
too, which MarianMTModel computes itself and does not save); `from_marian(state, config)` reads a state in either
form (a saved file holds a tied matrix once) and gives our state_dict's tensors. `from_marian(to_marian(s, c), c)`
is `s`, bit for bit.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import ModelConfig
from ..model.transformer import sinusoidal_encoding

MARIAN, PEGASUS = "MarianMTModel", "PegasusForConditionalGeneration"


class LayoutError(ValueError):
    """A state that does not fit the mapping (a missing or unexpected tensor, embeddings that should be tied and
    are not, an output bias our model has no place for); the message names the tensor."""


def model_class(config: ModelConfig) -> str:
    """The transformers class that computes what our model computes: Marian for post-LN, Pegasus for pre-LN."""
    return PEGASUS if config.norm_first else MARIAN


def width_permutation(d_model: int) -> Tensor:
    """P with theirs[..., m] = ours[..., P[m]]: our even coordinates (the sines), then the odd ones (the cosines)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def inverse_permutation(index: Tensor) -> Tensor:
    return torch.argsort(index)


def marian_positions(length: int, d_model: int) -> Tensor:
    """Marian's (and Pegasus') sinusoidal table (L, D): ours with its width permuted."""
    return sinusoidal_encoding(length, d_model)[:, width_permutation(d_model)]


# Names --------------------------------------------------------------------------------------------------------------
# our name inside a layer -> theirs, and how the width axis enters the tensor: "in" (a weight's columns), "out" (a
# weight's rows, a bias), "none" (the attention's or the FFN's inner space only)
_ATTENTION = {
    "q_proj.weight": "in",
    "q_proj.bias": "none",
    "k_proj.weight": "in",
    "k_proj.bias": "none",
    "v_proj.weight": "in",
    "v_proj.bias": "none",
    "out_proj.weight": "out",
    "out_proj.bias": "out",
}
_FFN = {"linear1.weight": ("fc1.weight", "in"), "linear1.bias": ("fc1.bias", "none")}
_FFN |= {"linear2.weight": ("fc2.weight", "out"), "linear2.bias": ("fc2.bias", "out")}
_NORM = {"norm.weight": "out", "norm.bias": "out"}


def _layer_names(decoder: bool) -> dict[str, tuple[str, str]]:
    """Within one layer: our name -> (their name, width axis)."""
    names: dict[str, tuple[str, str]] = {}
    attentions = [("self_attn", "self_attn")] + ([("cross_attn", "encoder_attn")] if decoder else [])
    for ours, theirs in attentions:
        names |= {f"{ours}.{k}": (f"{theirs}.{k}", axis) for k, axis in _ATTENTION.items()}
    names |= {f"ff.{k}": v for k, v in _FFN.items()}
    norms = ["self_attn_layer_norm"] + (["encoder_attn_layer_norm"] if decoder else []) + ["final_layer_norm"]
    for i, theirs in enumerate(norms, start=1):
        names |= {f"sublayer{i}.{k}": (f"{theirs}.{k.split('.')[1]}", axis) for k, axis in _NORM.items()}
    return names


def _names(config: ModelConfig) -> dict[str, tuple[str, str]]:
    """Every weight of ours but the embeddings and the output: our name -> (their name, width axis)."""
    names: dict[str, tuple[str, str]] = {}
    for stack, layers in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        inner = _layer_names(stack == "decoder")
        for i in range(layers):
            names |= {f"{stack}.layers.{i}.{k}": (f"model.{stack}.layers.{i}.{v}", a) for k, (v, a) in inner.items()}
        if config.norm_first:
            names |= {f"{stack}.final_norm.{k}": (f"model.{stack}.layer_norm.{k}", "out") for k in ("weight", "bias")}
    return names


def _move(tensor: Tensor, axis: str, index: Tensor) -> Tensor:
    """`tensor` with its width axis (if any) reordered by `index`."""
    if axis == "in":
        return tensor.index_select(1, index)
    if axis == "out":
        return tensor.index_select(0, index)
    return tensor.clone()


def permute_width(state: dict[str, Tensor], config: ModelConfig, index: Tensor) -> dict[str, Tensor]:
    """Our state (our names) with the model width reordered by `index` everywhere it appears: the network then
    computes the same logits over positions whose table is reordered alike (`marian_positions` for P)."""
    out = {}
    for name, (_, axis) in _names(config).items():
        out[name] = _move(state[name], axis, index)
    for name in ("encoder.embed.tokens.weight", "decoder.embed.tokens.weight", "output.weight"):
        if name in state:
            out[name] = _move(state[name], "in", index)
    if "output.bias" in state:
        out["output.bias"] = state["output.bias"].clone()
    return out


# Ours -> theirs ------------------------------------------------------------------------------------------------------
def to_marian(state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """Our state_dict -> the state_dict of `model_class(config)` (every key, aliases and position tables included)."""
    state = _completed(state, config)
    index = width_permutation(config.d_model)
    permuted = permute_width(state, config, index)
    out = {theirs: permuted[ours] for ours, (theirs, _) in _names(config).items()}
    encoder, decoder = permuted["encoder.embed.tokens.weight"], permuted["decoder.embed.tokens.weight"]
    output = permuted["output.weight"]
    if config.tie_embeddings:
        out["model.shared.weight"] = encoder
        decoder = output = encoder
    out["model.encoder.embed_tokens.weight"] = encoder
    out["model.decoder.embed_tokens.weight"] = decoder
    out["lm_head.weight"] = output
    bias = permuted.get("output.bias")
    out["final_logits_bias"] = (torch.zeros(config.vocab_size) if bias is None else bias).reshape(1, -1)
    positions = marian_positions(config.max_len, config.d_model)
    out["model.encoder.embed_positions.weight"] = positions
    out["model.decoder.embed_positions.weight"] = positions.clone()
    return out


def _completed(state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """`state` with the tied matrix under all three of our names (our state_dict lists it so; a saved file once)."""
    needed = [*_names(config), "encoder.embed.tokens.weight"]
    if not config.tie_embeddings:
        needed += ["decoder.embed.tokens.weight", "output.weight"]
    missing = [k for k in needed if k not in state]
    if missing:
        raise LayoutError(f"the state lacks {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    if not config.tie_embeddings:
        return state
    tied = state["encoder.embed.tokens.weight"]
    return {"decoder.embed.tokens.weight": tied, "output.weight": tied, **state}


# Theirs -> ours ------------------------------------------------------------------------------------------------------
_POSITIONS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")


def from_marian(state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """The state of a MarianMTModel (post-LN) or PegasusForConditionalGeneration (pre-LN), as its state_dict or as
    saved (a tied matrix once, no position tables) -> our state_dict's tensors for `config`.

    The position tables, when present, are not read (ours are computed: `marian_positions` is what they hold).
    A tensor left over, one missing, untied embeddings for a tied config, or a nonzero final_logits_bias for a
    model without an output bias: LayoutError naming it."""
    index = inverse_permutation(width_permutation(config.d_model))
    used = set(_POSITIONS)

    def take(name: str) -> Tensor:
        if name not in state:
            raise LayoutError(f"the Hugging Face state has no {name}")
        used.add(name)
        return state[name]

    ours = {mine: _move(take(theirs), axis, index) for mine, (theirs, axis) in _names(config).items()}
    ours |= _embeddings_from(state, config, take, index)
    if "final_logits_bias" in state:
        bias = take("final_logits_bias").reshape(-1)
        if getattr(config, "output_bias", False):
            ours["output.bias"] = bias.clone()
        elif bool(bias.ne(0).any()):
            raise LayoutError("final_logits_bias is not zero, and the model config has no output bias")
    left = sorted(k for k in state if k not in used)
    if left:
        raise LayoutError(f"the Hugging Face state has weights this model has no place for: {', '.join(left[:3])}")
    return ours


def _embeddings_from(state: dict[str, Tensor], config: ModelConfig, take, index: Tensor) -> dict[str, Tensor]:
    """Our three embedding names from theirs: `model.shared` or each stack's own `embed_tokens`; `lm_head`, or the
    decoder's embeddings when it is tied to them (a saved file omits the alias)."""

    def first(*names: str) -> str:
        return next((n for n in names if n in state), names[0])

    encoder_name = first("model.shared.weight", "model.encoder.embed_tokens.weight")
    encoder = take(encoder_name)
    decoder = take(first("model.decoder.embed_tokens.weight", encoder_name))
    output = take(first("lm_head.weight", "model.decoder.embed_tokens.weight", encoder_name))
    for alias in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        if alias in state and config.tie_embeddings:
            take(alias)
    if config.tie_embeddings:
        for name, tensor in (("the decoder's embeddings", decoder), ("lm_head", output)):
            if tensor is not encoder and not torch.equal(tensor, encoder):
                raise LayoutError(f"{name} differ from the encoder's embeddings, and the model config ties them")
        matrix = _move(encoder, "in", index)
        return {"encoder.embed.tokens.weight": matrix, "decoder.embed.tokens.weight": matrix, "output.weight": matrix}
    return {
        "encoder.embed.tokens.weight": _move(encoder, "in", index),
        "decoder.embed.tokens.weight": _move(decoder, "in", index),
        "output.weight": _move(output, "in", index),
    }
