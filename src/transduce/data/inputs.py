"""A prepare's inputs: each split's corpora found on disk (`split_inputs`: line-aligned PREFIX.SRC / PREFIX.TGT, or
one TSV, JSON Lines or Parquet file: formats.py), the vocabulary given by data.tokenizer (`with_tokenizer`), and the
selected lines of a training corpus read back (`select_lines`, `select_rows`). parallel.py prepares them."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from itertools import islice, zip_longest
from pathlib import Path
from typing import Any

import numpy as np

from ..config import DataConfig
from .formats import count_rows, pair_blocks, pair_format
from .marian import load_tokenizer
from .stream import CHUNK_LINES, Blocks, ChunkJob, count_lines, line_blocks, open_binary, split_lines
from .text import DataError, file_digest, find_side, resolve_path
from .tokenizer import TokenizerError


def select_lines(path: Path, wanted: np.ndarray, errors: str) -> list[str]:
    """The lines of `path` whose numbers (from 0, rising) are in `wanted`, read in chunks."""
    out: list[str] = []
    first = 0
    for count, block in line_blocks(path, CHUNK_LINES):
        here = wanted[np.searchsorted(wanted, first) : np.searchsorted(wanted, first + count)] - first
        if len(here):
            lines = split_lines(block, str(path), first, errors)
            out.extend(lines[i] for i in here)
        first += count
    return out


@dataclass(frozen=True)
class Input:
    """One corpus of a split: its two files (absolute), the tag put before its sources, its weight (training)."""

    src: Path
    tgt: Path
    tag: str = ""
    weight: float = 1.0
    format: str = "lines"  # "lines": two line-aligned files; "tsv", "jsonl", "parquet": one file (src = tgt)
    langs: tuple[str, str] = ("", "")  # a one-file corpus: its source and target's keys (data.src, data.tgt)
    align: Path | None = None  # its word links (data.corpora's align; alignments.py), absolute
    join: int = 1  # data.corpora's join: runs of up to this many consecutive pairs joined into one (stream.py)

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file the corpus reads: its sides (one file for both in a one-file corpus) and its links."""
        return (*self.pair, *([self.align] if self.align else []))

    def side_blocks(self, side: int, rows: int) -> Blocks:
        """One side's lines in blocks of `rows`: (lines, their bytes), read anew each call."""
        if self.format == "lines":
            return partial(line_blocks, self.pair[side], rows)
        return lambda: ((n, tgt if side else src) for n, src, tgt, _ in self.blocks(rows))

    def blocks(self, rows: int) -> Iterator[tuple[int, bytes, bytes, np.ndarray]]:
        """A one-file corpus in blocks of `rows` rows (formats.pair_blocks)."""
        return pair_blocks(self.src, self.format, *self.langs, rows)

    @property
    def pair(self) -> tuple[Path, Path]:
        return self.src, self.tgt


Inputs = dict[str, list[Input]]  # split -> its corpora (one, but for a training split of data.corpora)


def split_inputs(config: DataConfig) -> Inputs:
    """Every split's files, found (PREFIX.SIDE or PREFIX.SIDE.gz) and made absolute: the summary records where the
    training text is (subword sampling reads it again)."""

    def found(prefix: str, src: str, tgt: str, **kw: Any) -> Input:
        fmt = pair_format(prefix)
        if fmt is not None:  # one file of both sides (TSV, JSONL, Parquet)
            path = resolve_path(prefix)
            if not path.is_file():
                raise DataError(f"{prefix}: no such file")
            return Input(path.absolute(), path.absolute(), format=fmt, langs=(src, tgt), **kw)
        return Input(find_side(prefix, src).absolute(), find_side(prefix, tgt).absolute(), **kw)

    inputs = {}
    for split, prefix in split_prefixes(config).items():
        if split == "train":  # data.train's pairs (if set), then each of data.corpora's
            inputs[split] = [found(prefix, config.src, config.tgt)] if config.train else []
            inputs[split] += [
                found(c.prefix, c.src or config.src, c.tgt or config.tgt, tag=c.tag, weight=c.weight,
                      align=_align_file(c.align, c.prefix), join=c.join)
                for c in config.corpora
            ]  # fmt: skip
        else:
            inputs[split] = [found(prefix, config.src, config.tgt, tag=config.valid_tag if split == "valid" else "")]
    return inputs


