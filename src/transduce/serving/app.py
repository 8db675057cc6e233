"""The HTTP layer: FastAPI routes over a predictor (Translator, Classifier, or any object with their methods).

Routes: `GET /health`, `GET /v1/info`, the task's own routes (`POST /v1/translate` and `POST /v1/attention` for a
translation model, `POST /v1/classify` for a classifier, `POST /v1/parse` and `POST /v1/attention` for a parser), the
page at `/`, and FastAPI's OpenAPI page at `/docs`; for a translation run, LibreTranslate's API (libretranslate.py).
Several translation runs make one server of several language pairs (pairs.py: `create_pairs_app`, `serve RUN...`).
Every error is JSON, `{"error": {"code", "message", ...}}`, and an error caused by a limit names it
(`"limit": "max_sentences", "max": 64`): a client should learn which knob it hit without reading server logs.

The service behind the routes (limits, batching, loading a run) is service.py; the JSON bodies are messages.py.
A served task is a TaskSpec here (how to recognise its predictor, how to run a batch of it, its routes), named by
its line in the task registry (config/registry.py): serving a new kind of model is one more spec, its route
function, and the registry line naming it (the parser was added that way).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from ..config import registry
from ..config.registry import load
from ..terminology import Glossary
from .access import ApiKeys, add_cors
from .address import check_address, network_warning
from .batcher import DynamicBatcher, RunBatch, model_executor
from .libretranslate import PATHS as LIBRE_PATHS
from .libretranslate import libretranslate_routes
from .messages import (
    AttentionRequest,
    AttentionResponse,
    ClassifyRequest,
    ClassifyResponse,
    ParseRequest,
    ParseResponse,
    Prediction,
)
from .middleware import BodyLimit, KeyCheck, OtherMethods
from .pairs import Pairs, check_glossary, load_models, pairs_info, pairs_of, runs_of
from .service import (
    ApiError,
    Limits,
    Service,
    classification_batch,
    decode_defaults,
    decode_options,
    parsing_batch,
    token_counter,
    translation_batch,
)
from .terminology import check_server_glossary
from .translation import attention_response, translation_routes

STATIC_DIR = Path(__file__).parent / "static"


def _respond(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), error.status)


# ---------------------------------------------------------------------------------------------------- classification
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
def _parse_tree_string(output: dict[str, Any]) -> str:
    return output["tree"]


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
        options = decode_options(service, request.beam, request.alpha)
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
                return await service.within_timeout(attention_response(service, request, _parse_tree_string))
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


TRANSLATION = TaskSpec(
    lambda p: hasattr(p, "translate_nbest"),
    translation_batch,
    translation_routes,
    lambda p: {"decode_defaults": decode_defaults(p).shown(), "attention": hasattr(p, "attention")},
)
CLASSIFICATION = TaskSpec(
    lambda p: hasattr(p, "predict_proba") and hasattr(p, "labels"),
    classification_batch,
    classification_routes,
    lambda p: {"labels": list(p.labels)},
)
PARSING = TaskSpec(
    lambda p: hasattr(p, "parse_trees"),
    parsing_batch,
    parsing_routes,
    lambda p: {"decode_defaults": decode_defaults(p).shown(), "attention": hasattr(p, "attention")},
)


def served_tasks() -> dict[str, TaskSpec]:
    """The registry's served tasks, in its order (their `serves` tests exclude each other for our predictors)."""
    return {name: load(task.serving) for name, task in registry.TASKS.items() if task.serving is not None}


def task_of(predictor: Any) -> str:
    tasks = served_tasks()
    for name, spec in tasks.items():
        if spec.serves(predictor):
            return name
    raise TypeError(
        f"cannot serve a {type(predictor).__name__}: it has none of the methods of {', '.join(tasks)} predictors"
    )


