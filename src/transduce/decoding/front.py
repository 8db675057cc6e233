"""The decoding front both translation engines share (`Translator` here, `CTranslate2Translator` in export/): the
call's options defaulted from the run's [decode] settings, inputs cut to the model's positions, empty lines, n-best
lists and MBR reordering. An engine only groups the token ids into calls and searches them (issue 61: this was
written twice, once per engine)."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from ..config import MBR_UTILITIES, ConfigError, DecodeConfig, check_patience, check_sampling
from ..config.bounds import check_value
from ..data.tokenizer import Tokenizer, TokenizerError
from ..documents import sentences as paragraphs
from ..documents import words
from ..documents.sentences import check_split
from .lexical import ConstraintError, Steering
from .mbr import mbr_rerank
from .search import Sampling
from .steering import Requests, describe, unit_steering


@dataclass
class Translation:
    text: str
    score: float
    tokens: list[int]
    # word links (source word, target word), 0-based over the whitespace-separated words of the input line and of
    # `text`, with `alignment=True` (documents/words.py); None otherwise
    alignment: list[tuple[int, int]] | None = None
    # (T, S) per target token, the alignment attention over the source positions (EOS excluded), where the engine
    # read it while searching (the torch engine); front turns it into `alignment`
    attention: Any = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Decoded:
    """What one decoding call gives back: per line its hypotheses, best first (an empty line gets an empty list),
    and the lines holding a sentence too long for the model's positions, which was cut into parts translated one
    by one (documents/sentences.py; `n_cut` such sentences in all)."""

    hypotheses: list[list[Translation]]
    cut: list[int]
    n_cut: int = 0


@dataclass(frozen=True)
class PairScore:
    """The model's score of one given (source, target) pair: log P(Y | X), the tokens it counts (EOS included),
    their mean, with `tokens=True` each token's log-probability, and whether the source or the target was longer
    than the model's positions (`cut`: only its first pieces were read, `pair_ids`)."""

    total: float
    tokens: int
    mean: float
    per_token: list[float] | None = None
    cut: bool = False


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
    split: str = "lines"  # "lines": a line is one sentence; "sentences": a paragraph (documents/sentences.py)
    alignment: bool = False  # also each hypothesis's word links (Translation.alignment)


LENGTH_PENALTIES = ("gnmt", "length", "none")
_KINDS = {"beam": int, "nbest": int, "batch_tokens": int, "sampling_topk": int, "seed": int}


def check_sentences(sentences: object, what: str = "sentence") -> list[str]:
    """The sentences a caller gives a predictor, as a list: a sequence of strings, each one Unicode text (a lone
    surrogate is not). Anything else is refused in one message of ours (TypeError: not text; ValueError: not
    Unicode), before a tokenizer or the model sees it. `what` is an item's name in the messages (a scorer's
    "source" and "target")."""
    if isinstance(sentences, (str, bytes, bytearray)) or not isinstance(sentences, Iterable):
        side = "" if what == "sentence" else f"the {what}s: "
        raise TypeError(f"{side}expected a list of strings, got {type(sentences).__name__}")
    sentences = list(sentences)
    for i, text in enumerate(sentences):
        if not isinstance(text, str):
            raise TypeError(f"{what} {i} is {type(text).__name__} {text!r:.40}, not a string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(
                f"{what} {i} holds a lone surrogate (U+{ord(text[err.start]):04X} at character {err.start}), "
                "which is not a Unicode character"
            ) from None
    return sentences


def check_pairs(
    decode: DecodeConfig, sources: object, targets: object, batch_tokens: int | None
) -> tuple[list[str], list[str], int]:
    """A scorer's given pairs checked as `decode_lines` checks its sentences (`check_sentences`), as many targets
    as sources, and the call's batch_tokens as `options` checks a translation's (default: decode.batch_tokens)."""
    sources, targets = check_sentences(sources, "source"), check_sentences(targets, "target")
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    return sources, targets, options(decode, batch_tokens=batch_tokens).batch_tokens


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
    split: str = "lines",
    alignment: bool = False,
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
        split=check_split(split),
        alignment=bool(alignment),
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
    """Sentences -> token ids (without EOS), the tag's id first when there is one, cut to the model's positions
    (`cut_sources`), and the indices of those cut: how a scorer reads a given source (decoding cuts a long sentence
    into parts instead, `decode_lines`)."""
    return cut_sources(tagged_ids(tokenizer, sentences, tag), max_len)


def tagged_ids(tokenizer: Tokenizer, sentences: list[str], tag: str = "") -> list[list[int]]:
    """Sentences -> token ids (without EOS), the tag's id first when there is one (as `prepare` puts a corpus's tag
    before its sources). A tag that is not one token of the vocabulary is refused."""
    ids = tokenizer.encode(sentences)
    return [[tag_id(tokenizer, tag), *x] for x in ids] if tag else ids


def tag_id(tokenizer: Tokenizer, tag: str) -> int:
    """The tag's token id; a tag that is not one token of the vocabulary is refused (ConfigError)."""
    try:
        return tokenizer.tag_id(tag)
    except TokenizerError as err:
        raise ConfigError(str(err)) from None


