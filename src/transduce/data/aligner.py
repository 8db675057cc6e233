"""`transduce align`: word links for a parallel corpus, the input of guided alignment (data/alignments.py).

eflomal (Östling and Tiedemann 2017; PyPI `eflomal`, the optional extra `align`) aligns the corpus in both
directions; the two are joined by grow-diag-final-and (Koehn et al. 2005, Moses' default), which eflomal's package
does not offer. The output has one line of Pharaoh links `i-j` (0-based source word - target word, the words of
str.split) per pair, empty for a pair without links. eflomal samples with a seed of its own: two runs may differ in
a few links.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..outputs import atomic_write, refuse_existing_file
from .stream import CHUNK_LINES, count_lines, line_blocks, split_lines
from .text import DataError

# the 8 neighbours of a link in the source x target grid: the sides first, then the diagonals (grow-diag)
NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))

Links = set[tuple[int, int]]  # (source word, target word)


def grow_diag_final_and(forward: Links, reverse: Links) -> list[tuple[int, int]]:
    """The symmetrization of two directions' links (Koehn et al. 2005): start from their intersection; grow it by
    the union's links next to a link (diagonals included) that join a word not yet linked on either side, until none
    is added; then (final-and) add each direction's links that join two words both still unlinked. Sorted."""
    union = forward | reverse
    links = forward & reverse
    src_linked, tgt_linked = {i for i, _ in links}, {j for _, j in links}

    def add(i: int, j: int) -> None:
        links.add((i, j))
        src_linked.add(i)
        tgt_linked.add(j)

    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in NEIGHBOURS:
                p, q = i + di, j + dj
                if (p, q) in union and (p, q) not in links and (p not in src_linked or q not in tgt_linked):
                    add(p, q)
                    grown = True
    for direction in (forward, reverse):
        for i, j in sorted(direction):
            if i not in src_linked and j not in tgt_linked:
                add(i, j)
    return sorted(links)


def read_pharaoh(line: str) -> Links:
    """A line of eflomal's links ("0-0 1-2") as a set."""
    return {(int(i), int(j)) for i, _, j in (token.partition("-") for token in line.split())}


def align_corpus(src: Path, tgt: Path, out: Path, *, errors: str = "strict", log: Callable[[str], None] = print) -> int:
    """Align the corpus SRC / TGT (plain or gzipped, one sentence per line) with eflomal in both directions and write
    their grow-diag-final-and links to OUT, a new file (an existing one is refused before any work: nothing of
    the user's is replaced). Returns the number of links written."""
    refuse_existing_file(out, "links")
    counts = [count_lines(path) for path in (src, tgt)]  # the files are checked before eflomal's long run
    for path, n in zip((src, tgt), counts):
        if not n:
            raise DataError(f"{path}: the file is empty")
    if counts[0] != counts[1]:
        raise DataError(f"{src} has {counts[0]} lines but {tgt} has {counts[1]}; a corpus has one pair per line")
    try:
        import eflomal
    except ImportError:
        raise DataError("transduce align needs eflomal: pip install 'transduce[align]'") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    log(f"align: {counts[0]:,} pairs of {src} and {tgt}, eflomal in both directions")
    # the two directions' links beside the output (they are as large as it), removed however this ends
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as scratch:
        forward, reverse = Path(scratch) / "forward", Path(scratch) / "reverse"
        eflomal.Aligner().align(
            _words(src, errors), _words(tgt, errors), links_filename_fwd=str(forward), links_filename_rev=str(reverse)
        )
        written = [0]

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as f:
                for links in _symmetrized(forward, reverse, counts[0]):
                    f.write(" ".join(f"{i}-{j}" for i, j in links) + "\n")
                    written[0] += len(links)

        refuse_existing_file(out, "links")  # made while eflomal ran?
        atomic_write(out, write)
    log(f"align: {written[0]:,} links (grow-diag-final-and) written to {out}")
    return written[0]


def _words(path: Path, errors: str) -> Iterator[str]:
    """The file's lines as eflomal reads them: the words of str.split, one space apart (so that eflomal's word
    indices are those of the links' definition), read block by block."""
    first = 0
    for count, block in line_blocks(path, CHUNK_LINES):
        for line in split_lines(block, str(path), first, errors):
            yield " ".join(line.split()) + "\n"
        first += count


def _symmetrized(forward: Path, reverse: Path, pairs: int) -> Iterable[list[tuple[int, int]]]:
    """Each pair's grow-diag-final-and links, from eflomal's two files read in step."""
    with open(forward, encoding="utf-8") as fwd, open(reverse, encoding="utf-8") as rev:
        n = 0
        for a, b in zip(fwd, rev):
            n += 1
            yield grow_diag_final_and(read_pharaoh(a), read_pharaoh(b))
    if n != pairs:  # eflomal stopped short (killed, out of memory): never a file with fewer lines than pairs
        raise DataError(f"eflomal wrote links for {n:,} of {pairs:,} pairs; nothing was written")
