"""Export a translation run as Argos Translate packages (`transduce export argos RUN --out NAME.argosmodel`).

What Argos Translate expects, read in argos-translate-lt 1.12.1 (the Argos that LibreTranslate 1.9.6 pins; its
package.py, translate.py, tokenizer.py, sbd.py, settings.py):
    - a zip file: `package.install_from_path` checks `zipfile.is_zipfile` and extracts the whole archive into its
      packages folder ($ARGOS_PACKAGES_DIR, else $XDG_DATA_HOME/argos-translate/packages); every folder there is a
      package, so the zip holds one top-level folder;
    - in it `metadata.json`: from_code, to_code (the pair; LibreTranslate routes `source`/`target` on them),
      from_name, to_name (shown in lists), package_version (LibreTranslate's updater replaces an installed package
      of a pair by its index's when the index's version is higher), argos_version (read, never compared), type
      ("translate" by default). Optional `target_prefix`: one token forced first on the TARGET side and stripped
      from the output. Argos puts nothing before the source;
    - `model/`: a CTranslate2 folder, `ctranslate2.Translator(model/, device="cpu", inter_threads=1,
      intra_threads=0)`, in the model's own weight type unless ARGOS_COMPUTE_TYPE says otherwise;
    - `sentencepiece.model` (else a `bpe.model`): ONE model for both sides. A sentence is `encode(text,
      out_type=str)` as it is (no lowercasing, no tag); the output is `decode_pieces(pieces)` with every "▁" and
      every "_" then replaced by a space, one leading space dropped;
    - optionally README.md (its description) and a sentence splitter's model (minisbd/, stanza/ or spacy/).
How it translates: the text is split on "\\n"; each line into sentences by MiniSBD (an ONNX model of the source
language, downloaded on first use; English where it has none); a line's sentences go through one
`translate_batch(pieces, beam_size=4 (ARGOS_BEAM_SIZE), num_hypotheses=1, length_penalty=0.2, replace_unknowns=True,
max_batch_size=32 (ARGOS_BATCH_SIZE) tokens, return_scores=True)`, the engine's defaults for the rest: at most 256
output tokens (`max_decoding_length`), at least 1, sources cut at 1024, patience 1, no token suppressed, the end token
not returned (so |Y| in log P / |Y|^0.2 does not count EOS); the sentences' pieces are decoded as one.

So a package is the run's CTranslate2 export (model/, with its transduce manifest), the run's tokenizer.model as
sentencepiece.model, metadata.json (codes: the run's languages; names: LANGUAGE_NAMES, else the code;
package_version the export's date, YYYY.M.D, above the index's 1.x so that LibreTranslate never swaps it for the
index's package of the pair) and a README.md model card, in a zip whose one folder is NAME. A tag (data.corpora's,
`translate --tag`'s) goes first in every source through the ENGINE: model/config.json's `add_source_bos` with
`bos_token` the tag (CTranslate2 prepends it, the decoder still starts from `decoder_start_token`; on a two-tag toy
run, the same tokens and scores as `translate --tag` wherever neither search reached its length limit). So a run whose
every corpus is tagged (multilingual) gives one package per tag, its pair the tagged corpus's languages; `--tag`
makes the one package of one tag. Where Argos's output differs from `transduce translate --engine ctranslate2 --beam
4 --alpha 0.2 --length-penalty length`: its sentence splitter; "_" read as a space; an unknown piece replaced by the
source piece it attends to most (ours: " ⁇ "); at least one token (ours may end at once, empty); PAD and BOS not
suppressed and |Y| without EOS (a beam may rank otherwise); the 256-token limit, and a run whose positions
(model.max_len) are fewer than a translation needs fails there (CTranslate2: "No position encodings ...").
Refused, one line naming each reason: a run of another task; a vocabulary Argos cannot apply (two SentencePiece
models, as a Marian import's; lowercasing or another setting of ours); a Marian model's `>>xx<<` tokens without
`--tag`; a destination that exists and is not a package of ours, or is not named NAME.argosmodel.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import tempfile
import zipfile
from pathlib import Path

from ..config import Config, ConfigError, read_config, task_name
from ..data.marian import MarianVocab, load_tokenizer
from ..data.tokenizer import Tokenizer, TokenizerError
from ..outputs import MANIFEST, OutputError, atomic_write
from ..runs import check_tokenizer, find_weights
from .ctranslate2 import QUANTIZATIONS, ExportError, export_ctranslate2
from .huggingface import TOKENIZER_SETTINGS
from .model_card import run_record

SUFFIX = ".argosmodel"
MARK = b"transduce argos-package 1"  # the zip's comment: how a later export knows the file is ours to replace
ARGOS_VERSION = "1.0"  # the format's version as Argos's own example metadata.json writes it (package.py)
# Argos's fixed decoding (translate.py's apply_packaged_translation; settings.py's defaults)
ARGOS_BEAM, ARGOS_LENGTH_PENALTY, ARGOS_MAX_OUTPUT = 4, 0.2, 256
# The codes of Argos Translate's package index and LibreTranslate, with English names (a code not here is its own
# name in metadata.json). "pb" and "zt" are Argos's own codes for Brazilian Portuguese and traditional Chinese.
LANGUAGE_NAMES = {
    "ar": "Arabic", "az": "Azerbaijani", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech",
    "da": "Danish", "de": "German", "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fr": "French", "ga": "Irish",
    "gl": "Galician", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "ky": "Kyrgyz", "lt": "Lithuanian", "lv": "Latvian", "ms": "Malay",
    "nb": "Norwegian", "nl": "Dutch", "pb": "Portuguese (Brazil)", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sv": "Swedish",
    "th": "Thai", "tl": "Tagalog", "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese",
    "zh": "Chinese", "zt": "Chinese (traditional)",
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Package:
    """One package to write: its file, the tag every source starts with ("" for none), its language pair."""

    out: Path
    tag: str
    source: str
    target: str


# The destination ------------------------------------------------------------------------------------------------------
def is_package(path: str | Path) -> bool:
    """True for a file written by `export_argos` (a zip whose comment is our mark)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.comment == MARK
    except (OSError, zipfile.BadZipFile):
        return False


