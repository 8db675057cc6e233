"""Export a transduce run to CTranslate2 (OpenNMT's C++ inference engine) and translate with it.

`export_ctranslate2(run, out)` describes the model with CTranslate2's model-specification API
(`ctranslate2.specs.TransformerSpec`: the library validates, quantizes and serialises it; we never write its binary
format ourselves) and puts beside it the run's SentencePiece model. `CTranslate2Translator` loads such a folder and
offers the interface of `transduce.decoding.translator.Translator` (`translate`, `translate_nbest`).

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

Decoding: what is the same in both engines and what is not.
    - Length penalty: our "length" (score = log P / |Y|^alpha) is CTranslate2's `length_penalty=alpha`, with |Y|
      counting EOS in both (the engine is asked to keep the end token, `return_end_token=True`, which makes its
      lengths count it; we strip it from the output). "none" is `length_penalty=0`. Our "gnmt",
      ((5 + |Y|) / 6)^alpha, has no counterpart in the engine's beam search: asking for it there raises ValueError.
    - Greedy search (beam 1): the engine returns the raw log-probability (`length_penalty=0`) and we divide it by
      our penalty, any of the three, as `search.greedy_search` does (greedy's tokens do not depend on it).
    - Maximum output length |x| + 50 (decode.max_len_a * |x| + decode.max_len_b, at most max_len - 1, counting
      EOS): the engine takes one maximum per call. By default all sentences go through one call with the maximum of
      the longest source (a sentence may then run past its own |x| + 50, never past max_len - 1); with `exact=True`
      sentences are decoded in groups of equal source length, each with its own maximum. We force EOS at the last
      position; the engine is given one step less and stops there, which gives the same tokens.
    - PAD and BOS are never produced: we mask them after the log-softmax, the engine (`suppress_sequences`) before
      it, so its log-probabilities are renormalised over the other tokens and its scores are a little higher, by
      -log(1 - p(PAD) - p(BOS)) per step. Not negligible by construction: with tied embeddings PAD's row stays zero,
      so its logit is 0 (on the tests' toy model, up to 0.2% of a sentence's score).
    - Beam search: both expand 2 x beam candidates per sentence and step, finish a hypothesis only when its EOS is
      among the top `beam` candidates, and keep the `beam` best that do not end in EOS. The engine ends a sentence
      once beam x patience hypotheses have finished and returns the best of those by normalised score; ours stops
      once no unfinished hypothesis can beat its n-best. While both run, their unfinished hypotheses are the same;
      so, apart from rounding and the renormalisation above, the engine's best translation never has a higher
      model score than ours (tested where they differ). The default is the engine's own patience, 1 (its speed);
      `exact=True` uses 4: on the tests' 250-update model, patience 1 / 2 / 4 gave 64 / 69 / 70 of 70 toy sentences
      identical to ours with the "length" penalty (70 / 70 / 70 with "none"; measured 2026-11-23; the tests assert
      30 of 30 at patience 4 with `exact=True`).
      A hypothesis that reaches the maximum length counts its forced EOS in |Y| with us, not in the engine.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from torch import nn

from ..config import Config, ConfigError, DecodeConfig, ModelConfig, config_from_dict
from ..config.bounds import check_value
from ..data.marian import load_tokenizer
from ..data.tokenizer import Tokenizer
from ..decoding import front
from ..decoding.front import Decoded, Translation
from ..decoding.search import Sampling, length_penalty
from ..decoding.translator import PairScore
from ..model import Transformer, alignment
from ..outputs import CT2_EXPORT, MANIFEST, atomic_folder, check_replaceable, read_manifest
from ..training.checkpoint import find_weights, load_weights, read_run_config

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
    run_dir, weights = find_weights(run)
    config = read_run_config(run_dir, "translation")
    tokenizer = load_tokenizer(run_dir / "tokenizer.model")
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


# Translation -------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Search:
    """One call's search settings: the engine's options and how to score a greedy hypothesis."""

    engine: dict
    greedy: bool
    penalty: str
    alpha: float

    def score(self, log_prob: float, length: int) -> float:
        """The reported score. Beam: the engine's, log P / |Y|^alpha. Greedy: log P / lp(|Y|) with our penalty
        (any of gnmt, length, none: greedy's tokens do not depend on it), |Y| counting EOS, as `greedy_search`."""
        if not self.greedy:
            return log_prob
        return log_prob / float(length_penalty(float(length), kind=self.penalty, alpha=self.alpha))


def _search(
    *, beam: int, nbest: int, alpha: float, penalty: str, patience: float, sampling: Sampling | None = None
) -> _Search:
    """`translate_batch` options that give our search's semantics (see the module docstring)."""
    if penalty not in ("gnmt", "length", "none"):
        raise ConfigError(f"unknown length penalty {penalty!r} (gnmt, length, none)")
    if beam > 1 and penalty == "gnmt":
        raise ConfigError(
            "CTranslate2 has no GNMT length penalty ((5 + |Y|) / 6)^alpha for beam search; use "
            "length_penalty='length' (|Y|^alpha, the form both engines share) or 'none'"
        )
    exponent = alpha if penalty == "length" and beam > 1 else 0.0  # greedy: the raw log P, penalised by us
    engine = {
        "beam_size": beam,
        "num_hypotheses": nbest,
        "length_penalty": exponent,
        "patience": patience,
        "return_scores": True,
        "return_end_token": True,
        "min_decoding_length": 0,
        "max_input_length": 0,
    }
    if sampling is not None:  # the engine's names for the same settings
        engine.update(
            sampling_topk=sampling.topk, sampling_topp=sampling.topp, sampling_temperature=sampling.temperature
        )
    return _Search(engine, beam == 1, penalty, alpha)


class CTranslate2Translator:
    """`Translator`'s interface (translate, translate_nbest) on a CTranslate2 export.

    `CTranslate2Translator(folder)` loads a folder written by `export_ctranslate2`; `from_run(path)` accepts either
    such a folder or a run directory (or weights file), which it exports into a temporary folder, loads, and
    deletes (the engine and SentencePiece keep their models in memory). The defaults are the run's [decode]
    settings, except that a run decoding with the GNMT length penalty gets "length" (|Y|^alpha), the form both
    engines share, for beam search (`self.decode` says which).

    Two ways to drive the engine. The default runs at the engine's speed: a whole input in one `translate_batch`
    call (the engine batches and sorts by length itself, `batch_tokens` tokens a batch), patience 1, the maximum
    output length of the longest source. `exact=True` reproduces our search's output: one call per source length
    (each its own maximum) and patience 4 (the engine ends a sentence after beam x patience finished hypotheses;
    4 decodes a little longer and brings it to our search's result, see above). `patience` overrides either.
    Thread-safe as the engine is.
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        decode: DecodeConfig | None = None,
        device: str = "cpu",
        compute_type: str | None = None,
        threads: int = 0,
        exact: bool = False,
        patience: float | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        ct2 = _ctranslate2()
        folder = Path(folder)
        if not is_export(folder):
            raise ExportError(f"{folder}: not a transduce CTranslate2 export (no {MANIFEST})")
        self.manifest = read_manifest(folder) or {}
        self.max_len = self.manifest["model"]["max_len"]
        check_value("model.max_len", self.max_len, name=f"{folder / MANIFEST}: model.max_len", kind=int)
        if decode is None:  # the export's decode settings, read as a run's config.json is (keys, types, bounds)
            decode = config_from_dict({"decode": self.manifest["decode"]}, Config).decode
            if decode.length_penalty == "gnmt":
                decode = dataclasses.replace(decode, length_penalty="length")
        self.decode = decode
        self.tokenizer = tokenizer or load_tokenizer(folder / "tokenizer.model")
        self.pieces = json.loads((folder / "shared_vocabulary.json").read_text(encoding="utf-8"))
        if self.pieces != _pieces(self.tokenizer):
            raise ExportError(f"{folder}: the vocabulary does not match the SentencePiece model")
        self.piece_ids = {piece: i for i, piece in enumerate(self.pieces)}
        self.compute_type = compute_type or _compute_type(ct2, self.manifest.get("quantization"), device)
        self.engine = ct2.Translator(str(folder), device=device, compute_type=self.compute_type, intra_threads=threads)
        self.exact = exact
        self.patience = (4.0 if exact else 1.0) if patience is None else patience

    @classmethod
    def from_run(cls, path: str | Path, *, quantization: str | None = None, **kwargs) -> CTranslate2Translator:
        """An export folder, or a run directory / weights file exported on the fly into a temporary folder."""
        if is_export(path):
            return cls(path, **kwargs)
        with tempfile.TemporaryDirectory(prefix="transduce-ct2-") as tmp:
            folder = export_ctranslate2(path, Path(tmp) / "model", quantization=quantization)
            run_dir, _ = find_weights(path)
            return cls(folder, tokenizer=load_tokenizer(run_dir / "tokenizer.model"), **kwargs)

    def encode_sources(self, sentences: list[str], tag: str = "") -> list[list[int]]:
        """Token ids (without EOS: the engine adds it), tagged and cut as `Translator.encode_sources` does."""
        return self._cut_sources(sentences, tag)[0]

    def _cut_sources(self, sentences: list[str], tag: str = "") -> tuple[list[list[int]], list[int]]:
        return front.source_ids(self.tokenizer, sentences, self.max_len, tag)

    def max_output(self, source_length: int) -> int:
        """Output tokens allowed, EOS included: `search._max_lengths`'s rule, in the same float32 arithmetic."""
        d = self.decode
        length = int(np.float32(d.max_len_a) * np.float32(source_length) + np.float32(d.max_len_b))
        return min(max(length, 1), self.max_len - 1)

    def translate_nbest(self, sentences: list[str], **kwargs) -> list[list[Translation]]:
        """Per sentence, its `nbest` best translations, best first (see `decode_lines`)."""
        return self.decode_lines(sentences, **kwargs).hypotheses

    def decode_lines(
        self,
        sentences: list[str],
        *,
        beam: int | None = None,
        alpha: float | None = None,
        nbest: int = 1,
        batch_tokens: int | None = None,
        length_penalty: str | None = None,
        mbr: str | None = None,
        sampling_topk: int | None = None,
        sampling_topp: float | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        tag: str | None = None,
        split: str = "lines",
        alignment: bool = False,
        progress: bool = False,
    ) -> Decoded:
        """`Translator.decode_lines` (decoding/front.py) on the engine; its patience is this translator's.
        Sampling uses the engine's own sampler and random generator (`ctranslate2.set_random_seed(seed)`): the same
        settings, not the same draws as the torch engine, nor independent of the batching."""
        settings = front.options(
            self.decode,
            beam=beam,
            alpha=alpha,
            nbest=nbest,
            batch_tokens=batch_tokens,
            length_penalty=length_penalty,
            mbr=mbr,
            patience=self.patience,
            sampling_topk=sampling_topk,
            sampling_topp=sampling_topp,
            temperature=temperature,
            seed=seed,
            tag=tag,
            split=split,
            alignment=alignment,
        )
        if settings.sampling is not None:
            _ctranslate2().set_random_seed(settings.sampling.seed)
        search = _search(
            beam=settings.beam,
            nbest=settings.nbest,
            alpha=settings.alpha,
            patience=settings.patience,
            penalty=settings.length_penalty,
            sampling=settings.sampling,
        )

        def decode(sources: list[list[int]], lines: list[int]) -> list[list[Translation]]:  # lines: the engine's RNG
            longest = max(len(ids) for ids in sources)
            return self._decode(sources, self.max_output(longest), settings.batch_tokens, search)

        language = self.manifest.get("languages", {}).get("source", "")
        engine = front.Engine(self.tokenizer, self.max_len, language, decode, self._calls, self.alignments)
        return front.decode_lines(sentences, settings, engine, progress=progress)

    @property
    def can_align(self) -> bool:
        """Whether the export records its alignment layer and heads (exports made before word alignments do not)."""
        return "alignment_layer" in self.manifest["model"]

    def pair_alignments(self, sources: list[str], targets: list[str], *, tag: str = "") -> list[list[tuple[int, int]]]:
        """`Translator.pair_alignments` on the engine."""
        return front.pair_links(self.tokenizer, self.alignments, (sources, targets), max_len=self.max_len, tag=tag)

    def alignments(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[int]]:
        """`Translator.alignments` through the engine's `return_attention` (the export's decoder has the run's
        alignment layer and heads): each target forced as the prefix of a one-step search."""
        if not self.can_align:
            raise ExportError("this export predates word alignments (its alignment heads are unknown): export again")
        results = self.engine.translate_batch(
            [[self.pieces[i] for i in ids] for ids in sources],
            target_prefix=[[self.pieces[i] for i in ids] for ids in targets],
            max_decoding_length=max(map(len, targets), default=0) + 1,
            max_batch_size=self.decode.batch_tokens,
            batch_type="tokens",
            beam_size=1,
            return_attention=True,
            max_input_length=0,
        )
        out = []
        for ids, target, result in zip(sources, targets, results):
            weights = torch.tensor(result.attention[0], dtype=torch.float32)  # (T', S): a row per output token
            out.append(weights[: len(target), : len(ids)].argmax(dim=-1).tolist() if ids else [0] * len(target))
        return out

    def _calls(self, sources: list[list[int]]) -> list[list[int]]:
        """Positions in `sources` per engine call: all in one (the default), or one call per source length, longest
        first (`exact`: each length its own maximum output)."""
        if not self.exact:
            return [list(range(len(sources)))] if sources else []
        groups: dict[int, list[int]] = {}
        for j, ids in enumerate(sources):
            groups.setdefault(len(ids), []).append(j)
        return [groups[length] for length in sorted(groups, reverse=True)]

    def translate(self, sentences: list[str], **kwargs) -> list[str]:
        """Translate raw sentences; returns raw translations in input order (empty input -> empty output)."""
        return [hyps[0].text if hyps else "" for hyps in self.translate_nbest(sentences, **kwargs)]

    def _decode(
        self, sources: list[list[int]], max_output: int, batch_tokens: int, search: _Search
    ) -> list[list[Translation]]:
        """Sources of one length through the engine; hypotheses back to our ids and text."""
        if max_output <= 1:  # only EOS fits: we force it at once, the engine cannot be asked for 0 steps
            return [[Translation("", 0.0, [])] for _ in sources]
        results = self.engine.translate_batch(
            [[self.pieces[i] for i in ids] for ids in sources],
            max_decoding_length=max_output - 1,
            max_batch_size=batch_tokens,
            batch_type="tokens",
            suppress_sequences=self._suppressed(),
            **search.engine,
        )
        eos = self.pieces[self.tokenizer.special.eos]
        out = []
        for result in results:
            hyps = []
            for tokens, score in zip(result.hypotheses, result.scores):
                ids = [self.piece_ids[t] for t in (tokens[:-1] if tokens and tokens[-1] == eos else tokens)]
                hyps.append((ids, search.score(float(score), len(ids) + 1)))  # EOS: generated, or ours forced
            texts = self.tokenizer.decode([ids for ids, _ in hyps])
            out.append([Translation(text, score, ids) for text, (ids, score) in zip(texts, hyps)])
        return out

    def score(
        self,
        sources: list[str],
        targets: list[str],
        *,
        batch_tokens: int | None = None,
        tokens: bool = False,
        tag: str = "",
    ) -> list[PairScore]:
        """`Translator.score` on the engine's `score_batch`: its log-probability of each target token, EOS
        included (the engine adds EOS to both sides), summed."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
        budget = self.decode.batch_tokens if batch_tokens is None else batch_tokens
        results = self.engine.score_batch(
            [[self.pieces[i] for i in ids] for ids in self.encode_sources(sources, tag)],
            [[self.pieces[i] for i in ids[: self.max_len - 2]] for ids in self.tokenizer.encode_target(targets)],
            max_batch_size=budget,
            batch_type="tokens",
            max_input_length=0,
        )
        out = []
        for result in results:
            lp = [float(x) for x in result.log_probs]
            out.append(PairScore(sum(lp), len(lp), sum(lp) / len(lp), lp if tokens else None))
        return out

    def _suppressed(self) -> list[list[str]]:
        """PAD and BOS, which our search never produces either."""
        special = self.tokenizer.special
        return [[self.pieces[special.pad]], [self.pieces[special.bos]]]


def _compute_type(ct2: ModuleType, quantization: str | None, device: str) -> str:
    """The engine's compute type: the exported weight type when the device computes in it, else "default" (the
    engine converts to a type it does compute in, e.g. float16 to float32 on a CPU, and logs a warning)."""
    if quantization is None:
        return "float32"
    if device == "auto":
        device = "cuda" if ct2.get_cuda_device_count() > 0 else "cpu"
    return quantization if quantization in ct2.get_supported_compute_types(device) else "default"
