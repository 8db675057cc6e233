"""Word links as training data for guided alignment (Garg et al. 2019; train.guided_alignment): a file of Pharaoh
links per corpus (data.corpora's `align`), checked against its corpus when it is prepared, kept per pair as word
links, and turned at collation into the distribution over source pieces that training/guided.py's loss reads.

A link `i-j` joins source word i and target word j (from 0), the words being the whitespace-separated words of the
raw lines (str.split); a pair without links has an empty line. Pieces map to words by SentencePiece's word-start
mark: a piece that begins with "▁" starts a new word, and the count of such pieces so far is the word index. A tag
put before a source (data.corpora's `tag`) starts no word, nor do BOS and EOS. Words stay words however a line is
segmented, so the links hold for train.subword_sampling's draws too: they are mapped to the pieces of each draw.

Axis legend: k links, S_i / T_i one pair's source / target pieces, B pairs, T decoder positions, S source positions.
This module imports no torch: `prepare`'s worker processes read the links.
"""

from __future__ import annotations

import numpy as np

from .text import DataError, decode_lines

WORD_START = "\u2581"  # SentencePiece's mark of a piece that begins a word (it stands for the space before it)


def word_starts(tokenizer) -> np.ndarray:
    """(V,) bool: whether each id of the vocabulary is a piece that starts a word."""
    return np.fromiter(
        (tokenizer.id_to_piece(i).startswith(WORD_START) for i in range(tokenizer.vocab_size)),
        dtype=bool,
        count=tokenizer.vocab_size,
    )


def piece_words(ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(L,) int32: the word each piece of `ids` belongs to, from 0; -1 for pieces before the first word (a tag)."""
    return (np.cumsum(starts[np.asarray(ids, dtype=np.int64)], dtype=np.int32) - 1).astype(np.int32, copy=False)


def parse_links(line: str, n_src: int, n_tgt: int, where: str) -> list[int]:
    """One line of Pharaoh links for a pair of `n_src` and `n_tgt` words -> [i0, j0, i1, j1, ...]; a token that is
    not `i-j`, or an index past its line's words, is refused naming `where` (FILE:LINE)."""
    flat: list[int] = []
    for token in line.split():
        i, dash, j = token.partition("-")
        if not (dash and i.isascii() and j.isascii() and i.isdigit() and j.isdigit()):
            raise DataError(f"{where}: {token!r} is not a link (expected i-j: a source and a target word, from 0)")
        src, tgt = int(i), int(j)
        if src >= n_src or tgt >= n_tgt:
            side, index, count = ("source", src, n_src) if src >= n_src else ("target", tgt, n_tgt)
            raise DataError(
                f"{where}: link {token}: {side} word {index} is past the {count} words of its {side} line "
                "(words are counted from 0)"
            )
        flat += (src, tgt)
    return flat


def chunk_links(raw: bytes, name: str, first_line: int, src_lines: list[str], tgt_lines: list[str]) -> list[list[int]]:
    """A chunk's lines of links (the bytes of the align file's lines first_line + 1 ...), each checked against its
    pair's words -> per pair its flat word links."""
    lines = decode_lines(raw, name, first_line=first_line)
    return [
        parse_links(line, len(src.split()), len(tgt.split()), f"{name}:{first_line + k + 1}")
        for k, (line, src, tgt) in enumerate(zip(lines, src_lines, tgt_lines))
    ]


def kept_links(
    links: list[list[int]] | None,
    rows: list[tuple[int, list[int], list[int]]],
    src_lines: list[str],
    tgt_lines: list[str],
    starts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The links of a chunk's kept pairs, in their order: `links` per line of the chunk (None: its corpus has no
    align file), `rows` per kept pair (its line in the chunk, its source ids with the tag, its target ids). A pair
    whose pieces hold other words than its line keeps no links (`same_words`). Returns the flat links, the values
    per pair (int32) and how many pairs lost theirs so."""
    kept: list[list[int]] = []
    lost = 0
    for line, src, tgt in rows:
        flat = links[line] if links is not None else []
        if flat and not (same_words(src, src_lines[line], starts) and same_words(tgt, tgt_lines[line], starts)):
            flat, lost = [], lost + 1
        kept.append(flat)
    lengths = np.fromiter(map(len, kept), dtype=np.int32, count=len(kept))
    return np.fromiter((v for flat in kept for v in flat), dtype=np.int64, count=int(lengths.sum())), lengths, lost


def same_words(ids: list[int], line: str, starts: np.ndarray) -> bool:
    """Whether the pieces `ids` hold as many words as `line` (SentencePiece's normalisation can join or split
    words that str.split does not: NFKC turns a few characters into spaces; a line that begins with a tag's text)."""
    return int(starts[np.asarray(ids, dtype=np.int64)].sum()) == len(line.split())


def pair_targets(
    links: np.ndarray, src_ids: np.ndarray, tgt_ids: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One pair's guided-alignment targets: for each target piece t of a word with links, p_t is uniform over the
    source pieces of the words linked to it. `links`: flat word links [i0, j0, ...]; the ids without EOS (the source
    with its tag). Returns (t, s, p) of the nonzero p_t[s], t being the target piece (the decoder position that
    predicts it) and s the source position; empty when the pieces hold fewer words than the links name (a draw of
    train.subword_sampling that joined words: the pair trains without the term)."""
    none = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    pairs = np.asarray(links, dtype=np.int64).reshape(-1, 2)  # (k, 2): source word, target word
    src_word, tgt_word = piece_words(src_ids, starts), piece_words(tgt_ids, starts)  # (S_i,), (T_i,)
    n_src, n_tgt = int(src_word.max(initial=-1)) + 1, int(tgt_word.max(initial=-1)) + 1
    if not len(pairs) or pairs[:, 0].max() >= n_src or pairs[:, 1].max() >= n_tgt:
        return none
    linked = np.zeros((n_tgt, n_src), dtype=bool)  # target word x source word
    linked[pairs[:, 1], pairs[:, 0]] = True
    pieces = linked[np.maximum(tgt_word, 0)][:, np.maximum(src_word, 0)]  # (T_i, S_i)
    pieces &= (tgt_word >= 0)[:, None] & (src_word >= 0)[None, :]  # a tag is no word
    t, s = np.nonzero(pieces)
    counts = pieces.sum(axis=1)  # (T_i,) source pieces per target piece
    return t, s, (1.0 / counts[t]).astype(np.float32)


def batch_targets(
    rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]], starts: np.ndarray, width: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, int]:
    """The guided-alignment targets of a padded batch: `rows` per pair (its word links, source ids, target ids),
    `width` the batch's (T, S). Returns the flat indices into the (B, T, S) attention, their probabilities, and the
    count of target positions with links."""
    tgt_width, src_width = width
    index, prob, aligned = [], [], 0
    for b, (links, src, tgt) in enumerate(rows):  # a loop over sentences, as in data.collate
        if not len(links):
            continue
        t, s, p = pair_targets(links, src, tgt, starts)
        index.append((b * tgt_width + t) * src_width + s)
        prob.append(p)
        aligned += len(np.unique(t))
    if not index:
        return np.zeros(0, np.int64), np.zeros(0, np.float32), 0
    return np.concatenate(index), np.concatenate(prob), aligned
