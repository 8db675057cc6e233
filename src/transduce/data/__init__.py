"""Data: text readers (text.py), the joint SentencePiece tokenizer (tokenizer.py), token arrays and batches
(corpus.py), parallel-corpus preparation (parallel.py, in chunks by stream.py), the cache every task's data uses
(cache.py), token-count batching (batching.py), two line-aligned files read in blocks (pair_blocks.py: score-pairs);
trees and their linearization (trees.py, kinds.py), treebank preparation (treebank.py), the parser's pointer reads
(pointers.py) and tree augmentation (augment.py); labelled text for the classifier (labelled.py).

corpus.py (whose collate needs torch) and parallel.py are imported on first use: the processes that encode a
corpus (stream.py) start without torch."""

import importlib
from typing import TYPE_CHECKING, Any

from .cache import changed_inputs, reuse_or_build
from .text import DataError, file_digest, find_side, read_lines, read_parallel, resolve_path

if TYPE_CHECKING:
    from .corpus import Batch, ParallelCorpus, TokenArrays, collate
    from .parallel import prepare
    from .prepared import Prepared, load_prepared

_LAZY = {
    **dict.fromkeys(("Batch", "ParallelCorpus", "TokenArrays", "collate"), ".corpus"),
    **dict.fromkeys(("Prepared", "load_prepared"), ".prepared"),
    "prepare": ".parallel",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Batch",
    "DataError",
    "ParallelCorpus",
    "Prepared",
    "TokenArrays",
    "changed_inputs",
    "collate",
    "file_digest",
    "find_side",
    "load_prepared",
    "prepare",
    "read_lines",
    "read_parallel",
    "resolve_path",
    "reuse_or_build",
]