def _align_file(name: str, prefix: str) -> Path | None:
    """A corpus's align file (resolved under TRANSDUCE_DATA as the corpus is), absolute; None where it has none."""
    if not name:
        return None
    path = resolve_path(name)
    if not path.is_file():
        raise DataError(f"{name}: no such file (the align file of the corpus {prefix} in data.corpora)")
    return path.absolute()


def select_rows(one: Input, side: int, wanted: np.ndarray, errors: str) -> list[str]:
    """A one-file corpus's `side` of the rows whose numbers (from 0, rising) are in `wanted`."""
    out: list[str] = []
    first = 0
    for count, block in one.side_blocks(side, CHUNK_LINES)():
        here = wanted[np.searchsorted(wanted, first) : np.searchsorted(wanted, first + count)] - first
        if len(here):
            lines = split_lines(block, str(one.src), first, errors)
            out.extend(lines[i] for i in here)
        first += count
    return out


def split_prefixes(config: DataConfig) -> dict[str, str]:
    """Each split's file prefix (the training split's: data.train, or data.corpora's first), by split name."""
    if not config.train and not config.corpora:
        raise DataError("no training data: set data.train (a file prefix, e.g. multi30k/train) or data.corpora")
    splits = {"train": config.train or config.corpora[0].prefix}
    if config.valid:
        splits["valid"] = config.valid
    for prefix in config.test:  # a test split is named by its file name (what `evaluate` and the summary show)
        name = Path(prefix).name
        if name in ("train", "valid"):
            raise DataError(f"data.test: {prefix} would be named {name!r}, the name of the {name} split; rename it")
        if name in splits:
            raise DataError(
                f"data.test: {splits[name]} and {prefix} would both be named {name!r} (a test split is named by "
                "its file name); rename one"
            )
        splits[name] = prefix
    return splits


def tokenizer_file(name: str | Path) -> Path:
    """data.tokenizer (`prepare --tokenizer`): a SentencePiece .model file, or a folder that holds tokenizer.model
    (a run directory, a prepared data folder), as an absolute path."""
    path = Path(name).expanduser().absolute()
    if path.is_dir():
        path = path / "tokenizer.model"
        if not path.is_file():
            raise DataError(f"{path.parent}: no tokenizer.model here (data.tokenizer names a run, a prepared data "
                            "folder or a SentencePiece .model file)")  # fmt: skip
    elif not path.is_file():
        raise DataError(f"{path}: no such tokenizer (data.tokenizer names a run, a prepared data folder or a "
                        "SentencePiece .model file)")  # fmt: skip
    return path


def with_tokenizer(config: DataConfig) -> tuple[DataConfig, str]:
    """data.tokenizer made concrete: its absolute path, the vocabulary options set to what the tokenizer is (so the
    summary and a run's config.json say what was used), and the digest of its model and settings files ("" without
    data.tokenizer: a vocabulary is learned)."""
    if not config.tokenizer:
        return config, ""
    path = tokenizer_file(config.tokenizer)
    try:
        tokenizer = load_tokenizer(path)
    except TokenizerError as err:
        raise DataError(f"data.tokenizer: {err}") from None
    meta = tokenizer.meta
    known = {k: meta[k] for k in ("model_type", "lowercase", "split_digits") if k in meta}
    config = replace(config, tokenizer=str(path), vocab_size=tokenizer.vocab_size, **known)
    side = path.with_suffix(".json")
    digest = file_digest(path) + (file_digest(side) if side.is_file() else "")
    return config, digest


