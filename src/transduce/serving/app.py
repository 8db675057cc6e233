"""The HTTP server: FastAPI routes over a predictor (Translator, Classifier, or any object with their methods).

Routes: `GET /health`, `GET /v1/info`, the task's own routes (`POST /v1/translate` and `POST /v1/attention` for a
translation model, `POST /v1/classify` for a classifier, `POST /v1/parse` and `POST /v1/attention` for a parser), the
page at `/`, and FastAPI's OpenAPI page at `/docs`.
Every error is JSON, `{"error": {"code", "message", ...}}`, and an error caused by a limit names it
(`"limit": "max_sentences", "max": 64`): a client should learn which knob it hit without reading server logs.

A task is an entry in TASKS: how to recognise its predictor, how to run a batch of it, and its routes. Serving a
new kind of model is one more entry and one route function (the parser was added that way).
"""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import Awaitable, Callable, Hashable, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from .batcher import CountTokens, DynamicBatcher, RunBatch, count_words

if TYPE_CHECKING:  # imported where used: loading one predictor does not import the others' dependencies
    from ..data.trees import Tree
    from ..decoding.classifier import Classifier
    from ..decoding.parser import Parser
    from ..decoding.translator import Translator
    from ..export.ctranslate2 import CTranslate2Translator

T = TypeVar("T")
STATIC_DIR = Path(__file__).parent / "static"


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one request may ask for. Each bound protects the shared model from one client's request."""

    max_sentences: int = 64  # texts per request (422)
    max_chars: int = 2000  # characters per text (422)
    max_body_bytes: int = 1_000_000  # request body (413)
    max_beam: int = 16  # 1 <= nbest <= beam <= max_beam (422); the run's own default beam is always allowed
    max_attention_pieces: int = 100  # /v1/attention: pieces per side (422), the CLI's picture limit (plot.MAX_PIECES)
    timeout_s: float = 30.0  # a request not answered by then gets 504


