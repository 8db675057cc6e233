"""What the parser's pointers read, for the decoder inputs BOS + target of one linearized tree (not in the paper).

- The word pointer (`model.word_pointer`): with leaves that are tags only, the decoder has to count the leaves it
  wrote to know which word comes next, and a small model trained on GUM's 3.7k trees does not learn to (it writes
  trees of the right shape with tags of the wrong words). With the pointer, each decoder input also gets (a
  projection of) the encoder state of the first piece of the next word to cover (after the last word: the source
  EOS). Training reads that word off the target (leaves written so far: here); decoding off the tree constraint's
  counter (decoding/constraints.py).
- The span pointer (`model.span_pointer`, with the word pointer): each decoder input also gets the encoder state of
  the first word of the innermost open constituent, so the decoder sees both ends of the span a ")" would close
  without having to match brackets by attention. Training reads it off the target (a stack of open brackets,
  `span_words`); decoding off the tree constraint's stack of open starts.
- The tree position (`model.tree_position`, with the word pointer): each decoder input also gets an embedding of the
  depth (open constituents) and a projection of the embedding of the innermost open constituent's "(LABEL", so the
  decoder knows where it stands in the tree without counting brackets by attention. Training reads both off the
  target (`tree_states`); decoding off the tree constraint's depth and stack of open labels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .kinds import CLOSE, LEAF, OPEN, ROOT_OPEN


def pointer_targets(starts: Sequence[int] | np.ndarray, *, last: bool = False) -> np.ndarray:
    """What the pointer reads for each word and then for EOS: the word starts (ParseCorpus), (n + 1,); with `last`
    (model.word_pointer_last) (first piece, last piece) pairs, (n + 1, 2): a word's last piece is the one before
    the next word's first, and EOS's is EOS."""
    starts = np.asarray(starts, dtype=np.int64)
    if not last:
        return starts
    return np.stack([starts, np.concatenate([starts[1:] - 1, starts[-1:]])], axis=1)


def _innermost_open(target: Sequence[int] | np.ndarray, kinds: np.ndarray) -> list[tuple[int, int, int] | None]:
    """For the decoder inputs BOS + target: (depth, "(LABEL" id, words covered when it was written) of the innermost
    open constituent, None at depth 0, as TreeConstraint tracks them while decoding. `kinds`: the constraint's token
    kind of every id (an UNK, kind OTHER, moves nothing)."""
    stack: list[tuple[int, int, int]] = []
    used = 0
    out: list[tuple[int, int, int] | None] = [None]
    target = np.asarray(target, dtype=np.int64)
    for token, kind in zip(target.tolist(), kinds[target].tolist()):
        if kind in (OPEN, ROOT_OPEN):
            stack.append((len(stack) + 1, token, used))
        elif kind == CLOSE and stack:
            stack.pop()
        elif kind == LEAF:
            used += 1
        out.append(stack[-1] if stack else None)
    return out


def span_words(target: Sequence[int] | np.ndarray, kinds: np.ndarray, n_words: int) -> np.ndarray:
    """For the decoder inputs BOS + target: the word at which the innermost open constituent starts (the words
    covered when its "(LABEL" was written), n_words (the source EOS) at depth 0 (model.span_pointer). (len(target) +
    1,)."""
    opens = _innermost_open(target, kinds)
    return np.asarray([n_words if o is None else min(o[2], n_words) for o in opens], dtype=np.int64)


def tree_states(target: Sequence[int] | np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """For the decoder inputs BOS + target: the open constituents (depth) and the id of the innermost one's
    "(LABEL" (0, PAD, at depth 0) (model.tree_position). (len(target) + 1, 2)."""
    opens = _innermost_open(target, kinds)
    return np.asarray([(0, 0) if o is None else o[:2] for o in opens], dtype=np.int64).reshape(-1, 2)


def word_positions(
    starts: np.ndarray,
    target: np.ndarray,
    leaves: np.ndarray,
    *,
    last: bool = False,
    kinds: np.ndarray | None = None,
    span: bool = False,
    tree: bool = False,
) -> np.ndarray:
    """For the decoder inputs BOS + target: the source position of the next word to cover at each of them, given
    the sentence's word starts (ParseCorpus) and which ids are leaves (the words used so far are the leaves
    already written). (len(target) + 1,), or (len(target) + 1, 2) with `last` (see pointer_targets). With `span`
    (model.span_pointer), one more column: the first piece of the innermost open constituent's first word
    (span_words); with `tree` (model.tree_position), two more last: the depth and the innermost open "(LABEL" id
    (tree_states). Both need the token `kinds`. The columns are ModelConfig.pointer_reads."""
    used = np.concatenate([[0], np.cumsum(leaves[target])])
    positions = pointer_targets(starts, last=last)[np.minimum(used, len(starts) - 1)]
    if not span and not tree:
        return positions
    if kinds is None:
        raise ValueError("the span and tree reads need the token kinds")
    columns = [positions.reshape(len(positions), -1)]
    if span:
        columns.append(np.asarray(starts, dtype=np.int64)[span_words(target, kinds, len(starts) - 1)][:, None])
    if tree:
        columns.append(tree_states(target, kinds))
    return np.concatenate(columns, axis=1)
