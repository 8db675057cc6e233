"""A folder `transduce prepare` made (parallel.py), opened: its tokenizer, its splits memory-mapped, its summary,
and the raw text of a split read back (`Prepared.texts`). A folder that is not one, or whose ids fall outside its
vocabulary, is refused in one line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..outputs import read_manifest
from .corpus import ParallelCorpus, TokenArrays
from .inputs import Input, select_lines, select_rows
from .marian import load_tokenizer
from .text import DataError, read_lines
from .tokenizer import Tokenizer, TokenizerError
from .training_text import training_corpora


@dataclass
class Prepared:
    """A prepared data folder: tokenizer, encoded splits (memory-mapped), and the summary that `prepare` printed."""

    root: Path
    tokenizer: Tokenizer
    splits: dict[str, ParallelCorpus]
    summary: dict
    # per split that has them (data.corpora's align: the training split), each pair's word links, memory-mapped: pair
    # i's are links[i] = [src word, tgt word, ...] (data/alignments.py; empty for a pair without)
    links: dict[str, TokenArrays] = field(default_factory=dict)

    def texts(self, split: str) -> tuple[list[str], list[str]]:
        """The raw (kept) sentences of a split: for validation and test splits (BLEU against real references) the
        folder's copies; for the training split (subword sampling) the kept lines of the input files, which must
        be unchanged since `prepare` read them."""
        if split != "train":  # the folder's copies
            return read_lines(self.root / f"{split}.src.txt"), read_lines(self.root / f"{split}.tgt.txt")
        from .training_text import check_unchanged

        lines = np.load(self.root / f"{split}.lines.npy", allow_pickle=False)
        errors = self.summary.get("options", {}).get("errors", "strict")
        sides: list[list[str]] = [[], []]
        for corpus in training_corpora(self.summary):  # each corpus's kept pairs, one after the other
            first, count = corpus["first"], corpus["sentences"]
            if corpus.get("join", 1) > 1:
                raise DataError(f"{corpus['files'][0]}: a joined corpus (data.corpora's join) has no line per pair")
            fmt = corpus.get("format", "lines")
            for k, (side, name) in enumerate(zip(sides, corpus["files"])):
                check_unchanged(Path(name), self.summary, self.root)
                if fmt == "lines":
                    side.extend(select_lines(Path(name), lines[first : first + count], errors))
                    continue
                one = Input(Path(name), Path(name), format=fmt, langs=tuple(corpus["langs"]))
                side.extend(select_rows(one, k, lines[first : first + count], errors))
        return sides[0], sides[1]


def open_prepared(folder: str | Path) -> Prepared:
    """A folder that `transduce prepare` made, opened read-only (data.prepared); anything else is refused."""
    folder = Path(folder)
    if not folder.exists():
        raise DataError(f"{folder}: no such folder (data.prepared names a folder made by `transduce prepare`)")
    manifest = read_manifest(folder)
    if not folder.is_dir() or manifest is None or manifest["kind"] != "data" or not (folder / "summary.json").is_file():
        raise DataError(f"{folder}: not a data folder made by `transduce prepare` (data.prepared names one)")
    return load_prepared(folder)


def load_prepared(root: str | Path) -> Prepared:
    root = Path(root)
    try:
        summary = json.loads((root / "summary.json").read_text(encoding="utf-8"))
        tokenizer = load_tokenizer(root / "tokenizer.model")
        splits = {
            name: ParallelCorpus(TokenArrays.load(root / f"{name}.src"), TokenArrays.load(root / f"{name}.tgt"))
            for name in summary["splits"]
        }
        links = {
            name: TokenArrays.load(root / f"{name}.links")
            for name in summary["splits"]
            if (root / f"{name}.links.ids.npy").is_file()
        }
    except (OSError, KeyError, ValueError, TokenizerError) as err:
        raise DataError(f"{root}: not a prepared data folder ({err})") from None
    for name, corpus in splits.items():
        for side, arrays in (("src", corpus.src), ("tgt", corpus.tgt)):
            _check_ids(root / f"{name}.{side}.ids.npy", arrays.ids, tokenizer.vocab_size)
    for name, arrays in links.items():
        if len(arrays) != len(splits[name]):
            raise DataError(
                f"{root / name}.links.offsets.npy: not one entry per pair of the {name} split; prepare again"
            )
    return Prepared(root, tokenizer, splits, summary, links)


ID_BLOCK = 1 << 24  # ids checked per block (a memory map read in blocks: 32 MB of uint16 at a time)


def _check_ids(path: Path, ids: np.ndarray, vocab_size: int) -> None:
    """Every id within the vocabulary: a folder whose ids are not (damaged, or made with another tokenizer) is
    refused in one line on load (it gave an IndexError in the embedding, at the first batch that held one)."""
    for start in range(0, len(ids), ID_BLOCK):
        block = ids[start : start + ID_BLOCK]
        low, high = int(block.min()), int(block.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise DataError(
                f"{path}: token id {bad} is outside the vocabulary of {vocab_size} pieces (its tokenizer.model): "
                "the folder is damaged or was not made with this tokenizer; prepare it again"
            )
