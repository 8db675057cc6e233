"""Markup kept through translation (documents/markup.py) on a trained run: Multi30k test sentences in seeded HTML.

    .venv/bin/python benchmarks/markup_eval.py --run runs/m30k [--limit 200] [--seed 0] [--ref-align test.align]
                                               [--out markup_eval.json]

Each source sentence becomes one HTML document, `<p>` around it and inline tags around some of its words, drawn
from a random generator seeded by --seed and the sentence's number (the same sentence gets the same tags whatever
--limit is): <b>, <i>, <a href title>, <b><i>..</i></b> nestings, and untranslated spans (<code>, <span
translate="no">). All the blocks go to the model in one `decode_lines(..., split="sentences", alignment=True)` call.
Reported, over the sentences:
  tags kept     outputs well-formed with exactly the source's tags (names and attributes, as a multiset);
  text kept     outputs whose text, tags and untranslated spans taken out, is the translation of the untagged
                input (the sentence without its markup and its untranslated words);
  spans cover   with --ref-align, the share of translated tags whose target words include all the target words
                that the reference alignment links to the tag's source words.
--ref-align FILE is Pharaoh links ("i-j ...", one line per sentence) between the untagged input and the model's
translation of it, made by another aligner (e.g. eflomal): run once with --out, align the "plain_source" and
"plain_translation" fields of its records, run again with --ref-align. Writes nothing without --out (a new file).
"""

from __future__ import annotations

import argparse
import html
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from lxml import etree

from transduce.data import read_lines, resolve_path
from transduce.documents.markup import AlignedTranslate, translate_markup

UNTRANSLATED = ("code", "notranslate")
KINDS = ["b", "i", "a", "nested", "code", "notranslate"]
KIND_WEIGHTS = [3, 3, 2, 2, 1, 1]


def make_document(sentence: str, number: int, seed: int) -> tuple[str, list[dict[str, Any]]]:
    """One sentence as an HTML document with random inline tags, and the tags: id, kind, word span [start, end) over
    the sentence's words (an <i> nested in a <b> is a tag of its own)."""
    rng = random.Random(f"{seed}:{number}")
    words = sentence.split()
    if not words:
        return "<p></p>", []
    n_tags = rng.choice([1, 1, 2, 2, 3])
    cuts = sorted(rng.sample(range(len(words) + 1), min(len(words) + 1, 2 * n_tags)))
    spans = [(cuts[k], cuts[k + 1]) for k in range(0, len(cuts) - 1, 2) if cuts[k] < cuts[k + 1]]
    opening: dict[int, list[str]] = {}
    closing: dict[int, list[str]] = {}
    tags: list[dict[str, Any]] = []

    def add(kind: str, start: int, end: int, open_tag: str, close_tag: str) -> None:
        tags.append({"id": f"s{number}t{len(tags)}", "kind": kind, "start": start, "end": end})
        opening.setdefault(start, []).append(open_tag.format(id=tags[-1]["id"]))
        closing.setdefault(end - 1, []).insert(0, close_tag)

    for start, end in spans:
        kind = rng.choices(KINDS, weights=KIND_WEIGHTS)[0]
        if kind == "a":
            add(kind, start, end, f'<a id="{{id}}" href="https://example.org/{number}" title="link {number}">', "</a>")
        elif kind == "nested":
            add("b", start, end, '<b id="{id}">', "</b>")
            inner = rng.randrange(start, end)
            add("i", inner, rng.randrange(inner, end) + 1, '<i id="{id}">', "</i>")
        elif kind == "code":
            add(kind, start, end, '<code id="{id}">', "</code>")
        elif kind == "notranslate":
            add(kind, start, end, '<span id="{id}" translate="no">', "</span>")
        else:
            add(kind, start, end, f'<{kind} id="{{id}}">', f"</{kind}>")
    pieces = ["".join(opening.get(k, [])) + html.escape(w) + "".join(closing.get(k, [])) for k, w in enumerate(words)]
    return "<p>" + " ".join(pieces) + "</p>", tags


def plain_words(sentence: str, tags: list[dict[str, Any]]) -> tuple[list[str], dict[int, int]]:
    """The words the model sees (the untranslated spans' taken out), and each one's index among them by its index in
    the sentence."""
    hidden = {k for tag in tags if tag["kind"] in UNTRANSLATED for k in range(tag["start"], tag["end"])}
    index: dict[int, int] = {}
    for k in range(len(sentence.split())):
        if k not in hidden:
            index[k] = len(index)
    return [w for k, w in enumerate(sentence.split()) if k not in hidden], index


def recorded_blocks(document: str) -> list[str]:
    """The blocks translate_markup sends for `document`."""
    seen: list[str] = []
    translate_markup(document, "html", lambda blocks: seen.extend(blocks) or [(b, []) for b in blocks])
    return seen


def output_words(paragraph: Any) -> tuple[list[str], dict[str, tuple[int, int]]]:
    """An output paragraph's translated words (untranslated spans left out), and each element's id -> its word span
    [start, end) among them."""
    text = ""
    chars: dict[str, tuple[int, int]] = {}

    def visit(element: Any) -> None:
        nonlocal text
        start = len(text)
        if element.tag == "code" or element.get("translate") == "no":
            text += " "  # not the model's words; it parts the words around it, as in markup.py
        else:
            text += element.text or ""
            for child in element:
                visit(child)
                text += child.tail or ""
        if element.get("id"):
            chars[element.get("id")] = (start, len(text))

    visit(paragraph)
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for k, char in enumerate(text + " "):  # the space ends the last word
        if start is None and not char.isspace():
            start = k
        elif start is not None and char.isspace():
            spans.append((start, k))
            start = None
    # an element's words: those that overlap its characters
    ranges = {key: (sum(e <= a for _, e in spans), sum(s < b for s, _ in spans)) for key, (a, b) in chars.items()}
    return [text[s:e] for s, e in spans], ranges


