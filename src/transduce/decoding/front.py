"""The decoding front both translation engines share (`Translator` here, `CTranslate2Translator` in export/): the
call's options defaulted from the run's [decode] settings, inputs cut to the model's positions, empty lines, n-best
lists and MBR reordering. An engine only groups the token ids into calls and searches them (issue 61: this was
written twice, once per engine)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tqdm import tqdm

from ..config import MBR_UTILITIES, ConfigError, DecodeConfig, check_patience, check_sampling
from ..config.bounds import check_value
from ..data.tokenizer import Tokenizer, TokenizerError
from .mbr import mbr_rerank
from .search import Sampling


@dataclass
class Translation:
    text: str
    score: float
    tokens: list[int]


@dataclass(frozen=True)
class Decoded:
    """What one decoding call gives back: per sentence its hypotheses, best first (an empty line gets an empty
    list), and the indices of the sentences cut to the model's positions (the CLI warns about them)."""

    hypotheses: list[list[Translation]]
    truncated: list[int]


@dataclass(frozen=True, kw_only=True)
class Options:
    """One call's decoding options, each the caller's or else the run's decode.* setting."""

    beam: int
    alpha: float
    length_penalty: str
    batch_tokens: int
    mbr: str
    patience: float
    keep: int  # hypotheses returned per sentence (the caller's nbest)
    nbest: int  # hypotheses the search finds per sentence: all the beam's finishes under MBR, which chooses among them
    sampling: Sampling | None = None  # random sampling in place of the search (beam 1), or None
    tag: str = ""  # a tag (data.corpora's) put before every source: `translate --tag`; empty: none


LENGTH_PENALTIES = ("gnmt", "length", "none")
_KINDS = {"beam": int, "nbest": int, "batch_tokens": int, "sampling_topk": int, "seed": int}


def check_sentences(sentences: object) -> list[str]:
    """The sentences a caller gives a predictor, as a list: a sequence of strings, each one Unicode text (a lone
    surrogate is not). Anything else is refused in one message of ours (TypeError: not text; ValueError: not
    Unicode), before a tokenizer or the model sees it."""
    if isinstance(sentences, (str, bytes, bytearray)) or not isinstance(sentences, Iterable):
        raise TypeError(f"expected a list of strings, got {type(sentences).__name__}")
    sentences = list(sentences)
    for i, text in enumerate(sentences):
        if not isinstance(text, str):
            raise TypeError(f"sentence {i} is {type(text).__name__} {text!r:.40}, not a string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(
                f"sentence {i} holds a lone surrogate (U+{ord(text[err.start]):04X} at character {err.start}), "
                "which is not a Unicode character"
            ) from None
    return sentences


def options(
    decode: DecodeConfig,
    *,
    beam: int | None = None,
    alpha: float | None = None,
    nbest: int = 1,
    batch_tokens: int | None = None,
    length_penalty: str | None = None,
    mbr: str | None = None,
    patience: float | None = None,
    sampling_topk: int | None = None,
    sampling_topp: float | None = None,
    temperature: float | None = None,
    seed: int | None = None,
    tag: str | None = None,
) -> Options:
    """The call's options, checked: each given one against its decode.* setting's bounds (config/bounds.py, the
    message naming the keyword), 1 <= nbest <= beam, and a patience that lets the search find them all.
    Sampling (a top-k other than 1) draws one translation per sentence: the beam is 1 unless the caller asks for
    another, which is refused, as are an n-best list and MBR."""
    numbers = dict(beam=beam, alpha=alpha, nbest=nbest, batch_tokens=batch_tokens, patience=patience)
    numbers.update(sampling_topk=sampling_topk, sampling_topp=sampling_topp, temperature=temperature, seed=seed)
    for name, value in numbers.items():
        if value is not None:
            check_value(f"decode.{name}", value, name=name, kind=_KINDS.get(name, float))
    if length_penalty is not None and length_penalty not in LENGTH_PENALTIES:
        raise ConfigError(f"length_penalty must be one of {', '.join(LENGTH_PENALTIES)}, got {length_penalty!r}")
    if mbr is not None and mbr not in MBR_UTILITIES:
        raise ConfigError(f"mbr must be one of {', '.join(MBR_UTILITIES)}, got {mbr!r}")
    sampling = _sampling(decode, topk=sampling_topk, topp=sampling_topp, temperature=temperature, seed=seed)
    mbr = decode.mbr if mbr is None else mbr
    if sampling is not None:
        if (beam or 1) > 1 or nbest > 1 or mbr != "none":
            raise ConfigError(
                f"sampling (top-k {sampling.topk}) draws one translation per sentence: it takes no beam ({beam}), "
                f"n-best list ({nbest}) or MBR ({mbr})"
            )
        beam = 1
    beam = decode.beam if beam is None else beam
    patience = decode.patience if patience is None else patience
    if not 1 <= nbest <= beam:
        raise ConfigError(f"nbest ({nbest}) must be between 1 and the beam size ({beam})")
    searched = beam if mbr != "none" else nbest
    check_patience(patience, beam, searched)
    return Options(
        beam=beam,
        alpha=decode.alpha if alpha is None else alpha,
        length_penalty=decode.length_penalty if length_penalty is None else length_penalty,
        batch_tokens=decode.batch_tokens if batch_tokens is None else batch_tokens,
        mbr=mbr,
        patience=patience,
        keep=nbest,
        nbest=searched,
        sampling=sampling,
        tag=tag or "",
    )


