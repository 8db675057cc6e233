"""Streaming preparation: a parallel corpus of any size read in chunks of CHUNK_LINES pairs, each chunk encoded in a
worker process and written to disk as flat NumPy arrays; the chunks are then joined into one array per split and
side. Nothing holds the whole corpus as Python objects: the main process keeps one chunk of raw bytes per worker in
flight, and the per-pair lengths at the end.

A chunk is a pure function of its lines, the tokenizer and the options, and is written under a temporary name and
renamed when complete; so a prepare killed at any point restarts from the chunks it finished and ends with the same
bytes as an unbroken run. This module imports no torch: the worker processes start in a fraction of a second.
"""

from __future__ import annotations

import gzip
import json
import typing
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import chain, islice
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..outputs import atomic_folder, names_file
from .alignments import chunk_links, kept_links, word_starts
from .marian import load_tokenizer
from .text import DataError, decode_lines
from .tokenizer import Tokenizer

CHUNK = "data chunk"  # the manifest kind of one finished chunk in a prepare's work folder
CHUNK_LINES = 50_000  # pairs per chunk: part of the cache format (a resumed prepare relies on the same boundaries)


# Reading -----------------------------------------------------------------------------------------------------------
def open_binary(path: Path) -> IO[bytes]:
    """A file's bytes, decompressed when it ends in .gz."""
    try:
        if path.suffix == ".gz":
            return typing.cast(IO[bytes], gzip.open(path, "rb"))
        return open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, not a text file") from None


def line_blocks(path: Path, lines: int) -> Iterator[tuple[int, bytes]]:
    """The file's bytes in blocks of `lines` whole lines (the last block may be shorter), with their line counts."""
    try:
        with open_binary(path) as f:
            while True:
                block = list(islice(f, lines))
                if not block:
                    return
                yield len(block), b"".join(block)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(f"{path}: unreadable gzip data ({err or 'truncated'})") from None


def count_lines(path: Path) -> int:
    """Lines in a file (plain or gzipped) as read_lines counts them: a last line without a newline counts."""
    count, last = 0, b"\n"
    try:
        with open_binary(path) as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                count += block.count(b"\n")
                last = block[-1:]
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(f"{path}: unreadable gzip data ({err or 'truncated'})") from None
    return count + (last != b"\n")


def split_lines(data: bytes, name: str, first_line: int, errors: str) -> list[str]:
    """A block of whole lines -> its lines as read_lines gives them; a bad line is named by its number in the file."""
    return decode_lines(data, name, errors=errors, first_line=first_line)


Blocks = Callable[
    [], Iterator[tuple[int, bytes]]
]  # a side's lines in blocks: (lines, their bytes), read anew each call


def sample_lines(
    paths: list[Path], counts: list[int], size: int, *, seed: int, errors: str, blocks: list[Blocks] | None = None
) -> Iterator[str]:
    """The non-blank lines among a seeded random choice of `size` lines of the files (taken as one sequence, in file
    order); every line when the files hold no more than `size`. Streams: memory grows with `size`, not the files.
    `blocks`: each file's lines where they are not its own lines (a side of a TSV, JSONL or Parquet corpus)."""
    total = sum(counts)
    chosen = None if total <= size else choose(total, size, seed=seed)
    start = 0
    readers = blocks or [partial(line_blocks, path, CHUNK_LINES) for path in paths]
    for path, count, reader in zip(paths, counts, readers):
        mine = None if chosen is None else chosen[(chosen >= start) & (chosen < start + count)] - start
        first = 0
        for in_block, block in reader():
            if mine is None:
                yield from (line for line in split_lines(block, str(path), first, errors) if line.strip())
            else:  # only the chosen lines are decoded (the others are checked when the corpus is encoded)
                raw = block.split(b"\n")
                for i in mine[np.searchsorted(mine, first) : np.searchsorted(mine, first + in_block)] - first:
                    [line] = split_lines(raw[i] + b"\n", str(path), first + int(i), errors)
                    if line.strip():
                        yield line
            first += in_block
        start += count


def choose(total: int, size: int, *, seed: int, block: int = 1 << 20) -> np.ndarray:
    """`size` distinct integers drawn uniformly from range(total), sorted, in memory that grows with `size` (not
    `total`): block by block, how many fall in the block is drawn from the hypergeometric law, then which."""
    rng = np.random.default_rng(seed)
    parts, remaining = [], size
    for start in range(0, total, block):
        n = min(block, total - start)
        k = int(rng.hypergeometric(n, total - start - n, remaining)) if remaining else 0
        parts.append(np.sort(rng.choice(n, size=k, replace=False)) + start)
        remaining -= k
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


