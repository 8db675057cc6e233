"""Data: text readers (text.py), the joint SentencePiece tokenizer (tokenizer.py), parallel-corpus preparation and
caching (parallel.py, in chunks by stream.py; cache.py for every task), token-count batching (batching.py); trees
and their linearization (trees.py), treebank preparation (treebank.py), the parser's pointer reads (pointers.py) and
tree augmentation (augment.py); labelled text for the classifier (labelled.py).

parallel.py (which needs torch) is imported on first use: the processes that encode a corpus (stream.py) start
without torch."""

import importlib
from typing import TYPE_CHECKING, Any

from .cache import changed_inputs, reuse_or_build
from .text import DataError, file_digest, find_side, read_lines, read_parallel, resolve_path

if TYPE_CHECKING:
    from .parallel import Batch, ParallelCorpus, Prepared, TokenArrays, collate, load_prepared, prepare

_LAZY = ("Batch", "ParallelCorpus", "Prepared", "TokenArrays", "collate", "load_prepared", "prepare")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(".parallel", __name__), name)
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
