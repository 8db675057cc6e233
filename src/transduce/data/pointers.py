"""What the parser's word pointer reads, for the decoder inputs BOS + target of one linearized tree (not in the paper).

- The word pointer (`model.word_pointer`): with leaves that are tags only, the decoder has to count the leaves it
  wrote to know which word comes next, and a small model trained on GUM's 3.7k trees does not learn to (it writes
  trees of the right shape with tags of the wrong words). With the pointer, each decoder input also gets (a
  projection of) the encoder state of the first piece of the next word to cover (after the last word: the source
  EOS). Training reads that word off the target (leaves written so far: here); decoding off the tree constraint's
  counter (decoding/constraints.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pointer_targets(starts: Sequence[int] | np.ndarray, *, last: bool = False) -> np.ndarray:
    """What the pointer reads for each word and then for EOS: the word starts (ParseCorpus), (n + 1,); with `last`
    (model.word_pointer_last) (first piece, last piece) pairs, (n + 1, 2): a word's last piece is the one before
    the next word's first, and EOS's is EOS."""
    starts = np.asarray(starts, dtype=np.int64)
    if not last:
        return starts
    return np.stack([starts, np.concatenate([starts[1:] - 1, starts[-1:]])], axis=1)


def word_positions(starts: np.ndarray, target: np.ndarray, leaves: np.ndarray, *, last: bool = False) -> np.ndarray:
    """For the decoder inputs BOS + target: the source position of the next word to cover at each of them, given
    the sentence's word starts (ParseCorpus) and which ids are leaves (the words used so far are the leaves
    already written). (len(target) + 1,), or (len(target) + 1, 2) with `last` (see pointer_targets): the columns
    are ParserModelConfig.pointer_reads."""
    used = np.concatenate([[0], np.cumsum(leaves[target])])
    return pointer_targets(starts, last=last)[np.minimum(used, len(starts) - 1)]
