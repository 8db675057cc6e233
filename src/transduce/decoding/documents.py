"""Whole documents through a translator: plain text (a paragraph a line), HTML and XML (documents/markup.py) and
subtitles (documents/subtitles.py). One entry, `translate_document`, for `translate --format`, the Python API and the
server; either engine (`Translator`, `CTranslate2Translator`) does the translating."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import ConfigError
from ..documents.formats import FORMATS

MARKUP, SUBTITLES = ("html", "xml"), ("srt", "vtt")


@dataclass(frozen=True)
class Document:
    """A translated document, how many sentences were too long for the model and cut into parts, and how many
    inline subtitle tags were dropped (documents/subtitles.py)."""

    text: str
    n_cut: int = 0
    tags_dropped: int = 0


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return fmt


def translate_document(translator: Any, text: str, fmt: str, *, name: str = "<input>", **options: Any) -> Document:
    """`text` translated as a document of format `fmt` ("text", "html", "xml", "srt", "vtt"), `name` naming it in
    error messages; `options` go to `decode_lines` (beam, alpha, tag, ...). A document's paragraphs are split into
    sentences (split="sentences"); "text" keeps the caller's `split` (default: sentences) and the line layout."""
    check_format(fmt)
    for key in ("nbest", "alignment", "mbr", "constraints", "prefixes"):
        if options.get(key) not in (None, False, 1, "none"):
            raise ConfigError(f"a document ({fmt}) is translated to one text: {key} does not apply (a glossary does)")
    n_cut = 0

    def decode(paragraphs: list[str], alignment: bool):
        nonlocal n_cut
        decoded = translator.decode_lines(paragraphs, **{"split": "sentences", **options, "alignment": alignment})
        n_cut += decoded.n_cut
        return [hyps[0] if hyps else None for hyps in decoded.hypotheses]

    if fmt == "text":
        lines = text.split("\n")
        out = [h.text if h else "" for h in decode(lines, False)]
        return Document("\n".join(out), n_cut)
    if fmt in MARKUP:
        from ..documents.markup import translate_markup

        def aligned(blocks: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
            return [(h.text, h.alignment or []) if h else ("", []) for h in decode(blocks, True)]

        return Document(translate_markup(text, fmt, aligned, name=name), n_cut)
    from ..documents.subtitles import translate_subtitles_counted

    plain = lambda paragraphs: [h.text if h else "" for h in decode(paragraphs, False)]
    translated, dropped = translate_subtitles_counted(text, fmt, plain, name=name)
    return Document(translated, n_cut, dropped)
