"""LibreTranslate's API on `transduce serve`, beside `/v1/*`: the apps that speak it (browser extensions, e-book and
chat plugins, desktop and phone apps, libretranslatepy) can be pointed at a model trained here.

Routes, with LibreTranslate's request and response shapes: `POST /translate` (`q` a string or a list, `source`
(a code or "auto"), `target`, `format` text or html, `alternatives`, `api_key`) -> `translatedText` (a string or a
list), `alternatives`, `detectedLanguage`; `POST /detect` (`q`) -> `[{"confidence", "language"}]`; `GET /languages`
-> `[{"code", "name", "targets"}]`; `GET /frontend/settings` (`charLimit` and the rest). `GET /health` is the
server's own (app.py), whose `{"status": "ok", ...}` LibreTranslate's clients read as theirs. Bodies are JSON, a
form or a multipart form (forms.py); every error is LibreTranslate's `{"error": "message"}` with its status (400
for a bad request, with its messages word for word where it has one; 403 for a key), never FastAPI's 422 shape.

Why a layer and not a second server: a request goes through the same Service as `/v1/translate` (service.py: its
limits, timeout, dynamic batcher and model thread), so both APIs share one model, one queue and one set of bounds,
and a LibreTranslate request with default settings batches with `/v1` requests. A text is a paragraph, split into
sentences (`split="sentences"`), as the page and `/v1/translate` do by default; `alternatives` are the rest of the
n-best list (the beam widened to hold them, within the server's beam bound); html goes through
`translate_document(..., "html")`, as `/v1/translate`'s `"format": "html"`.

The routes take a mapping (source, target) -> the Service that translates that pair: a server of several runs is
one more entry each. Where LibreTranslate differs and we do not follow: a timeout is 504 and a body over the limit
413 (LibreTranslate has neither); a missing key is 403, not 400; `alternatives` of an html text are none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from .access import ApiKeys, bearer_key
from .forms import FormError, read_params
from .languages import Detected, LanguageIdentifier, language_name
from .pairs import Pairs, sources_into
from .service import ApiError, DecodeOptions, Limits, Service, decode_defaults, decode_options
from .translation import translate_documents, translate_texts

PATHS = ("/translate", "/detect", "/languages", "/frontend/settings")  # answered in LibreTranslate's error shape
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default `frontendTimeout`: its page's typing delay, not a limit
_log = logging.getLogger("uvicorn.error")


class LibreError(Exception):
    """An error answered `{"error": message}` with `status`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def libretranslate_routes(pairs: Pairs, *, keys: ApiKeys | None = None) -> APIRouter:
    """LibreTranslate's routes over `pairs` (at least one), with one set of limits (the server's)."""
    if not pairs:
        raise ValueError("LibreTranslate's routes need at least one language pair")
    limits = next(iter(pairs.values())).limits
    if any(service.limits != limits for service in pairs.values()):
        raise ValueError("LibreTranslate's routes report one set of limits: give every pair the same")
    router = APIRouter(tags=["LibreTranslate"])

    @router.post("/translate")
    async def translate(request: Request) -> JSONResponse:
        """LibreTranslate's translation: q (a string or a list), source (or "auto"), target, format, alternatives."""
        return await _answer(request, keys, lambda params, form: _translate(params, form, pairs, limits))

    @router.post("/detect")
    async def detect(request: Request) -> JSONResponse:
        """The likeliest of the served source languages of q, best first, with confidences in percent."""
        return await _answer(request, keys, lambda params, form: _detect(params, form, pairs, limits))

    @router.get("/languages")
    async def languages() -> list[dict[str, Any]]:
        """Every served language, each with the codes it translates into."""
        return _languages(pairs)

    @router.get("/frontend/settings")
    async def frontend_settings() -> dict[str, Any]:
        """The limits and features, as LibreTranslate's page reads them."""
        return _settings(pairs, limits, keys)

    return router


