"""The service behind the HTTP layer (app.py): the predictor, its dynamic batcher (batcher.py), the limits a
request is held to, the batches each task runs, and loading a run for serving. Nothing here knows HTTP routes or
JSON bodies; an `ApiError` carries the status the HTTP layer answers it with.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .batcher import CountTokens, DynamicBatcher, RunBatch, count_words

if TYPE_CHECKING:  # imported where used: loading one predictor does not import the others' dependencies
    from ..data.trees import Tree
    from ..decoding.classifier import Classifier
    from ..decoding.parser import Parser
    from ..decoding.translator import Translator
    from ..export.ct2_translator import CTranslate2Translator
    from ..terminology import Constraints, Glossary

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Limits:
    """What one request may ask for. Each bound protects the shared model from one client's request."""

    max_sentences: int = 64  # texts per request (422)
    max_chars: int = 2000  # characters per text (422)
    max_body_bytes: int = 1_000_000  # request body (413)
    max_beam: int = 16  # 1 <= nbest <= beam <= max_beam (422); the run's own default beam is always allowed
    max_attention_pieces: int = 100  # /v1/attention: pieces per side (422), the CLI's picture limit (plot.MAX_PIECES)
    max_glossary_entries: int = 1000  # /v1/translate: entries of a request's own glossary (422), compiled per request
    timeout_s: float = 30.0  # a request not answered by then gets 504

    def __post_init__(self) -> None:
        """Every limit within LIMIT_RANGES (a limit of 0, a negative one or NaN would refuse every request or none):
        refused in one line (ConfigError) naming the limit and its `serve` flag, before anything is served."""
        import math

        from ..config import ConfigError

        for name, (low, high) in LIMIT_RANGES.items():
            value = getattr(self, name)
            whole = isinstance(value, int) and not isinstance(value, bool)
            number = whole or isinstance(value, float)
            if name == "timeout_s":
                fits = number and math.isfinite(value) and low < value <= high
                wanted = f"a number of seconds above 0 and at most {high:,}"
            else:
                fits = whole and low <= value <= high
                wanted = f"a whole number from {low} to {high:,}"
            if not fits:
                flag = f" (serve {LIMIT_FLAGS[name]})" if name in LIMIT_FLAGS else ""
                raise ConfigError(f"{name}{flag} must be {wanted}, got {value!r}")


# The bounds of each limit (the documented maxima: docs/deployment.md); timeout_s is above its lower bound.
LIMIT_RANGES = {
    "max_sentences": (1, 10_000),
    "max_chars": (1, 100_000),
    "max_body_bytes": (1, 100_000_000),
    "max_beam": (1, 64),  # the CLI's --beam bound
    "max_attention_pieces": (1, 100),  # the pictures' bound (plot.MAX_PIECES)
    "max_glossary_entries": (1, 100_000),  # a glossary file's bound (terminology.glossary.MAX_ENTRIES)
    "timeout_s": (0, 3600),
}
LIMIT_FLAGS = {"max_sentences": "--max-sentences", "max_chars": "--max-chars", "timeout_s": "--timeout"}


