"""Paragraphs (issue 73): a test set with N consecutive sentences joined on each line, translated three ways and
scored against the references joined the same way:

- one by one: every sentence a line of its own (`--split lines` on the original file), then joined N a line;
- `--split sentences` on the joined file (each line a paragraph, split by the run's source language's rules);
- `--split lines` on the joined file (each paragraph taken as one sentence: the behaviour before issue 73).

Also the cost of the two options on the original one-sentence lines: `--split sentences` and `--alignment` against
plain decoding, sentences/s (best of `--repeats`, same process, same settings).

    python benchmarks/paragraphs.py --run RUN --src multi30k/test_2016_flickr.en.gz \
        --ref multi30k/test_2016_flickr.fr.gz --group 5
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from transduce.data import read_lines, resolve_path
from transduce.decoding.translator import Translator
from transduce.documents.sentences import sentence_spans
from transduce.metrics import score


def joined(lines: list[str], n: int) -> list[str]:
    return [" ".join(lines[k : k + n]) for k in range(0, len(lines), n)]


def timed(call, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = call()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--group", type=int, default=5, help="sentences joined on a line")
    p.add_argument("--beam", type=int, default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2, help="timing runs of each cost measure (the best counts)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    sources, refs = read_lines(resolve_path(args.src)), read_lines(resolve_path(args.ref))
    translator = Translator.from_run(args.run, precision=args.precision)
    options = {} if args.beam is None else {"beam": args.beam}
    ref_joined = joined(refs, args.group)
    paragraphs = joined(sources, args.group)

    plain_s, one_by_one = timed(lambda: translator.translate(sources, **options), args.repeats)
    split_s, split_one = timed(lambda: translator.translate(sources, split="sentences", **options), args.repeats)
    align_s, aligned = timed(lambda: translator.decode_lines(sources, alignment=True, **options), args.repeats)
    assert [h[0].text for h in aligned.hypotheses] == one_by_one, "--alignment changed a translation"
    decoded = translator.decode_lines(paragraphs, split="sentences", **options)
    as_sentences = [h[0].text if h else "" for h in decoded.hypotheses]
    as_lines = translator.translate(paragraphs, **options)

    rows = [
        (f"one by one ({len(sources)} lines), joined {args.group} a line", joined(one_by_one, args.group)),
        (f"--split sentences on {len(paragraphs)} paragraphs", as_sentences),
        (f"--split lines on {len(paragraphs)} paragraphs", as_lines),
    ]
    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads, torch {torch.__version__}")
    print(f"{'translated':<48} {'BLEU':>6} {'chrF':>6} {'words':>7}")
    for name, hyps in rows:
        s = score(hyps, ref_joined)
        print(f"{name:<48} {s.bleu:6.2f} {s.chrf:6.2f} {sum(len(h.split()) for h in hyps):7,}")
    print(f"reference words: {sum(len(r.split()) for r in ref_joined):,}; sentences cut for length: {decoded.n_cut}")
    # where the gap comes from: paragraphs the splitter cut into exactly their N sentences, and the others (a
    # sentence without final punctuation joins the next)
    whole = [len(sentence_spans(p, translator.language)) == args.group for p in paragraphs]
    for label, keep in (("split into their sentences", True), ("split into fewer", False)):
        picked = [k for k, w in enumerate(whole) if w == keep]
        if picked:
            one = score([joined(one_by_one, args.group)[k] for k in picked], [ref_joined[k] for k in picked]).bleu
            par = score([as_sentences[k] for k in picked], [ref_joined[k] for k in picked]).bleu
            print(f"  {len(picked)} paragraphs {label}: one by one {one:.2f}, --split sentences {par:.2f}")
    n = len(sources)
    print(f"cost on {n} one-sentence lines (sentences/s, best of {args.repeats}):")
    print(f"  plain {n / plain_s:.1f}; --split sentences {n / split_s:.1f} ({plain_s / split_s:.3f}x)")
    print(f"  --alignment {n / align_s:.1f} ({plain_s / align_s:.3f}x)")
    print(f"  translations equal to plain: --split sentences {split_one == one_by_one}, --alignment True")


if __name__ == "__main__":
    main()
