"""The decoding front both translation engines share (`Translator` here, `CTranslate2Translator` in export/): the
call's options defaulted from the run's [decode] settings, inputs cut to the model's positions, empty lines, n-best
lists and MBR reordering. An engine only groups the token ids into calls and searches them (issue 61: this was
written twice, once per engine)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from tqdm import tqdm

from ..config import ConfigError, DecodeConfig, check_patience
from .mbr import mbr_rerank


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
) -> Options:
    """The call's options, checked: 1 <= nbest <= beam, and a patience that lets the search find them all."""
    beam = decode.beam if beam is None else beam
    mbr = decode.mbr if mbr is None else mbr
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
    )


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
    search: Callable[[list[list[int]]], list[list[Translation]]],
    progress: bool = False,
) -> Decoded:
    """Decode raw `sentences` through an engine: `encode` gives the non-empty ones' token ids and which were cut
    (`cut_sources`), `groups` the positions in those ids that go through one search call, `search` per source its
    `settings.nbest` hypotheses, best first. Empty lines are never searched."""
    results: list[list[Translation]] = [[] for _ in sentences]
    todo = [i for i, s in enumerate(sentences) if s.strip()]  # an empty line gets an empty translation
    sources, cut = encode([sentences[i] for i in todo])
    with tqdm(total=len(sentences), unit="sent", disable=not progress, file=sys.stderr, leave=False) as bar:
        for members in groups(sources):
            for j, hyps in zip(members, search([sources[j] for j in members])):
                results[todo[j]] = mbr_rerank(hyps, settings.mbr)[: settings.keep]
            bar.update(len(members))
    return Decoded(results, [todo[j] for j in cut])
