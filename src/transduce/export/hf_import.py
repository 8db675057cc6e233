"""`transduce import huggingface DIR --out RUN`: a MarianMT folder (an opus-mt model, or any saved with transformers'
`save_pretrained`) becomes a run directory that translate, evaluate, serve, `export ctranslate2`, the Python API and
`train --init-from` take like one of our own.

What is read, and nothing else: config.json (the model's settings), model.safetensors (or the shards that
model.safetensors.index.json lists), vocab.json with source.spm and target.spm (the vocabulary, data/marian.py),
generation_config.json and tokenizer_config.json when present (beam size, languages). A pickled checkpoint
(pytorch_model.bin) is never loaded: a folder that has only that is refused. So is a config whose network ours does
not compute exactly, naming the setting. transformers itself is not needed.

The weights go through hf/layout.py (`from_marian`: names and the permutation of the model width that turns
Marian's sines-then-cosines positions into our interleaved ones), so the run computes Marian's logits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..config import Config, ConfigError, DataConfig, DecodeConfig, ModelConfig, save_config
from ..config.bounds import check_value
from ..data.marian import MarianVocab
from ..data.tokenizer import SpecialIds
from ..hf.layout import LayoutError, from_marian, to_marian
from ..model import Transformer
from ..outputs import OutputError, atomic_folder, read_manifest
from ..runs import save_weights

KIND = "run"  # an imported model is a run directory (its manifest also says where it came from: "imported_from")
WEIGHTS, INDEX, PICKLES = "model.safetensors", "model.safetensors.index.json", ("pytorch_model.bin", "model.bin")
VOCABULARY = ("vocab.json", "source.spm", "target.spm")
ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}  # transformers' name -> ours
# config.json's numbers -> the setting of ours each becomes: checked as that setting is (config/bounds.py), a whole
# number where ours is one (never "32" or 32.5 taken as 32), and named by the file's key
NUMBERS = {
    **dict.fromkeys(("vocab_size", "decoder_vocab_size"), "model.vocab_size"),
    "encoder_layers": "model.n_encoder_layers",
    "decoder_layers": "model.n_decoder_layers",
    "d_model": "model.d_model",
    **dict.fromkeys(("encoder_ffn_dim", "decoder_ffn_dim"), "model.d_ff"),
    **dict.fromkeys(("encoder_attention_heads", "decoder_attention_heads"), "model.n_heads"),
    "max_position_embeddings": "model.max_len",
    "pad_token_id": "model.pad_id",
    "decoder_start_token_id": "model.bos_id",
    "eos_token_id": "model.eos_id",
}
RATES = ("dropout", "attention_dropout", "activation_dropout")  # config.json's, our model.* settings of that name
SWITCHES = ("scale_embedding", "share_encoder_decoder_embeddings", "tie_word_embeddings")  # true or false
WEIGHT_TYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # read into our float32 weights


class HFImportError(ValueError):
    """Not a Marian folder we can read, or a model our network cannot compute exactly; the message says which."""


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise HFImportError(f"{path}: cannot read it ({err.strerror or err})") from None
    except ValueError as err:
        raise HFImportError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise HFImportError(f"{path}: not a JSON object")
    return data


def model_config(folder: Path, config: dict[str, Any]) -> ModelConfig:
    """Our ModelConfig for a Marian config.json; a setting ours cannot represent exactly is refused by name."""
    where = folder / "config.json"
    if config.get("model_type") != "marian":
        raise HFImportError(
            f"{where}: model_type {config.get('model_type')!r} is not a Marian model (MarianMTModel, "
            "model_type 'marian'); transduce imports Marian models only"
        )

    _check_numbers(where, config)

    def same(encoder: str, decoder: str) -> int:
        if config.get(encoder) != config.get(decoder):
            raise HFImportError(
                f"{where}: {encoder} = {config.get(encoder)} but {decoder} = {config.get(decoder)}; "
                "transduce's encoder and decoder share one width of that kind"
            )
        return int(config[encoder])

    try:
        vocab, activation, tied = _representable(where, config)
        layers = int(config["encoder_layers"]), int(config["decoder_layers"])
        return ModelConfig(
            vocab_size=vocab,
            n_layers=max(layers),
            n_encoder_layers=layers[0],
            n_decoder_layers=layers[1],
            d_model=int(config["d_model"]),
            d_ff=same("encoder_ffn_dim", "decoder_ffn_dim"),
            n_heads=same("encoder_attention_heads", "decoder_attention_heads"),
            dropout=float(config.get("dropout", 0.1)),
            attention_dropout=float(config.get("attention_dropout", 0.0)),
            activation_dropout=float(config.get("activation_dropout", 0.0)),
            max_len=int(config["max_position_embeddings"]),
            tie_embeddings=tied,
            pad_id=int(config["pad_token_id"]),
            bos_id=int(config["decoder_start_token_id"]),
            eos_id=int(config["eos_token_id"]),
            activation=activation,
            scale_embeddings=bool(config.get("scale_embedding", False)),
            output_bias=True,
        )
    except KeyError as err:
        raise HFImportError(f"{where}: has no {err.args[0]}") from None
    except (TypeError, ValueError) as err:
        if isinstance(err, HFImportError):
            raise
        raise HFImportError(f"{where}: {err}") from None


def _setting(where: Path, key: str, value: object, setting: str, kind: type = int) -> None:
    """`value`, the file's `key`, checked as our `setting` is (its type and bounds); refused naming file and key."""
    try:
        check_value(setting, value, name=key, kind=kind)
    except ConfigError as err:
        raise HFImportError(f"{where}: {err}") from None