def pair_ids(
    tokenizer: Tokenizer, pairs: tuple[list[str], list[str]], max_len: int, tag: str = ""
) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """Given (source, target) pairs -> their token ids as a scorer reads them (without EOS): the source tagged and
    cut as `source_ids` cuts it, the target cut alike (with BOS before it, or EOS after, it fills the model's
    positions less one); and the indices of the pairs where either side was cut (PairScore.cut)."""
    sources, targets = pairs
    src_ids, src_cut = source_ids(tokenizer, sources, max_len, tag)
    tgt_ids, tgt_cut = cut_sources(tokenizer.encode_target(targets), max_len)
    return src_ids, tgt_ids, sorted(set(src_cut) | set(tgt_cut))


def cut_sources(token_ids: list[list[int]], max_len: int) -> tuple[list[list[int]], list[int]]:
    """Source token ids (without EOS) cut so that with EOS they fit the model's `max_len` positions less one (as
    both engines read a source), and the indices of those cut."""
    limit = max_len - 2  # ids + EOS <= max_len - 1
    cut = [i for i, ids in enumerate(token_ids) if len(ids) > limit]
    return [ids[:limit] for ids in token_ids], cut


@dataclass(frozen=True)
class Engine:
    """What `decode_lines` needs of a translation engine. `search(sources, lines, steering)`: per source (token ids
    without EOS) its hypotheses, best first; `lines` are the sources' indices in the call's units (they seed
    sampling); `steering` None, or per source its lexical constraints and prefix (decoding/lexical.py) or None.
    `groups(sources)`: the positions in `sources` that go through one search call. `align(sources, tokens)`: per
    (source, output tokens) pair, its alignment attention (T, S): per output token, over the source positions as
    given (a tag included; EOS excluded); None where the engine gives no alignments. `link_rule`: how word links
    are read from it (model.alignment_links, documents/words.py)."""

    tokenizer: Tokenizer
    max_len: int  # the model's positions
    language: str  # the source language: the sentence splitter's rules
    search: Callable[[list[list[int]], list[int], list[Steering | None] | None], list[list[Translation]]]
    groups: Callable[[list[list[int]]], list[list[int]]]
    align: Callable[[list[list[int]], list[list[int]]], list[Any]] | None = None
    link_rule: str = "pieces"


def decode_lines(
    lines: list[str], settings: Options, engine: Engine, *, progress: bool = False, requests: Requests | None = None
) -> Decoded:
    """Decode raw `lines` through an engine. Each line becomes units (documents/sentences.py: the line, or its
    sentences under settings.split "sentences"); a unit too long for the model's positions is cut into parts that
    fit; the units are searched in the engine's groups, and each line's translation is its units' joined.
    Empty lines are never searched and get no hypotheses. `requests`: constraints, prefixes and a glossary
    (decoding/steering.py); units they steer are searched in groups of their own, so the others' search is the
    unconstrained one."""
    lines = check_sentences(lines)
    if requests is not None:
        requests.check(len(lines))
    requests = requests if requests else None
    tag = [tag_id(engine.tokenizer, settings.tag)] if settings.tag else []
    units, sources, n_cut = _units(lines, settings, engine)
    steering: list[Steering | None] = (
        unit_steering(units, requests, engine.tokenizer) if requests is not None else [None] * len(units)
    )
    if settings.sampling is not None and any(s is not None for s in steering):
        raise ConfigError("constraints, glossary terms and prefixes steer the beam search: they take no sampling")
    sources = [tag + ids for ids in sources]
    per_line = Counter(u.line for u in units)
    # sampling seeds each input by its index: a line's own when it is one unit (as before paragraphs), else one
    # past the lines
    seeds = [u.line if per_line[u.line] == 1 else len(lines) + j for j, u in enumerate(units)]
    found: list[list[Translation]] = [[] for _ in units]
    with tqdm(total=len(units), unit="sent", disable=not progress, file=sys.stderr, leave=False) as bar:
        for members in _groups(engine, sources, steering):
            batch = [sources[j] for j in members]
            steered = [steering[j] for j in members] if steering[members[0]] is not None else None
            try:
                searched = engine.search(batch, [seeds[j] for j in members], steered)
            except ConstraintError as err:
                j = members[err.row]
                raise ConfigError(
                    f"line {units[j].line + 1}: {err.reason} ({describe(units, requests or Requests(), j)})"
                ) from None
            for j, hyps in zip(members, searched):
                found[j] = mbr_rerank(hyps, settings.mbr)[: settings.keep]
            if settings.alignment:
                _align(engine, [sources[j] for j in members], [found[j] for j in members], bool(tag))
            bar.update(len(members))
    results: list[list[Translation]] = [[] for _ in lines]
    by_line: dict[int, list[int]] = {}
    for j, unit in enumerate(units):
        by_line.setdefault(unit.line, []).append(j)
    for i, members in by_line.items():
        results[i] = _joined(lines[i], [units[j] for j in members], [found[j] for j in members], settings)
    return Decoded(results, sorted({u.line for u in units if u.cut}), n_cut)


