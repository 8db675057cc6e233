"""A prepare's inputs: each split's corpora found on disk (`split_inputs`: line-aligned PREFIX.SRC / PREFIX.TGT, or
one TSV, JSON Lines or Parquet file: formats.py), the vocabulary given by data.tokenizer (`with_tokenizer`), and the
selected lines of a training corpus read back (`select_lines`, `select_rows`). parallel.py prepares them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ..config import DataConfig
from .formats import pair_blocks, pair_format
from .marian import load_tokenizer
from .stream import CHUNK_LINES, Blocks, line_blocks, split_lines
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
                found(c.prefix, c.src or config.src, c.tgt or config.tgt, tag=c.tag, weight=c.weight)
                for c in config.corpora
            ]
        else:
            inputs[split] = [found(prefix, config.src, config.tgt, tag=config.valid_tag if split == "valid" else "")]
    return inputs


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
