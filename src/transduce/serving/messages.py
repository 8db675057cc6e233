"""The JSON bodies of the HTTP API (app.py): requests are strict (an unknown field is refused, and a value of
another JSON type is never converted: `"beam": "4"` and `"beam": true` are 422, not beam 4 and beam 1), responses
are what the routes answer."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..terminology.constraints import MAX_PHRASE_CHARS, MAX_PHRASES, MAX_PREFIX_CHARS
from ..terminology.glossary import MAX_TERM_CHARS


class _Strict(BaseModel):
    # a misspelt option is refused, never silently ignored; strict: no coercion between types (pydantic's lax mode
    # reads "4" and true as the integers 4 and 1); a JSON integer is still a valid float
    model_config = ConfigDict(extra="forbid", strict=True)


class ConstraintsIn(_Strict):
    include: list[str] = Field(
        default_factory=list, description="Target phrases the translation must contain (whole, in any order)."
    )
    exclude: list[str] = Field(default_factory=list, description="Target phrases it must not contain.")


GlossaryEntry = Annotated[list[str], Field(min_length=2, max_length=2)]  # [source term, target term]


PAIR_HELP = (
    "required only when the server translates several language pairs (/v1/info's `pairs`); matched without regard "
    "to case"
)


class TranslateRequest(_Strict):
    text: list[str] = Field(min_length=1, description="Raw sentences, one translation each, in this order.")
    source: str | None = Field(
        None,
        min_length=1,
        max_length=32,
        description=f"The source language's code (e.g. 'en'), or 'auto' (found among the served ones): {PAIR_HELP}.",
    )
    target: str | None = Field(
        None, min_length=1, max_length=32, description=f"The target language's code (e.g. 'de'): {PAIR_HELP}."
    )
    beam: int | None = Field(None, ge=1, description="Beam size (default: the run's, usually 4); 1 = greedy.")
    nbest: int = Field(1, ge=1, description="Hypotheses returned per sentence (<= beam).")
    alpha: float | None = Field(None, ge=0.0, le=10.0, description="Length-penalty exponent (default: the run's).")
    sampling_topk: int | None = Field(
        None,
        ge=0,
        le=100_000,
        description="Sample each token from the K most probable (0: all) instead of searching; 1 = greedy "
        "(default: the run's decode.sampling_topk). Sampling takes no beam or nbest.",
    )
    sampling_topp: float | None = Field(
        None, gt=0.0, le=1.0, description="Then from the smallest set of probability P."
    )
    temperature: float | None = Field(None, gt=0.0, le=100.0, description="Sampling from softmax(logits / T).")
    seed: int | None = Field(
        None, ge=0, lt=2**63, description="Sampling's seed: the same request with the same seed gets the same answer."
    )
    tag: str | None = Field(
        None, max_length=32, description="A tag of the model's corpora (e.g. '<2de>') put before every source."
    )
    split: Literal["sentences", "lines"] = Field(
        "sentences",
        description="sentences: each text is a paragraph, split into sentences by the source language's rules and "
        "rejoined with its spacing; lines: each text is one sentence (as a test set). A sentence too long for the "
        "model is cut into parts either way, never truncated.",
    )
    format: Literal["text", "html", "xml", "srt", "vtt"] = Field(
        "text",
        description="text: plain paragraphs; html or xml: each text a document whose markup is kept (inline tags "
        "moved with their aligned words); srt or vtt: each text a subtitle file (cue numbers and timings kept).",
    )
    alignment: bool = Field(
        False,
        description="Also each translation's word alignment: [source word, target word] pairs, 0-based, words split "
        "at whitespace (format text only).",
    )
    constraints: list[ConstraintsIn | None] | None = Field(
        None,
        description="One entry per text (null: none): target phrases its translation must and must not contain, "
        f"at most {MAX_PHRASES} phrases of {MAX_PHRASE_CHARS} characters. A text with phrases to include must be "
        "one sentence (split 'lines', or a one-sentence paragraph); format text only.",
    )
    prefix: list[str | None] | None = Field(
        None,
        description="One entry per text (null or '': none): the text its translation starts with, as written, at "
        f"most {MAX_PREFIX_CHARS} characters; format text only.",
    )
    glossary: list[GlossaryEntry] | None = Field(
        None,
        description="[source term, target term] pairs for this request, merged over the server's glossary (an entry "
        "here replaces the server's for the same term): a sentence holding a source term (whole words, any case) must "
        "contain its target term; a target equal to its source keeps the term untranslated. At most the server's "
        f"max_glossary_entries (/v1/info) entries of {MAX_TERM_CHARS} characters a term; every format.",
    )


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="log P(Y | X) divided by the length penalty (what the search ranks by).")
    alignment: list[tuple[int, int]] | None = Field(
        default=None,
        description="With alignment: [source word, target word] links, 0-based over whitespace-split words.",
    )


class TranslationOut(Hypothesis):
    nbest: list[Hypothesis] | None = Field(None, description="All hypotheses, best first (only when nbest > 1).")


class TranslateResponse(BaseModel):
    translations: list[TranslationOut]
    source: str | None = Field(None, description="The source language found, when the request's source was 'auto'.")


class AttentionRequest(_Strict):
    text: str = Field(description="One source sentence.")
    target: str | None = Field(None, description="Its translation (default: the model's, with default options).")


class LanguagePair(_Strict):
    source: str | None = Field(None, min_length=1, max_length=32, description="The source language's code.")
    target: str | None = Field(None, min_length=1, max_length=32, description="The target language's code.")


class TranslationAttentionRequest(AttentionRequest):
    languages: LanguagePair | None = Field(
        None, description=f"The pair, as /v1/translate's source and target (`target` here is the text): {PAIR_HELP}."
    )


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
