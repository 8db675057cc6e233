"""From what a caller asks of each input line (terminology/: phrases that must or must not appear, a prefix, a
glossary) to what the search gets for each translation unit (decoding/lexical.py's `Steering`: token ids).

A line is one unit, or several under split "sentences" (and a sentence too long for the model's positions becomes
several parts: front.py). Per unit:
- the line's negative phrases apply to every unit, its prefix to the first;
- its positive phrases need the line to be one unit (where in a paragraph a phrase belongs is not known): a line of
  several units with positive phrases is refused, pointing at split "lines" or a glossary;
- a glossary's terms are found in each unit's own source text, and their target terms become positive phrases of
  that unit.
Phrases and prefixes are encoded by the run's tokenizer as target text, as they would appear inside a sentence (a
SentencePiece model marks a word's start whether it opens the sentence or not), so a phrase that must appear starts a
word. A phrase that must not appear is banned in every way the vocabulary's pieces can write it (up to SPELLINGS
ways, fewest pieces first), as a word and attached to what precedes it (French "l'homme" writes "homme" without the
word-start mark): a model does not always segment a word as the tokenizer does. A phrase holding a character the
vocabulary cannot spell (it would come out as <unk>) is refused naming the line and the phrase.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import ConfigError
from ..data.tokenizer import Tokenizer
from ..documents.sentences import Unit
from ..terminology import Constraints, Glossary
from .lexical import Steering


@dataclass(frozen=True)
class Requests:
    """One call's terminology: per line its constraints and its prefix (None: none), and a glossary for all."""

    constraints: Sequence[Constraints | None] | None = None
    prefixes: Sequence[str | None] | None = None
    glossary: Glossary | None = None

    def __bool__(self) -> bool:
        return bool(
            any(c for c in self.constraints or ())
            or any(p for p in self.prefixes or ())
            or (self.glossary is not None and len(self.glossary) > 0)
        )

    def check(self, n_lines: int) -> None:
        """Per-line lists must have one entry per input line."""
        for name, given in (("constraints", self.constraints), ("prefixes", self.prefixes)):
            if given is not None and len(given) != n_lines:
                raise ConfigError(f"{name} has {len(given)} entries but there are {n_lines} lines: one per line")
        for i, c in enumerate(self.constraints or ()):
            if c is not None and not isinstance(c, Constraints):
                raise ConfigError(f"constraints[{i}] is {type(c).__name__}, not a terminology.Constraints")
        for i, p in enumerate(self.prefixes or ()):
            if p is not None and not isinstance(p, str):
                raise ConfigError(f"prefixes[{i}] is {type(p).__name__}, not a string")


def unit_steering(units: Sequence[Unit], requests: Requests, tokenizer: Tokenizer) -> list[Steering | None]:
    """Per unit its Steering, or None where nothing steers it (see the module docstring)."""
    per_line = Counter(u.line for u in units)
    first_of_line: set[int] = set()
    texts: list[tuple[list[str], list[str], str]] = []  # per unit: include, exclude, prefix
    for unit in units:
        given = requests.constraints[unit.line] if requests.constraints else None
        include = list(given.include) if given else []
        if include and per_line[unit.line] > 1:
            raise ConfigError(
                f"line {unit.line + 1}: it is translated as {per_line[unit.line]} units (sentences, or parts of a "
                "sentence too long for the model), and where its constraints belong is not known: translate it "
                'with split "lines", or give the terms as a glossary (found sentence by sentence)'
            )
        if requests.glossary is not None:
            include += [t for t in requests.glossary.constraints(unit.text) if t not in include]
        prefix = ""
        if unit.line not in first_of_line:
            first_of_line.add(unit.line)
            prefix = (requests.prefixes[unit.line] if requests.prefixes else None) or ""
        texts.append((include, list(given.exclude) if given else [], prefix))
    distinct = sorted({p for inc, exc, pre in texts for p in (*inc, *exc, *([pre] if pre else []))})
    ids = dict(zip(distinct, tokenizer.encode_target(distinct))) if distinct else {}
    spellings = {p: _spellings(tokenizer, tuple(ids[p])) for inc, exc, pre in texts for p in exc}
    unk = tokenizer.special.unk
    out: list[Steering | None] = []
    for unit, (include, exclude, prefix) in zip(units, texts):
        for phrase in (*include, *exclude, *([prefix] if prefix else [])):
            if not ids[phrase]:
                raise ConfigError(f"line {unit.line + 1}: the phrase {phrase!r} is empty once tokenized")
            if unk in ids[phrase]:
                raise ConfigError(
                    f"line {unit.line + 1}: the phrase {phrase!r} holds a character the vocabulary cannot spell "
                    "(it would come out as <unk>)"
                )
        steering = Steering(
            include=tuple(tuple(ids[p]) for p in include),
            exclude=tuple(dict.fromkeys(v for p in exclude for v in spellings[p])),
            prefix=tuple(ids[prefix]) if prefix else (),
        )
        out.append(steering or None)
    return out


