"""EVALB's parameters, as its .prm files set them: `Params` (the program's defaults), `COLLINS` (COLLINS.prm, the
standard setting of published WSJ results), `default_params` (COLLINS.prm plus DELETE_LABEL ROOT) and `read_params`
(a .prm file read by EVALB's rules, stricter about what it does not know). evalb.py's docstring gives the rules
the parameters drive; evalb_scoring.py applies them."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from ..data.trees import TreeError, read_lines


@dataclass(frozen=True)
class Params:
    """EVALB's parameters; the defaults are the program's own when no parameter file is given."""

    debug: int = 0
    max_error: int = 10
    cutoff_len: int = 40
    labeled: bool = True
    delete_labels: tuple[str, ...] = ()
    delete_labels_for_length: tuple[str, ...] = ()
    quote_labels: tuple[str, ...] = ()
    eq_labels: tuple[tuple[str, str], ...] = ()
    eq_words: tuple[tuple[str, str], ...] = ()

    def label_equal(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_labels or (b, a) in self.eq_labels

    def word_equal(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_words or (b, a) in self.eq_words


# EVALB's COLLINS.prm, the standard setting of published WSJ results (comments dropped, settings in file order).
COLLINS = Params(
    debug=0,
    max_error=10,
    cutoff_len=40,
    labeled=True,
    delete_labels=("TOP", "-NONE-", ",", ":", "``", "''", "."),
    delete_labels_for_length=("-NONE-",),
    eq_labels=(("ADVP", "PRT"),),
)


def default_params() -> Params:
    """COLLINS.prm plus DELETE_LABEL ROOT: the root bracket of a ROOT-rooted tree is not scored, as TOP is not."""
    return replace(COLLINS, delete_labels=(*COLLINS.delete_labels, "ROOT"))


_INT_KEYS = {"DEBUG": "debug", "MAX_ERROR": "max_error", "CUTOFF_LEN": "cutoff_len", "LABELED": "labeled"}


def read_params(path: str | Path) -> Params:
    """Parameters from an EVALB .prm file: one `KEYWORD value` per line; lines starting with '#' and lines shorter
    than 3 characters are ignored (EVALB's rules). Unknown keywords and malformed values are refused (EVALB only
    warns, which would let a misspelt DELETE_LABEL change scores silently)."""
    values: dict[str, int] = {}
    lists: dict[str, list[str]] = {"DELETE_LABEL": [], "DELETE_LABEL_FOR_LENGTH": [], "QUOTE_LABEL": []}
    pairs: dict[str, list[tuple[str, str]]] = {"EQ_LABEL": [], "EQ_WORD": []}
    for number, text in read_lines(path):
        text = text.rstrip()
        if text.startswith("#") or len(text) < 3:
            continue
        parts = text.split(None, 1)  # EVALB: the value starts after the blanks that follow the keyword
        key, value = parts[0], parts[1].strip() if len(parts) == 2 else ""

        def fail(reason: str, number: int = number) -> TreeError:
            return TreeError(reason, source=str(path), line=number)

        if not value:
            raise fail(f"{key} has no value")
        if key in _INT_KEYS:
            if not re.fullmatch(r"[+-]?\d+", value.strip()):
                raise fail(f"{key} needs a whole number, not {value!r}")
            values[_INT_KEYS[key]] = int(value)
        elif key in pairs:
            pair = value.split()
            if len(pair) != 2:
                raise fail(f"{key} needs two values, not {len(pair)}")
            pairs[key].append((pair[0], pair[1]))
        elif key in lists:
            lists[key].append(value)
        else:
            raise fail(
                f"unknown keyword {key!r} (DEBUG, MAX_ERROR, CUTOFF_LEN, LABELED, DELETE_LABEL, "
                "DELETE_LABEL_FOR_LENGTH, QUOTE_LABEL, EQ_LABEL, EQ_WORD)"
            )
    defaults = Params()
    return Params(
        debug=values.get("debug", defaults.debug),
        max_error=values.get("max_error", defaults.max_error),
        cutoff_len=values.get("cutoff_len", defaults.cutoff_len),
        labeled=values["labeled"] != 0 if "labeled" in values else defaults.labeled,
        delete_labels=tuple(lists["DELETE_LABEL"]),
        delete_labels_for_length=tuple(lists["DELETE_LABEL_FOR_LENGTH"]),
        quote_labels=tuple(lists["QUOTE_LABEL"]),
        eq_labels=tuple(pairs["EQ_LABEL"]),
        eq_words=tuple(pairs["EQ_WORD"]),
    )
