"""Export a transduce run to CTranslate2 (OpenNMT's C++ inference engine) and translate with it.

`export_ctranslate2(run, out)` describes the model with CTranslate2's model-specification API
(`ctranslate2.specs.TransformerSpec`: the library validates, quantizes and serialises it; we never write its binary
format ourselves) and puts beside it the run's SentencePiece model. `CTranslate2Translator` (ct2_translator.py)
loads such a folder and offers the interface of `transduce.decoding.translator.Translator`.

How our model maps onto the engine's Transformer (CTranslate2's "Transformer" spec, its docs' "Model conversion"):
    - post-LN (`norm_first=False`) is the spec's `pre_norm=False`; pre-LN adds the final LayerNorm of each stack;
    - token embeddings are multiplied by sqrt(d_model) (`scale_embeddings`), then the position table is added. The
      table is exported as it is (sinusoidal or learned): the engine's built-in sinusoid puts all sines before all
      cosines, ours interleaves them (paper §3.5, `model.sinusoidal_encoding`);
    - self-attention Q, K, V are one fused (3D, D) projection, encoder-decoder K, V one fused (2D, D) projection;
    - tied embeddings are exported as equal matrices, which the spec stores once (its `optimize` aliases them);
    - the vocabulary is the SentencePiece model's pieces in id order, so token ids are the same in both engines
      (PAD 0, UNK 1, BOS 2, EOS 3); the engine adds EOS to the source itself (`add_source_eos`), as we do.
Restricted self-attention (`attention_window`) has no counterpart in the engine's encoder-decoder Transformer
(its `sliding_window` bounds a key/value cache, not a symmetric band around each query): refused.
Decoding with the engine, and how it differs from ours: ct2_translator.py.
"""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from torch import nn

from ..config import ModelConfig
from ..data.tokenizer import Tokenizer
from ..model import Transformer, alignment
from ..outputs import CT2_EXPORT, atomic_folder, check_replaceable, read_manifest
from ..runs import load_weights, open_run

KIND = CT2_EXPORT  # the kind in the folder's transduce-manifest.json (see transduce.outputs)
FORMAT_VERSION = 1
# The weight types CTranslate2's `ModelSpec.optimize(quantization=...)` accepts.
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
# model.activation -> CTranslate2's Activation member (its GELU is the exact, erf form, as torch's F.gelu)
ACTIVATIONS = {"relu": "RELU", "swish": "SWISH", "gelu": "GELU"}
INSTALL_HINT = "pip install 'transduce[export]' (or: pip install ctranslate2)"


class ExportError(ValueError):
    """The model or the destination cannot be exported to; the message says what and why."""


def _ctranslate2() -> ModuleType:
    """The optional `ctranslate2` package, or an ExportError that says how to install it."""
    try:
        return importlib.import_module("ctranslate2")
    except ImportError:
        raise ExportError(f"exporting to CTranslate2 needs the ctranslate2 package: {INSTALL_HINT}") from None


# What the engine can express -----------------------------------------------------------------------------------------
def check_exportable(config: ModelConfig, tokenizer: Tokenizer) -> None:
    """Refuse, naming every reason, a model that CTranslate2's Transformer cannot compute exactly."""
    problems = []
    if config.attention_window is not None:
        problems.append(
            f"model.attention_window = {config.attention_window} (restricted self-attention): "
            "CTranslate2's encoder-decoder Transformer always attends to every position"
        )
    if config.encoder_layers < 1 or config.decoder_layers < 1:
        problems.append(
            f"{config.encoder_layers} encoder and {config.decoder_layers} decoder layers: "
            "CTranslate2 needs at least one layer in each stack"
        )
    problems += special_id_problems(config, tokenizer)
    if tokenizer.vocab_size != config.vocab_size:
        problems.append(f"the tokenizer has {tokenizer.vocab_size} pieces, the model {config.vocab_size}")
    pieces = _pieces(tokenizer)
    if len(set(pieces)) != len(pieces):
        problems.append("the SentencePiece model has duplicate pieces: CTranslate2 maps tokens to ids by their text")
    if problems:
        raise ExportError("cannot export to CTranslate2: " + "; ".join(problems))