class ApiError(Exception):
    """An error answered as JSON with its status; `extra` names the limit and its value where one was hit."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"code": self.code, "message": self.message, **self.extra}}, self.status)


# ---------------------------------------------------------------------------------------------------- messages
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt option is refused, never silently ignored


class TranslateRequest(_Strict):
    text: list[str] = Field(min_length=1, description="Raw sentences, one translation each, in this order.")
    beam: int | None = Field(None, ge=1, description="Beam size (default: the run's, usually 4); 1 = greedy.")
    nbest: int = Field(1, ge=1, description="Hypotheses returned per sentence (<= beam).")
    alpha: float | None = Field(None, ge=0.0, le=10.0, description="Length-penalty exponent (default: the run's).")


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="log P(Y | X) divided by the length penalty (what the search ranks by).")


class TranslationOut(Hypothesis):
    nbest: list[Hypothesis] | None = Field(None, description="All hypotheses, best first (only when nbest > 1).")


class TranslateResponse(BaseModel):
    translations: list[TranslationOut]


class AttentionRequest(_Strict):
    text: str = Field(description="One source sentence.")
    target: str | None = Field(None, description="Its translation (default: the model's, with default options).")


class AttentionResponse(BaseModel):
    source_pieces: list[str] = Field(description="Subword pieces of the source, ending with </s>.")
    target_pieces: list[str] = Field(description="Decoder inputs: <s> then the target's pieces.")
    layers: int
    heads: int
    cross: list[list[list[list[float]]]] = Field(
        description="Encoder-decoder attention (layer, head, target, source); each row sums to 1."
    )


class ParseRequest(_Strict):
    text: list[str] = Field(
        min_length=1,
        description="Sentences with words separated by spaces (punctuation as its own word: 'The dog barks .'), "
        "one tree each, in this order.",
    )
    beam: int | None = Field(None, ge=1, description="Beam size (default: the run's, 21 in the paper); 1 = greedy.")
    alpha: float | None = Field(None, ge=0.0, le=10.0, description="Length-penalty exponent (default: the run's).")


class ParsedTree(BaseModel):
    tree: str = Field(
        description="The tree in one-line PTB notation ('' for an empty line); brackets in words "
        "are written -LRB- / -RRB-."
    )
    words: list[str] = Field(description="The tree's leaves in order (the input's words; brackets restored).")


class ParseResponse(BaseModel):
    trees: list[ParsedTree]


class ClassifyRequest(_Strict):
    text: list[str] = Field(min_length=1, description="Raw texts, one prediction each, in this order.")


class Prediction(BaseModel):
    label: str
    probabilities: dict[str, float]


class ClassifyResponse(BaseModel):
    predictions: list[Prediction]


@dataclass(frozen=True)
class DecodeOptions:
    """The batching key of a translation request: only requests with equal options share a beam search."""

    beam: int
    alpha: float
    nbest: int


# ---------------------------------------------------------------------------------------------------- service
@dataclass(kw_only=True)
class Service:
    """What every route needs: the predictor, its batcher, the limits, and what /v1/info reports."""

    predictor: Any
    task: str
    engine: str
    limits: Limits
    batcher: DynamicBatcher
    batching: bool
    metadata: Mapping[str, Any] = field(default_factory=dict)

    async def within_timeout(self, work: Awaitable[T]) -> T:
        try:
            return await asyncio.wait_for(work, self.limits.timeout_s)
        except asyncio.TimeoutError:
            raise ApiError(
                504,
                "timeout",
                f"no answer within {self.limits.timeout_s:g} s",
                limit="timeout_s",
                max=self.limits.timeout_s,
            ) from None

    def check_texts(self, texts: list[str]) -> None:
        """Sentence-count and length limits, and text that is not Unicode (a lone surrogate, which JSON's \\uD800
        escapes can carry): 422, checked before anything reaches the model."""
        if len(texts) > self.limits.max_sentences:
            raise ApiError(
                422,
                "limit_exceeded",
                f"{len(texts)} texts in one request, at most {self.limits.max_sentences} allowed",
                limit="max_sentences",
                max=self.limits.max_sentences,
            )
        for i, text in enumerate(texts):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as err:
                raise ApiError(
                    422,
                    "invalid_text",
                    f"text {i} holds a lone surrogate (U+{ord(text[err.start]):04X} at character {err.start}), "
                    "which is not a Unicode character",
                    index=i,
                ) from None
            if len(text) > self.limits.max_chars:
                raise ApiError(
                    422,
                    "limit_exceeded",
                    f"text {i} has {len(text)} characters, at most {self.limits.max_chars} allowed",
                    limit="max_chars",
                    max=self.limits.max_chars,
                    index=i,
                )

    @property
    def max_beam(self) -> int:
        """The beam bound requests are held to: Limits.max_beam, or the run's own default beam when larger (a
        parsing run decodes with the paper's beam 21, and a request that asks for nothing is never refused)."""
        return max(self.limits.max_beam, _decode_defaults(self.predictor).beam)

    def info(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "engine": self.engine,
            **({"exact": bool(self.predictor.exact)} if hasattr(self.predictor, "exact") else {}),
            **self.metadata,
            "parameters": _parameters(self.predictor),
            **TASKS[self.task].describe(self.predictor),
            "limits": {**asdict(self.limits), "max_beam": self.max_beam},
            "batching": {
                "enabled": self.batching,
                "max_tokens": self.batcher.max_tokens,
                "max_wait_ms": self.batcher.max_wait_s * 1000.0,
            },
        }


def _parameters(predictor: Any) -> int | None:
    """The model's parameter count (a CTranslate2 export's manifest records it; the engine does not say)."""
    manifest = getattr(predictor, "manifest", None)
    if isinstance(manifest, dict) and isinstance(manifest.get("parameters"), int):
        return manifest["parameters"]
    model = getattr(predictor, "model", None)
    if model is None or not hasattr(model, "parameters"):
        return None
    return sum(p.numel() for p in model.parameters())