def _check_numbers(where: Path, config: dict[str, Any]) -> None:
    """config.json's numbers (NUMBERS) and switches (SWITCHES), where given, of the types and in the bounds of ours."""
    for key, setting in NUMBERS.items():
        if config.get(key) is not None:
            _setting(where, key, config[key], setting)
    for key in RATES:
        if config.get(key) is not None:
            _setting(where, key, config[key], f"model.{key}", float)
    for key in SWITCHES:
        if key in config and not isinstance(config[key], bool):
            raise HFImportError(f"{where}: {key} must be true or false, got {config[key]!r}")


def _representable(where: Path, config: dict[str, Any]) -> tuple[int, str, bool]:
    """(vocab_size, our activation, tied) of a Marian config.json, refusing the settings ours has no form for."""
    vocab = int(config["vocab_size"])
    if config.get("decoder_vocab_size") not in (None, vocab):
        raise HFImportError(
            f"{where}: decoder_vocab_size = {config['decoder_vocab_size']} differs from vocab_size = {vocab}: "
            "transduce's two sides share one vocabulary"
        )
    activation = ACTIVATIONS.get(str(config.get("activation_function", "swish")))
    if activation is None:
        raise HFImportError(
            f"{where}: activation_function {config.get('activation_function')!r} is not one transduce computes "
            f"({', '.join(ACTIVATIONS)})"
        )
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    tied = bool(config.get("tie_word_embeddings", True))
    if shared != tied:
        raise HFImportError(
            f"{where}: share_encoder_decoder_embeddings = {shared} with tie_word_embeddings = {tied}: "
            "transduce ties all three embeddings or none"
        )
    if config.get("decoder_start_token_id") is None or config.get("eos_token_id") is None:
        raise HFImportError(f"{where}: needs decoder_start_token_id and eos_token_id")
    return vocab, activation, tied