# Encoding (in the worker processes) ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChunkJob:
    """One chunk of one split: lines [first_line, first_line + n) of both sides, as raw bytes."""

    split: str
    index: int
    first_line: int
    src: bytes
    tgt: bytes
    src_name: str
    tgt_name: str
    folder: str  # where the chunk's folder goes (it is named after split and index)
    tokenizer: str  # the SentencePiece model's path
    kind: str  # "train" (length and ratio filters, empty pairs dropped), "valid" (length filter too), "test" (kept)
    max_len: int
    max_ratio: float
    errors: str
    id_dtype: str  # "uint16" or "int32"
    src_pos: int = 0  # the chunk's first byte in each (decompressed) file
    tgt_pos: int = 0
    corpus: int = 0  # which of the split's corpora (data.corpora) the lines are of
    prefix: tuple[int, ...] = ()  # ids put before every source (the corpus's tag), counted in its length
    # a one-file corpus (TSV, JSONL, Parquet: formats.py): where each row begins in it, for both sides; None: the
    # lines' own offsets in their files (src_pos, tgt_pos)
    row_starts: np.ndarray | None = None
    # the split keeps word links (data.corpora's align): SPLIT.links.*.npy, none for a pair of a corpus without
    links: bool = False
    align: bytes | None = None  # this chunk's lines of its corpus's align file; None: the corpus has none
    align_name: str = ""  # that file, for the errors
    link_dtype: str = "uint16"  # word indices (below data.max_len: a longer pair is dropped)
    join: int = 1  # data.corpora's join: the chunk's pairs joined in seeded runs of 2 to `join` (`joined_pairs`)


_TOKENIZERS: dict[str, Tokenizer] = {}  # per worker process: each loads the model once
_WORD_STARTS: dict[str, np.ndarray] = {}  # and its pieces' word-start marks (alignments.word_starts)


def chunk_folder(folder: str | Path, split: str, index: int) -> Path:
    return Path(folder) / f"{split}-{index:06d}"


def flat_ids(seqs: list[list[int]], lengths: np.ndarray, dtype: str) -> np.ndarray:
    return np.fromiter(chain.from_iterable(seqs), dtype=dtype, count=int(lengths.sum()))


def encode_chunk(job: ChunkJob) -> dict[str, Any]:
    """Decode, filter and encode one chunk and write it: SIDE.ids.npy (flat ids of the kept pairs), SIDE.lengths.npy,
    lines.npy (their line numbers in the files, from 0), for the training split SIDE.starts.npy (each kept line's
    first byte in its decompressed file: the text subword sampling reads), for the others SIDE.txt (the kept lines),
    where the split keeps word links links.{ids,lengths}.npy (alignments.kept_links), and stats.json (returned)."""
    final = chunk_folder(job.folder, job.split, job.index)
    if job.tokenizer not in _TOKENIZERS:
        _TOKENIZERS[job.tokenizer] = load_tokenizer(job.tokenizer)
    tokenizer = _TOKENIZERS[job.tokenizer]
    src_lines = split_lines(job.src, job.src_name, job.first_line, job.errors)
    tgt_lines = split_lines(job.tgt, job.tgt_name, job.first_line, job.errors)
    # every line of links checked against its pair's words, before anything is written (dropped pairs' too)
    links = None if job.align is None else chunk_links(job.align, job.align_name, job.first_line, src_lines, tgt_lines)
    n = len(src_lines)
    nonblank = [any(line.strip() for line in lines) for lines in (src_lines, tgt_lines)]
    kept = _nonempty(job, src_lines, tgt_lines)
    dropped = {"empty": n - len(kept)}
    if job.join > 1:  # the kept pairs joined in runs: each run's first line stands for it (line number, start)
        rng = np.random.default_rng([JOIN_SEED, job.corpus, job.index])
        src_lines, tgt_lines, kept = joined_pairs(src_lines, tgt_lines, kept, job.join, rng)
    src_ids = tokenizer.encode([src_lines[i] for i in kept], num_threads=1)
    if job.prefix:
        src_ids = [[*job.prefix, *ids] for ids in src_ids]
    tgt_ids = tokenizer.encode_target([tgt_lines[i] for i in kept], num_threads=1)
    src_len = np.fromiter(map(len, src_ids), dtype=np.int64, count=len(kept))
    tgt_len = np.fromiter(map(len, tgt_ids), dtype=np.int64, count=len(kept))
    ok = _length_filters(job, src_len, tgt_len, dropped)
    stats: dict[str, Any] = {
        "first_line": job.first_line,
        "corpus": job.corpus,
        "lines": n,
        "sentences": int(ok.sum()),
        "dropped": dropped,
        "nonblank": nonblank,
    }
    with names_file(final), atomic_folder(final, CHUNK) as folder:  # a chunk on disk is always whole
        sides = (("src", src_ids, src_len, src_lines, job.src), ("tgt", tgt_ids, tgt_len, tgt_lines, job.tgt))
        for side, ids, lengths, lines, raw in sides:
            flat = flat_ids(ids, lengths, job.id_dtype)[np.repeat(ok, lengths)]
            stats[f"{side}_tokens"] = int(flat.size)
            stats[f"{side}_unk"] = int((flat == tokenizer.special.unk).sum())
            np.save(folder / f"{side}.ids.npy", flat, allow_pickle=False)
            np.save(folder / f"{side}.lengths.npy", lengths[ok].astype(np.int32), allow_pickle=False)
            if job.kind == "train" and job.row_starts is not None:
                np.save(folder / f"{side}.starts.npy", job.row_starts[kept[ok]], allow_pickle=False)
            elif job.kind == "train":
                starts = line_starts(raw)[kept[ok]] + (job.src_pos if side == "src" else job.tgt_pos)
                np.save(folder / f"{side}.starts.npy", starts, allow_pickle=False)
            else:
                text = "".join(lines[i] + "\n" for i in kept[ok])
                (folder / f"{side}.txt").write_bytes(text.encode("utf-8"))
        np.save(folder / "lines.npy", (kept[ok] + job.first_line).astype(np.int64), allow_pickle=False)
        if job.links:  # the kept pairs' links, in step with their ids
            rows = [(kept[p], src_ids[p], tgt_ids[p]) for p in np.flatnonzero(ok)]
            stats.update(_save_links(folder, job, tokenizer, links, rows, (src_lines, tgt_lines)))
        (folder / "stats.json").write_text(json.dumps(stats) + "\n", encoding="utf-8")
    return stats


