"""Per-line terminology given by the user: target phrases a translation must or must not contain, and target
prefixes a translation must start with.

A constraints file has one line per input line, in the layout fairseq's constrained decoding reads (phrases separated
by TAB), with one addition for negative constraints:

    Bundesrat<TAB>Gesetz<TAB>##<TAB>Parlament

- the fields before a field `##` are phrases the translation must contain, those after it phrases it must not
  contain; without `##` every phrase is one to contain; at most one `##` on a line;
- each phrase is stripped of surrounding whitespace; an empty phrase (two tabs in a row, a tab at either end of the
  line) is refused rather than read as "no phrase", since it is almost always a slip of the editor;
- an empty (or all-whitespace) line means no constraints for that input line;
- a phrase repeated on its side is kept once; a phrase on both sides is refused (no translation can satisfy it);
- at most 32 phrases per line and 200 characters per phrase: constrained beam search keeps a state per phrase, and a
  longer list is more likely a wrong file (a whole document pasted in) than a real need.

A prefixes file has one prefix per input line (an empty line: no prefix), taken as written, spaces included: the
translation is forced to start with exactly that text. Prefixes of more than 1000 characters are refused.

Every error is a `DataError` naming the file and the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..data import DataError, read_lines

SEPARATOR = "##"  # the field between the phrases to include and the phrases to exclude
MAX_PHRASES = 32
MAX_PHRASE_CHARS = 200
MAX_PREFIX_CHARS = 1000


@dataclass(frozen=True)
class Constraints:
    """Target phrases one translation must contain (`include`) and must not contain (`exclude`)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude)


def parse_constraints(line: str, where: str) -> Constraints:
    """The constraints of one line of a constraints file; `where` ("cons.txt:3") starts every error message."""
    if not line.strip():
        return Constraints()
    fields = [field.strip() for field in line.split("\t")]
    separators = [i for i, field in enumerate(fields) if field == SEPARATOR]
    if len(separators) > 1:
        raise DataError(
            f"{where}: a second {SEPARATOR} (field {separators[1] + 1}); a line has at most one, between the "
            "phrases to include and the phrases to exclude"
        )
    cut = separators[0] if separators else len(fields)
    _check_fields(fields, where)
    include = tuple(dict.fromkeys(fields[:cut]))  # repeated phrases kept once, in order
    exclude = tuple(dict.fromkeys(fields[cut + 1 :]))
    both = [phrase for phrase in include if phrase in exclude]
    if both:
        raise DataError(f"{where}: {both[0]!r} is both a phrase to include and a phrase to exclude")
    return Constraints(include, exclude)


def _check_fields(fields: list[str], where: str) -> None:
    """Refuse empty and over-long phrases, and too many of them (the separator is not a phrase)."""
    phrases = 0
    for number, field in enumerate(fields, start=1):
        if not field:
            raise DataError(f"{where}: field {number} is empty (two tabs in a row, or a tab at an end of the line?)")
        if field == SEPARATOR:
            continue
        phrases += 1
        if len(field) > MAX_PHRASE_CHARS:
            raise DataError(f"{where}: field {number} has {len(field)} characters, at most {MAX_PHRASE_CHARS}")
    if phrases > MAX_PHRASES:
        raise DataError(f"{where}: {phrases} phrases, at most {MAX_PHRASES} per line")


def read_constraints(path: str | Path, *, errors: str = "strict") -> list[Constraints]:
    """Every line of a constraints file parsed (an empty file: no lines)."""
    lines = _read(path, errors)
    return [parse_constraints(line, f"{path}:{number}") for number, line in enumerate(lines, start=1)]


def check_count(what: str, path: str | Path, n: int, n_input: int, input_name: str) -> None:
    """Refuse a per-line file whose line count differs from the input's: pairing them by position would silently
    give line i's constraints to another sentence."""
    if n != n_input:
        raise DataError(f"{path} has {n} lines but {input_name} has {n_input}: {what} needs one line per input line")


def read_prefixes(path: str | Path, *, errors: str = "strict") -> list[str]:
    """One target prefix per line, as written (only the line end removed); an empty line is no prefix."""
    prefixes = _read(path, errors)
    for number, prefix in enumerate(prefixes, start=1):
        if len(prefix) > MAX_PREFIX_CHARS:
            raise DataError(f"{path}:{number}: the prefix has {len(prefix)} characters, at most {MAX_PREFIX_CHARS}")
    return prefixes


def _read(path: str | Path, errors: str) -> list[str]:
    """The file's lines without their line ends (read_lines drops a byte-order mark at its start)."""
    return read_lines(Path(path), errors=errors, allow_empty=True)
