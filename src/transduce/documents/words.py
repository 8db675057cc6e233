"""Word alignments: attention over SentencePiece pieces turned into links between words.

A *word* is a whitespace-separated word of the raw text (`str.split()`), on both sides: what Pharaoh links (`i-j`,
0-based, source word i - target word j) count, as fairseq, Marian and eole print them. SentencePiece marks a piece
that begins a word with "▁", so a piece's word is the count of such marks up to it.

A target piece is linked to the source piece its alignment attention weighs most (model/alignment.py), end of
sentence and a tag excluded (fairseq's `extract_hard_alignment`, Garg et al. 2019 §3); its word is linked to that
piece's word. A unit's links (one sentence of a paragraph, or a part of a cut one) are moved into its line's word
numbering by the characters where the unit's words begin (`relocate`).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

import torch

Links = list[tuple[int, int]]
_WORD = re.compile(r"\S+")


def piece_words(pieces: Sequence[str]) -> list[int]:
    """The word index of each piece: a piece starting with "▁" begins the next word (a first piece without the
    mark, as in the second part of a word cut in two, belongs to word 0)."""
    out, word = [], -1
    for piece in pieces:
        if piece.startswith("▁") or word < 0:
            word += 1
        out.append(word)
    return out


def hard_links(weights: torch.Tensor, source_len: int, target_len: int, first: int = 0) -> list[int]:
    """Per target piece, the source piece its weights point at most. `weights` (T', S') of one pair: row t is the
    decoder position predicting target piece t; columns `first` (after a tag) to `first + source_len` are the
    source's pieces (end of sentence and padding after them are excluded)."""
    rows = weights[:target_len, first : first + source_len]  # (T, S)
    return rows.argmax(dim=-1).tolist()


def word_links(source_pieces: Sequence[str], target_pieces: Sequence[str], pointed: Sequence[int]) -> Links:
    """Word links (source word, target word), sorted and each once, from `pointed` (per target piece, the index of
    its source piece: `hard_links`)."""
    src_words, tgt_words = piece_words(source_pieces), piece_words(target_pieces)
    return sorted({(src_words[s], tgt_words[t]) for t, s in enumerate(pointed) if s < len(src_words)})


def word_starts(text: str) -> list[int]:
    """Where each whitespace-separated word of `text` begins (character offsets)."""
    return [m.start() for m in _WORD.finditer(text)]


def relocate(links: Links, source: tuple[str, int, list[int]], target: tuple[str, int, list[int]]) -> Links:
    """A unit's links in its line's numbering. `source` and `target` are each (the unit's text, where it begins in
    the line's text, the line's `word_starts`): a unit's word k is the line's word that holds its first character.
    Indices past the unit's own words (a piece count that differs from the words, rare) stay within range."""
    src_map, tgt_map = _word_map(*source), _word_map(*target)
    if not src_map or not tgt_map:
        return []
    return sorted({(src_map[min(i, len(src_map) - 1)], tgt_map[min(j, len(tgt_map) - 1)]) for i, j in links})


def _word_map(text: str, offset: int, line_starts: list[int]) -> list[int]:
    """Per word of `text` (found at `offset` of its line), the index of the line's word that holds it."""
    return [max(0, bisect.bisect_right(line_starts, offset + start) - 1) for start in word_starts(text)]


def pharaoh(links: Links) -> str:
    """Links as Pharaoh text: "i-j i-j ..." (source word - target word, 0-based)."""
    return " ".join(f"{i}-{j}" for i, j in links)
