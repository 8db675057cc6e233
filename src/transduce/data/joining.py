"""A split's finished chunks joined into its arrays: SPLIT.SIDE.{ids,lengths,offsets}.npy, SPLIT.lines.npy and, for
the training split, SPLIT.SIDE.starts.npy (else SPLIT.SIDE.txt) and its word links where it has them, each written
part by part (never a whole array in memory, never a memory map being filled)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..outputs import names_file
from .corpus import ParallelCorpus, TokenArrays


def join_chunks(
    split: str, folders: list[Path], out: Path, id_dtype: str, *, text: bool, links: bool = False
) -> ParallelCorpus:
    """One split's chunks joined into OUT/SPLIT.SIDE.{ids,lengths,offsets}.npy, OUT/SPLIT.lines.npy (each kept
    pair's line number in the input files) and, for the training split, OUT/train.SIDE.starts.npy (where each kept
    line begins in its decompressed input file), for the others OUT/SPLIT.SIDE.txt; with `links`, the kept pairs'
    word links as OUT/SPLIT.links.{ids,lengths,offsets}.npy (data/alignments.py). Each file is written chunk by
    chunk (never a whole array in memory, never a memory map being filled); read back memory-mapped."""

    def parts(name: str) -> Callable[[], Iterator[np.ndarray]]:
        return lambda: (np.load(f / f"{name}.npy", mmap_mode="r", allow_pickle=False) for f in folders)

    for name in ["lines"] if text else ["lines", "src.starts", "tgt.starts"]:
        _write_joined(out / f"{split}.{name}.npy", parts(name), np.int64)
    for side in ("src", "tgt", "links") if links else ("src", "tgt"):
        lengths = parts(f"{side}.lengths")
        longest = max((int(np.max(a, initial=0)) for a in lengths()), default=0)
        _write_joined(out / f"{split}.{side}.lengths.npy", lengths, _length_dtype(longest))
        _write_joined(out / f"{split}.{side}.offsets.npy", partial(_running_offsets, lengths), np.int64)
        # the links keep their chunks' type (ChunkJob.link_dtype)
        dtype = np.dtype(id_dtype) if side != "links" else next((a.dtype for a in parts("links.ids")()), np.int32)
        _write_joined(out / f"{split}.{side}.ids.npy", parts(f"{side}.ids"), dtype)
        if text and side != "links":
            with names_file(out / f"{split}.{side}.txt"), open(out / f"{split}.{side}.txt", "wb") as dst:
                for f in folders:
                    with open(f / f"{side}.txt", "rb") as src:
                        shutil.copyfileobj(src, dst)
    return ParallelCorpus(TokenArrays.load(out / f"{split}.src"), TokenArrays.load(out / f"{split}.tgt"))


def _length_dtype(longest: int) -> Any:
    return np.uint16 if longest < 1 << 16 else np.int32


def _running_offsets(lengths: Callable[[], Iterator[np.ndarray]]) -> Iterator[np.ndarray]:
    """0, then the cumulative sum of the lengths, one chunk at a time."""
    carry = 0
    yield np.zeros(1, dtype=np.int64)
    for part in lengths():
        offsets = np.cumsum(part, dtype=np.int64) + carry
        carry = int(offsets[-1]) if len(offsets) else carry
        yield offsets


def _write_joined(path: Path, parts: Callable[[], Iterator[np.ndarray]], dtype: Any) -> None:
    """A .npy file of the parts one after another, streamed: its header first (the length counted by a first pass
    over the parts' headers). One part is mapped at a time: a part read is unmapped before the next (the pages of
    a memory map count as the process's memory while it is mapped)."""
    total = sum(len(p) for p in parts())
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (total,)}
    with names_file(path), open(path, "wb") as f:  # a full disk's error names the file
        np.lib.format.write_array_header_1_0(f, header)
        for p in parts():
            f.write(np.ascontiguousarray(p, dtype=dtype).tobytes())
            del p
