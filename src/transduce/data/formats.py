"""Parallel corpora in one file, as the datasets library and other tools store them: TSV (`source<TAB>target` a line),
JSON Lines (the Hub's `{"translation": {"en": ..., "de": ...}}` a line, or `{"en": ..., "de": ...}`: the keys are
data.src and data.tgt) and Parquet (a `translation` struct column, or two columns named data.src and data.tgt; read
by row groups with pyarrow).

`pair_blocks` reads one in blocks of rows and gives each block as the two sides' lines, the bytes that the
line-aligned files PREFIX.SRC and PREFIX.TGT would hold (so a block is encoded by the same code, into the same ids),
with where each row begins in the (decompressed) file: TSV and JSONL rows are lines, which subword sampling reads
again by offset (`row_sides`). A bad row is refused naming the file and the row (its line: rows count from 1).
Memory: one block of rows at a time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from .text import DataError, without_bom

FORMATS = {".tsv": "tsv", ".jsonl": "jsonl", ".parquet": "parquet"}  # a corpus file's suffix (before .gz) -> format


def pair_format(path: str | Path) -> str | None:
    """The format of a one-file corpus by its name (x.tsv, x.tsv.gz, x.jsonl, x.jsonl.gz, x.parquet), else None."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
        if name.endswith(".parquet"):
            return None  # Parquet compresses its own pages
    return FORMATS.get(Path(name).suffix)


def count_rows(path: Path, fmt: str) -> int:
    """The corpus's pairs: Parquet's row count from its footer, else its lines."""
    if fmt == "parquet":
        return _parquet(path).metadata.num_rows
    from .stream import count_lines

    return count_lines(path)


def pair_blocks(path: Path, fmt: str, src: str, tgt: str, rows: int) -> Iterator[tuple[int, bytes, bytes, np.ndarray]]:
    """The corpus in blocks of `rows` pairs: (pairs, source lines, target lines, each pair's first byte in the
    decompressed file; for Parquet, its row number)."""
    if fmt == "parquet":
        yield from _parquet_blocks(path, src, tgt, rows)
        return
    from .stream import open_binary

    first = at = 0
    with open_binary(path) as f:
        while True:
            lines = list(islice(f, rows))
            if not lines:
                return
            starts = np.cumsum([at] + [len(line) for line in lines[:-1]], dtype=np.int64)
            if first == 0:  # the file's start: a byte-order mark is no part of the first row (nor valid JSON)
                lines[0] = without_bom(lines[0])
            pairs = [row_sides(line, fmt, src, tgt, path, first + k + 1) for k, line in enumerate(lines)]
            yield len(lines), _joined(p[0] for p in pairs), _joined(p[1] for p in pairs), starts
            first += len(lines)
            at += sum(len(line) for line in lines)


def row_sides(line: bytes, fmt: str, src: str, tgt: str, path: Path, row: int) -> tuple[bytes, bytes]:
    """One TSV or JSONL row -> its source and target as UTF-8 bytes (decoded, and checked, where they are encoded)."""
    line = line.rstrip(b"\n").rstrip(b"\r")
    if fmt == "tsv":
        fields = line.split(b"\t")
        if len(fields) != 2:
            raise DataError(f"{path}:{row}: expected 2 tab-separated fields (source, target), found {len(fields)}")
        return fields[0], fields[1]
    if not line.strip():
        raise DataError(f"{path}:{row}: an empty line (a JSON Lines corpus holds one object a line)")
    try:
        record = json.loads(line)
    except ValueError as err:
        raise DataError(f"{path}:{row}: not a JSON object ({str(err).split(':')[0]})") from None
    a, b = (_text(_field(record, key, path, row), path, row).encode("utf-8", "surrogatepass") for key in (src, tgt))
    return a, b  # a lone surrogate stays invalid UTF-8: refused (or replaced) where the text is decoded


def _field(record: Any, key: str, path: Path, row: int) -> Any:
    if not isinstance(record, dict):
        raise DataError(f"{path}:{row}: not a JSON object")
    where = record.get("translation", record)
    if not isinstance(where, dict) or key not in where:
        raise DataError(
            f'{path}:{row}: no "{key}" field (expected {{"translation": {{"{key}": ...}}}} or {{"{key}": ...}})'
        )
    return where[key]


def _text(value: Any, path: Path, row: int) -> str:
    if not isinstance(value, str):
        raise DataError(f"{path}:{row}: a sentence must be a string, got {type(value).__name__}")
    if "\n" in value or "\r" in value:
        raise DataError(f"{path}:{row}: a sentence holds a line break")
    return value


def _joined(sides: Iterator[bytes]) -> bytes:
    return b"".join(side + b"\n" for side in sides)


def _parquet(path: Path):
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - a dependency; a broken install
        raise DataError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        return pq.ParquetFile(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except Exception as err:  # pyarrow's ArrowInvalid and friends: the file is not Parquet
        raise DataError(f"{path}: not a readable Parquet file ({str(err).splitlines()[0][:120]})") from None


def _parquet_blocks(path: Path, src: str, tgt: str, rows: int) -> Iterator[tuple[int, bytes, bytes, np.ndarray]]:
    table = _parquet(path)
    names = table.schema_arrow.names
    if "translation" in names:
        columns, pick = ["translation"], lambda batch, key: batch.column("translation").field(key)
        fields = [f.name for f in table.schema_arrow.field("translation").type]
        missing = [key for key in (src, tgt) if key not in fields]
    else:
        columns, pick = [src, tgt], lambda batch, key: batch.column(key)
        missing = [key for key in (src, tgt) if key not in names]
    if missing:
        raise DataError(
            f'{path}: no "{missing[0]}" column (expected a "translation" struct column, or columns named '
            f"{src} and {tgt})"
        )
    first = 0
    try:
        for batch in table.iter_batches(batch_size=rows, columns=columns):
            sides = [pick(batch, key).to_pylist() for key in (src, tgt)]
            for side in sides:
                for k, value in enumerate(side):
                    if value is None:
                        raise DataError(f"{path}: row {first + k + 1}: a missing (null) sentence")
                    _text(value, path, first + k + 1)
            n = batch.num_rows
            rows_here = np.arange(first, first + n, dtype=np.int64)
            src_lines, tgt_lines = (_joined(v.encode("utf-8", "surrogatepass") for v in side) for side in sides)
            yield n, src_lines, tgt_lines, rows_here
            first += n
    except DataError:
        raise
    except Exception as err:  # a truncated or corrupt page
        raise DataError(f"{path}: unreadable Parquet data ({str(err).splitlines()[0][:120]})") from None
