"""Terminology in a translation request: `POST /v1/translate`'s `constraints`, `prefix` and `glossary`
(messages.py), and the server's own glossary (`serve --glossary`).

Why a module of its own: each field is checked before anything reaches the model (the server's rule: one client's
request cannot make the shared model do unbounded work), then turned into the objects the decoder takes
(transduce.terminology's `Constraints` and `Glossary`), which the request's decoding options (service.DecodeOptions,
the batching key) carry to the model call. The bounds: per text at most MAX_PHRASES phrases of MAX_PHRASE_CHARS
characters and a prefix of MAX_PREFIX_CHARS (terminology/constraints.py); per request at most
Limits.max_glossary_entries glossary entries, each term of at most MAX_TERM_CHARS (terminology/glossary.py). A
request's glossary is compiled per request (about 0.5 s for 1,000 terms of 200 characters), off the event loop.

Batching: constraints and prefixes are per text, and a request's glossary is its own, so a request with any of them
is decoded apart from others (service.set_apart); the server's glossary is one object, the same in every request's
options, so requests without terminology of their own batch exactly as before.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from ..config import ConfigError
from ..data import DataError
from ..terminology import Constraints, Glossary
from ..terminology.constraints import MAX_PHRASE_CHARS, MAX_PHRASES, MAX_PREFIX_CHARS
from ..terminology.glossary import MAX_TERM_CHARS
from .messages import ConstraintsIn, TranslateRequest
from .service import ApiError, DecodeOptions, Service, set_apart


async def with_terminology(service: Service, request: TranslateRequest, options: DecodeOptions) -> DecodeOptions:
    """`options` carrying the request's terminology and the server's glossary (a 422 for anything out of bounds or
    malformed); set apart when the request brings terminology of its own. Call after `service.check_texts`."""
    if request.format != "text" and (request.constraints is not None or request.prefix is not None):
        raise ApiError(
            422,
            "invalid_request",
            f"format {request.format} gives one document: no constraints or prefix (a glossary applies)",
        )
    n_texts = len(request.text)
    constraints = _constraints(request.constraints, n_texts)
    prefixes = _prefixes(request.prefix, n_texts)
    own = await _glossary(service, request.glossary)
    glossary = service.glossary if own is None else own if service.glossary is None else service.glossary.merged(own)
    options = dataclasses.replace(options, constraints=constraints, prefixes=prefixes, glossary=glossary)
    return set_apart(options) if constraints or prefixes or own is not None else options


def check_server_glossary(task: str | None, engine: str) -> None:
    """A server's glossary serves a translation run on the torch engine only (ConfigError, one line); `task` None:
    not known yet (the engine is checked before a large glossary is read)."""
    if task not in (None, "translation"):
        raise ConfigError(f"--glossary applies to a translation run, not a {task} run")
    if engine == "ctranslate2":
        from ..export.ct2_translator import NO_CONSTRAINTS

        raise ConfigError(f"{NO_CONSTRAINTS}: --glossary needs --engine torch")


def _count(name: str, given: Sequence[object], n_texts: int) -> None:
    """A per-text list must pair with the texts one to one: by position, a shorter one would steer another text."""
    if len(given) != n_texts:
        raise ApiError(
            422, "invalid_request", f"{name} has {len(given)} entries but text has {n_texts}: one entry per text"
        )


def _check_string(value: str, where: str, limit: str, most: int, index: int) -> None:
    """A lone surrogate (not Unicode; JSON's \\uD800 escapes carry one) or a string over its bound: 422 naming it."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ApiError(
            422,
            "invalid_text",
            f"{where} holds a lone surrogate (U+{ord(value[err.start]):04X} at character {err.start}), which is not "
            "a Unicode character",
            index=index,
        ) from None
    if len(value) > most:
        raise ApiError(
            422,
            "limit_exceeded",
            f"{where} has {len(value)} characters, at most {most} allowed",
            limit=limit,
            max=most,
            index=index,
        )


# ---------------------------------------------------------------------------------------------------- per text
def _constraints(entries: list[ConstraintsIn | None] | None, n_texts: int) -> tuple[Constraints | None, ...] | None:
    """Per text its Constraints (None: none); None when no text has any."""
    if entries is None:
        return None
    _count("constraints", entries, n_texts)
    out = tuple(None if entry is None else _constraint(entry, i) for i, entry in enumerate(entries))
    return out if any(out) else None


def _constraint(entry: ConstraintsIn, i: int) -> Constraints | None:
    """One text's phrases, stripped, a repeated one kept once (the rules of a constraints file's line)."""
    given = len(entry.include) + len(entry.exclude)
    if given > MAX_PHRASES:
        raise ApiError(
            422,
            "limit_exceeded",
            f"constraints.{i} has {given} phrases, at most {MAX_PHRASES} allowed",
            limit="max_phrases",
            max=MAX_PHRASES,
            index=i,
        )
    include = _phrases(entry.include, f"constraints.{i}.include", i)
    exclude = _phrases(entry.exclude, f"constraints.{i}.exclude", i)
    both = [phrase for phrase in include if phrase in exclude]
    if both:
        raise ApiError(
            422,
            "invalid_request",
            f"constraints.{i}: {both[0]!r} is both a phrase to include and a phrase to exclude",
            index=i,
        )
    return Constraints(include, exclude) or None


def _phrases(phrases: list[str], where: str, i: int) -> tuple[str, ...]:
    out = []
    for j, phrase in enumerate(phrases):
        _check_string(phrase, f"{where}.{j}", "max_phrase_chars", MAX_PHRASE_CHARS, i)
        if not phrase.strip():
            raise ApiError(422, "invalid_request", f"{where}.{j}: the phrase is empty", index=i)
        out.append(phrase.strip())
    return tuple(dict.fromkeys(out))


def _prefixes(prefixes: list[str | None] | None, n_texts: int) -> tuple[str | None, ...] | None:
    """Per text its prefix, as written (None or "": none); None when no text has one."""
    if prefixes is None:
        return None
    _count("prefix", prefixes, n_texts)
    for i, prefix in enumerate(prefixes):
        if prefix is not None:
            _check_string(prefix, f"prefix.{i}", "max_prefix_chars", MAX_PREFIX_CHARS, i)
    return tuple(prefixes) if any(prefixes) else None


# ---------------------------------------------------------------------------------------------------- glossary
async def _glossary(service: Service, pairs: list[list[str]] | None) -> Glossary | None:
    """The request's own glossary (None when it gives no entry), compiled on a thread of its own; an entry the
    glossary refuses (an empty term, a source term twice with different targets) is a 422 naming it."""
    if not pairs:
        return None
    most = service.limits.max_glossary_entries
    if len(pairs) > most:
        raise ApiError(
            422,
            "limit_exceeded",
            f"the glossary has {len(pairs)} entries, at most {most} allowed",
            limit="max_glossary_entries",
            max=most,
        )
    for i, pair in enumerate(pairs):
        for side, term in zip(("source", "target"), pair):
            where = f"glossary: entry {i + 1}: the {side} term"  # the wording of the glossary's own messages
            _check_string(term, where, "max_term_chars", MAX_TERM_CHARS, i)
    try:
        return await asyncio.to_thread(Glossary, [(source, target) for source, target in pairs], "glossary")
    except DataError as err:
        raise ApiError(422, "invalid_request", str(err)) from None