def read_weights(folder: Path, model: ModelConfig) -> tuple[dict[str, torch.Tensor], list[Path]]:
    """The state in model.safetensors, or in the shards its index names, each file's tensors checked
    (`_check_tensors`) against the shapes `model` gives them; refused: only a pickled checkpoint."""
    if (folder / INDEX).is_file():
        shards = sorted({str(v) for v in _json(folder / INDEX).get("weight_map", {}).values()})
        outside = [name for name in shards if Path(name).name != name]
        if outside or not shards:
            raise HFImportError(f"{folder / INDEX}: names no shard, or one outside the folder ({outside[:1]})")
        files = [folder / name for name in shards]
    elif (folder / WEIGHTS).is_file():
        files = [folder / WEIGHTS]
    else:
        pickled = [name for name in PICKLES if (folder / name).is_file()]
        if pickled:
            raise HFImportError(
                f"{folder / pickled[0]}: a pickled checkpoint, which transduce never loads (unpickling runs code); "
                "save the model as model.safetensors (transformers: save_pretrained(..., safe_serialization=True))"
            )
        raise HFImportError(f"{folder}: no {WEIGHTS} here")
    shapes, state = marian_shapes(folder, model), dict[str, torch.Tensor]()
    for path in files:
        try:
            part = load_file(path)
        except (OSError, SafetensorError) as err:
            raise HFImportError(f"{path}: cannot read the weights ({err})") from None
        _check_tensors(path, part, shapes)
        state |= part
    return state, files