def evaluate(sentences: list[str], translate: AlignedTranslate, *, seed: int, ref_align: list[str] | None) -> dict:
    """The figures (see the module's docstring) and one record per sentence; `translate` is called once."""
    documents = [make_document(s, k, seed) for k, s in enumerate(sentences)]
    plains = [plain_words(s, tags) for s, (_, tags) in zip(sentences, documents)]
    untagged = ["<p>" + html.escape(" ".join(words)) + "</p>" for words, _ in plains]
    wanted = list(dict.fromkeys(b for doc in [*(d for d, _ in documents), *untagged] for b in recorded_blocks(doc)))
    start = time.perf_counter()
    known = dict(zip(wanted, translate(wanted))) if wanted else {}
    model_seconds = time.perf_counter() - start
    cached = lambda blocks: [known[b] for b in blocks]
    start = time.perf_counter()
    outputs = [translate_markup(doc, "html", cached) for doc, _ in documents]
    markup_seconds = time.perf_counter() - start
    records, tags_ok, text_ok, covered, judged = [], 0, 0, 0, 0
    for k, ((doc, tags), out, (words, index)) in enumerate(zip(documents, outputs, plains)):
        translation = " ".join(
            "".join(etree.fromstring(translate_markup(untagged[k], "html", cached)).itertext()).split()
        )
        record = {"source": doc, "output": out, "plain_source": " ".join(words), "plain_translation": translation}
        try:
            got, want = etree.fromstring(f"<r>{out}</r>"), etree.fromstring(f"<r>{doc}</r>")
        except etree.XMLSyntaxError:
            records.append({**record, "tags_ok": False, "text_ok": False})
            continue
        signature = lambda root: Counter((e.tag, tuple(sorted(e.attrib.items()))) for e in root.iter("*"))
        record["tags_ok"] = signature(got) == signature(want)
        found, spans = output_words(got[0]) if len(got) else ([], {})
        record["text_ok"] = " ".join(found) == translation
        tags_ok += record["tags_ok"]
        text_ok += record["text_ok"]
        if ref_align is not None and record["text_ok"]:
            links = [tuple(map(int, link.split("-"))) for link in ref_align[k].split()]
            for tag in tags:
                if tag["kind"] in UNTRANSLATED or tag["id"] not in spans:
                    continue
                source = {index[i] for i in range(tag["start"], tag["end"])}
                reference = {j for i, j in links if i in source}
                if reference:
                    judged += 1
                    covered += reference <= set(range(*spans[tag["id"]]))
        records.append(record)
    n = max(len(sentences), 1)
    figures = {
        "sentences": len(sentences),
        "tags": sum(len(tags) for _, tags in documents),
        "tags_kept": tags_ok / n,
        "text_kept": text_ok / n,
        "spans_cover": covered / judged if judged else None,
        "spans_judged": judged,
        "model_seconds": round(model_seconds, 2),
        "markup_seconds": round(markup_seconds, 2),
    }
    return {"figures": figures, "records": records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a run directory (or a weights file in one)")
    parser.add_argument("--src", default="multi30k/test_2016_flickr.en.gz", help="under $TRANSDUCE_DATA if relative")
    parser.add_argument("--limit", type=int, default=0, help="the first N sentences only (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ref-align", type=Path, help="Pharaoh links between the untagged input and its translation")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, help="a new JSON file: the figures and one record per sentence")
    args = parser.parse_args()
    if args.out is not None and args.out.exists():
        sys.exit(f"{args.out} exists: --out writes a new file")
    sentences = read_lines(resolve_path(args.src))
    sentences = sentences[: args.limit] if args.limit > 0 else sentences
    ref_align = None
    if args.ref_align is not None:
        ref_align = read_lines(args.ref_align, allow_empty=True)
        if len(ref_align) != len(sentences):
            sys.exit(f"{args.ref_align}: {len(ref_align)} lines for {len(sentences)} sentences")
    from transduce import Translator

    translator = Translator.from_run(args.run, device=args.device)

    def translate(blocks: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
        decoded = translator.decode_lines(blocks, split="sentences", alignment=True)
        best = [hyps[0] if hyps else None for hyps in decoded.hypotheses]
        return [(h.text, list(h.alignment or [])) if h else ("", []) for h in best]

    result = evaluate(sentences, translate, seed=args.seed, ref_align=ref_align)
    figures = result["figures"]
    print(f"{'figure':<16}{'value':>10}  over")
    print(f"{'tags kept':<16}{figures['tags_kept']:>10.1%}  {figures['sentences']} sentences")
    print(f"{'text kept':<16}{figures['text_kept']:>10.1%}  {figures['sentences']} sentences")
    if figures["spans_cover"] is not None:
        print(f"{'spans cover':<16}{figures['spans_cover']:>10.1%}  {figures['spans_judged']} tags")
    print(f"{'model seconds':<16}{figures['model_seconds']:>10}  one decode_lines call")
    print(f"{'markup seconds':<16}{figures['markup_seconds']:>10}  translate_markup, all documents")
    if args.out is not None:
        with args.out.open("x", encoding="utf-8") as f:
            json.dump({"run": str(args.run), "seed": args.seed, **result}, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