def chunk_jobs(
    config: DataConfig, split: str, inputs: list[Input], chunks: Path, tokenizer: str, id_dtype: str,
    tag_ids: dict[str, int], chunk_lines: int = CHUNK_LINES,
) -> Iterator[ChunkJob]:  # fmt: skip
    """A split's chunks of `chunk_lines` pairs (stream.encode_chunk's jobs): its corpora one after the other,
    numbered on across them, each chunk with its corpus's index, its tag id (put before every source) and its lines
    of links (data.corpora's align), read in step with its pairs: an align file of another line count is refused.
    parallel.py passes its CHUNK_LINES (the tests make chunks small there)."""
    kind = split if split in ("train", "valid") else "test"
    links = any(one.align for one in inputs)  # the split keeps links: a corpus without gets none per pair
    link_dtype = "uint16" if config.max_len < 1 << 16 else "int32"
    index = 0
    for k, one in enumerate(inputs):
        prefix = (tag_ids[one.tag],) if one.tag else ()
        with _LinkLines(one) as aligned:
            if one.format != "lines":  # one file of both sides: its rows' blocks, where each row begins
                first = 0
                for n, src, tgt, starts in one.blocks(chunk_lines):
                    yield ChunkJob(
                        split, index, first, src, tgt, str(one.src), str(one.tgt), str(chunks), tokenizer, kind,
                        config.max_len, config.max_ratio, config.errors, id_dtype, corpus=k, prefix=prefix,
                        row_starts=starts, links=links, align=aligned.take(n), align_name=str(one.align),
                        link_dtype=link_dtype, join=one.join,
                    )  # fmt: skip
                    first += n
                    index += 1
                continue
            first = src_pos = tgt_pos = 0
            for a, b in zip_longest(line_blocks(one.src, chunk_lines), line_blocks(one.tgt, chunk_lines)):
                if a is None or b is None or a[0] != b[0]:
                    check_line_counts(one.src, one.tgt, count_lines(one.src), count_lines(one.tgt))
                yield ChunkJob(
                    split, index, first, a[1], b[1], str(one.src), str(one.tgt), str(chunks), tokenizer, kind,
                    config.max_len, config.max_ratio, config.errors, id_dtype, src_pos, tgt_pos,
                    corpus=k, prefix=prefix, links=links, align=aligned.take(a[0]), align_name=str(one.align),
                    link_dtype=link_dtype, join=one.join,
                )  # fmt: skip
                first += a[0]
                src_pos += len(a[1])
                tgt_pos += len(b[1])
                index += 1


class _LinkLines:
    """A corpus's align file read in step with its pairs (`take` the next n lines; None where the corpus has none);
    on leaving, a file with more or fewer lines than the corpus has pairs is refused, naming where they part."""

    def __init__(self, one: Input) -> None:
        self.one, self.read = one, 0
        self.file = None if one.align is None else open_binary(one.align)

    def __enter__(self) -> _LinkLines:
        return self

    def take(self, n: int) -> bytes | None:
        if self.file is None:
            return None
        lines = self._lines(n)
        self.read += len(lines)
        if len(lines) < n:
            self._refuse()
        return b"".join(lines)

    def _lines(self, n: int) -> list[bytes]:
        assert self.file is not None and self.one.align is not None
        try:
            return list(islice(self.file, n))
        except (gzip.BadGzipFile, EOFError, zlib.error) as err:
            raise DataError(f"{self.one.align}: unreadable gzip data ({err or 'truncated'})") from None

    def __exit__(self, kind, *_) -> None:
        if self.file is None:
            return
        try:
            if kind is None and self._lines(1):  # read to the corpus's end: one more line is one too many
                self._refuse()
        finally:
            self.file.close()

    def _refuse(self) -> None:
        one = self.one
        assert one.align is not None
        lines = count_lines(one.align)
        pairs = count_lines(one.src) if one.format == "lines" else count_rows(one.src, one.format)
        raise DataError(
            f"{one.align}:{min(lines, pairs) + 1}: the file has {lines:,} lines of links but its corpus {one.src} "
            f"has {pairs:,} pairs; an align file has one line per pair (an empty line for a pair without links)"
        )


def check_line_counts(src_path: Path, tgt_path: Path, n_src: int, n_tgt: int) -> None:
    """Both sides of a corpus of line-aligned files hold lines, as many on each side."""
    for path, n in ((src_path, n_src), (tgt_path, n_tgt)):
        if n == 0:
            raise DataError(f"{path}: the file is empty")
    if n_src != n_tgt:
        raise DataError(
            f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; "
            "parallel files must have one sentence per line on both sides"
        )