# ---------------------------------------------------------------------------------------------------- requests
async def _answer(
    request: Request, keys: ApiKeys | None, work: Callable[[dict[str, Any], bool], Awaitable[Any]]
) -> JSONResponse:
    """The route's answer, or its error in LibreTranslate's shape: the body read, the key checked, then `work`
    (params, whether they came from a form). A failure inside the model is a 500 naming its kind only; its traceback
    goes to the server's log."""
    try:
        params, from_json = read_params(
            await request.body(), request.headers.get("content-type", ""), request.url.query
        )
        _check_key(keys, params.get("api_key") or bearer_key(request.headers.get("authorization")))
        return JSONResponse(await work(params, not from_json))
    except FormError as error:
        return _error(400, str(error))
    except LibreError as error:
        return _error(error.status, error.message)
    except ApiError as error:  # a limit or a check of the Service, in LibreTranslate's words and statuses
        status = 400 if error.status == 422 else error.status
        prefix = "Invalid request: " if status == 400 else "Cannot translate text: "
        return _error(status, prefix + error.message)
    except ImportError as error:  # py3langid missing: its message says how to install it
        return _error(500, f"Cannot detect the language: {error}")
    except Exception as error:
        _log.exception("LibreTranslate route %s failed", request.url.path)
        return _error(500, f"Cannot translate text: the server failed on this request ({type(error).__name__})")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status)


def _check_key(keys: ApiKeys | None, key: Any) -> None:
    if keys is None:
        return
    if not key:
        raise LibreError(403, "Please contact the server operator to get an API key")
    if not isinstance(key, str) or not keys.accepts(key):
        raise LibreError(403, "Invalid API key")


def _missing(name: str) -> LibreError:
    return LibreError(400, f"Invalid request: missing {name} parameter")


def _texts(q: Any, form: bool) -> tuple[list[str], bool]:
    """(the texts of `q`, whether it was a list). A form's line endings become LF, as LibreTranslate's do, so that
    its character limit counts the same text."""
    if isinstance(q, str):
        return ["\n".join(q.splitlines()) if form else q], False
    if isinstance(q, list) and all(isinstance(text, str) for text in q):
        return list(q), True
    raise LibreError(400, "Invalid request: q parameter must be a string or a list of strings")


def _check_limits(texts: list[str], limits: Limits) -> None:
    """The server's limits (sentences per request, characters per text) in LibreTranslate's words."""
    for size, limit in [(len(texts), limits.max_sentences)] + [(len(text), limits.max_chars) for text in texts]:
        if size > limit:
            raise LibreError(400, f"Invalid request: request ({size}) exceeds text limit ({limit})")


def _code(params: dict[str, Any], name: str) -> str:
    value = params.get(name)
    if not value:
        raise _missing(name)
    if not isinstance(value, str):
        raise LibreError(400, f"Invalid request: {name} parameter must be a string")
    return value.strip()


