"""Export a transduce translation run as a Hugging Face Transformers model folder (`transduce export huggingface`).

`export_huggingface(run, out)` writes what `MarianMTModel.from_pretrained(out)` (a post-LN run) or
`PegasusForConditionalGeneration.from_pretrained(out)` (a pre-LN run; `AutoModelForSeq2SeqLM` picks either) and
`AutoTokenizer.from_pretrained(out)` (a `MarianTokenizer`) load with no code of ours:
    - config.json, generation_config.json, model.safetensors: built by transformers itself (the model is
      instantiated from its config, given our weights through `hf.layout.to_marian`, checked to hold every tensor,
      and saved with `save_pretrained`); float32;
    - source.spm, target.spm (the run's SentencePiece model, twice: one vocabulary for both sides), vocab.json
      (piece -> id, our ids: PAD 0, UNK 1, BOS 2, EOS 3), tokenizer_config.json, written by MarianTokenizer; for a
      run imported from a Marian model (export/hf_import.py), its own vocab.json, source.spm and target.spm;
    - README.md, a model card: the run's recipe, its data and the figures its run directory recorded
      (export/model_card.py).

How our model maps onto the classes (the weight layout is hf/layout.py's; the settings are the config's):
    - post-LN is MarianMTModel, pre-LN PegasusForConditionalGeneration (its stacks end in a LayerNorm, as ours);
    - model.activation is `activation_function` (relu, Eq. 2, by default), model.scale_embeddings
      `scale_embedding` (true: times sqrt(d_model)), the sinusoidal table (the width permutation makes theirs ours),
      model.output_bias `final_logits_bias` (zero without it), LayerNorm eps
      1e-5 (torch's default, which both classes use and cannot change);
    - tied embeddings are `share_encoder_decoder_embeddings=True, tie_word_embeddings=True`; untied (three matrices)
      are Marian's `share_encoder_decoder_embeddings=False, tie_word_embeddings=False` (Pegasus always shares the
      encoder's and decoder's embeddings: a pre-LN untied run is refused);
    - special ids, the model's (model.pad_id, eos_id, bos_id): `pad_token_id` PAD, `eos_token_id` and
      `forced_eos_token_id` EOS, `decoder_start_token_id` BOS (ours start from BOS; Marian's opus-mt models, and so
      runs imported from them, from PAD);
    - decoding defaults (generation_config.json) are the run's [decode] settings where `generate` has them: the
      beam, the "length" penalty |Y|^alpha as `length_penalty=alpha` (|Y| counts EOS in both; "none" is 0; "gnmt"
      has no counterpart and is exported as "length", the model card says so), PAD and BOS suppressed
      (`suppress_tokens`, applied after the log-softmax in beam search, as ours), `early_stopping="never"` (a
      sentence ends when no unfinished hypothesis can beat its finished ones: our stop), `max_length` the model's
      positions. Our maximum output, max_len_a * |x| + max_len_b tokens, is one number per call in `generate`
      (`max_new_tokens`).
Refused, each naming the setting (`check_exportable`): restricted attention, learned positions, a LayerNorm eps
other than 1e-5, special ids that are not the vocabulary's, lowercasing or another tokenizer setting
MarianTokenizer lacks, untied pre-LN embeddings, a vocabulary that is not the model's, a run that is not a
translation run.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import warnings
from pathlib import Path
from types import ModuleType

import torch

from ..config import Config, ModelConfig, read_config, task_name
from ..data.marian import MarianVocab, load_tokenizer
from ..data.tokenizer import Tokenizer
from ..hf.layout import PEGASUS, model_class, to_marian
from ..model import Transformer
from ..outputs import HF_EXPORT, atomic_folder, check_replaceable, read_manifest
from ..runs import check_tokenizer, find_weights, load_weights
from .ctranslate2 import ExportError, special_id_problems
from .model_card import model_card

KIND = HF_EXPORT  # the kind in the folder's transduce-manifest.json (see transduce.outputs)
FORMAT_VERSION = 1
INSTALL_HINT = "pip install 'transduce[hf]' (or: pip install 'transformers>=5,<6')"
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default: what MarianMTModel and Pegasus use, with no setting for it
# the settings Tokenizer.train records (tokenizer.json); another one would change the text before SentencePiece
TOKENIZER_SETTINGS = {"lowercase", "model_type", "vocab_size", "split_digits", "pad_id", "unk_id", "bos_id", "eos_id"}


def _transformers() -> ModuleType:
    """The optional `transformers` package (5.x), or an ExportError that says how to install it."""
    try:
        module = importlib.import_module("transformers")
    except ImportError:
        raise ExportError(f"exporting to Hugging Face needs the transformers package: {INSTALL_HINT}") from None
    if int(module.__version__.split(".")[0]) != 5:
        raise ExportError(
            f"exporting to Hugging Face needs transformers 5.x, found {module.__version__}: {INSTALL_HINT}"
        )
    return module


# What the classes can express ----------------------------------------------------------------------------------------
def check_exportable(config, tokenizer: Tokenizer | None) -> None:
    """Refuse, in one line naming every setting, a run that MarianMTModel or Pegasus cannot compute exactly."""
    if not isinstance(config, Config):
        raise ExportError(
            f"cannot export to Hugging Face: the run is a {task_name(config)} run; only translation runs have a "
            "MarianMT counterpart"
        )
    problems = _model_problems(config.model)
    if tokenizer is not None:
        problems += _tokenizer_problems(config.model, tokenizer)
    if problems:
        raise ExportError("cannot export to Hugging Face: " + "; ".join(problems))


def _model_problems(model: ModelConfig) -> list[str]:
    problems = []
    if model.attention_window is not None:
        problems.append(
            f"model.attention_window = {model.attention_window} (restricted self-attention): "
            "MarianMTModel and Pegasus attend to every position"
        )
    if model.positional != "sinusoidal":
        problems.append(f"model.positional = {model.positional!r}: MarianMTModel and Pegasus have sinusoidal positions")
    if model.layer_norm_eps != LAYER_NORM_EPS:
        problems.append(
            f"model.layer_norm_eps = {model.layer_norm_eps:g}: MarianMTModel and Pegasus use {LAYER_NORM_EPS:g}"
        )
    if model.norm_first and not model.tie_embeddings:
        problems.append(
            "model.tie_embeddings = false with model.norm_first = true: Pegasus (the pre-LN class) shares one "
            "matrix between the encoder's and the decoder's embeddings"
        )
    return problems


def _tokenizer_problems(model: ModelConfig, tokenizer: Tokenizer) -> list[str]:
    problems = []
    problems += special_id_problems(model, tokenizer)
    if isinstance(tokenizer, MarianVocab):  # an imported Marian vocabulary: its own files go back out as they came
        return problems + ([] if tokenizer.vocab_size == model.vocab_size else [_sizes(tokenizer, model)])
    if tokenizer.lowercase:
        problems.append("data.lowercase = true: MarianTokenizer does not lowercase its input")
    other = sorted(
        k for k, v in tokenizer.meta.items() if k not in TOKENIZER_SETTINGS and v not in (None, False, "", [])
    )
    if other:
        problems.append(
            f"the tokenizer setting {', '.join(other)} (tokenizer.json): MarianTokenizer has no counterpart"
        )
    if tokenizer.vocab_size != model.vocab_size:
        problems.append(_sizes(tokenizer, model))
    pieces = _pieces(tokenizer)
    if len(set(pieces)) != len(pieces):
        problems.append("the SentencePiece model has duplicate pieces: vocab.json maps pieces to ids")
    return problems


def _sizes(tokenizer: Tokenizer, model: ModelConfig) -> str:
    return f"the tokenizer has {tokenizer.vocab_size} pieces, the model {model.vocab_size}"


def _pieces(tokenizer: Tokenizer) -> list[str]:
    return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]


# The model and its configs -------------------------------------------------------------------------------------------
def hf_config(transformers: ModuleType, model: ModelConfig):
    """The MarianConfig (post-LN) or PegasusConfig (pre-LN) of our model."""
    settings = {
        "vocab_size": model.vocab_size,
        "d_model": model.d_model,
        "encoder_layers": model.encoder_layers,
        "decoder_layers": model.decoder_layers,
        "encoder_ffn_dim": model.d_ff,
        "decoder_ffn_dim": model.d_ff,
        "encoder_attention_heads": model.n_heads,
        "decoder_attention_heads": model.n_heads,
        "max_position_embeddings": model.max_len,
        "activation_function": model.activation,  # relu (Eq. 2), swish or gelu: the same names in transformers
        "scale_embedding": model.scale_embeddings,  # §3.4: embeddings times sqrt(d_model), unless set otherwise
        "dropout": model.dropout,
        "attention_dropout": model.attention_dropout,
        "activation_dropout": model.activation_dropout,
        "pad_token_id": model.pad_id,
        "bos_token_id": model.bos_id,
        "eos_token_id": model.eos_id,
        "forced_eos_token_id": model.eos_id,
        "decoder_start_token_id": model.bos_id,
        "tie_word_embeddings": model.tie_embeddings,
    }
    if model_class(model) == PEGASUS:
        return transformers.PegasusConfig(**settings)
    return transformers.MarianConfig(
        decoder_vocab_size=model.vocab_size, share_encoder_decoder_embeddings=model.tie_embeddings, **settings
    )


def generation_settings(config: Config) -> dict:
    """generation_config.json: the run's [decode] settings where `generate` has them (see the module docstring)."""
    decode, model = config.decode, config.model
    return {
        "decoder_start_token_id": model.bos_id,
        "bos_token_id": model.bos_id,
        "eos_token_id": model.eos_id,
        "pad_token_id": model.pad_id,
        "forced_eos_token_id": model.eos_id,
        "suppress_tokens": sorted({model.pad_id, model.bos_id}),
        "num_beams": decode.beam,
        "length_penalty": 0.0 if decode.length_penalty == "none" else decode.alpha,
        "early_stopping": True if decode.patience == 1 else "never",
        "max_length": config.model.max_len,
    }


