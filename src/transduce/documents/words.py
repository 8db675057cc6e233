"""Word alignments: attention over SentencePiece pieces turned into links between words.

A *word* is a whitespace-separated word of the raw text (`str.split()`), on both sides: what Pharaoh links (`i-j`,
0-based, source word i - target word j) count, as fairseq, Marian and eole print them. SentencePiece marks a piece
that begins a word with "▁", so a piece's word is the count of such marks up to it.

The alignment attention (model/alignment.py) of each target piece over the source pieces (end of sentence
excluded, as fairseq's `extract_hard_alignment` does) gives the links by the model's rule (model.alignment_links,
`word_links`): by default each target piece's word to the word of the source piece it weighs most. A unit's
links (one sentence of a paragraph, or a part of a cut one) are moved into its line's word numbering by the
characters where the unit's words begin (`relocate`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

import numpy as np

from ..data.aligner import grow_diag_final_and
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
    source_pieces: Sequence[str], target_pieces: Sequence[str], attention, first: int = 0, rule: str = "pieces"
) -> Links:
    """Word links (source word, target word), sorted, from `attention` (T, S'): per target piece, its alignment
    attention over the source as the model read it, where `source_pieces` begin at position `first` (1 after a
    tag; end of sentence is past them). `rule` (model.alignment_links): "pieces" links each target piece's word to
    the word of the source position it weighs most (none when that is the tag). The others sum the weights over
    each source word's pieces and average them over each target word's, a mass per (target word, source word):
    "target" links each target word to its heaviest source word; "both" keeps those links that are also the source
    word's heaviest target word; "grow" joins the two directions by grow-diag-final-and, as `transduce align`
    joins eflomal's."""
    src_words, tgt_words = piece_words(source_pieces), piece_words(target_pieces)
    weights = np.asarray(attention, dtype=np.float64)[: len(tgt_words), : first + len(src_words)]
    if not weights.size or weights.shape[1] <= first:
        return []
    if rule == "pieces":
        pointed = weights.argmax(axis=1) - first
        return sorted({(src_words[s], tgt_words[t]) for t, s in enumerate(pointed.tolist()) if s >= 0})
    weights = weights[:, first:]
    rows, cols = np.asarray(tgt_words[: weights.shape[0]]), np.asarray(src_words[: weights.shape[1]])
    mass = np.zeros((rows[-1] + 1, cols[-1] + 1))
    np.add.at(mass, (rows[:, None], cols[None, :]), weights)
    mass /= np.bincount(rows)[:, None]
    forward = {(int(s), t) for t, s in enumerate(mass.argmax(axis=1))}
    if rule == "target":
        return sorted(forward)
    reverse = {(s, int(t)) for s, t in enumerate(mass.argmax(axis=0))}
    return sorted(forward & reverse) if rule == "both" else grow_diag_final_and(forward, reverse)


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
