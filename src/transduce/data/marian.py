"""A Marian vocabulary (an opus-mt model's): one list of pieces, two SentencePiece models, one per side.

Marian models segment the source with source.spm and the target with target.spm, and map both sides' pieces to ids
through one vocab.json: `</s>` is 0, `<unk>` 1, `<pad>` the last id, and decoding starts from the pad row (the
config's decoder_start_token_id). A line that starts with a target-language token `>>xx<<` keeps it as one token
(multilingual models choose their output language with it). A piece that vocab.json lacks is `<unk>`.

In a run directory the vocabulary is two files, as ours (data/tokenizer.py) are, so that everything that copies or
fingerprints a run's tokenizer (prepare, fine-tuning, the ensemble check) treats both alike: tokenizer.model is the
source SentencePiece model, tokenizer.json its settings with `"kind": "marian"`, the pieces in id order, the
special ids and the target SentencePiece model (base64). `load_tokenizer` opens either kind.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm

from ..outputs import atomic_write, atomic_write_text
from .tokenizer import SpecialIds, Tokenizer, TokenizerError

KIND = "marian"  # tokenizer.json's "kind" for this vocabulary


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The vocabulary whose model file is `path` (RUN/tokenizer.model): a MarianVocab when its settings file says
    so, else our joint SentencePiece Tokenizer."""
    path = Path(path)
    meta = path.with_suffix(".json")
    try:
        kind = json.loads(meta.read_text(encoding="utf-8")).get("kind") if meta.is_file() else None
    except (OSError, ValueError, AttributeError, RecursionError):
        kind = None  # Tokenizer names the unreadable settings file
    return MarianVocab(path) if kind == KIND else Tokenizer(path)


def _threads(num_threads: int | None) -> int:
    return num_threads or os.cpu_count() or 1


def _processor(data: bytes, where: str) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_proto=data)
    except (RuntimeError, OSError) as err:
        raise TokenizerError(f"{where}: not a readable SentencePiece model ({str(err).strip()[:120]})") from None


