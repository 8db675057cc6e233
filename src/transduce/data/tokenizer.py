"""The joint source/target subword vocabulary (§5.1): one SentencePiece model trained on both training sides.

Special ids are defined here, once, and written into the SentencePiece model itself.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sentencepiece as spm

from ..config.sections import TAG_FORM

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


@dataclass(frozen=True)
class SpecialIds:
    """A vocabulary's special ids: padding, unknown, the decoder's first input (BOS; a Marian vocabulary starts
    from its pad row) and end of sentence. Ours are the constants above; data/marian.py's are its vocab.json's."""

    pad: int = PAD_ID
    unk: int = UNK_ID
    bos: int = BOS_ID
    eos: int = EOS_ID


class TokenizerError(ValueError):
    pass


class Tokenizer:
    """A SentencePiece model plus the text normalisation applied before it (lowercasing, when asked for). Both
    sides share it: `encode_target` is `encode` (data/marian.py's vocabulary has one model per side)."""

    special = SpecialIds()

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if not path.is_file():
            raise TokenizerError(f"{path}: no tokenizer model here")
        self.path = path
        try:
            self.sp = spm.SentencePieceProcessor(model_file=str(path))
        except (RuntimeError, OSError) as err:
            raise TokenizerError(f"{path}: not a readable SentencePiece model ({str(err).strip()[:120]})") from None
        meta_path = path.with_suffix(".json")
        try:
            self.meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
        except (OSError, ValueError) as err:
            raise TokenizerError(f"{meta_path}: cannot read the tokenizer's settings ({err})") from None
        except RecursionError:  # nested thousands of levels deep
            raise TokenizerError(f"{meta_path}: cannot read the tokenizer's settings (nested too deeply)") from None
        if not isinstance(self.meta, dict):
            raise TokenizerError(f"{meta_path}: the tokenizer's settings are not a JSON object")
        self.lowercase = self.meta.get("lowercase", False)
        if not isinstance(self.lowercase, bool):  # "false" (a string) would be true
            raise TokenizerError(f'{meta_path}: "lowercase" must be true or false, got {self.lowercase!r}')
        ids = (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise TokenizerError(
                f"{path}: special ids {ids} differ from transduce's "
                f"(pad, unk, bos, eos) = {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}"
            )

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def signature(self) -> tuple:
        """What decides how text becomes ids: the settings and every piece with its score and kind. Two runs
        prepared alike have equal signatures although their model files differ (the file records where it was
        trained)."""
        sp = self.sp
        kinds = (sp.is_control, sp.is_unknown, sp.is_unused, sp.is_byte)
        pieces = tuple(
            (sp.id_to_piece(i), sp.get_score(i), tuple(k(i) for k in kinds)) for i in range(sp.get_piece_size())
        )
        return tuple(sorted(self.meta.items())), pieces

    @functools.cached_property
    def tags(self) -> tuple[str, ...]:
        """The tags (data.corpora's, data.valid_tag) this vocabulary was learned with (its settings file lists them),
        and in a SentencePiece model given without one, its control symbols of a tag's form (`<2de>`)."""
        tags = self.meta.get("tags")
        if isinstance(tags, list):
            return tuple(t for t in tags if isinstance(t, str))
        specials = {PAD_ID, UNK_ID, BOS_ID, EOS_ID}
        return tuple(
            piece
            for i in range(self.sp.get_piece_size())
            if i not in specials and self.sp.is_control(i) and TAG_FORM.fullmatch(piece := self.sp.id_to_piece(i))
        )

    def tag_id(self, tag: str) -> int:
        """The one token id of `tag` (put before a source: data.corpora's tag, `translate --tag`); anything but one
        of the vocabulary's `tags` (a plain piece such as `▁A` included) is refused."""
        ident = self.sp.piece_to_id(tag) if tag in self.tags else UNK_ID
        if ident == UNK_ID:
            known = f"its tags: {', '.join(self.tags)}" if self.tags else "it was learned with no tags"
            raise TokenizerError(f"the tag {tag!r} is not a tag of the vocabulary {self.path} ({known})")
        return ident

    @functools.cached_property
    def _text_tags(self) -> frozenset[int]:
        """Tags that encoding text can produce: a vocabulary made before tags were control symbols holds them as
        user symbols, which SentencePiece matches inside any text (issue 76: the tag `man` in "woman")."""
        ids = (self.sp.piece_to_id(t) for t in self.tags)
        return frozenset(i for i in ids if i != UNK_ID and not self.sp.is_control(i))

    def _as_text(self, seqs: list[list[int]]) -> list[list[int]]:
        """Encoded text never holds a tag: in an old vocabulary (`_text_tags`) text that spells one is unknown."""
        if not self._text_tags:
            return seqs
        tags = self._text_tags
        return [[UNK_ID if i in tags else i for i in ids] if tags.intersection(ids) else ids for ids in seqs]

    def normalize(self, text: str) -> str:
        return text.lower() if self.lowercase else text

    def encode(self, texts: Sequence[str], *, num_threads: int | None = None) -> list[list[int]]:
        """Texts -> token ids (no BOS/EOS; callers add them), on `num_threads` threads (default: every core). Text
        that spells a tag is encoded as text: a tag is put in by its id only (`tag_id`)."""
        threads = num_threads or os.cpu_count() or 1
        return self._as_text(self.sp.encode([self.normalize(t) for t in texts], out_type=int, num_threads=threads))

    def encode_target(self, texts: Sequence[str], *, num_threads: int | None = None) -> list[list[int]]:
        return self.encode(texts, num_threads=num_threads)

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(i)

    def encode_sampled(self, texts: Sequence[str], *, alpha: float, seed: int, target: bool = False) -> list[list[int]]:
        """Texts -> one segmentation drawn at random (subword regularisation): BPE-dropout with rate `alpha` for a
        BPE model, sampling from all segmentations with smoothing `alpha` for a unigram one. The same seed gives
        the same segmentations (one thread: SentencePiece's generator is seeded once per call). `target`: the side
        (one model serves both here)."""
        spm.set_random_generator_seed(seed)
        drawn = self.sp.encode(
            [self.normalize(t) for t in texts],
            out_type=int,
            enable_sampling=True,
            alpha=alpha,
            nbest_size=-1,
            num_threads=1,
        )
        return self._as_text(drawn)

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return self.sp.decode([list(map(int, x)) for x in ids])

    def pieces(self, text: str) -> list[str]:
        return self.sp.encode(self.normalize(text), out_type=str)

    def copy_to(self, path: Path) -> None:
        from ..outputs import atomic_write

        atomic_write(path, lambda tmp: shutil.copyfile(self.path, tmp))
        meta = self.path.with_suffix(".json")
        if meta.is_file():
            atomic_write(path.with_suffix(".json"), lambda tmp: shutil.copyfile(meta, tmp))

    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        path: str | Path,
        *,
        vocab_size: int,
        model_type: str = "bpe",
        lowercase: bool = False,
        split_digits: bool = False,
        max_sentences: int = 2_000_000,
        tags: Sequence[str] = (),
    ) -> Tokenizer:
        """Train one SentencePiece model on `texts` (both languages' training sides) and write it to `path`; each of
        `tags` becomes a control symbol at the ids after EOS: a token put in by its id, never produced from text
        (text that spells it is encoded as text) and decoded as nothing."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # a fixed scratch name beside `path` (SentencePiece records it in the model file): the same inputs give the
        # same bytes, so a resumed `prepare` ends byte-identical to an unbroken one
        scratch = path.parent / f".{path.stem}-training"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        failure: list[Exception] = []
        try:
            prefix = scratch / "spm"
            sentences = _guarded((t.lower() if lowercase else t for t in texts), failure)
            _train_sentencepiece(
                sentences, prefix, failure, vocab_size, model_type, split_digits, max_sentences, tuple(tags)
            )
            meta = {
                "lowercase": lowercase,
                "model_type": model_type,
                "vocab_size": vocab_size,
                "split_digits": split_digits,
                "pad_id": PAD_ID,
                "unk_id": UNK_ID,
                "bos_id": BOS_ID,
                "eos_id": EOS_ID,
                **({"tags": list(tags)} if tags else {}),
            }
            Path(f"{prefix}.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
            os.replace(f"{prefix}.json", path.with_suffix(".json"))
            os.replace(f"{prefix}.model", path)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return cls(path)


def _train_sentencepiece(
    sentences: Iterator[str],
    prefix: Path,
    failure: list[Exception],
    vocab_size: int,
    model_type: str,
    split_digits: bool,
    max_sentences: int,
    tags: tuple[str, ...] = (),
) -> None:
    """PREFIX.model from `sentences`; a failure reading them (kept in `failure`) or SentencePiece's own refusal is
    raised as one clear error."""
    symbols: dict[str, Any] = {"control_symbols": list(tags)} if tags else {}  # none: the options as always
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences,
            model_prefix=str(prefix),
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=1.0,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            split_digits=split_digits,
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
            **symbols,
        )
    except RuntimeError as err:  # e.g. "Vocabulary size too high (8000). Please set it to a value <= 5321."
        if failure:  # reading the text failed (a DataError naming the line): that is the error
            raise failure[0] from None
        raise TokenizerError(_vocabulary_refusal(vocab_size, str(err))) from None


def _vocabulary_refusal(vocab_size: int, said: str) -> str:
    """SentencePiece's refusal of a vocabulary size, in the settings' words (its own message is a C++ check)."""
    small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", said)
    if small:
        return (
            f"data.vocab_size {vocab_size} is too small: a piece for each distinct character of the training text, "
            f"the special pieces and the tags make {small.group(1)}; set it to at least that"
        )
    large = re.search(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)", said)
    if large:
        return (
            f"data.vocab_size {vocab_size} is too large for this training text: it gives at most {large.group(2)} "
            "pieces; set data.vocab_size to that or less"
        )
    return f"SentencePiece could not train a vocabulary of {vocab_size}: {said.strip().splitlines()[-1]}"


def _guarded(texts: Iterable[str], failure: list[Exception]) -> Iterator[str]:
    """`texts`, keeping the exception that ends them (SentencePiece turns it into a bare RuntimeError)."""
    try:
        yield from texts
    except Exception as err:
        failure.append(err)
        raise
