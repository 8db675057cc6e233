"""A glossary: source terms found in a sentence, each giving a target phrase its translation must contain.

A glossary file is TSV, one entry per line: `source term<TAB>target term` (empty lines skipped, a UTF-8 byte-order
mark ignored). How terms are found in a sentence:
- **Whole words only.** A term is not found inside a word: "cat" is not found in "category" nor in "bobcat", but
  is in "Cat." and "(cat)". The check is made only on a side where the term ends in a letter or digit: "C++" is
  found in "C++11" (its end "+" needs no boundary), ".NET" in "ASP.NET".
- **CJK and other wide scripts have no spaces between words**, so a wide character (East Asian width W or F:
  Chinese, Japanese, Korean, full-width forms) never makes a boundary fail: "東京" is found in "我住在東京都", and
  "iPhone" in "我的iPhone很好".
- **Case is ignored, nothing else is.** "apple" finds "Apple" and "APPLE"; there is no stemming or inflection, so
  "mouse" does not find "mice" nor "mouses": list each form you need as its own entry.
- **Whitespace inside a term matches any run of whitespace** ("New York" finds "New  York" and "New\\nYork").
- **Leftmost, then longest, never overlapping.** The text is read left to right; where several terms start at the
  same place the longest wins ("New York City" over "New York"), and a term found is not searched again inside
  ("York" is not found inside the "New York" already taken).
- **Do-not-translate entries**: when the target is the source itself (case counts, spacing does not; e.g.
  `Roger Stone<TAB>Roger Stone`) the phrase required is the text as it appears in the sentence ("APPLE" stays
  "APPLE", runs of whitespace made one space); otherwise it is the target as written in the glossary.
- **Merging**: `Glossary.merged` adds a request's glossary to the server's; an entry of the request replaces the
  server's entry for the same source term (ignoring case and spacing).
Refused, naming the file and line: a line that is not two TAB-separated fields, an empty term, a term of more than
200 characters, the same source term (ignoring case and spacing) twice with different targets (twice with the same
target is kept once), more than 100,000 entries.

All terms are compiled into one regular expression, shaped as a trie of the terms (`_trie_pattern`): at each place in
the text the engine follows only the terms that share the characters read so far, instead of trying 100,000
alternatives one after the other, and a trie tried branch-first yields the longest term at each place. Measured on
100,000 random one- to three-word terms (Python 3.11): about 5.5 s to compile, once, and 0.3 ms to search a sentence
of 290 characters, where a flat alternation of the terms sorted longest first takes 50 ms. A merged glossary reuses
the compiled regexes of its parts.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..data import DataError, read_lines

MAX_TERM_CHARS = 200
MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class Term:
    """A glossary term found at text[start:end]."""

    start: int
    end: int
    source: str  # the matched text as it appears
    target: str  # the phrase the translation must contain


@dataclass(frozen=True)
class _Entry:
    source: str
    target: str
    where: str  # "terms.tsv:4" or "glossary: entry 4", for messages

    @property
    def keep(self) -> bool:
        """Do-not-translate: the target is the source itself (case counts, spacing does not)."""
        return self.source.split() == self.target.split()


class Glossary:
    """Source terms and their target terms, found in text by the rules of the module docstring."""

    def __init__(self, pairs: Sequence[tuple[str, str]], name: str = "glossary", *, lines: Sequence[int] = ()):
        """`lines`, when given (one per pair), are the file's line numbers, and messages name `name:line`."""
        if len(pairs) > MAX_ENTRIES:
            raise DataError(f"{name}: {len(pairs)} entries, at most {MAX_ENTRIES}")
        wheres = [f"{name}:{n}" for n in lines] if lines else [f"{name}: entry {i + 1}" for i in range(len(pairs))]
        entries = _unique(
            [_entry(source, target, where) for (source, target), where in zip(pairs, wheres, strict=True)]
        )
        patterns = (re.compile(_trie_pattern(list(entries))),) if entries else ()
        self._set(name, entries, patterns)

    def _set(self, name: str, entries: dict[str, _Entry], patterns: tuple[re.Pattern[str], ...]) -> None:
        self.name = name
        self._entries = entries  # by _key(source), overrides applied
        self._patterns = patterns  # one per glossary merged in, searched as one by `find`

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Glossary({self.name!r}, {len(self)} entries)"

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        """The (source, target) entries, a repeated one once."""
        return tuple((entry.source, entry.target) for entry in self._entries.values())

    def find(self, text: str) -> list[Term]:
        """The terms in `text`, in text order."""
        terms = []
        for start, end in _leftmost_longest(self._patterns, text):
            matched = text[start:end]
            entry = self._lookup(matched)
            target = " ".join(matched.split()) if entry.keep else entry.target
            terms.append(Term(start, end, matched, target))
        return terms

    def constraints(self, text: str) -> tuple[str, ...]:
        """The distinct target phrases of the terms in `text`, in order of first occurrence."""
        return tuple(dict.fromkeys(term.target for term in self.find(text)))

    def merged(self, other: Glossary) -> Glossary:
        """This glossary with `other`'s entries added, each replacing an entry of the same source term here (a
        request's glossary over the server's). Nothing is compiled again: `find` runs both regexes as one; a term
        both have is found by both at the same place with the same length, and its entry is `other`'s."""
        entries = dict(self._entries)
        entries.update(other._entries)  # no limit on the sum: each part was checked and compiled on its own
        new = Glossary.__new__(Glossary)
        new._set(f"{self.name}+{other.name}", entries, self._patterns + other._patterns)
        return new

    def _lookup(self, matched: str) -> _Entry:
        """The entry a match came from. The regex ignores case by Unicode simple case folding, `_key` by
        str.lower(); they differ on a handful of characters (final sigma, the long s "ſ"), so on a miss the
        entries are tried one by one."""
        entry = self._entries.get(_key(matched))
        if entry is not None:
            return entry
        for key, entry in self._entries.items():
            if re.fullmatch(r"\s+".join(map(re.escape, key.split())), matched, re.IGNORECASE):
                return entry
        raise AssertionError(f"no glossary entry matches {matched!r}")  # the regexes are built from the entries