def _token_counter(predictor: Any) -> CountTokens:
    """Source tokens per request with the predictor's own tokenizer (the batch budget is in tokens)."""
    tokenizer = getattr(predictor, "tokenizer", None)
    if tokenizer is None or not hasattr(tokenizer, "encode"):
        return count_words
    return lambda texts: sum(len(ids) + 1 for ids in tokenizer.encode(texts))


# ---------------------------------------------------------------------------------------------------- translation
def _decode_defaults(predictor: Any) -> DecodeOptions:
    decode = getattr(predictor, "decode", None)
    return DecodeOptions(beam=getattr(decode, "beam", 4), alpha=getattr(decode, "alpha", 0.6), nbest=1)


def _decode_options(service: Service, beam: int | None, alpha: float | None, nbest: int = 1) -> DecodeOptions:
    """A request's options with the run's defaults filled in, checked against the beam bound.

    The bound is max_beam or the run's own default beam, whichever is larger: a parsing run decodes with the
    paper's beam 21 by default, and a request that asks for nothing must not be refused for the run's settings.
    """
    defaults = _decode_defaults(service.predictor)
    beam = defaults.beam if beam is None else beam
    alpha = defaults.alpha if alpha is None else alpha
    bound = service.max_beam
    if beam > bound:
        raise ApiError(
            422, "limit_exceeded", f"beam {beam} is above the server's maximum {bound}", limit="max_beam", max=bound
        )
    if nbest > beam:
        raise ApiError(422, "invalid_request", f"nbest ({nbest}) must not exceed beam ({beam})")
    return DecodeOptions(beam=beam, alpha=alpha, nbest=nbest)


def _translation_batch(predictor: Any, batch_tokens: int) -> RunBatch:
    def run(texts: list[str], options: Hashable) -> list:
        assert isinstance(options, DecodeOptions)
        return predictor.translate_nbest(
            texts, beam=options.beam, alpha=options.alpha, nbest=options.nbest, batch_tokens=batch_tokens
        )

    return run


def _translation_out(hypotheses: list, nbest: int) -> TranslationOut:
    if not hypotheses:  # an empty input line
        return TranslationOut(text="", score=0.0, nbest=[] if nbest > 1 else None)
    listed = [Hypothesis(text=h.text, score=float(h.score)) for h in hypotheses] if nbest > 1 else None
    return TranslationOut(text=hypotheses[0].text, score=float(hypotheses[0].score), nbest=listed)


def translation_routes(service: Service) -> APIRouter:
    router = APIRouter(tags=["translation"])

    @router.post("/v1/translate", response_model=TranslateResponse, response_model_exclude_none=True)
    async def translate(request: TranslateRequest) -> TranslateResponse:
        """Translate raw sentences; the answer keeps input order. Concurrent requests are decoded together."""
        options = _decode_options(service, request.beam, request.alpha, request.nbest)
        service.check_texts(request.text)
        results = await service.within_timeout(service.batcher.submit(request.text, options))
        return TranslateResponse(translations=[_translation_out(h, options.nbest) for h in results])

    if hasattr(service.predictor, "attention"):

        @router.post("/v1/attention", response_model=AttentionResponse)
        async def attention(request: AttentionRequest) -> AttentionResponse:
            """Encoder-decoder attention of one sentence pair (what the page draws)."""
            service.check_texts([request.text] + ([request.target] if request.target is not None else []))
            return await service.within_timeout(_attention(service, request, _best_translation))

    return router


def _best_translation(hypotheses: list) -> str:
    return hypotheses[0].text if hypotheses else ""


