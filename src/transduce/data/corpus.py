"""Token ids in memory and on disk, and the batches the model trains on: `TokenArrays` (variable-length sequences
stored flat, memory-mapped from a cache), `ParallelCorpus` (source and target arrays side by side, as every
sequence-to-sequence task prepares them: parallel.py, treebank.py), and `collate` into a padded `Batch`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .tokenizer import SpecialIds

OURS = SpecialIds()  # the special ids of our own vocabularies (data/tokenizer.py)

if TYPE_CHECKING:
    import torch


@dataclass
class TokenArrays:
    """Variable-length sequences stored flat: sequence i is ids[offsets[i]:offsets[i+1]]."""

    ids: np.ndarray
    offsets: np.ndarray
    stored_lengths: np.ndarray | None = None  # SPLIT.SIDE.lengths.npy where the cache has it (no pass over offsets)

    @classmethod
    def from_lists(cls, seqs: list[list[int]]) -> TokenArrays:
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter((t for s in seqs for t in s), dtype=np.int32, count=int(offsets[-1]))
        return cls(ids, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        """Each sequence's length (int32: 4 bytes a sequence, computed without an int64 copy)."""
        if self.stored_lengths is not None:
            return self.stored_lengths.astype(np.int32)
        lengths = np.empty(len(self), dtype=np.int32)
        np.subtract(self.offsets[1:], self.offsets[:-1], out=lengths, casting="unsafe")
        return lengths

    def save(self, stem: Path) -> None:
        np.save(f"{stem}.ids.npy", self.ids, allow_pickle=False)
        np.save(f"{stem}.offsets.npy", self.offsets, allow_pickle=False)

    @classmethod
    def load(cls, stem: Path) -> TokenArrays:
        """Memory-mapped: the ids stay on disk (the page cache shares them between ranks and runs); the lengths, where
        the cache has them (version 2), read whole (2 bytes a sequence)."""
        lengths = Path(f"{stem}.lengths.npy")
        stored = np.load(lengths, allow_pickle=False) if lengths.is_file() else None
        return cls(_map(f"{stem}.ids.npy"), _map(f"{stem}.offsets.npy"), stored)


def _map(path: str) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError:  # an empty array cannot be mapped
        return np.load(path, allow_pickle=False)


@dataclass
class ParallelCorpus:
    src: TokenArrays
    tgt: TokenArrays

    def __len__(self) -> int:
        return len(self.src)

    # Lengths as the model sees them: source + EOS; target + BOS (decoder input) or + EOS (target output). Computed
    # once (int32: 4 bytes a pair, the only per-pair memory a memory-mapped corpus costs).
    @cached_property
    def src_lengths(self) -> np.ndarray:
        lengths = self.src.lengths
        lengths += 1
        return lengths

    @cached_property
    def tgt_lengths(self) -> np.ndarray:
        lengths = self.tgt.lengths
        lengths += 1
        return lengths


@dataclass
class Batch:
    """Padded tensors for one micro-batch. tgt_in = BOS + y (teacher forcing), tgt_out = y + EOS (§3)."""

    src: torch.Tensor  # (B, S)
    tgt_in: torch.Tensor  # (B, T)
    tgt_out: torch.Tensor  # (B, T)
    n_tokens: int  # non-pad target tokens
    n_padded: int  # padded source + target positions (for padding efficiency)
    n_real: int  # real source + target positions
    positions: torch.Tensor  # (n_tokens,) flat indices of the non-pad target positions in B*T
    target: torch.Tensor  # (n_tokens,) tgt_out at those positions
    word_pos: torch.Tensor | None = None  # (B, T) parsing's word pointer: source position of the next word; (B, T, C)
    # with model.word_pointer_last (its last piece too)
    # guided alignment's targets (translation with train.guided_alignment; data/alignments.py): flat indices into the
    # (B, T, S) alignment attention and p_t[s] there, and the count of target positions with links
    align_index: torch.Tensor | None = None  # (K,)
    align_prob: torch.Tensor | None = None  # (K,)
    n_aligned: int = 0

    def to(self, device: torch.device) -> Batch:
        nb = device.type == "cuda"
        return Batch(
            src=self.src.to(device, non_blocking=nb),
            tgt_in=self.tgt_in.to(device, non_blocking=nb),
            tgt_out=self.tgt_out.to(device, non_blocking=nb),
            n_tokens=self.n_tokens,
            n_padded=self.n_padded,
            n_real=self.n_real,
            positions=self.positions.to(device, non_blocking=nb),
            target=self.target.to(device, non_blocking=nb),
            word_pos=None if self.word_pos is None else self.word_pos.to(device, non_blocking=nb),
            align_index=None if self.align_index is None else self.align_index.to(device, non_blocking=nb),
            align_prob=None if self.align_prob is None else self.align_prob.to(device, non_blocking=nb),
            n_aligned=self.n_aligned,
        )


def padded_width(longest: int, multiple: int, limit: int | None) -> int:
    """`longest` rounded up to a multiple of `multiple` (at most `limit`): with a multiple of 8 or 16, a GPU sees a
    bounded set of sequence lengths, so its kernels, attention plans and graphs are reused across batches."""
    width = -(-longest // multiple) * multiple
    return max(longest, min(width, limit)) if limit is not None else width


def collate(
    corpus: ParallelCorpus,
    indices: np.ndarray,
    *,
    pad_multiple: int = 1,
    limit: int | None = None,
    special: SpecialIds = OURS,
) -> Batch:
    """Padded tensors for the pairs `indices`; lengths padded up to a multiple of `pad_multiple` (<= `limit`);
    EOS ends each side, the decoder input starts with BOS, PAD pads (`special`: the vocabulary's ids)."""
    pad, bos, eos = special.pad, special.bos, special.eos
    import torch  # here, not at the top: `transduce prepare` and its worker processes never load torch

    n = len(indices)
    src_len = corpus.src_lengths[indices]
    tgt_len = corpus.tgt_lengths[indices]
    src = np.full((n, padded_width(int(src_len.max()), pad_multiple, limit)), pad, dtype=np.int64)
    tgt_in = np.full((n, padded_width(int(tgt_len.max()), pad_multiple, limit)), pad, dtype=np.int64)
    tgt_out = tgt_in.copy()
    for row, i in enumerate(indices):  # a loop over sentences (about 100 per batch), never over tokens
        s, t = corpus.src[i], corpus.tgt[i]
        src[row, : len(s)] = s
        src[row, len(s)] = eos
        tgt_in[row, 0] = bos
        tgt_in[row, 1 : len(t) + 1] = t
        tgt_out[row, : len(t)] = t
        tgt_out[row, len(t)] = eos
    n_tokens = int(tgt_len.sum())
    positions = np.flatnonzero(tgt_out != pad)
    return Batch(
        torch.from_numpy(src),
        torch.from_numpy(tgt_in),
        torch.from_numpy(tgt_out),
        n_tokens,
        n_padded=src.size + tgt_in.size,
        n_real=int(src_len.sum()) + n_tokens,
        positions=torch.from_numpy(positions),
        target=torch.from_numpy(tgt_out.reshape(-1)[positions]),
    )