# ---------------------------------------------------------------------------------------------------- common routes
def common_routes(services: Sequence[Service]) -> APIRouter:
    router = APIRouter(tags=["server"])

    @router.get("/health")
    async def health() -> dict[str, str]:
        """Liveness: answers while the server accepts requests."""
        return {"status": "ok", "task": services[0].task}

    @router.get("/v1/info")
    async def info() -> dict[str, Any]:
        """Task, languages, parameter count, engine, limits and batching settings (with several language pairs:
        each pair's under `pairs`)."""
        return services[0].info() if len(services) == 1 else pairs_info(services)

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
        return _respond(ApiError(400, "invalid_json", "the request body is not valid JSON"))
    message = "; ".join(
        f"{_where(e)}: {'unknown field' if e['type'] == 'extra_forbidden' else e['msg']}" for e in errors
    )
    return JSONResponse({"error": {"code": "invalid_request", "message": message, "errors": errors}}, 422)


async def _api_error(request: Request, error: ApiError) -> JSONResponse:
    return _respond(error)


async def _internal_error(request: Request, error: Exception) -> JSONResponse:
    """A failure inside the model: JSON like every other error; the traceback goes to the server's log only."""
    return _respond(ApiError(500, "internal_error", f"the server failed on this request ({type(error).__name__})"))


# ---------------------------------------------------------------------------------------------------- the app
Served = tuple[Any, Mapping[str, Any]]  # a predictor and what /v1/info tells of it (its run, its languages)


def create_app(
    predictor: Any,
    *,
    limits: Limits | None = None,
    batching: bool = True,
    engine: str = "torch",
    metadata: Mapping[str, Any] | None = None,
    batch_tokens: int = 4096,
    max_wait_ms: float = 5.0,
    glossary: Glossary | None = None,
    cors: Sequence[str] = (),
    api_keys: ApiKeys | None = None,
) -> FastAPI:
    """The FastAPI app serving `predictor` (a Translator, a Classifier, or an object with the same methods).

    batching=False decodes one request at a time (the baseline the load benchmark compares with).
    metadata: what /v1/info adds about the run (e.g. {"languages": {"source": "en", "target": "de"}}).
    glossary: the server's (serve --glossary), applied to every translation request (serving/terminology.py).
    A translation run with languages also gets LibreTranslate's routes (libretranslate.py). cors: the origins whose
    pages may call the server; api_keys: the keys /v1/*, /translate and /detect then need (access.py).
    """
    return create_pairs_app(
        [(predictor, metadata or {})],
        limits=limits,
        batching=batching,
        engine=engine,
        batch_tokens=batch_tokens,
        max_wait_ms=max_wait_ms,
        glossary=glossary,
        cors=cors,
        api_keys=api_keys,
    )


def create_pairs_app(
    models: Sequence[Served],
    *,
    limits: Limits | None = None,
    batching: bool = True,
    engine: str = "torch",
    batch_tokens: int = 4096,
    max_wait_ms: float = 5.0,
    glossary: Glossary | None = None,
    cors: Sequence[str] = (),
    api_keys: ApiKeys | None = None,
) -> FastAPI:
    """The app serving several translation models, one per language pair (their metadata's "languages"), as
    `create_app` serves one: each model has its own batcher, all on one model thread, and a request goes to the pair
    it names (pairs.py). Models of another task, with unknown languages or of one pair are refused (ConfigError, one
    line), and so is a glossary (`glossary` serves one model)."""
    if not models:
        raise ValueError("a server needs at least one model")
    limits = limits or Limits()
    task = task_of(models[0][0])
    if glossary is not None:
        check_server_glossary(task, engine)
        check_glossary(len(models))
    spec = served_tasks()[task]
    # several models share one model thread (batcher.py); one model's batcher keeps its own, as it always has
    executor = model_executor() if len(models) > 1 else None
    services = [
        Service(
            predictor=predictor,
            task=task_of(predictor),
            engine=engine,
            limits=limits,
            batcher=DynamicBatcher(
                spec.run_batch(predictor, batch_tokens),
                max_tokens=batch_tokens,
                max_wait_s=max_wait_ms / 1000.0 if batching else 0.0,
                max_requests=None if batching else 1,
                count_tokens=token_counter(predictor),
                executor=executor,
            ),
            batching=batching,
            metadata=dict(metadata),
            describe=spec.describe,
            glossary=glossary,
        )
        for predictor, metadata in models
    ]
    pairs = pairs_of(services)  # several: refused unless each is a translation model of a pair of its own
    routes = spec.routes(services[0]) if len(services) == 1 else translation_routes(services[0], pairs)
    return _app(services, routes, pairs, cors=cors, api_keys=api_keys, executor=executor)