def _groups(engine: Engine, sources: list[list[int]], steering: list[Steering | None]) -> list[list[int]]:
    """The engine's groups, the steered units grouped apart from the others."""
    out = []
    for steered in (False, True):
        members = [j for j, s in enumerate(steering) if (s is not None) == steered]
        if members:
            out += [[members[i] for i in group] for group in engine.groups([sources[j] for j in members])]
    return out


def _units(lines: list[str], settings: Options, engine: Engine) -> tuple[list[paragraphs.Unit], list[list[int]], int]:
    """The lines' units, those too long for the model cut into parts (`paragraphs.cut_spans`), their token ids
    (no tag, no EOS), and how many units were cut."""
    limit = engine.max_len - 2 - (1 if settings.tag else 0)  # ids + EOS <= max_len - 1, the tag one of them
    encode = engine.tokenizer.encode
    fits = lambda text: len(encode([text])[0]) <= limit
    units = paragraphs.units(lines, settings.split, engine.language)
    out, ids, n_cut = [], [], 0
    for unit, unit_ids in zip(units, encode([u.text for u in units])):
        if len(unit_ids) <= limit:
            out.append(unit)
            ids.append(unit_ids)
            continue
        n_cut += 1
        parts = [
            paragraphs.Unit(unit.line, unit.start + a, unit.start + b, unit.text[a:b], cut=True)
            for a, b in paragraphs.cut_spans(unit.text, fits, engine.tokenizer.pieces)
        ]
        out += parts
        ids += encode([p.text for p in parts])
    return out, ids, n_cut


def _align(engine: Engine, sources: list[list[int]], found: list[list[Translation]], tagged: bool) -> None:
    """Each hypothesis's word links in its unit's own numbering (relocated into the line's by `_joined`); a tag
    (`tagged`: the sources' first id) is no word."""
    pairs = [(ids, h) for ids, hyps in zip(sources, found) for h in hyps]
    if not pairs:
        return
    if all(h.attention is not None for _, h in pairs):
        attention = [h.attention for _, h in pairs]
    elif engine.align is None:
        raise ConfigError("this engine gives no word alignments")
    else:
        attention = engine.align([ids for ids, _ in pairs], [h.tokens for _, h in pairs])
    piece = engine.tokenizer.id_to_piece
    at = 0
    for ids, hyps in zip(sources, found):
        source_pieces = [piece(i) for i in ids[int(tagged) :]]  # positions count the tag: word_links's `first`
        for h in hyps:
            target_pieces = [piece(t) for t in h.tokens]
            h.alignment = words.word_links(source_pieces, target_pieces, attention[at], int(tagged), engine.link_rule)
            h.attention = None  # read: the links are what is kept
            at += 1


def _joined(
    line: str, units: list[paragraphs.Unit], found: list[list[Translation]], settings: Options
) -> list[Translation]:
    """A line's hypotheses from its units': the k-th joins each unit's k-th (or its last, when a unit has fewer),
    scores added, tokens one after the other, word links moved into the line's numbering."""
    if len(units) == 1 and settings.split == "lines" and not settings.alignment:
        return found[0]  # the common case: one line, one sentence, as decoded
    out = []
    spans = [(u.start, u.end) for u in units]
    line_starts = words.word_offsets(line)
    for k in range(max(len(hyps) for hyps in found)):
        picked = [hyps[min(k, len(hyps) - 1)] if hyps else None for hyps in found]
        texts = [h.text if h else "" for h in picked]
        text, offsets = paragraphs.join(line, spans, texts, settings.split)
        links: list[tuple[int, int]] | None = None
        if settings.alignment:
            links, target_starts = [], words.word_offsets(text)
            for unit, h, offset in zip(units, picked, offsets):
                if h is not None and h.alignment:
                    src, tgt = (unit.text, unit.start, line_starts), (h.text, offset, target_starts)
                    links += words.relocate(h.alignment, src, tgt)
            links = sorted(set(links))
        score = sum(h.score for h in picked if h)
        tokens = [t for h in picked if h for t in h.tokens]
        out.append(Translation(text, score, tokens, links))
    return out


def pair_links(
    tokenizer: Tokenizer,
    align: Callable[[list[list[int]], list[list[int]]], list[Any]],
    pairs: tuple[list[str], list[str]],
    *,
    max_len: int,
    tag: str = "",
    rule: str = "pieces",
) -> list[list[tuple[int, int]]]:
    """The word links of given (source, target) pairs (`score-pairs --alignment`), from the engine's `align` over
    each pair read as the scorer reads it (source and target cut to the model's positions), by the link `rule`."""
    sources, targets = pairs
    src_ids, tgt_ids, _ = pair_ids(tokenizer, pairs, max_len, tag)
    piece = tokenizer.id_to_piece
    out = []
    for source, target, src, tgt, weights in zip(sources, targets, src_ids, tgt_ids, align(src_ids, tgt_ids)):
        first = 1 if tag else 0  # the positions count the tag
        links = words.word_links([piece(i) for i in src[first:]], [piece(t) for t in tgt], weights, first, rule)
        out.append(
            words.relocate(links, (source, 0, words.word_offsets(source)), (target, 0, words.word_offsets(target)))
        )
    return out