def _nonempty(job: ChunkJob, src_lines: list[str], tgt_lines: list[str]) -> np.ndarray:
    """The chunk's pairs kept before encoding: those with text on both sides (a test split keeps every line)."""
    n = len(src_lines)
    if job.kind == "test":
        return np.arange(n)
    return np.flatnonzero(np.fromiter((bool(a.strip() and b.strip()) for a, b in zip(src_lines, tgt_lines)), bool, n))


JOIN_SEED = 0x6A6F696E  # data.corpora's join: the runs of chunk i of corpus c are drawn from (this, c, i)


def joined_pairs(
    src: list[str], tgt: list[str], kept: np.ndarray, most: int, rng: np.random.Generator
) -> tuple[list[str], list[str], np.ndarray]:
    """The kept pairs (line indices `kept`, in order) in runs of 2 to `most` consecutive ones, each run's length
    drawn from `rng` (the last run may be shorter), its sentences joined by a space: lists as long as `src` whose
    entries at the returned indices (each run's first line) hold the joined runs. Runs never cross a chunk: a pure
    function of the chunk, so a resumed prepare writes the same bytes."""
    sizes = rng.integers(2, most + 1, size=len(kept) // 2 + 1)
    ends = np.cumsum(sizes)
    ends = np.append(ends[ends < len(kept)], len(kept)) if len(kept) else ends[:0]
    starts = np.concatenate(([0], ends[:-1])).astype(np.int64)[: len(ends)]
    out_src, out_tgt = list(src), list(tgt)
    for a, b in zip(starts.tolist(), ends.tolist()):
        run = kept[a:b].tolist()
        out_src[run[0]] = " ".join(src[i].strip() for i in run)
        out_tgt[run[0]] = " ".join(tgt[i].strip() for i in run)
    return out_src, out_tgt, kept[starts]


def _save_links(
    folder: Path, job: ChunkJob, tokenizer, links: list[list[int]] | None, rows: list, lines: tuple[list, list]
) -> dict[str, int]:
    """links.{ids,lengths}.npy: the links of the chunk's kept pairs (`rows`: line, source ids, target ids), in step
    with their ids (alignments.kept_links); returns the stats of how many pairs kept links and how many lost them."""
    if job.tokenizer not in _WORD_STARTS:
        _WORD_STARTS[job.tokenizer] = word_starts(tokenizer)
    flat, lengths, unlinked = kept_links(links, rows, *lines, _WORD_STARTS[job.tokenizer])
    np.save(folder / "links.ids.npy", flat.astype(job.link_dtype), allow_pickle=False)
    np.save(folder / "links.lengths.npy", lengths, allow_pickle=False)
    return {"unlinked": unlinked, "linked": int((lengths > 0).sum())}


def _length_filters(job: ChunkJob, src_len: np.ndarray, tgt_len: np.ndarray, dropped: dict[str, int]) -> np.ndarray:
    """Which of the (non-empty) pairs stay: all in a test split; in train and valid none longer than max_len on
    either side; in train none whose longer side exceeds max_ratio times the shorter. Counts what goes in
    `dropped`."""
    ok = np.ones(len(src_len), dtype=bool)
    if job.kind == "test":
        return ok
    long = (src_len > job.max_len) | (tgt_len > job.max_len)
    ok &= ~long
    dropped["too_long"] = int(long.sum())
    dropped["ratio"] = 0
    if job.kind == "train":
        ratio = ~long & (np.maximum(src_len, tgt_len) > job.max_ratio * np.maximum(1, np.minimum(src_len, tgt_len)))
        ok &= ~ratio
        dropped["ratio"] = int(ratio.sum())
    return ok


def line_starts(data: bytes) -> np.ndarray:
    """The offset of each line's first byte in a block of whole lines (int64)."""
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1
    starts = np.concatenate(([0], ends)).astype(np.int64)
    return starts if len(data) and data[-1:] != b"\n" else starts[:-1]


def read_chunk_stats(folder: Path) -> dict[str, Any] | None:
    """The stats of a finished chunk, or None when it is missing or incomplete (it is then encoded again)."""
    try:
        return json.loads((folder / "stats.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