def check_destination(out: Path) -> None:
    """Refuse a name Argos does not install by, or an existing entry that is not a package of ours."""
    if out.suffix != SUFFIX:
        raise ExportError(f"{out}: an Argos Translate package is a file NAME{SUFFIX}; give --out such a name")
    if out.is_symlink() or out.is_dir():
        raise OutputError(f"{out}: exists and is not a file; nothing was changed: choose another name")
    if out.exists() and not is_package(out):
        raise OutputError(
            f"{out}: exists and was not made by transduce export argos; nothing was changed: choose another name"
        )


def package_metadata(path: str | Path) -> dict:
    """The metadata.json of a package file (its one top-level folder's)."""
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/metadata.json"))
        return json.loads(archive.read(name).decode("utf-8"))


# What Argos can run ---------------------------------------------------------------------------------------------------
def check_exportable(config, tokenizer: Tokenizer | None) -> None:
    """Refuse, in one line naming every reason, a run whose translations Argos Translate cannot reproduce."""
    if not isinstance(config, Config):
        raise ExportError(
            f"cannot export to Argos Translate: the run is a {task_name(config)} run; Argos Translate packages "
            "hold translation models"
        )
    problems = _tokenizer_problems(tokenizer) if tokenizer is not None else []
    if problems:
        raise ExportError("cannot export to Argos Translate: " + "; ".join(problems))


def _tokenizer_problems(tokenizer: Tokenizer) -> list[str]:
    if isinstance(tokenizer, MarianVocab):
        if tokenizer.target.serialized_model_proto() != tokenizer.sp.serialized_model_proto():
            return [
                "the run's vocabulary has two SentencePiece models (source and target: a Marian import), and an "
                "Argos Translate package holds one sentencepiece.model for both sides"
            ]
        return []
    problems = []
    if tokenizer.lowercase:
        problems.append("data.lowercase = true: Argos Translate gives SentencePiece the text as it is")
    ours = TOKENIZER_SETTINGS | {"tags"}  # tags: put first by the engine (plan)
    other = sorted(k for k, v in tokenizer.meta.items() if k not in ours and v not in (None, False, "", []))
    if other:
        problems.append(
            f"the tokenizer setting {', '.join(other)} (tokenizer.json): Argos Translate has no counterpart"
        )
    return problems


