"""Training-data augmentation for the parser (train.subtree_substitution): pure functions
on encoded trees, drawn from a numpy generator that the task seeds per epoch (tasks/parsing.py)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .kinds import CLOSE, LEAF, OPEN, ROOT_OPEN


def tree_phrases(target: Sequence[int] | np.ndarray, kinds: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Every constituent of one linearized tree but its root, in the order they close: (first token, end token,
    first word, end word), so that target[first token:end token] runs from its "(LABEL" to its ")" and it covers
    words [first word, end word). `kinds`: the tree constraint's token kind of every id. Preterminals are leaves,
    not constituents."""
    found: list[tuple[int, int, int, int]] = []
    stack: list[tuple[int, int]] = []
    used = 0
    for at, kind in enumerate(kinds[np.asarray(target, dtype=np.int64)].tolist()):
        if kind in (OPEN, ROOT_OPEN):
            stack.append((at, used))
        elif kind == CLOSE and stack:
            start, first = stack.pop()
            if start > 0:  # the root is never replaced
                found.append((start, at + 1, first, used))
        elif kind == LEAF:
            used += 1
    return found


def substitute_subtrees(
    sentences: Sequence[Sequence[list[int]]],
    targets: Sequence[np.ndarray],
    phrases: Sequence[Sequence[tuple[int, int, int, int]]],
    *,
    rate: float,
    rng: np.random.Generator,
    max_len: int,
    budgets: Sequence[int] | None = None,
    groups: Sequence[int] | None = None,
) -> tuple[list[list[list[int]]], list[np.ndarray]]:
    """Same-label subtree substitution (Shi et al. 2021, "SUB2"): each tree, with probability `rate`, has one of its
    constituents (`tree_phrases`, chosen uniformly) replaced by a constituent of the same label drawn uniformly from
    all the trees' (its own included), words and subtree together. `sentences`: each tree's words as their source
    pieces; `targets`: the linearized trees. A result with more than `max_len` target tokens, or more source pieces
    than its tree's budget (`budgets`, default `max_len`), keeps the tree as it was. `groups`: each tree's treebank
    (its data.corpora tag's id); donors then come from the tree's own group only. Returns new lists (the inputs are not
    changed)."""
    pool: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i, found in enumerate(phrases):
        for k, (start, _, _, _) in enumerate(found):
            pool.setdefault((int(targets[i][start]), groups[i] if groups else 0), []).append((i, k))
    out_sentences = [list(sentence) for sentence in sentences]
    out_targets = list(targets)
    for i in np.flatnonzero(rng.random(len(targets)) < rate).tolist():
        if not phrases[i]:
            continue
        start, end, first, last = phrases[i][int(rng.integers(len(phrases[i])))]
        donors = pool[(int(targets[i][start]), groups[i] if groups else 0)]
        d, k = donors[int(rng.integers(len(donors)))]
        d_start, d_end, d_first, d_last = phrases[d][k]
        target = np.concatenate([targets[i][:start], targets[d][d_start:d_end], targets[i][end:]])
        sentence = [*sentences[i][:first], *sentences[d][d_first:d_last], *sentences[i][last:]]
        budget = budgets[i] if budgets is not None else max_len
        if len(target) <= max_len and sum(len(pieces) for pieces in sentence) <= budget:
            out_sentences[i], out_targets[i] = sentence, target
    return out_sentences, out_targets