async def _attention(service: Service, request: AttentionRequest, target_of: Callable[[Any], str]) -> AttentionResponse:
    """The attention maps of `request` on the model thread; with no target given, the model's own output (decoded
    through the batcher with default options, so it is exactly what the task's route answers) is the target."""
    target = request.target
    if target is None:
        output = (await service.batcher.submit([request.text], _decode_defaults(service.predictor)))[0]
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


# ---------------------------------------------------------------------------------------------------- classification
def _classification_batch(predictor: Any, batch_tokens: int) -> RunBatch:
    def run(texts: list[str], _key: Hashable) -> list:
        return predictor.predict_proba(texts).tolist()

    return run


def classification_routes(service: Service) -> APIRouter:
    router = APIRouter(tags=["classification"])
    labels = list(service.predictor.labels)

    @router.post("/v1/classify", response_model=ClassifyResponse)
    async def classify(request: ClassifyRequest) -> ClassifyResponse:
        """The most probable label of each text and the probability of every label, in input order."""
        service.check_texts(request.text)
        rows = await service.within_timeout(service.batcher.submit(request.text, None))
        return ClassifyResponse(
            predictions=[
                Prediction(
                    label=labels[max(range(len(row)), key=row.__getitem__)],
                    probabilities={label: float(p) for label, p in zip(labels, row)},
                )
                for row in rows
            ]
        )

    return router


# ---------------------------------------------------------------------------------------------------- parsing
def _parsed(tree: Tree | None) -> ParsedTree:
    """One answer of /v1/parse: the tree's one-line string and its leaves with brackets restored, so a client can
    check or show the words without reading PTB escapes."""
    from ..data.trees import to_string, unescape_word, words

    if tree is None:  # an empty input line
        return ParsedTree(tree="", words=[])
    return ParsedTree(tree=to_string(tree), words=[unescape_word(w) for w in words(tree)])


def _parsing_batch(predictor: Any, batch_tokens: int) -> RunBatch:
    """The parser batches a model call by its own budget (pieces x beam, decode.batch_tokens); the server's budget
    only decides which requests share the call. Trees become strings here, on the model thread."""

    def run(texts: list[str], options: Hashable) -> list:
        assert isinstance(options, DecodeOptions)
        return [_parsed(tree) for tree in predictor.parse_trees(texts, beam=options.beam, alpha=options.alpha)]

    return run


def _parse_tree_string(output: ParsedTree) -> str:
    return output.tree


def parsing_routes(service: Service) -> APIRouter:
    """POST /v1/parse, and POST /v1/attention (sentence pieces x the tree's tokens: one teacher-forced forward pass,
    as cheap as a translation's). A sentence the model's positions cannot hold is refused (422): a parse must cover
    every word, so it cannot be cut as a translation's input is."""
    from ..data.text import DataError

    router = APIRouter(tags=["parsing"])

    @router.post("/v1/parse", response_model=ParseResponse)
    async def parse(request: ParseRequest) -> ParseResponse:
        """One tree per sentence, in input order, each over exactly the sentence's words. Concurrent requests with
        equal options are decoded together."""
        options = _decode_options(service, request.beam, request.alpha)
        service.check_texts(request.text)
        try:
            trees = await service.within_timeout(service.batcher.submit(request.text, options))
        except DataError as error:  # too long for the model (raised for this request alone: see the batcher)
            raise ApiError(422, "too_long", f"text: {error}") from None
        return ParseResponse(trees=trees)

    if hasattr(service.predictor, "attention"):

        @router.post("/v1/attention", response_model=AttentionResponse)
        async def attention(request: AttentionRequest) -> AttentionResponse:
            """Encoder-decoder attention of a sentence and a tree (`target`: one-line PTB; default: the model's
            parse). Target tokens are <s> then the linearised tree: brackets, labels and tags."""
            service.check_texts([request.text] + ([request.target] if request.target is not None else []))
            try:
                return await service.within_timeout(_attention(service, request, _parse_tree_string))
            except ValueError as error:  # an empty sentence, a malformed tree, a sentence too long
                raise ApiError(422, "invalid_request", str(error)) from None

    return router