def build_model(model: Transformer, transformers: ModuleType | None = None):
    """A transformers model (MarianMTModel or PegasusForConditionalGeneration) holding our model's weights."""
    transformers = transformers or _transformers()
    config = model.config
    hf = getattr(transformers, model_class(config))(hf_config(transformers, config))
    state = to_marian({k: v.detach().to("cpu", torch.float32) for k, v in model.state_dict().items()}, config)
    result = hf.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:  # the layout and the class disagree: a bug, not the user's
        raise RuntimeError(f"weights do not fit {type(hf).__name__}: {result}")
    hf.tie_weights()
    return hf.eval()


# Export --------------------------------------------------------------------------------------------------------------
def is_export(path: str | Path) -> bool:
    """True for a folder written by `export_huggingface` (its manifest says so)."""
    manifest = read_manifest(path)
    return manifest is not None and manifest["kind"] == KIND


def export_huggingface(run: str | Path, out: str | Path) -> Path:
    """Export a run (its best weights, else the newest checkpoint; or a weights file inside it) to folder `out`.

    Nothing a user already has is overwritten (as `export_ctranslate2`): the folder is written under a temporary
    name beside `out` and renamed into place; an existing `out` is replaced only when it is an earlier Hugging Face
    export of ours (it holds our manifest) or an empty folder, else OutputError. Returns `out`.
    """
    transformers = _transformers()
    out = Path(out)
    check_replaceable(out, KIND)  # refuse early, before the work
    run_dir, weights = find_weights(run)
    config = read_config(run_dir / "config.json")
    check_exportable(config, None)  # the settings first: a parsing run's tokenizer is not read
    check_tokenizer(run_dir)  # the vocabulary the weights were trained with
    tokenizer = load_tokenizer(run_dir / "tokenizer.model")
    check_exportable(config, tokenizer)
    model = Transformer(config.model)
    load_weights(model, weights)
    hf = build_model(model.eval(), transformers)
    hf.generation_config = transformers.GenerationConfig(**generation_settings(config))
    manifest = {
        "version": FORMAT_VERSION,
        "run": str(run_dir.resolve()),
        "weights": str(Path(weights).resolve()),
        "class": type(hf).__name__,
        "transformers": transformers.__version__,
        "model": dataclasses.asdict(config.model),
        "decode": dataclasses.asdict(config.decode),
        "languages": {"source": config.data.src, "target": config.data.tgt},
        "parameters": model.num_parameters(),
    }
    with atomic_folder(out, KIND, **manifest) as tmp:  # refuses a destination that is not an export of ours
        hf.save_pretrained(tmp)
        _save_tokenizer(transformers, tokenizer, config, tmp)
        card = model_card(run_dir, config, weights=Path(weights), hf_class=type(hf).__name__, model=model)
        (tmp / "README.md").write_text(card, encoding="utf-8")
    return out


