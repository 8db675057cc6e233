"""Terminology for translation, at the level of text: a glossary whose source terms, found in a sentence, give the
target phrases its translation must contain (glossary.py), and per-line files of phrases to include or exclude and of
target prefixes (constraints.py). Nothing here decodes: the decoder gets the phrases and enforces them."""

from .constraints import Constraints, check_count, parse_constraints, read_constraints, read_prefixes
from .glossary import Glossary, Term, read_glossary

__all__ = [
    "Constraints",
    "Glossary",
    "Term",
    "check_count",
    "parse_constraints",
    "read_constraints",
    "read_glossary",
    "read_prefixes",
]
