"""Token-count batches (the paper's §5.1: "sentence pairs were batched together by approximate sequence length").

shuffle (seed, epoch) -> stable sort by target length, then by source length, rising within even target lengths
and falling within odd ones -> pack while padded source and padded target tokens each stay <= max_tokens -> shuffle
the batch order. Everything is a pure function of (lengths, max_tokens, seed, epoch), so a resumed run rebuilds
exactly the batches it was consuming, and every rank builds the same list.

Why the alternating ("snake") source order: a batch that straddles two target lengths would otherwise hold the
longest sources of one length and the shortest of the next, and pad all of them to the longest. On Multi30k at
4,700 tokens per side this lifts the source side's padding efficiency from 0.875 to 0.907 (target side 0.993 and
0.992) and the real tokens per batch by 2.8%.
"""

from __future__ import annotations

import numpy as np


def make_batches(
    src_lengths: np.ndarray, tgt_lengths: np.ndarray, *, max_tokens: int, seed: int, epoch: int, shuffle: bool = True
) -> list[np.ndarray]:
    """Index arrays of pairs. A pair longer than max_tokens on its own gets a batch to itself."""
    n = len(src_lengths)
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(n) if shuffle else np.arange(n)
    # np.lexsort is stable: among equal lengths the shuffled order survives. Last key = primary (target).
    src, tgt = np.asarray(src_lengths[order], dtype=np.int64), np.asarray(tgt_lengths[order], dtype=np.int64)
    order = order[np.lexsort((np.where(tgt % 2 == 0, src, -src), tgt))]
    batches, start, max_s, max_t = [], 0, 0, 0
    s_sorted, t_sorted = src_lengths[order], tgt_lengths[order]
    for i in range(n):
        s, t = max(max_s, int(s_sorted[i])), max(max_t, int(t_sorted[i]))
        count = i - start + 1
        if count > 1 and (count * s > max_tokens or count * t > max_tokens):
            batches.append(order[start:i])
            start, s, t = i, int(s_sorted[i]), int(t_sorted[i])
        max_s, max_t = s, t
    if n:
        batches.append(order[start:n])
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def update_groups(batches: list[np.ndarray], *, world_size: int, rank: int, accumulate: int) -> list[list]:
    """Split an epoch's batches into optimizer updates for one rank.

    Update u takes the next world_size * accumulate batches; rank r gets every world_size-th of them, starting at r.
    So over an epoch each batch goes to exactly one rank, and a run on W ranks with accumulate A sees the same
    batches per update as one process with accumulate W * A. In the last update a rank may be short of batches:
    its missing slots are None (the trainer runs them as zero-weight steps so that DDP's all-reduce still meets).
    """
    per_update = world_size * accumulate
    groups = []
    for start in range(0, len(batches), per_update):
        mine = batches[start : start + per_update][rank::world_size]
        longest = len(batches[start : start + per_update][0::world_size])  # rank 0 has the most
        groups.append(mine + [None] * (longest - len(mine)))
    return groups


def padding_efficiency(corpus, batches: list[np.ndarray]) -> float:
    """Real tokens / padded tokens (source and target together) over the given batches."""
    src, tgt = corpus.src_lengths, corpus.tgt_lengths
    real = padded = 0
    for b in batches:
        real += int(src[b].sum()) + int(tgt[b].sum())
        padded += len(b) * (int(src[b].max()) + int(tgt[b].max()))
    return real / max(1, padded)