def _sampling(
    decode: DecodeConfig, *, topk: int | None, topp: float | None, temperature: float | None, seed: int | None
) -> Sampling | None:
    """The call's sampling settings, each the caller's or the run's decode.*; None when top-k is 1 (greedy)."""
    topk = decode.sampling_topk if topk is None else topk
    topp = decode.sampling_topp if topp is None else topp
    temperature = decode.temperature if temperature is None else temperature
    check_sampling(topk, topp, temperature)
    if topk == 1 and topp < 1.0:
        raise ConfigError(f"a sampling top-p ({topp}) needs a sampling top-k of 0 (all tokens) or above 1 (1: greedy)")
    if topk == 1:
        return None
    return Sampling(topk=topk, topp=topp, temperature=temperature, seed=decode.seed if seed is None else seed)


def source_ids(
    tokenizer: Tokenizer, sentences: list[str], max_len: int, tag: str = ""
) -> tuple[list[list[int]], list[int]]:
    """Sentences -> token ids (without EOS), the tag's id first when there is one (as `prepare` puts a corpus's tag
    before its sources), cut to the model's positions (`cut_sources`), and the indices of those cut. A tag that is
    not one token of the vocabulary is refused."""
    ids = tokenizer.encode(sentences)
    if tag:
        try:
            first = tokenizer.tag_id(tag)
        except TokenizerError as err:
            raise ConfigError(str(err)) from None
        ids = [[first, *x] for x in ids]
    return cut_sources(ids, max_len)


def cut_sources(token_ids: list[list[int]], max_len: int) -> tuple[list[list[int]], list[int]]:
    """Source token ids (without EOS) cut so that with EOS they fit the model's `max_len` positions less one (as
    both engines read a source), and the indices of those cut."""
    limit = max_len - 2  # ids + EOS <= max_len - 1
    cut = [i for i, ids in enumerate(token_ids) if len(ids) > limit]
    return [ids[:limit] for ids in token_ids], cut


def decode_lines(
    sentences: list[str],
    settings: Options,
    *,
    encode: Callable[[list[str]], tuple[list[list[int]], list[int]]],
    groups: Callable[[list[list[int]]], list[list[int]]],
    search: Callable[[list[list[int]], list[int]], list[list[Translation]]],
    progress: bool = False,
) -> Decoded:
    """Decode raw `sentences` through an engine: `encode` gives the non-empty ones' token ids and which were cut
    (`cut_sources`), `groups` the positions in those ids that go through one search call, `search` per source its
    `settings.nbest` hypotheses, best first, given the sources and their line indices in `sentences` (which seed
    sampling). Empty lines are never searched."""
    sentences = check_sentences(sentences)
    results: list[list[Translation]] = [[] for _ in sentences]
    todo = [i for i, s in enumerate(sentences) if s.strip()]  # an empty line gets an empty translation
    sources, cut = encode([sentences[i] for i in todo])
    with tqdm(total=len(sentences), unit="sent", disable=not progress, file=sys.stderr, leave=False) as bar:
        for members in groups(sources):
            for j, hyps in zip(members, search([sources[j] for j in members], [todo[j] for j in members])):
                results[todo[j]] = mbr_rerank(hyps, settings.mbr)[: settings.keep]
            bar.update(len(members))
    return Decoded(results, [todo[j] for j in cut])