# Which packages -------------------------------------------------------------------------------------------------------
def plan(config: Config, tokenizer: Tokenizer, out: Path, tag: str | None = None) -> list[Package]:
    """The packages of a run: the one of `tag` when given; else one per tag when every training corpus is tagged
    (a multilingual run; NAME-TAG.argosmodel, TAG without < > and the like); else one, untagged."""
    if tag:
        _check_tag(tokenizer, tag)
        return [Package(out, tag, *_pair(config, tag))]
    tags = _required_tags(config, tokenizer)
    if not tags:
        return [Package(out, "", config.data.src, config.data.tgt)]
    packages = [Package(out.with_name(f"{out.stem}-{_slug(t)}{SUFFIX}"), t, *_pair(config, t)) for t in tags]
    if len({p.out for p in packages}) < len(packages) or not all(_slug(t) for t in tags):
        raise ExportError(f"the tags {', '.join(tags)} do not name one file each: give --tag (one package per tag)")
    return packages


def _required_tags(config: Config, tokenizer: Tokenizer) -> tuple[str, ...]:
    """The tags a source must start with: every corpus's when all are tagged; none when the run also trained on
    untagged sources (back-translation's `<bt>` beside genuine pairs: untagged input is the model's own)."""
    data = config.data
    tagged = [c.tag for c in data.corpora]
    if tagged and all(tagged) and not data.train:
        return tuple(dict.fromkeys(tagged))
    if isinstance(tokenizer, MarianVocab) and tokenizer.tags:
        shown = ", ".join(tokenizer.tags[:4]) + (", ..." if len(tokenizer.tags) > 4 else "")
        raise ExportError(
            f"the Marian vocabulary has target-language tokens ({shown}), one of which goes first in each source: "
            "give --tag (one package per tag)"
        )
    return ()


def _check_tag(tokenizer: Tokenizer, tag: str) -> None:
    try:
        tokenizer.tag_id(tag)  # one token of the vocabulary, as `translate --tag` requires
    except TokenizerError as err:
        raise ConfigError(str(err)) from None


def _pair(config: Config, tag: str) -> tuple[str, str]:
    """The languages of the corpus that carries `tag`; a Marian `>>xx<<` token's target; else the run's."""
    data = config.data
    for corpus in data.corpora:
        if corpus.tag == tag:
            return corpus.src or data.src, corpus.tgt or data.tgt
    if tag.startswith(">>") and tag.endswith("<<") and len(tag) > 4:
        return data.src, tag[2:-2]
    return data.src, data.tgt


def _slug(tag: str) -> str:
    return "".join(c for c in tag if c.isalnum() or c in "_-")


# The packages ---------------------------------------------------------------------------------------------------------
def metadata(package: Package, *, today: datetime.date | None = None) -> dict:
    """metadata.json: the pair, its names, the package's version (the export's date, UTC)."""
    day = today or datetime.datetime.now(datetime.timezone.utc).date()
    return {
        "package_version": f"{day.year}.{day.month}.{day.day}",
        "argos_version": ARGOS_VERSION,
        "type": "translate",
        "from_code": package.source,
        "from_name": LANGUAGE_NAMES.get(package.source, package.source),
        "to_code": package.target,
        "to_name": LANGUAGE_NAMES.get(package.target, package.target),
    }


