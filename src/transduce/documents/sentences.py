"""Paragraphs into sentences, sentences too long for the model cut into parts, and the translations put back.

A line of input becomes one or more *units*, each a span of the line sent to the translator on its own:
- `split="lines"` (the command line's default): the whole line is one unit, as a test set wants it.
- `split="sentences"`: the line is a paragraph, split by sentencex (Wikimedia's rule-based splitter: about 300
  languages through fallbacks, abbreviation lists per language, no model to download; docs/translation.md says why
  it was chosen over pysbd and the Moses splitter).
A unit longer than the model's positions is cut again (`cut_spans`): at clause punctuation, else between words,
else between SentencePiece pieces, each part as near the middle as the candidates allow, until every part fits.
`join` puts a line back together: each unit's translation, and between units the source's own spacing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

SPLITS = ("lines", "sentences")
# where a clause may end: a unit is cut after one of these when followed by a space (strongest first)
_CLAUSE_ENDS = (";:；：", ",，、")
_DASHES = ("–", "—")  # a dash between spaces ends a clause too


@dataclass(frozen=True)
class Unit:
    """A span [start, end) of input line `line` translated on its own (no surrounding whitespace in it)."""

    line: int
    start: int
    end: int
    text: str
    cut: bool = False  # a part of a sentence too long for the model


def check_split(split: str) -> str:
    from ..config import ConfigError

    if split not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return split


def sentence_spans(text: str, language: str) -> list[tuple[int, int]]:
    """The sentences of `text` as (start, end) spans without their surrounding whitespace; sentencex returns the
    sentences with their trailing whitespace, so they tile the text and the offsets follow by adding lengths."""
    import sentencex

    spans, at = [], 0
    for sentence in sentencex.segment(language or "en", text):
        start = text.find(sentence, at)
        if start < 0:  # sentencex keeps every character: this cannot happen, but never lose text if it does
            return _stripped(text, 0, len(text))
        spans += _stripped(text, start, start + len(sentence))
        at = start + len(sentence)
    if at < len(text):
        spans += _stripped(text, at, len(text))
    return spans


def _stripped(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) without leading and trailing whitespace; nothing when it is all whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return [(start, end)] if start < end else []


def units(lines: Sequence[str], split: str, language: str) -> list[Unit]:
    """Every non-empty line's units, in order (an empty or all-whitespace line has none)."""
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        spans = sentence_spans(line, language) if split == "sentences" else [(0, len(line))]
        out += [Unit(i, a, b, line[a:b]) for a, b in spans]
    return out


def cut_spans(text: str, fits: Callable[[str], bool], pieces: Callable[[str], list[str]]) -> list[tuple[int, int]]:
    """`text` cut into spans (whitespace trimmed) for which `fits` holds: recursively at the best place nearest the
    middle (`_cut_point`). A span that cannot be cut further (one piece) is kept as it is."""
    stack, out = [(0, len(text))], []
    while stack:
        start, end = stack.pop()
        if fits(text[start:end]):
            out.append((start, end))
            continue
        at = _cut_point(text, start, end, pieces)
        if at is None:
            out.append((start, end))  # a single piece longer than the model: its translation is what it is
            continue
        for part in reversed(_stripped(text, start, at) + _stripped(text, at, end)):
            stack.append(part)
    return sorted(out)


def _cut_point(text: str, start: int, end: int, pieces: Callable[[str], list[str]]) -> int | None:
    """Where to cut text[start:end]: after clause punctuation followed by a space, else at a space, else between
    two pieces; of the best kind found, the place nearest the middle. None for a span of one piece."""
    middle = (start + end) / 2
    for marks in _CLAUSE_ENDS:
        found = [i + 1 for i in range(start, end - 1) if text[i] in marks and text[i + 1].isspace()]
        if found:
            return min(found, key=lambda i: abs(i - middle))
    dashes = [i for i in range(start + 1, end - 1) if text[i] in _DASHES and text[i - 1] == " " == text[i + 1]]
    if dashes:
        return min(dashes, key=lambda i: abs(i - middle))
    spaces = [i for i in range(start + 1, end) if text[i].isspace() and not text[i - 1].isspace()]
    if spaces:
        return min(spaces, key=lambda i: abs(i - middle))
    at = _piece_boundary(text[start:end], pieces, middle - start)
    return None if at is None else start + at


def _piece_boundary(text: str, pieces: Callable[[str], list[str]], middle: float) -> int | None:
    """A cut between two of the text's SentencePiece pieces, nearest `middle` (an offset into `text`): the pieces'
    surface lengths (the word-start mark "▁" aside) give their offsets."""
    ends, at = [], 0
    for piece in pieces(text)[:-1]:
        at += len(piece.lstrip("▁")) + (1 if piece.startswith("▁") and at else 0)
        if 0 < at < len(text):
            ends.append(at)
    return min(ends, key=lambda i: abs(i - middle)) if ends else None


def _spaced(before: str, after: str) -> bool:
    """Whether two translations that meet need a space between them: both non-empty and neither side written in a
    script without spaces between words (East Asian wide or full-width characters)."""
    import unicodedata

    if not before or not after or before[-1].isspace() or after[0].isspace():
        return False
    return all(unicodedata.east_asian_width(c) not in ("W", "F") for c in (before[-1], after[0]))


def join(line: str, spans: Sequence[tuple[int, int]], translations: Sequence[str], split: str) -> tuple[str, list[int]]:
    """A line's translation from its units' (`spans`, in order), and where each unit's translation begins in it:
    under "sentences" the line's leading whitespace, then each unit's translation followed by the source's
    whitespace after that unit, the line's trailing whitespace last (a paragraph keeps its spacing); under "lines"
    the translations of a cut line's parts joined by one space."""
    out: list[str] = []
    offsets, at = [], 0
    if split == "sentences" and spans:
        out.append(line[: spans[0][0]])
        at = len(out[0])
    for k, ((_, end), text) in enumerate(zip(spans, translations)):
        if split == "sentences":
            gap = line[end : spans[k + 1][0]] if k + 1 < len(spans) else line[end:]  # trailing: "\r" kept
            if not gap and k + 1 < len(spans) and _spaced(text, translations[k + 1]):
                gap = " "  # sentences that touched in a script without spaces (Chinese, Japanese) may need one
        else:
            gap = " " if k + 1 < len(spans) and text else ""
        offsets.append(at)
        out += [text, gap]
        at += len(text) + len(gap)
    return "".join(out), offsets