def _app(
    services: list[Service],
    task_routes: APIRouter,
    pairs: Pairs,
    *,
    cors: Sequence[str],
    api_keys: ApiKeys | None,
    executor: ThreadPoolExecutor | None,
) -> FastAPI:
    """The FastAPI app over the services: middleware, error handlers, routes (LibreTranslate's where there are
    pairs), and a lifespan that stops every batcher, then the model thread they share (`executor`, if shared)."""
    limits, task = services[0].limits, services[0].task

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        for service in services:  # after uvicorn has let in-flight requests finish
            await service.batcher.close()
        if executor is not None:
            executor.shutdown(wait=True)

    app = FastAPI(title="transduce", summary=f"A {task} model served over HTTP.", lifespan=lifespan)
    app.state.service, app.state.services = services[0], services
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes, plain_paths=LIBRE_PATHS)
    methods: dict[str, set[str]] = {}  # every route's path (none has parameters) and its methods
    app.add_middleware(OtherMethods, methods=methods)
    if api_keys is not None:
        app.add_middleware(KeyCheck, keys=api_keys)
    if cors:
        add_cors(app, cors)  # outermost: preflights are answered before the key check
    # Starlette types a handler as taking any Exception, though it only calls it with the class it is registered for
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _internal_error)
    libre = [libretranslate_routes(pairs, keys=api_keys)] if pairs else []
    routers = (common_routes(services), task_routes, *libre, page_routes())
    for router in routers:
        app.include_router(router)
    for route in [r for router in routers for r in router.routes] + list(app.router.routes):  # app's own: /docs
        path, allowed = getattr(route, "path", None), getattr(route, "methods", None)
        if isinstance(path, str) and allowed:
            methods.setdefault(path, set()).update(allowed)
    return app


# ---------------------------------------------------------------------------------------------------- serve
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
    run: str | Path | Sequence[str | Path],
    *,
    engine: str = "torch",
    exact: bool = False,
    threads: int = 0,
    host: str = "127.0.0.1",
    port: int = 8000,
    device: str = "auto",
    precision: str = "fp32",
    limits: Limits | None = None,
    batching: bool = True,
    batch_tokens: int = 4096,
    max_wait_ms: float = 5.0,
    graceful_timeout_s: int = 30,
    log_level: str = "info",
    glossary: Glossary | None = None,
    cors: Sequence[str] = (),
    api_keys: ApiKeys | None = None,
) -> None:
    """Serve a run directory over HTTP (loopback only unless `host` says otherwise) until SIGTERM or Ctrl-C; several
    runs (or a folder of runs, pairs.runs_of) make one server of several language pairs."""
    runs = runs_of([run] if isinstance(run, str | Path) else run)
    check_address(host, port)  # before the model is loaded: a taken port is one line, at once
    warning = network_warning(host, keys=api_keys is not None)
    if warning is not None:
        print(warning, file=sys.stderr)
    models = load_models(
        runs,
        engine=engine,
        glossary=glossary is not None,
        device=device,
        exact=exact,
        threads=threads,
        precision=precision,
    )
    app = create_pairs_app(
        models,
        limits=limits,
        batching=batching,
        engine=engine,
        batch_tokens=batch_tokens,
        max_wait_ms=max_wait_ms,
        glossary=glossary,
        cors=cors,
        api_keys=api_keys,
    )
    run_server(app, host=host, port=port, graceful_timeout_s=graceful_timeout_s, log_level=log_level)