def marian_shapes(folder: Path, model: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor of the Marian state `model` has (`to_marian` of a network on the meta device:
    shapes, no memory); a model ours cannot build is refused naming config.json."""
    try:
        with torch.device("meta"):
            state = to_marian(Transformer(model).state_dict(), model)
    except ConfigError as err:
        raise HFImportError(f"{folder / 'config.json'}: {err}") from None
    return {name: tuple(tensor.shape) for name, tensor in state.items()}


def _check_tensors(path: Path, state: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]]) -> None:
    """Every tensor of a weights file a floating-point one (WEIGHT_TYPES: another is refused, never cast), of the
    shape config.json gives it (`shapes`), finite (the README's promise: no NaN or infinite weight is saved), and
    finite in our float32 too."""
    for name, tensor in state.items():
        if tensor.dtype not in WEIGHT_TYPES:
            raise HFImportError(
                f"{path}: {name} is {str(tensor.dtype).removeprefix('torch.')}, not a weight transduce reads "
                "(float16, bfloat16, float32 or float64); it is never converted"
            )
        if name in shapes and tuple(tensor.shape) != shapes[name]:
            raise HFImportError(
                f"{path}: {name} has shape {tuple(tensor.shape)}, but config.json gives it {shapes[name]}"
            )
        if not bool(torch.isfinite(tensor).all()):
            raise HFImportError(f"{path}: {name} holds NaN or infinite values; transduce never saves such weights")
        if tensor.dtype == torch.float64 and not bool(torch.isfinite(tensor.float()).all()):
            raise HFImportError(f"{path}: {name} holds values beyond float32's range, which transduce computes in")


def read_vocabulary(folder: Path, model: ModelConfig, out: Path) -> MarianVocab:
    """vocab.json + source.spm + target.spm -> RUN/tokenizer.model and .json (data/marian.py's layout)."""
    missing = [name for name in VOCABULARY if not (folder / name).is_file()]
    if missing:
        raise HFImportError(f"{folder}: no {', '.join(missing)} (a Marian model's vocabulary) here")
    if (folder / "target_vocab.json").is_file():
        raise HFImportError(
            f"{folder / 'target_vocab.json'}: a second vocabulary for the target side (separate_vocabs); "
            "transduce's two sides share one"
        )
    ids = _json(folder / "vocab.json")
    pieces: list[str | None] = [None] * len(ids)
    for piece, i in ids.items():
        if not isinstance(i, int) or not 0 <= i < len(ids) or pieces[i] is not None:
            raise HFImportError(
                f"{folder / 'vocab.json'}: {piece!r} -> {i!r}: the ids must be 0..{len(ids) - 1}, once each"
            )
        pieces[i] = piece
    if len(pieces) != model.vocab_size:
        raise HFImportError(
            f"{folder / 'vocab.json'}: {len(pieces)} pieces, but config.json's vocab_size is {model.vocab_size}"
        )
    for name, i in (("</s>", model.eos_id), ("<pad>", model.pad_id)):
        if pieces[i] != name:
            raise HFImportError(f"{folder / 'vocab.json'}: id {i} is {pieces[i]!r}, config.json says it is {name}")
    unk = ids.get("<unk>")
    if not isinstance(unk, int):
        raise HFImportError(f"{folder / 'vocab.json'}: has no <unk>")
    special = SpecialIds(pad=model.pad_id, unk=unk, bos=model.bos_id, eos=model.eos_id)
    source, target = ((folder / name).read_bytes() for name in VOCABULARY[1:])
    return MarianVocab.write(
        out / "tokenizer.model", source=source, target=target, pieces=[str(p) for p in pieces], special=special
    )


def _languages(folder: Path, src: str | None, tgt: str | None) -> tuple[str, str]:
    """--src and --tgt, else tokenizer_config.json's source_lang and target_lang, which are checked as data.src and
    data.tgt are (DataConfig's rule), naming the file and the key."""
    path = folder / "tokenizer_config.json"
    settings = _json(path) if path.is_file() else {}
    found = []
    for given, key, side in ((src, "source_lang", "src"), (tgt, "target_lang", "tgt")):
        value = given or settings.get(key)
        if value is None or value == "":
            raise HFImportError(
                f"{folder}: which languages it translates is not recorded (tokenizer_config.json's source_lang and "
                "target_lang); give --src and --tgt"
            )
        if not given:
            try:
                DataConfig(src=value) if side == "src" else DataConfig(tgt=value)
            except ConfigError as err:
                raise HFImportError(f"{path}: {key} = {value!r:.40}: {err}") from None
        found.append(value)
    return found[0], found[1]


def _decode_settings(folder: Path) -> DecodeConfig:
    """The folder's beam size; transformers' length penalty is score / length^alpha ("length", alpha 1.0). Each
    value is checked as the decode.* setting it becomes, named by the file and its key."""
    path = folder / "generation_config.json"
    settings = _json(path) if path.is_file() else {}
    beam, alpha = settings.get("num_beams"), settings.get("length_penalty")
    beam, alpha = 4 if beam is None else beam, 1.0 if alpha is None else alpha
    _setting(path, "num_beams", beam, "decode.beam")
    _setting(path, "length_penalty", alpha, "decode.alpha", float)
    return DecodeConfig(beam=beam, alpha=float(alpha), length_penalty="length")


def check_destination(out: Path) -> None:
    """RUN must be new, an empty folder or an earlier import: a trained run is never replaced by an import."""
    manifest = read_manifest(out) if out.is_dir() else None
    if manifest is not None and manifest.get("kind") == KIND and "imported_from" not in manifest:
        raise OutputError(f"{out}: holds a run trained by transduce; import into a new folder")


def import_huggingface(folder: str | Path, out: str | Path, *, src: str | None = None, tgt: str | None = None) -> Path:
    """Import the Marian model in `folder` into the run directory `out` (written beside it, then renamed; an
    existing `out` must be empty or an earlier import). Returns `out`."""
    folder, out = Path(folder), Path(out)
    if not (folder / "config.json").is_file():
        raise HFImportError(f"{folder}: no config.json here (not a Hugging Face model folder)")
    check_destination(out)
    model = model_config(folder, _json(folder / "config.json"))
    languages = _languages(folder, src, tgt)
    state, files = read_weights(folder, model)
    if "final_logits_bias" not in state or not bool(state["final_logits_bias"].ne(0).any()):
        model = dataclasses.replace(model, output_bias=False)  # no bias to keep: our plain projection
    try:
        network = Transformer(model)
        network.load_state_dict(from_marian(state, model))
    except (LayoutError, RuntimeError, ConfigError) as err:
        raise HFImportError(f"{folder}: the weights do not fit config.json ({str(err).splitlines()[0]})") from None
    digests = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in files}
    data = DataConfig(src=languages[0], tgt=languages[1], vocab_size=max(5, model.vocab_size))
    config = Config(model=model, data=data, decode=_decode_settings(folder))
    imported = {"folder": str(folder.absolute()), "sha256": digests}
    with atomic_folder(out, KIND, task="translation", imported_from=imported) as tmp:
        read_vocabulary(folder, model, tmp)
        save_config(config, tmp / "config.json")
        save_weights(network, tmp / "best.safetensors")
    return out