def special_id_problems(config: ModelConfig, tokenizer: Tokenizer) -> list[str]:
    """The model's special ids that are not its vocabulary's, each named (a run keeps them equal; a hand-edited
    config may not)."""
    special = tokenizer.special
    ids = (("pad_id", special.pad, "PAD"), ("bos_id", special.bos, "BOS"), ("eos_id", special.eos, "EOS"))
    return [
        f"model.{name} = {getattr(config, name)}: the vocabulary puts {what} at {i}"
        for name, i, what in ids
        if getattr(config, name) != i
    ]


def _pieces(tokenizer: Tokenizer) -> list[str]:
    """The vocabulary in id order: piece i is token id i in both engines."""
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]


# The model specification -------------------------------------------------------------------------------------------
def _array(tensor: torch.Tensor) -> np.ndarray:
    """A float32 copy (the spec quantizes in place; our parameters must not change)."""
    return tensor.detach().to("cpu", torch.float32).numpy().copy()


def _set_linear(spec, *linears: nn.Linear) -> None:
    """One spec linear from one or several of ours, stacked along the output axis (fused projections)."""
    spec.weight = _array(torch.cat([m.weight for m in linears]))
    if linears[0].bias is not None:
        spec.bias = _array(torch.cat([m.bias for m in linears]))


def _set_norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _set_inputs(spec, embedding) -> None:
    """Token embeddings (scaled by sqrt(d_model) in the engine, §3.4, unless model.scale_embeddings is false) and
    our own position table (§3.5)."""
    spec.scale_embeddings = embedding.scale != 1.0
    table = embedding.learned.weight if hasattr(embedding, "learned") else embedding.pe
    spec.position_encodings.encodings = _array(table)  # (max_len, D)


def _set_encoder(spec, encoder) -> None:
    _set_inputs(spec, encoder.embed)
    spec.embeddings[0].weight = _array(encoder.embed.tokens.weight)
    for layer_spec, layer in zip(spec.layer, encoder.layers):
        attn = layer.self_attn
        _set_linear(layer_spec.self_attention.linear[0], attn.q_proj, attn.k_proj, attn.v_proj)
        _set_linear(layer_spec.self_attention.linear[1], attn.out_proj)
        _set_norm(layer_spec.self_attention.layer_norm, layer.sublayer1.norm)
        _set_feed_forward(layer_spec.ffn, layer.ff, layer.sublayer2.norm)
    if encoder.final_norm is not None:
        _set_norm(spec.layer_norm, encoder.final_norm)


def _set_decoder(spec, decoder, output: nn.Linear) -> None:
    _set_inputs(spec, decoder.embed)
    spec.embeddings.weight = _array(decoder.embed.tokens.weight)
    for layer_spec, layer in zip(spec.layer, decoder.layers):
        attn, cross = layer.self_attn, layer.cross_attn
        _set_linear(layer_spec.self_attention.linear[0], attn.q_proj, attn.k_proj, attn.v_proj)
        _set_linear(layer_spec.self_attention.linear[1], attn.out_proj)
        _set_norm(layer_spec.self_attention.layer_norm, layer.sublayer1.norm)
        _set_linear(layer_spec.attention.linear[0], cross.q_proj)
        _set_linear(layer_spec.attention.linear[1], cross.k_proj, cross.v_proj)
        _set_linear(layer_spec.attention.linear[2], cross.out_proj)
        _set_norm(layer_spec.attention.layer_norm, layer.sublayer2.norm)
        _set_feed_forward(layer_spec.ffn, layer.ff, layer.sublayer3.norm)
    if decoder.final_norm is not None:
        _set_norm(spec.layer_norm, decoder.final_norm)
    _set_linear(spec.projection, output)  # pre-softmax projection (its bias with model.output_bias)