# ---------------------------------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class TaskSpec:
    """One servable task: which predictors it serves, how a batch of them runs, and its routes."""

    serves: Callable[[Any], bool]
    run_batch: Callable[[Any, int], RunBatch]  # (predictor, batch_tokens) -> RunBatch
    routes: Callable[[Service], APIRouter]
    describe: Callable[[Any], dict[str, Any]]  # what /v1/info adds for this task (the page reads it)


# Checked in this order: the first whose `serves` accepts the predictor serves it.
TASKS: dict[str, TaskSpec] = {
    "classification": TaskSpec(
        lambda p: hasattr(p, "predict_proba") and hasattr(p, "labels"),
        _classification_batch,
        classification_routes,
        lambda p: {"labels": list(p.labels)},
    ),
    "translation": TaskSpec(
        lambda p: hasattr(p, "translate_nbest"),
        _translation_batch,
        translation_routes,
        lambda p: {"decode_defaults": asdict(_decode_defaults(p)), "attention": hasattr(p, "attention")},
    ),
    "parsing": TaskSpec(
        lambda p: hasattr(p, "parse_trees"),
        _parsing_batch,
        parsing_routes,
        lambda p: {"decode_defaults": asdict(_decode_defaults(p)), "attention": hasattr(p, "attention")},
    ),
}


def task_of(predictor: Any) -> str:
    for name, spec in TASKS.items():
        if spec.serves(predictor):
            return name
    raise TypeError(
        f"cannot serve a {type(predictor).__name__}: it has none of the methods of {', '.join(TASKS)} predictors"
    )


# ---------------------------------------------------------------------------------------------------- common routes
def common_routes(service: Service) -> APIRouter:
    router = APIRouter(tags=["server"])

    @router.get("/health")
    async def health() -> dict[str, str]:
        """Liveness: answers while the server accepts requests."""
        return {"status": "ok", "task": service.task}

    @router.get("/v1/info")
    async def info() -> dict[str, Any]:
        """Task, languages, parameter count, engine, limits and batching settings."""
        return service.info()

    return router


# The page's files, fixed here: no path in a request ever reaches the file system.
PAGE_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/static/page.css": ("page.css", "text/css; charset=utf-8"),
}
# Everything the page loads comes from this server: it works offline and nothing else may run in it.
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:", "Cache-Control": "no-cache"}


def page_routes() -> APIRouter:
    router = APIRouter(include_in_schema=False)
    for url, (name, media_type) in PAGE_FILES.items():
        content = (STATIC_DIR / name).read_bytes()  # read once, at start-up

        async def page_file(content: bytes = content, media_type: str = media_type) -> Response:
            return Response(content, media_type=media_type, headers=PAGE_HEADERS)

        router.add_api_route(url, page_file, methods=["GET"])
    return router


# ---------------------------------------------------------------------------------------------------- errors
def _summarise(errors: list[dict]) -> list[dict[str, Any]]:
    """pydantic's errors without their inputs (which may be large, or not JSON): where, what kind, what."""
    return [
        {"loc": [str(part) for part in e.get("loc", ())], "type": e.get("type", ""), "msg": e.get("msg", "")}
        for e in errors
    ]


def _where(error: dict[str, Any]) -> str:
    """A field's path without the leading "body" (`text.3`, `beam`)."""
    loc = error["loc"][1:] if error["loc"][:1] == ["body"] else error["loc"]
    return ".".join(loc) or "body"


async def _validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
    """Unparsable JSON is the client's syntax error (400); a well-formed body with wrong fields is 422."""
    errors = _summarise(list(error.errors()))
    if any(e["type"] == "json_invalid" for e in errors):
        return ApiError(400, "invalid_json", "the request body is not valid JSON").response()
    message = "; ".join(
        f"{_where(e)}: {'unknown field' if e['type'] == 'extra_forbidden' else e['msg']}" for e in errors
    )
    return JSONResponse({"error": {"code": "invalid_request", "message": message, "errors": errors}}, 422)