def _leftmost_longest(patterns: tuple[re.Pattern[str], ...], text: str) -> list[tuple[int, int]]:
    """The (start, end) of the non-overlapping matches of several regexes taken as one: each regex's next match
    (its leftmost, and longest there), the leftmost of those, and of those starting there the longest."""
    if len(patterns) == 1:
        return [match.span() for match in patterns[0].finditer(text)]
    spans, upcoming = [], [pattern.search(text) for pattern in patterns]
    while any(upcoming):
        start = min(match.start() for match in upcoming if match)
        end = max(match.end() for match in upcoming if match and match.start() == start)
        spans.append((start, end))
        # a regex whose next match overlaps the one taken looks again after it
        upcoming = [
            pattern.search(text, end) if match and match.start() < end else match
            for pattern, match in zip(patterns, upcoming)
        ]
    return spans


def _entry(source: str, target: str, where: str) -> _Entry:
    source, target = source.strip(), target.strip()
    for side, term in (("source", source), ("target", target)):
        if not term:
            raise DataError(f"{where}: the {side} term is empty")
        if len(term) > MAX_TERM_CHARS:
            raise DataError(f"{where}: the {side} term has {len(term)} characters, at most {MAX_TERM_CHARS}")
    return _Entry(source, target, where)


def _unique(entries: list[_Entry]) -> dict[str, _Entry]:
    """The entries by source term (ignoring case and spacing). The same term twice is refused when the targets
    differ (which one was meant?) and kept once when they agree (two do-not-translate entries always agree)."""
    out: dict[str, _Entry] = {}
    for entry in entries:
        first = out.setdefault(_key(entry.source), entry)
        if first is not entry and (first.target != entry.target and not (first.keep and entry.keep)):
            raise DataError(
                f"{entry.where}: the source term {entry.source!r} is already in the glossary ({first.where}) with "
                f"another target: {first.target!r} there, {entry.target!r} here"
            )
    return out


# Matching ---------------------------------------------------------------------------------------------------------
def _fold(char: str) -> str:
    """One character lower-cased, kept as it is where lower() would make it two ("İ" -> "i̇")."""
    lower = char.lower()
    return lower if len(lower) == 1 else char


def _key(term: str) -> str:
    """What two spellings of one term share: characters folded, whitespace runs made one space."""
    return " ".join("".join(map(_fold, word)) for word in term.split())


@cache
def _boundary() -> str:
    """A regex that holds where a term may start or end: not between two word characters (Unicode \\w) that are
    both narrow. Placed before and after a match, it refuses "cat" in "category" but needs nothing on the side of a
    term ending in punctuation ("C++") or next to a wide character (CJK, where words are not spaced)."""
    narrow_word = f"[^\\W{''.join(f'{_escape(a)}-{_escape(b)}' for a, b in _wide_ranges())}]"
    return f"(?!(?<={narrow_word}){narrow_word})"


def _wide_ranges() -> list[tuple[int, int]]:
    """The code point ranges of East Asian width W or F (planes 0 to 3 hold every such letter; scanned at first
    use, about 0.1 s, so that the table follows the Python's Unicode version)."""
    ranges: list[list[int]] = []
    for point in range(0x40000):
        if unicodedata.east_asian_width(chr(point)) in ("W", "F"):
            if ranges and ranges[-1][1] == point - 1:
                ranges[-1][1] = point
            else:
                ranges.append([point, point])
    return [(a, b) for a, b in ranges]


def _escape(point: int) -> str:
    return f"\\U{point:08x}"


def _trie_pattern(keys: list[str]) -> str:
    """One regex finding every key (see `_key`) at word boundaries, case ignored, whitespace in a key matching any
    run of whitespace. The keys form a trie and the regex follows it: at each node the branches come before the
    end of a shorter key, so the first match the engine finds at a place is the longest (at most one branch can
    match a given character: the branches of a node are distinct folded characters)."""
    trie: dict = {}
    for key in keys:
        node = trie
        for char in key:
            node = node.setdefault(char, {})
        node[""] = {}  # the end of a key
    return f"{_boundary()}(?i:{_node_pattern(trie)}){_boundary()}"


def _node_pattern(node: dict) -> str:
    branches = [_char_pattern(char) + _node_pattern(child) for char, child in node.items() if char]
    if "" in node:
        branches.append("")  # a key ends here: tried last, after every longer key through this node
    return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"


def _char_pattern(char: str) -> str:
    return r"\s+" if char == " " else re.escape(char)


def read_glossary(path: str | Path, *, errors: str = "strict") -> Glossary:
    """A glossary from a TSV file, `source term<TAB>target term` per line (empty lines skipped)."""
    lines = read_lines(Path(path), errors=errors, allow_empty=True)  # without a byte-order mark at its start
    pairs, numbers = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            count = f"{len(fields)} field" + ("s" if len(fields) > 1 else "")
            raise DataError(f"{path}:{number}: {count}, expected 2: source term<TAB>target term")
        pairs.append((fields[0], fields[1]))
        numbers.append(number)
    return Glossary(pairs, str(path), lines=numbers)