def _alternatives(value: Any) -> int:
    """LibreTranslate's `alternatives`: a whole number (a negative one is 0)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise LibreError(400, "Invalid request: alternatives parameter is not a number")
    try:
        return max(0, int(value))
    except ValueError:
        raise LibreError(400, "Invalid request: alternatives parameter is not a number") from None


# ---------------------------------------------------------------------------------------------------- translate
async def _translate(params: dict[str, Any], form: bool, pairs: Pairs, limits: Limits) -> dict[str, Any]:
    if not params.get("q"):
        raise _missing("q")
    source, target = _code(params, "source"), _code(params, "target")
    alternatives = _alternatives(params.get("alternatives", 0))
    texts, batch = _texts(params["q"], form)
    _check_limits(texts, limits)
    fmt = params.get("format") or "text"
    service, detected = await _route(source, target, texts, pairs)
    if alternatives > service.max_beam - 1:
        raise LibreError(400, f"Invalid request: alternatives parameter must be <= {service.max_beam - 1}")
    if fmt not in ("text", "html"):
        raise LibreError(400, f"{fmt} format is not supported")
    service.check_texts(texts)  # a lone surrogate (422 there, 400 here)
    others: list[list[str]] = [[] for _ in texts]  # html: no alternatives, as LibreTranslate's
    if fmt == "html":
        outputs = await _html(service, texts)
    else:
        outputs, others = await _text(service, texts, alternatives)
    result: dict[str, Any] = {"translatedText": outputs if batch else outputs[0]}
    if detected is not None:
        result["detectedLanguage"] = [detected.shown()] * len(texts) if batch else detected.shown()
    if alternatives > 0:
        result["alternatives"] = others if batch else others[0]
    return result


def _options(service: Service, nbest: int) -> DecodeOptions:
    """The options of a `/v1/translate` request that asks for nothing (the run's beam and alpha, paragraphs split
    into sentences, the server's glossary), the beam widened to hold `nbest` hypotheses."""
    beam = max(decode_defaults(service.predictor).beam, nbest)
    options = decode_options(service, beam, None, nbest, split="sentences")
    return dataclasses.replace(options, glossary=service.glossary)


async def _text(service: Service, texts: list[str], alternatives: int) -> tuple[list[str], list[list[str]]]:
    """Each text's best translation and its alternatives: the rest of its n-best list, without repeats, empties or
    the best one (as LibreTranslate's)."""
    results = await translate_texts(service, texts, _options(service, alternatives + 1))
    best = [hypotheses[0].text if hypotheses else "" for hypotheses in results]
    return best, [_unique([h.text for h in hypotheses[1:]], first) for first, hypotheses in zip(best, results)]


def _unique(texts: list[str], best: str) -> list[str]:
    """`texts` without repeats, empty ones or `best`, in order."""
    return [text for text in dict.fromkeys(texts) if text not in (best, "")]


async def _html(service: Service, texts: list[str]) -> list[str]:
    if not getattr(service.predictor, "can_align", True):
        raise LibreError(400, f"html format is not supported by this model's export: {service.predictor.align_refusal}")
    return await service.within_timeout(translate_documents(service, texts, "html", _options(service, 1)))


async def _route(source: str, target: str, texts: list[str], pairs: Pairs) -> tuple[Service, Detected | None]:
    """The service of (source, target) (codes matched without regard to case), the source detected among those that
    translate into `target` when it is "auto"; LibreTranslate's 400 for a language or a pair not served."""
    codes = {code.lower(): code for pair in pairs for code in pair}
    if source.lower() != "auto" and source.lower() not in codes:
        raise LibreError(400, f"{source} is not supported")
    if target.lower() not in codes:
        raise LibreError(400, f"{target} is not supported")
    target, detected = codes[target.lower()], None
    if source.lower() == "auto":
        detected = (await _identify(LanguageIdentifier(sources_into(pairs, target)), texts, most=1))[0]
        source = detected.language
    source = codes[source.lower()]
    if (source, target) not in pairs:
        raise LibreError(
            400,
            f"{language_name(target)} ({target}) is not available as a target language from "
            f"{language_name(source)} ({source})",
        )
    return pairs[(source, target)], detected


async def _identify(identifier: LanguageIdentifier, texts: list[str], most: int = 3) -> list[Detected]:
    """The identifier over all the texts at once (one answer for a list, as LibreTranslate's), off the event
    loop."""
    return await asyncio.to_thread(identifier.rank, "\n".join(texts), most)


# ---------------------------------------------------------------------------------------------------- the rest
async def _detect(params: dict[str, Any], form: bool, pairs: Pairs, limits: Limits) -> list[dict[str, Any]]:
    if not params.get("q"):
        raise _missing("q")
    texts, _ = _texts(params["q"], form)
    _check_limits(texts, limits)
    next(iter(pairs.values())).check_texts(texts)  # a lone surrogate
    sources = list(dict.fromkeys(source for source, _ in pairs))
    return [detected.shown() for detected in await _identify(LanguageIdentifier(sources), texts)]


def _languages(pairs: Pairs) -> list[dict[str, Any]]:
    """Every language of the served pairs (sources first), each with its targets (a target-only language has none:
    listed all the same, as clients check a target against this list)."""
    codes = list(dict.fromkeys([s for s, _ in pairs] + [t for _, t in pairs]))
    return [
        {"code": code, "name": language_name(code), "targets": [t for s, t in pairs if s == code]} for code in codes
    ]


def _settings(pairs: Pairs, limits: Limits, keys: ApiKeys | None) -> dict[str, Any]:
    """LibreTranslate's frontend settings, plus the two limits it does not report (`batchLimit`: texts per
    request; `requestTimeout`: seconds before a request gets 504)."""
    source, target = next(iter(pairs))
    return {
        "charLimit": limits.max_chars,
        "frontendTimeout": FRONTEND_TIMEOUT_MS,
        "apiKeys": keys is not None,
        "keyRequired": keys is not None,
        "suggestions": False,
        "filesTranslation": False,
        "supportedFilesFormat": [],
        "language": {
            "source": {"code": source, "name": language_name(source)},
            "target": {"code": target, "name": language_name(target)},
        },
        "batchLimit": limits.max_sentences,
        "requestTimeout": limits.timeout_s,
    }