async def _api_error(request: Request, error: ApiError) -> JSONResponse:
    return error.response()


async def _internal_error(request: Request, error: Exception) -> JSONResponse:
    """A failure inside the model: JSON like every other error; the traceback goes to the server's log only."""
    return ApiError(500, "internal_error", f"the server failed on this request ({type(error).__name__})").response()


class BodyLimit:
    """ASGI middleware: refuse a request body over `max_bytes` with 413 before any route parses it.

    A declared Content-Length is checked up front; a chunked body is counted as it arrives. The body is then
    handed on whole (it is at most max_bytes).
    """

    def __init__(self, app: Callable, *, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers", ())).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_bytes:
            return await self._refuse(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                return await self._refuse(scope, receive, send)
        body, delivered = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)

    async def _refuse(self, scope: dict, receive: Callable, send: Callable) -> None:
        error = ApiError(
            413,
            "limit_exceeded",
            f"the request body is over {self.max_bytes} bytes",
            limit="max_body_bytes",
            max=self.max_bytes,
        )
        await error.response()(scope, receive, send)


# ---------------------------------------------------------------------------------------------------- the app
def create_app(
    predictor: Any,
    *,
    limits: Limits | None = None,
    batching: bool = True,
    engine: str = "torch",
    metadata: Mapping[str, Any] | None = None,
    batch_tokens: int = 4096,
    max_wait_ms: float = 5.0,
) -> FastAPI:
    """The FastAPI app serving `predictor` (a Translator, a Classifier, or an object with the same methods).

    batching=False decodes one request at a time (the baseline the load benchmark compares with).
    metadata: what /v1/info adds about the run (e.g. {"languages": {"source": "en", "target": "de"}}).
    """
    task, limits = task_of(predictor), limits or Limits()
    spec = TASKS[task]
    batcher = DynamicBatcher(
        spec.run_batch(predictor, batch_tokens),
        max_tokens=batch_tokens,
        max_wait_s=max_wait_ms / 1000.0 if batching else 0.0,
        max_requests=None if batching else 1,
        count_tokens=_token_counter(predictor),
    )
    service = Service(
        predictor=predictor,
        task=task,
        engine=engine,
        limits=limits,
        batcher=batcher,
        batching=batching,
        metadata=dict(metadata or {}),
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await batcher.close()  # after uvicorn has let in-flight requests finish

    app = FastAPI(title="transduce", summary=f"A {task} model served over HTTP.", lifespan=lifespan)
    app.state.service = service
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    # Starlette types a handler as taking any Exception, though it only calls it with the class it is registered for
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _internal_error)
    for router in (common_routes(service), spec.routes(service), page_routes()):
        app.include_router(router)
    return app


# ---------------------------------------------------------------------------------------------------- serve
ENGINES = ("torch", "ctranslate2")


def _describe_run(run: str | Path, engine: str) -> tuple[str, str, dict[str, str] | None]:
    """The run's name, its kind ("translation", "parsing" or "classifier") and its languages (None when it has
    none), read from the run's config.json, or for a CTranslate2 export folder (which keeps no run config) from its
    manifest."""
    from ..outputs import read_manifest
    from ..training.checkpoint import find_weights

    def languages(source: str | None, target: str | None) -> dict[str, str] | None:
        return {"source": source, "target": target} if source and target else None

    if engine == "ctranslate2":
        from ..export.ctranslate2 import is_export

        if is_export(run):
            named = (read_manifest(run) or {}).get("languages") or {}
            return Path(run).resolve().name, "translation", languages(named.get("source"), named.get("target"))
    run_dir = find_weights(run)[0]
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    kind = "parsing" if config.get("task") == "parsing" else "classifier" if "head" in config else "translation"
    data = config.get("data", {})
    return run_dir.resolve().name, kind, languages(data.get("src"), data.get("tgt"))


def load_predictor(
    run: str | Path, *, engine: str = "torch", device: str = "auto", exact: bool = False, threads: int = 0
) -> tuple[Any, dict[str, Any]]:
    """The predictor for a run directory (a parsing run's config says `"task": "parsing"`, a classifier run has a
    "head" section; engine "ctranslate2" also takes an export folder) and what /v1/info should tell of it."""
    from ..config import ConfigError

    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r} ({', '.join(ENGINES)})")
    name, kind, languages = _describe_run(run, engine)
    predictor: Classifier | CTranslate2Translator | Parser | Translator
    if kind != "translation" and engine != "torch":  # the export knows only plain translation models
        raise ConfigError(f"{run}: a {kind} run is served with the torch engine only (--engine torch)")
    if threads < 0:
        raise ConfigError(f"--threads must be 0 (the engine's default) or more, got {threads}")
    if threads and engine == "torch":
        import torch

        torch.set_num_threads(threads)
    if kind == "parsing":
        from ..decoding.parser import Parser

        predictor = Parser.from_run(run, device=device)
    elif kind == "classifier":
        from ..decoding.classifier import Classifier

        predictor = Classifier.from_run(run, device=device)
    elif engine == "ctranslate2":
        from ..export.ctranslate2 import CTranslate2Translator

        predictor = CTranslate2Translator.from_run(run, device=device, exact=exact, threads=threads)
    else:
        from ..decoding.translator import Translator

        predictor = Translator.from_run(run, device=device)
    metadata: dict[str, Any] = {"run": name}
    if languages is not None:
        metadata["languages"] = languages
    return predictor, metadata


