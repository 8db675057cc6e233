"""Two line-aligned files read together in blocks of whole lines (`pair_blocks`), so that a command can take a file of
millions of pairs in bounded memory: `score-pairs` reads a block, scores it, writes its scores, reads the next.

Both files are first read through once, a block at a time, before any block is given out: different line counts, an
empty file and invalid UTF-8 are refused then, naming the file (and the line), rather than after the scores of the
lines before them were written. Standard input ("-") and other streams (a pipe, `<(...)`) cannot be read twice:
read as they come, a difference in line counts is found where one side ends."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from itertools import islice, zip_longest
from pathlib import Path

from .stream import line_blocks, split_lines
from .text import DataError

Block = tuple[int, list[str], list[str]]  # (the index of its first pair in the files, sources, targets)


def pair_blocks(src: Path, tgt: Path, lines: int, *, errors: str = "strict") -> Iterator[Block]:
    """The pairs of `src` and `tgt` (plain, gzipped, or "-" for one of them: stdin) in blocks of `lines`, in file
    order, their lines as read_lines gives them. The files are checked through first (see the module), when this is
    called: the blocks then come as the result is iterated."""
    if str(src) == str(tgt) == "-":
        raise DataError("the sources and the targets cannot both be read from standard input")
    counts = [_checked(path, lines, errors) for path in (src, tgt) if _regular(path)]
    if len(counts) == 2 and counts[0] != counts[1]:
        raise DataError(f"{src} has {counts[0]} lines but {tgt} has {counts[1]}: one line per pair on both sides")
    return _pairs(src, tgt, lines, errors)


def _pairs(src: Path, tgt: Path, lines: int, errors: str) -> Iterator[Block]:
    first = 0
    for a, b in zip_longest(_blocks(src, lines), _blocks(tgt, lines)):
        if a is None or b is None or a[0] != b[0]:  # one side ends first (only where one is stdin)
            na, nb = (a[0] if a else 0), (b[0] if b else 0)
            short, long = (src, tgt) if na < nb else (tgt, src)
            raise DataError(
                f"{_name(short)} has {first + min(na, nb)} lines but {_name(long)} has more: one line per pair on "
                "both sides"
            )
        sources = split_lines(a[1], _name(src), first, errors)
        targets = split_lines(b[1], _name(tgt), first, errors)
        yield first, sources, targets
        first += a[0]


def _checked(path: Path, lines: int, errors: str) -> int:
    """A file's line count, read through once a block at a time: an empty file (nothing but white space) and, under
    errors "strict", invalid UTF-8 are refused (the lines decoded as the blocks will be: split_lines)."""
    count, text = 0, False
    for n, block in line_blocks(path, lines):
        decoded = split_lines(block, str(path), count, errors)  # invalid UTF-8: refused naming the line
        text = text or any(line.strip() for line in decoded)
        count += n
    if not text:
        raise DataError(f"{path}: the file is empty")
    return count


def _blocks(path: Path, lines: int) -> Iterator[tuple[int, bytes]]:
    """(lines, their bytes) per block of a file (stream.line_blocks) or of standard input."""
    if str(path) != "-":
        yield from line_blocks(path, lines)
        return
    while block := list(islice(sys.stdin.buffer, lines)):
        yield len(block), b"".join(block)


def _regular(path: Path) -> bool:
    """A file that can be read twice (not stdin, a pipe or a device); a missing one is refused as its blocks are
    read."""
    return str(path) != "-" and path.is_file()


def _name(path: Path) -> str:
    return "<stdin>" if str(path) == "-" else str(path)