def _set_feed_forward(spec, ff, norm: nn.LayerNorm) -> None:
    _set_linear(spec.linear_0, ff.linear1)
    _set_linear(spec.linear_1, ff.linear2)
    _set_norm(spec.layer_norm, norm)


def build_spec(model: Transformer, tokenizer: Tokenizer):
    """A `ctranslate2.specs.TransformerSpec` holding the model's weights and the tokenizer's vocabulary."""
    ct2 = _ctranslate2()
    config = model.config
    check_exportable(config, tokenizer)
    specs = ct2.specs
    activation = getattr(specs.Activation, ACTIVATIONS[config.activation])
    spec = specs.TransformerSpec(
        specs.TransformerEncoderSpec(
            config.encoder_layers, config.n_heads, pre_norm=config.norm_first, activation=activation
        ),
        specs.TransformerDecoderSpec(
            config.decoder_layers,
            config.n_heads,
            pre_norm=config.norm_first,
            activation=activation,
            alignment_layer=alignment.layer_index(config),  # return_attention gives translate --alignment's weights
            alignment_heads=alignment.head_count(config),
        ),
    )
    _set_encoder(spec.encoder, model.encoder)
    output = model.output
    assert isinstance(output, nn.Linear), "a loaded model's output projection is an nn.Linear (no cpu_speed measures)"
    _set_decoder(spec.decoder, model.decoder, output)
    pieces = _pieces(tokenizer)
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    special = tokenizer.special  # a Marian vocabulary's decoder starts from its pad row
    spec.config.unk_token, spec.config.bos_token = pieces[special.unk], pieces[special.bos]
    spec.config.eos_token, spec.config.decoder_start_token = pieces[special.eos], pieces[special.bos]
    spec.config.add_source_eos = True  # our encoder input is the pieces + EOS
    return spec


# Export ------------------------------------------------------------------------------------------------------------
def is_export(path: str | Path) -> bool:
    """True for a folder written by `export_ctranslate2` (its manifest says so)."""
    manifest = read_manifest(path)
    return manifest is not None and manifest["kind"] == KIND


def export_ctranslate2(run: str | Path, out: str | Path, *, quantization: str | None = None) -> Path:
    """Export a run (its best weights, else the newest checkpoint; or a weights file inside it) to folder `out`.

    `quantization`: None keeps float32; else one of QUANTIZATIONS (int8, int16, float16, ...), applied by the spec.
    Nothing a user already has is overwritten: the export is written into a temporary folder beside `out` and
    renamed into place; an existing `out` is replaced only when it is an earlier export (it holds our manifest)
    or an empty folder, else ExportError. Returns `out`.
    """
    ct2 = _ctranslate2()
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    out = Path(out)
    check_replaceable(out, KIND)  # refuse early, before the work
    opened = open_run(run, "translation")
    run_dir, weights, config, tokenizer = opened.folder, opened.weights, opened.config, opened.tokenizer()
    check_exportable(config.model, tokenizer)  # before loading weights: refuse early
    model = Transformer(config.model)
    load_weights(model, weights)
    spec = build_spec(model.eval(), tokenizer)
    spec.register_file(str(tokenizer.path), "tokenizer.model")
    meta = tokenizer.path.with_suffix(".json")  # lowercasing and other text normalisation
    if meta.is_file():
        spec.register_file(str(meta), "tokenizer.json")
    spec.validate()
    spec.optimize(quantization=quantization)
    manifest = {
        "version": FORMAT_VERSION,
        "run": str(run_dir.resolve()),
        "weights": str(Path(weights).resolve()),
        "quantization": quantization,
        "ctranslate2": ct2.__version__,
        "model": dataclasses.asdict(config.model),
        "decode": dataclasses.asdict(config.decode),
        "languages": {"source": config.data.src, "target": config.data.tgt},  # for the server's /v1/info
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    with atomic_folder(out, KIND, **manifest) as tmp:  # refuses a destination that is not an export of ours
        spec.save(str(tmp))
    return out