def export_argos(
    run: str | Path, out: str | Path, *, quantization: str | None = None, tag: str | None = None
) -> list[Path]:
    """Write the Argos Translate packages of a run (its best weights, else the newest checkpoint; or a weights file
    inside it): `plan`'s, each a file NAME.argosmodel holding one folder NAME. `quantization`: as
    `export_ctranslate2` (None keeps float32; Argos's own packages are int8). Each file is written beside its name
    under a temporary one and renamed into place; an existing file is replaced only when it is a package of ours
    (all are checked before the work). Returns the files written."""
    out = Path(out)
    check_destination(out)  # refuse early, before the work
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization {quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    run_dir, weights = find_weights(run)
    config = read_config(run_dir / "config.json")
    check_exportable(config, None)  # the task first: a parsing run's tokenizer is not read
    check_tokenizer(run_dir)  # the vocabulary the weights were trained with
    tokenizer = load_tokenizer(run_dir / "tokenizer.model")
    check_exportable(config, tokenizer)
    packages = plan(config, tokenizer, out, tag)
    for package in packages:
        check_destination(package.out)
    with tempfile.TemporaryDirectory(prefix="transduce-argos-") as tmp:
        model = export_ctranslate2(weights, Path(tmp) / "model", quantization=quantization)
        for package in packages:
            meta = metadata(package)
            card = model_card(
                run_dir, config, weights=Path(weights), meta=meta, quantization=quantization, tag=package.tag
            )
            files = {**_model_files(model, package), "sentencepiece.model": tokenizer.path}
            files |= {"metadata.json": _json(meta), "README.md": card.encode("utf-8")}
            atomic_write(package.out, lambda path, files=files, package=package: _zip(files, path, package.out))
    return [package.out for package in packages]


def _json(data: dict) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _model_files(model: Path, package: Package) -> dict[str, Path | bytes]:
    """model/: the export's files; with a tag, its config.json asks the engine to put the tag before every source
    (and the manifest says so, with the package's pair)."""
    files: dict[str, Path | bytes] = {
        f"model/{p.relative_to(model).as_posix()}": p for p in model.rglob("*") if p.is_file()
    }
    if package.tag:
        config = json.loads((model / "config.json").read_text(encoding="utf-8"))
        files["model/config.json"] = _json({**config, "add_source_bos": True, "bos_token": package.tag})
    manifest = json.loads((model / MANIFEST).read_text(encoding="utf-8"))
    manifest["languages"] = {"source": package.source, "target": package.target}
    files[f"model/{MANIFEST}"] = _json({**manifest, "source_tag_by_engine": package.tag})
    return files


def _zip(files: dict[str, Path | bytes], path: str, out: Path) -> None:
    """The zip of `files` under one folder named after `out`, marked ours; `out` checked again before the rename."""
    folder = out.stem
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.comment = MARK
        for name in sorted(files):
            content = files[name]
            if isinstance(content, Path):
                archive.write(content, f"{folder}/{name}")
            else:
                entry = zipfile.ZipInfo(f"{folder}/{name}", datetime.datetime.now().timetuple()[:6])
                entry.external_attr = 0o644 << 16  # rw-r--r-- where unzip applies modes (writestr's default: 0600)
                archive.writestr(entry, content, compress_type=zipfile.ZIP_DEFLATED)
    check_destination(out)  # made meanwhile by someone else: refused, and the temporary file goes


# The model card -------------------------------------------------------------------------------------------------------
def model_card(
    run_dir: Path, config: Config, *, weights: Path, meta: dict, quantization: str | None, tag: str | None
) -> str:
    """README.md: what the package holds, how to install it, how Argos decodes with it, then the run's record."""
    m, d = config.model, config.decode
    src, tgt = meta["from_code"], meta["to_code"]
    penalty = {"length": f"|Y|^{d.alpha:g}", "gnmt": f"((5 + |Y|) / 6)^{d.alpha:g}", "none": "none"}
    notes = [f"Every source starts with the tag `{tag}` (model/config.json: CTranslate2 puts it first)."] if tag else []
    if m.max_len < ARGOS_MAX_OUTPUT:
        notes.append(
            f"This model has {m.max_len} positions: a translation that reaches them fails in Argos (CTranslate2: "
            '"No position encodings are defined for positions >= ...").'
        )
    head = f"""# {meta["from_name"]} → {meta["to_name"]} ({src} → {tgt}): an Argos Translate package made by transduce

A Transformer ("Attention Is All You Need"; {m.encoder_layers} encoder and {m.decoder_layers} decoder layers,
d_model {m.d_model}, {m.n_heads} heads) trained with transduce. `model/` is the run's CTranslate2 export
({quantization or "float32"}), `sentencepiece.model` its SentencePiece vocabulary ({m.vocab_size} pieces, both
languages), `metadata.json` the pair (package version {meta["package_version"]}).

## Install

```
python -c "import argostranslate.package as p; p.install_from_path('PACKAGE.argosmodel')"
argos-translate --from-lang {src} --to-lang {tgt} "A sentence to translate."
libretranslate --load-only {src},{tgt}     # LibreTranslate serves the packages installed there
```

## How Argos Translate decodes it

Sentences split by Argos's splitter (MiniSBD), beam {ARGOS_BEAM}, length penalty log P / |Y|^{ARGOS_LENGTH_PENALTY}
(|Y| without EOS), at least one and at most {ARGOS_MAX_OUTPUT} tokens, an unknown piece replaced by the source piece
it attends to most, "_" read as a space: fixed by Argos Translate.{"".join(" " + note for note in notes)}
The run's own settings (`transduce translate`): beam {d.beam}, length penalty {penalty[d.length_penalty]}, at most
{d.max_len_a:g} x |source| + {d.max_len_b} tokens.
"""
    return head + "\n" + run_record(run_dir, config, weights=weights)