class MarianVocab(Tokenizer):
    """Tokenizer's interface over a Marian vocabulary: `encode` (source side), `encode_target`, `decode` (target
    side), `special` (its own ids)."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        meta_path = path.with_suffix(".json")
        try:
            self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
            self.sp = _processor(path.read_bytes(), str(path))
            self.target = _processor(base64.b64decode(self.meta["target_model"]), f"{meta_path}: target_model")
            self.vocab: list[str] = list(self.meta["pieces"])
            self.special = SpecialIds(**self.meta["special_ids"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise TokenizerError(f"{meta_path}: not a Marian vocabulary's settings ({err})") from None
        self.path, self.lowercase = path, False
        self.ids = {piece: i for i, piece in enumerate(self.vocab)}
        if len(self.ids) != len(self.vocab):
            raise TokenizerError(f"{meta_path}: the vocabulary lists a piece twice")
        if not all(0 <= i < len(self.vocab) for i in vars(self.special).values()):
            raise TokenizerError(f"{meta_path}: special ids {vars(self.special)} outside the vocabulary")

    @classmethod
    def write(
        cls, path: Path, *, source: bytes, target: bytes, pieces: Sequence[str], special: SpecialIds
    ) -> MarianVocab:
        """RUN/tokenizer.model and RUN/tokenizer.json from the two SentencePiece models and the pieces in id order."""
        meta = {
            "kind": KIND,
            "lowercase": False,
            "special_ids": vars(special),
            "pieces": list(pieces),
            "target_model": base64.b64encode(target).decode("ascii"),
        }
        atomic_write(path, lambda tmp: Path(tmp).write_bytes(source))
        atomic_write_text(path.with_suffix(".json"), json.dumps(meta, ensure_ascii=False) + "\n")
        return cls(path)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def marian_files(self) -> dict[str, bytes]:
        """The vocabulary as a Marian folder holds it: vocab.json, source.spm, target.spm (what an export writes)."""
        ids = {piece: i for i, piece in enumerate(self.vocab)}
        return {
            "vocab.json": (json.dumps(ids, ensure_ascii=False, indent=2) + "\n").encode("utf-8"),
            "source.spm": self.path.read_bytes(),
            "target.spm": base64.b64decode(self.meta["target_model"]),
        }

    def signature(self) -> tuple:
        models = tuple(hashlib.sha256(p.serialized_model_proto()).hexdigest() for p in (self.sp, self.target))
        return KIND, tuple(self.vocab), tuple(sorted(vars(self.special).items())), models

    def _ids(self, pieces: list[list[str]], codes: list[list[str]]) -> list[list[int]]:
        unk, ids = self.special.unk, self.ids
        return [[ids.get(p, unk) for p in code + row] for code, row in zip(codes, pieces)]

    @staticmethod
    def _split_codes(texts: Sequence[str]) -> tuple[list[list[str]], list[str]]:
        """Each text's leading `>>xx<<` token (kept whole: a text that starts with ">>" up to the first "<<", as
        transformers' MarianTokenizer reads it) and the rest of it."""
        codes, rest = [], []
        for text in texts:
            end = text.find("<<") if text.startswith(">>") else -1
            codes.append([text[: end + 2]] if end != -1 else [])
            rest.append(text[end + 2 :] if end != -1 else text)
        return codes, rest

    def encode(self, texts: Sequence[str], *, num_threads: int | None = None) -> list[list[int]]:
        """Source texts -> ids (no EOS): a leading `>>xx<<`, then source.spm's pieces."""
        codes, rest = self._split_codes(texts)
        return self._ids(self.sp.encode(rest, out_type=str, num_threads=_threads(num_threads)), codes)

    def encode_target(self, texts: Sequence[str], *, num_threads: int | None = None) -> list[list[int]]:
        pieces = self.target.encode(list(texts), out_type=str, num_threads=_threads(num_threads))
        return self._ids(pieces, [[] for _ in texts])

    def encode_sampled(self, texts: Sequence[str], *, alpha: float, seed: int, target: bool = False) -> list[list[int]]:
        spm.set_random_generator_seed(seed)
        codes, rest = ([[] for _ in texts], list(texts)) if target else self._split_codes(texts)
        model = self.target if target else self.sp
        pieces = model.encode(rest, out_type=str, enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1)
        return self._ids(pieces, codes)

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Target ids -> text with target.spm; the special tokens (pad, EOS, unknown) are left out. A piece that
        target.spm lacks (a source-side piece) keeps its text, its word-start mark "▁" read as a space."""
        skip = {self.special.pad, self.special.eos, self.special.unk}
        rows = [[self.vocab[int(i)] for i in row if int(i) not in skip] for row in ids]
        return [self.target.decode_pieces(row).replace("\u2581", " ").strip() for row in rows]

    def pieces(self, text: str) -> list[str]:
        codes, rest = self._split_codes([text])
        return codes[0] + self.sp.encode(rest[0], out_type=str)

    def id_to_piece(self, i: int) -> str:
        return self.vocab[i]

    @property
    def tags(self) -> tuple[str, ...]:
        """The vocabulary's `>>xx<<` target-language tokens: its tags (`translate --tag ">>fr<<"`)."""
        return tuple(p for p in self.vocab if p.startswith(">>") and p.endswith("<<"))

    def tag_id(self, tag: str) -> int:
        """A tag's id in vocab.json (a `>>xx<<` token, or any other piece but the special ones)."""
        ident = self.ids.get(tag)
        if ident is None or ident in vars(self.special).values():
            tags = self.tags
            known = f"its tags: {', '.join(tags[:12])}{', ...' if len(tags) > 12 else ''}" if tags else "it has no tags"
            raise TokenizerError(f"the tag {tag!r} is not a tag of the vocabulary {self.path} ({known})")
        return ident