def _spellings(tokenizer: Tokenizer, own: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The ways the vocabulary's pieces write the phrase the tokenizer wrote as `own` (word start marked) and attached
    to what precedes it (no mark on its first piece): its own encoding first, then the others with the fewest pieces,
    at most SPELLINGS of each. A model may well take another segmentation than the tokenizer's ("ident" "iques" for
    "identiques"), and a phrase that must not appear must not come out that way either."""
    written = "".join(tokenizer.id_to_piece(i) for i in own)
    vocab = _vocabulary(tokenizer)
    out = [own]
    for text in (written, written[1:] if written.startswith(WORD_START) else ""):
        found = [x for x in _segmentations(text, vocab) if x != own]
        out += sorted(found, key=len)[:SPELLINGS]
    return list(dict.fromkeys(out))


SPELLINGS = 8  # of a negative phrase, per form (its own encoding comes on top)
WORD_START = "\u2581"  # SentencePiece's mark of a word's first piece
_VOCABULARIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _vocabulary(tokenizer: Tokenizer) -> dict[str, int]:
    """piece -> id of the tokenizer's vocabulary (made once per tokenizer)."""
    if tokenizer not in _VOCABULARIES:
        _VOCABULARIES[tokenizer] = {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    return _VOCABULARIES[tokenizer]


def _segmentations(text: str, vocab: dict[str, int], most: int = 64) -> list[tuple[int, ...]]:
    """Up to `most` ways of writing `text` as a sequence of vocabulary pieces, longest pieces tried first."""
    longest = 24
    out: list[tuple[int, ...]] = []
    ends = [False] * len(text) + [True]  # ends[i]: text[i:] can be written at all
    for i in range(len(text) - 1, -1, -1):
        ends[i] = any(text[i:j] in vocab and ends[j] for j in range(i + 1, min(len(text), i + longest) + 1))

    def walk(i: int, ids: list[int]) -> None:
        if len(out) >= most:
            return
        if i == len(text):
            out.append(tuple(ids))
            return
        for j in range(min(len(text), i + longest), i, -1):
            if ends[j] and text[i:j] in vocab:
                walk(j, ids + [vocab[text[i:j]]])

    if text:
        walk(0, [])
    return out


def describe(units: Sequence[Unit], requests: Requests, j: int) -> str:
    """What steered unit j, for an error message: its line's constraints, prefix and glossary terms."""
    unit, parts = units[j], []
    given = requests.constraints[unit.line] if requests.constraints else None
    if given and given.include:
        parts.append("must contain " + ", ".join(repr(p) for p in given.include))
    if given and given.exclude:
        parts.append("must not contain " + ", ".join(repr(p) for p in given.exclude))
    if requests.glossary is not None and requests.glossary.constraints(unit.text):
        parts.append("glossary terms " + ", ".join(repr(t) for t in requests.glossary.constraints(unit.text)))
    prefix = requests.prefixes[unit.line] if requests.prefixes else None
    if prefix:
        parts.append(f"prefix {prefix!r}")
    return "; ".join(parts)
