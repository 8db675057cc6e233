"""The translation routes of the HTTP API (app.py builds the app): `POST /v1/translate` (sentences, paragraphs, word
links, or whole documents of another format; terminology: terminology.py) and `POST /v1/attention` (the maps the page
draws; the parser's route uses the same). On a server of several language pairs, each request goes to the pair it
names (pairs.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter

from .languages import LanguageIdentifier
from .messages import (
    AttentionRequest,
    AttentionResponse,
    Hypothesis,
    TranslateRequest,
    TranslateResponse,
    TranslationAttentionRequest,
    TranslationOut,
)
from .pairs import Pairs, choose, served_pairs, sources_into
from .service import ApiError, DecodeOptions, Service, decode_defaults, decode_options
from .terminology import with_terminology


def _translation_out(hypotheses: list, nbest: int) -> TranslationOut:
    if not hypotheses:  # an empty input line
        return TranslationOut(text="", score=0.0, alignment=None, nbest=[] if nbest > 1 else None)
    links = lambda h: getattr(h, "alignment", None)  # a predictor's hypotheses may have no links (asked for none)
    listed = [Hypothesis(text=h.text, score=float(h.score), alignment=links(h)) for h in hypotheses]
    best = hypotheses[0]
    return TranslationOut(
        text=best.text, score=float(best.score), alignment=links(best), nbest=listed if nbest > 1 else None
    )


def translation_routes(default: Service, pairs: Pairs | None = None) -> APIRouter:
    """The routes over `default` alone, or over `pairs` ((source, target) -> Service; default: the pair `default`
    serves), each request decoded by the service of the pair it names (pairs.choose)."""
    pairs = served_pairs(default) if pairs is None else pairs
    router = APIRouter(tags=["translation"])

    @router.post("/v1/translate", response_model=TranslateResponse, response_model_exclude_none=True)
    async def translate(request: TranslateRequest) -> TranslateResponse:
        """Translate raw sentences; the answer keeps input order. Concurrent requests are decoded together."""
        source = request.source
        detected = source is not None and source.lower() == "auto"
        if detected:  # LibreTranslate's "auto": the language identifier among the sources served into `target`
            source = await _identified(pairs, request.target, request.text)
        service = choose(pairs, default, source, request.target)
        sampling = (request.sampling_topk, request.sampling_topp, request.temperature, request.seed)
        if request.format != "text" and (request.alignment or request.nbest > 1):
            raise ApiError(422, "invalid_request", f"format {request.format} gives one document: no nbest or alignment")
        if (request.alignment or request.format in ("html", "xml")) and not getattr(
            service.predictor, "can_align", True
        ):
            raise ApiError(422, "invalid_request", service.predictor.align_refusal)
        options = decode_options(
            service,
            request.beam,
            request.alpha,
            request.nbest,
            sampling=sampling,
            tag=request.tag,
            split=request.split,
            alignment=request.alignment,
        )
        service.check_texts(request.text)
        options = await with_terminology(service, request, options)
        if request.format != "text":
            documents = await service.within_timeout(
                translate_documents(service, request.text, request.format, options)
            )
            return TranslateResponse(
                translations=[TranslationOut(text=d, score=0.0, alignment=None, nbest=None) for d in documents],
                source=source if detected else None,
            )
        results = await translate_texts(service, request.text, options)
        outs = [_translation_out(h, options.nbest) for h in results]
        return TranslateResponse(translations=outs, source=source if detected else None)

    if hasattr(default.predictor, "attention"):  # every pair's predictor is of one engine: all or none have it

        @router.post("/v1/attention", response_model=AttentionResponse)
        async def attention(request: TranslationAttentionRequest) -> AttentionResponse:
            """Encoder-decoder attention of one sentence pair (what the page draws)."""
            source, target = (request.languages.source, request.languages.target) if request.languages else (None, None)
            service = choose(pairs, default, source, target)
            service.check_texts([request.text] + ([request.target] if request.target is not None else []))
            return await service.within_timeout(attention_response(service, request, _best_translation))

    return router


async def _identified(pairs: Pairs, target: str | None, texts: list[str]) -> str | None:
    """The source language of `texts` (all of them at once, as LibreTranslate's "auto") among the served pairs'
    sources into `target` (every source when it is left out); None where the server names no languages."""
    into = sources_into(pairs, target)
    if not into:
        return None
    identifier = LanguageIdentifier(into)
    return (await asyncio.to_thread(identifier.best, "\n".join(texts))).language


async def translate_texts(service: Service, texts: list[str], options: DecodeOptions) -> list:
    """Each text's hypotheses through the batcher; what the decoder refuses for this request (constraints no output
    within the limit can meet, a phrase to include in a text of several sentences, a phrase the vocabulary cannot
    spell, a tokenizer's refusal) is a 422 with its message. A batch that fails is retried request by request
    (batcher.py), so the error is this request's alone, and its "line N" counts this request's texts from 1."""
    from ..config import ConfigError
    from ..data import DataError

    try:
        return await service.within_timeout(service.batcher.submit(texts, options))
    except (ConfigError, DataError) as err:
        raise ApiError(422, "invalid_request", str(err)) from None


async def translate_documents(service: Service, texts: list[str], fmt: str, options: DecodeOptions) -> list[str]:
    """Each text translated as a document of `fmt` on the model thread (decoding/documents.py); a document that
    cannot be read (malformed XML, a broken subtitle timing) is a 422 naming its index and line."""
    from ..config import ConfigError
    from ..data import DataError
    from ..decoding.documents import translate_document

    keywords = {"beam": options.beam, "alpha": options.alpha, **options.decoding(), "alignment": False}
    out = []
    for i, text in enumerate(texts):
        try:
            work = functools.partial(translate_document, service.predictor, text, fmt, name=f"text {i}", **keywords)
            document = await service.batcher.call(work)
        except (DataError, ConfigError) as err:
            raise ApiError(422, "invalid_document", str(err), index=i) from None
        out.append(document.text)
    return out


def _best_translation(hypotheses: list) -> str:
    return hypotheses[0].text if hypotheses else ""


async def attention_response(
    service: Service, request: AttentionRequest, target_of: Callable[[Any], str]
) -> AttentionResponse:
    """The attention maps of `request` on the model thread; with no target given, the model's own output (decoded
    through the batcher with default options, so it is exactly what the task's route answers) is the target."""
    target = request.target
    if target is None:  # the options of a request that asks for nothing (the server's glossary included)
        options = dataclasses.replace(decode_defaults(service.predictor), glossary=service.glossary)
        output = (await service.batcher.submit([request.text], options))[0]
        target = target_of(output)
    maps = await service.batcher.call(service.predictor.attention, request.text, target)
    cap = service.limits.max_attention_pieces
    for side, pieces in (("source", maps.source_pieces), ("target", maps.target_pieces)):
        if len(pieces) > cap:  # the maps grow with source x target pieces x layers x heads
            what = "the model's output" if side == "target" and request.target is None else f"the {side}"
            raise ApiError(
                422,
                "limit_exceeded",
                f"{what} has {len(pieces)} pieces, at most {cap} allowed for attention maps",
                limit="max_attention_pieces",
                max=cap,
            )
    cross = maps.cross.float().round(decimals=4)  # (L, H, T, S); 4 decimals keep the JSON small
    return AttentionResponse(
        source_pieces=maps.source_pieces,
        target_pieces=maps.target_pieces,
        layers=cross.shape[0],
        heads=cross.shape[1],
        cross=cross.tolist(),
    )