def check_address(host: str, port: int) -> None:
    """Refuse (ConfigError, one line) a port outside 0-65535 (0: any free port), a host that cannot be bound, or an
    address already in use, by binding it once, as uvicorn will (address reuse on: a port in TIME_WAIT is not
    refused)."""
    import socket

    from ..config import ConfigError

    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535 (0: any free port), got {port}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise ConfigError(f"--host {host}: not an address this machine can bind ({err.strerror})") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            why = "already in use (another server?)" if err.errno == errno.EADDRINUSE else err.strerror
            raise ConfigError(f"{host}:{port}: cannot serve there: {why}; choose another --port or --host") from None


def run_server(
    app: FastAPI, *, host: str = "127.0.0.1", port: int = 8000, graceful_timeout_s: int = 30, log_level: str = "info"
) -> None:
    """uvicorn until SIGINT/SIGTERM; then no new connections, in-flight requests get up to graceful_timeout_s."""
    import uvicorn

    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on", timeout_graceful_shutdown=graceful_timeout_s
    )
    uvicorn.Server(config).run()


def serve(
    run: str | Path,
    *,
    engine: str = "torch",
    exact: bool = False,
    threads: int = 0,
    host: str = "127.0.0.1",
    port: int = 8000,
    device: str = "auto",
    limits: Limits | None = None,
    batching: bool = True,
    batch_tokens: int = 4096,
    max_wait_ms: float = 5.0,
    graceful_timeout_s: int = 30,
    log_level: str = "info",
) -> None:
    """Serve a run directory over HTTP (loopback only unless `host` says otherwise) until SIGTERM or Ctrl-C."""
    check_address(host, port)  # before the model is loaded: a taken port is one line, at once
    predictor, metadata = load_predictor(run, engine=engine, device=device, exact=exact, threads=threads)
    app = create_app(
        predictor,
        limits=limits,
        batching=batching,
        engine=engine,
        metadata=metadata,
        batch_tokens=batch_tokens,
        max_wait_ms=max_wait_ms,
    )
    run_server(app, host=host, port=port, graceful_timeout_s=graceful_timeout_s, log_level=log_level)
