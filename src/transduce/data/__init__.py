"""Data: text readers (text.py), the joint SentencePiece tokenizer (tokenizer.py), parallel-corpus preparation and
caching (parallel.py), and token-count batching (batching.py)."""

from .parallel import Batch, ParallelCorpus, Prepared, TokenArrays, changed_inputs, collate, load_prepared, prepare
from .text import DataError, file_digest, find_side, read_lines, read_parallel, resolve_path

__all__ = ["Batch", "DataError", "ParallelCorpus", "Prepared", "TokenArrays", "changed_inputs", "collate",
           "file_digest", "find_side", "load_prepared", "prepare", "read_lines", "read_parallel", "resolve_path"]