def _save_tokenizer(transformers: ModuleType, tokenizer: Tokenizer, config: Config, folder: Path) -> None:
    """source.spm and target.spm (our SentencePiece model), vocab.json (our ids), tokenizer_config.json; an
    imported Marian vocabulary's own three files (data/marian.py)."""
    if isinstance(tokenizer, MarianVocab):
        for name, data in tokenizer.marian_files().items():
            (folder / name).write_bytes(data)
    else:
        (folder / "vocab.json").write_text(
            json.dumps({piece: i for i, piece in enumerate(_pieces(tokenizer))}, ensure_ascii=False, indent=1) + "\n",
            encoding="utf-8",
        )
        for name in ("source.spm", "target.spm"):
            (folder / name).write_bytes(tokenizer.path.read_bytes())
    with warnings.catch_warnings():  # "Recommended: pip install sacremoses" (its normalizer is not used to encode)
        warnings.simplefilter("ignore")
        hf_tokenizer = _marian_tokenizer(transformers, tokenizer, config, folder)
    hf_tokenizer.save_pretrained(str(folder))


def _marian_tokenizer(transformers: ModuleType, tokenizer: Tokenizer, config: Config, folder: Path):
    pieces, special = _pieces(tokenizer), tokenizer.special
    # our BOS is special: `decode(..., skip_special_tokens=True)` drops it; a Marian vocabulary starts from its pad
    bos = {} if special.bos == special.pad else {"bos_token": pieces[special.bos]}
    return transformers.MarianTokenizer(
        source_spm=str(folder / "source.spm"),
        target_spm=str(folder / "target.spm"),
        vocab=str(folder / "vocab.json"),
        source_lang=config.data.src,
        target_lang=config.data.tgt,
        unk_token=pieces[special.unk],
        eos_token=pieces[special.eos],
        pad_token=pieces[special.pad],
        **bos,
        model_max_length=config.model.max_len - 1,  # pieces + EOS, as `front.cut_sources` cuts a source
        clean_up_tokenization_spaces=False,
        split_special_tokens=True,  # the text "</s>" is characters, as SentencePiece reads it, not EOS
    )
