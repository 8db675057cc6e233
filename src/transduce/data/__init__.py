"""Data: text readers (text.py), the joint SentencePiece tokenizer (tokenizer.py), parallel-corpus preparation and
caching (parallel.py), and token-count batching (batching.py)."""

from .cache import changed_inputs, reuse_or_build
from .parallel import Batch, ParallelCorpus, Prepared, TokenArrays, collate, load_prepared, prepare
from .text import DataError, file_digest, find_side, read_lines, read_parallel, resolve_path

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
