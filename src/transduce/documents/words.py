"""Word alignments: attention over SentencePiece pieces turned into links between words.

A *word* is a whitespace-separated word of the raw text (`str.split()`), on both sides: what Pharaoh links (`i-j`,
0-based, source word i - target word j) count, as fairseq, Marian and eole print them. SentencePiece marks a piece
that begins a word with "▁", so a piece's word is the count of such marks up to it.

A target piece is linked to the source piece its alignment attention weighs most (model/alignment.py; end of
sentence excluded, as fairseq's `extract_hard_alignment` does), and its word to that piece's word; a piece that
points at a tag gets no link. A unit's links (one sentence of a paragraph, or a part of a cut one) are moved into
its line's word numbering by the characters where the unit's words begin (`relocate`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from ..data.alignments import WORD_START

Links = list[tuple[int, int]]
_WORD = re.compile(r"\S+")


def piece_words(pieces: Sequence[str]) -> list[int]:
    """The word index of each piece: a piece starting with "▁" begins the next word, as guided alignment's
    data/alignments.piece_words counts them over ids (here a first piece without the mark, as in the second part of
    a word cut in two, belongs to word 0)."""
    out, word = [], -1
    for piece in pieces:
        if piece.startswith(WORD_START) or word < 0:
            word += 1
        out.append(word)
    return out


def word_links(
    source_pieces: Sequence[str], target_pieces: Sequence[str], pointed: Sequence[int], first: int = 0
) -> Links:
    """Word links (source word, target word), sorted and each once, from `pointed`: per target piece, the position
    of the source piece its alignment attention weighs most, counted over the source as the model read it, where
    `source_pieces` begin at position `first` (1 after a tag: a target piece pointing at the tag has no link)."""
    src_words, tgt_words = piece_words(source_pieces), piece_words(target_pieces)
    return sorted(
        {(src_words[s - first], tgt_words[t]) for t, s in enumerate(pointed) if 0 <= s - first < len(src_words)}
    )


def word_offsets(text: str) -> list[int]:
    """Where each whitespace-separated word of `text` begins (character offsets)."""
    return [m.start() for m in _WORD.finditer(text)]


def relocate(links: Links, source: tuple[str, int, list[int]], target: tuple[str, int, list[int]]) -> Links:
    """A unit's links in its line's numbering. `source` and `target` are each (the unit's text, where it begins in
    the line's text, the line's `word_offsets`): a unit's word k is the line's word that holds its first character.
    Indices past the unit's own words (a piece count that differs from the words, rare) stay within range."""
    src_map, tgt_map = _word_map(*source), _word_map(*target)
    if not src_map or not tgt_map:
        return []
    return sorted({(src_map[min(i, len(src_map) - 1)], tgt_map[min(j, len(tgt_map) - 1)]) for i, j in links})


def _word_map(text: str, offset: int, line_starts: list[int]) -> list[int]:
    """Per word of `text` (found at `offset` of its line), the index of the line's word that holds it."""
    return [max(0, bisect.bisect_right(line_starts, offset + start) - 1) for start in word_offsets(text)]


def pharaoh(links: Links) -> str:
    """Links as Pharaoh text: "i-j i-j ..." (source word - target word, 0-based)."""
    return " ".join(f"{i}-{j}" for i, j in links)