class ApiError(Exception):
    """An error answered as JSON with its status; `extra` names the limit and its value where one was hit."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.extra}}


@dataclass(frozen=True)
class DecodeOptions:
    """The batching key of a translation request: only requests with equal options share a beam search."""

    beam: int
    alpha: float
    nbest: int
    # sampling (decoding/front.py) and the tag; `alone` sets a sampling request apart (a number of its own): each
    # sentence's draws are seeded by its index in the call, so a request decoded with others would not repeat
    sampling: tuple[int | None, float | None, float | None, int | None] = (None, None, None, None)
    tag: str | None = None
    alone: int = 0
    split: str = "sentences"  # paragraphs (documents/sentences.py), the server's default; "lines": one sentence each
    alignment: bool = False
    # terminology (decoding/steering.py, serving/terminology.py): per text its constraints and prefix, which fit only
    # the request's own texts (a request with them is set apart: `alone`), and the glossary: the server's (the same
    # object in every request's options: they still batch together), or a request's own merged over it (set apart)
    constraints: tuple[Constraints | None, ...] | None = None
    prefixes: tuple[str | None, ...] | None = None
    glossary: Glossary | None = None

    def shown(self) -> dict[str, Any]:
        """What /v1/info reports of the defaults: beam, alpha and nbest."""
        return {"beam": self.beam, "alpha": self.alpha, "nbest": self.nbest}

    def decoding(self) -> dict[str, Any]:
        """The keyword arguments of the predictor's decoding call beyond beam, alpha and nbest."""
        topk, topp, temperature, seed = self.sampling
        given = {"sampling_topk": topk, "sampling_topp": topp, "temperature": temperature, "seed": seed}
        words = {"split": self.split, "alignment": self.alignment}
        terms = {
            "constraints": None if self.constraints is None else list(self.constraints),
            "prefixes": None if self.prefixes is None else list(self.prefixes),
            "glossary": self.glossary,
        }
        return {k: v for k, v in {**given, "tag": self.tag, **words, **terms}.items() if v is not None}


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
    describe: Callable[[Any], dict[str, Any]] = lambda _: {}  # what the task adds to /v1/info (its app.TaskSpec)
    glossary: Glossary | None = None  # the server's (serve --glossary), applied to every translation request

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
        return max(self.limits.max_beam, decode_defaults(self.predictor).beam)

    def info(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "engine": self.engine,
            **({"exact": bool(self.predictor.exact)} if hasattr(self.predictor, "exact") else {}),
            **({"precision": self.predictor.precision} if hasattr(self.predictor, "precision") else {}),
            **self.metadata,
            "parameters": _parameters(self.predictor),
            **self.describe(self.predictor),
            **({"glossary": {"entries": len(self.glossary)}} if self.glossary is not None else {}),
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


def token_counter(predictor: Any) -> CountTokens:
    """Source tokens per request with the predictor's own tokenizer (the batch budget is in tokens)."""
    tokenizer = getattr(predictor, "tokenizer", None)
    if tokenizer is None or not hasattr(tokenizer, "encode"):
        return count_words
    return lambda texts: sum(len(ids) + 1 for ids in tokenizer.encode(texts))


def decode_defaults(predictor: Any) -> DecodeOptions:
    decode = getattr(predictor, "decode", None)
    return DecodeOptions(beam=getattr(decode, "beam", 4), alpha=getattr(decode, "alpha", 0.6), nbest=1)


_ALONE = itertools.count(1)  # the numbers that keep sampling and terminology requests out of shared calls


def set_apart(options: DecodeOptions) -> DecodeOptions:
    """`options` with a number of their own: the request they belong to shares no model call."""
    return dataclasses.replace(options, alone=next(_ALONE))


def decode_options(
    service: Service,
    beam: int | None,
    alpha: float | None,
    nbest: int = 1,
    *,
    sampling: tuple[int | None, float | None, float | None, int | None] = (None, None, None, None),
    tag: str | None = None,
    split: str = "sentences",
    alignment: bool = False,
) -> DecodeOptions:
    """A request's options with the run's defaults filled in, checked against the beam bound.

    The bound is max_beam or the run's own default beam, whichever is larger: a parsing run decodes with the
    paper's beam 21 by default, and a request that asks for nothing must not be refused for the run's settings.
    """
    defaults = decode_defaults(service.predictor)
    samples = _samples(service.predictor, sampling[0])
    beam = (1 if samples else defaults.beam) if beam is None else beam  # sampling: one draw per sentence
    alpha = defaults.alpha if alpha is None else alpha
    bound = service.max_beam
    if beam > bound:
        raise ApiError(
            422, "limit_exceeded", f"beam {beam} is above the server's maximum {bound}", limit="max_beam", max=bound
        )
    if nbest > beam:
        raise ApiError(422, "invalid_request", f"nbest ({nbest}) must not exceed beam ({beam})")
    options = DecodeOptions(
        beam=beam, alpha=alpha, nbest=nbest, sampling=sampling, tag=tag, split=split, alignment=alignment
    )
    if any(v is not None for v in sampling) or tag is not None:
        _check_decoding(service.predictor, options)
    return set_apart(options) if samples else options


def _samples(predictor: Any, topk: int | None) -> bool:
    """Whether a request samples: its top-k, else the run's decode.sampling_topk, is not 1."""
    return (getattr(getattr(predictor, "decode", None), "sampling_topk", 1) if topk is None else topk) != 1


def _check_decoding(predictor: Any, options: DecodeOptions) -> None:
    """The sampling settings and the tag checked as the decoding call checks them (decoding/front.py), so that a
    mistake is a 422 naming it, not a failed batch."""
    from ..config import ConfigError
    from ..decoding import front

    if not hasattr(predictor, "tokenizer") or not hasattr(predictor.tokenizer, "tag_id"):
        raise ApiError(422, "invalid_request", "this model takes no sampling settings or tag")
    topk, topp, temperature, seed = options.sampling
    try:
        front.options(predictor.decode, beam=options.beam, nbest=options.nbest, sampling_topk=topk,
                      sampling_topp=topp, temperature=temperature, seed=seed)  # fmt: skip
        if options.tag:
            predictor.tokenizer.tag_id(options.tag)
    except (ConfigError, ValueError) as err:
        raise ApiError(422, "invalid_request", str(err)) from None


# ---------------------------------------------------------------------------------------------------- batches
def translation_batch(predictor: Any, batch_tokens: int) -> RunBatch:
    def run(texts: list[str], options: Hashable) -> list:
        assert isinstance(options, DecodeOptions)
        return predictor.translate_nbest(
            texts,
            beam=options.beam,
            alpha=options.alpha,
            nbest=options.nbest,
            batch_tokens=batch_tokens,
            **options.decoding(),
        )

    return run


def classification_batch(predictor: Any, batch_tokens: int) -> RunBatch:
    def run(texts: list[str], _key: Hashable) -> list:
        return predictor.predict_proba(texts).tolist()

    return run


def _parsed(tree: Tree | None) -> dict[str, Any]:
    """One answer of /v1/parse (messages.ParsedTree): the tree's one-line string and its leaves with brackets
    restored, so a client can check or show the words without reading PTB escapes."""
    from ..data.trees import to_string, unescape_word, words

    if tree is None:  # an empty input line
        return {"tree": "", "words": []}
    return {"tree": to_string(tree), "words": [unescape_word(w) for w in words(tree)]}


def parsing_batch(predictor: Any, batch_tokens: int) -> RunBatch:
    """The parser batches a model call by its own budget (pieces x beam, decode.batch_tokens); the server's budget
    only decides which requests share the call. Trees become strings here, on the model thread."""

    def run(texts: list[str], options: Hashable) -> list:
        assert isinstance(options, DecodeOptions)
        return [_parsed(tree) for tree in predictor.parse_trees(texts, beam=options.beam, alpha=options.alpha)]

    return run


# ---------------------------------------------------------------------------------------------------- loading
ENGINES = ("torch", "ctranslate2")


def describe_run(run: str | Path, engine: str) -> tuple[str, str, dict[str, str] | None]:
    """The run's name, its task (a name of the task registry) and its languages (None when it has none), read from
    the run's config.json (its "task"; a config without one is a classifier's when it has a "head" section), or for
    a CTranslate2 export folder (which keeps no run config) from its manifest."""
    from ..config import read_config_dict
    from ..outputs import read_manifest
    from ..runs import find_weights

    def languages(source: str | None, target: str | None) -> dict[str, str] | None:
        return {"source": source, "target": target} if source and target else None

    if engine == "ctranslate2":
        from ..export.ctranslate2 import is_export

        if is_export(run):
            named = (read_manifest(run) or {}).get("languages") or {}
            return Path(run).resolve().name, "translation", languages(named.get("source"), named.get("target"))
    run_dir = find_weights(run)[0]
    config = read_config_dict(run_dir / "config.json")  # one line for an unreadable one (issue 65)
    kind = config.get("task") or ("classification" if "head" in config else "translation")
    data = config.get("data", {})
    return run_dir.resolve().name, kind, languages(data.get("src"), data.get("tgt"))


def max_threads() -> int:
    """The most model threads `serve --threads` takes: the cores this process may run on (device.usable_cores)."""
    from ..device import usable_cores

    return usable_cores()


def load_predictor(
    run: str | Path,
    *,
    engine: str = "torch",
    device: str = "auto",
    exact: bool = False,
    threads: int = 0,
    precision: str = "fp32",
) -> tuple[Any, dict[str, Any]]:
    """The predictor for a run directory (its task's, from the task registry; engine "ctranslate2" also takes an
    export folder) and what /v1/info should tell of it. `precision` "bf16": a translation model decodes in
    bfloat16 autocast (Translator's precision)."""
    from ..config import ConfigError, registry

    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r} ({', '.join(ENGINES)})")
    name, kind, languages = describe_run(run, engine)
    predictor: Classifier | CTranslate2Translator | Parser | Translator
    if kind != "translation" and engine != "torch":  # the export knows only plain translation models
        raise ConfigError(f"{run}: a {kind} run is served with the torch engine only (--engine torch)")
    if precision != "fp32" and (kind != "translation" or engine != "torch"):
        raise ConfigError(f"--precision {precision} serves a translation run with --engine torch only")
    most = max_threads()
    if not 0 <= threads <= most:  # 1000 threads on 2 cores ran 3,001 OS threads, all contending for the cores
        raise ConfigError(
            f"--threads must be 0 (the engine's default) to {most} (the cores this process may use), got {threads}"
        )
    if threads and engine == "torch":
        import torch

        torch.set_num_threads(threads)
    if kind == "translation" and engine == "ctranslate2":
        from ..export.ct2_translator import CTranslate2Translator

        predictor = CTranslate2Translator.from_run(run, device=device, exact=exact, threads=threads)
    else:
        extra = {"precision": precision} if precision != "fp32" else {}
        predictor = registry.load(registry.entry(kind).predictor).from_run(run, device=device, **extra)
    metadata: dict[str, Any] = {"run": name}
    if languages is not None:
        metadata["languages"] = languages
    return predictor, metadata
