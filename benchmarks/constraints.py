"""Terminology (issue 74): lexical constraints, negative phrases and a glossary on a test set, against the
unconstrained search of the same model, threads and settings.

- Positive constraints: for each sentence 1 or 2 phrases (1 or 2 words) drawn from its reference among those the
  unconstrained translation lacks (random.Random(f"{seed}:{line}"): the line's own draw; punctuation stripped from the
  words' ends). Reported at each beam: the share of phrases in the output (as text: what the token-level constraint
  guarantees; and as whole words), BLEU with and without them, sentences/s.
- Negative phrases: for each sentence one word (3+ letters) of its unconstrained translation that must not appear;
  the share that still appears (as a whole word).
- Glossary: GLOSSARY below (everyday En->Fr terms, twelve with a French target, two kept untranslated):
  sentences without a term must come out byte-identical to the unconstrained search, those with one must hold
  each target term.

    python benchmarks/constraints.py --run RUN --src multi30k/test_2016_flickr.en.gz \
        --ref multi30k/test_2016_flickr.fr.gz
"""

from __future__ import annotations

import argparse
import functools
import platform
import random
import re

import torch
from paragraphs import timed  # benchmarks/ is the script's folder

from transduce.data import read_lines, resolve_path
from transduce.decoding.translator import Translator
from transduce.metrics import score
from transduce.terminology import Constraints, Glossary

GLOSSARY = [
    ("bike", "bicyclette"),
    ("car", "automobile"),
    ("woman", "dame"),
    ("kids", "gamins"),
    ("jacket", "veste"),
    ("shirt", "chemise"),
    ("street", "rue"),
    ("crowd", "foule"),
    ("beach", "plage"),
    ("ocean", "océan"),
    ("guitar", "guitare"),
    ("hat", "chapeau"),
    ("frisbee", "frisbee"),
    ("skateboard", "skateboard"),
]
PUNCT = ".,;:!?\"'()«»"


def words(text: str) -> list[str]:
    return [w.strip(PUNCT) for w in text.split() if w.strip(PUNCT)]


def whole(phrase: str, text: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


def draw_positive(ref: str, hyp: str, line: int, seed: int) -> tuple[str, ...]:
    rng = random.Random(f"{seed}:{line}")
    ref_words = words(ref)
    spans = [" ".join(ref_words[i : i + n]) for n in (1, 2) for i in range(len(ref_words) - n + 1)]
    lacking = [s for s in dict.fromkeys(spans) if s not in hyp]
    if not lacking:
        return ()
    picked = rng.sample(lacking, min(len(lacking), rng.choice((1, 2))))
    return tuple(p for p in picked if not any(p != q and p in q for q in picked))  # not one inside another


def draw_negative(hyp: str, line: int, seed: int) -> tuple[str, ...]:
    rng = random.Random(f"{seed}:{line}:neg")
    candidates = sorted({w for w in words(hyp) if len(w) >= 3 and w.isalpha()})
    return (rng.choice(candidates),) if candidates else ()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--beams", default="4,8")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2, help="timing runs at the first beam (the best counts)")
    p.add_argument("--limit", type=int, default=0, help="only the first N sentences (0: all)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    sources, refs = read_lines(resolve_path(args.src)), read_lines(resolve_path(args.ref))
    if args.limit:
        sources, refs = sources[: args.limit], refs[: args.limit]
    translator = Translator.from_run(args.run)
    print(f"machine: {platform.processor() or platform.machine()}, {args.threads} threads, torch {torch.__version__}")
    n = len(sources)
    for k, beam in enumerate(int(b) for b in args.beams.split(",")):
        repeats = args.repeats if k == 0 else 1
        plain = translator.translate(sources, beam=beam)
        positive = [draw_positive(r, h, i, args.seed) for i, (r, h) in enumerate(zip(refs, plain))]
        cons = [Constraints(include=c) for c in positive]
        constrained = translator.translate(sources, beam=beam, constraints=cons)
        # the cost on the sentences that have phrases, the same sentences with and without them
        held_lines = [i for i, c in enumerate(positive) if c]
        subset = [sources[i] for i in held_lines]
        subset_cons = [cons[i] for i in held_lines]
        plain_s, _ = timed(functools.partial(translator.translate, subset, beam=beam), repeats)
        pos_s, _ = timed(functools.partial(translator.translate, subset, beam=beam, constraints=subset_cons), repeats)
        phrases = [(p, out) for c, out in zip(positive, constrained) for p in c]
        held = sum(p in out for p, out in phrases) / len(phrases)
        held_whole = sum(whole(p, out) for p, out in phrases) / len(phrases)
        negative = [draw_negative(h, i, args.seed) for i, h in enumerate(plain)]
        banned = translator.translate(sources, beam=beam, constraints=[Constraints(exclude=c) for c in negative])
        negs = [(p, out) for c, out in zip(negative, banned) for p in c]
        print(f"beam {beam}: {n} sentences, {len(phrases)} positive phrases on {sum(map(bool, positive))} sentences")
        print(f"  positive phrases in the output: {held:.2%} (as whole words {held_whole:.2%})")
        print(f"  negative phrases in the output (whole words): {sum(whole(p, o) for p, o in negs) / len(negs):.2%}")
        print(
            f"  BLEU unconstrained {score(plain, refs).bleu:.2f}, with the phrases {score(constrained, refs).bleu:.2f}"
        )
        print(
            f"  sentences/s on those {len(subset)}: unconstrained {len(subset) / plain_s:.1f}, with their 1-2 phrases "
            f"{len(subset) / pos_s:.1f} "
            f"({plain_s / pos_s:.3f}x, best of {repeats})"
        )
        if k == 0:
            glossary = Glossary(GLOSSARY, name="benchmark glossary")
            glossed = translator.translate(sources, beam=beam, glossary=glossary)
            found = [glossary.constraints(s) for s in sources]
            without = [i for i, f in enumerate(found) if not f]
            same = sum(glossed[i] == plain[i] for i in without)
            terms = [(t, glossed[i]) for i, f in enumerate(found) for t in f]
            print(
                f"  glossary ({len(GLOSSARY)} entries): {len(sources) - len(without)} sentences hold a term; "
                f"{len(terms)} terms used {sum(t in out for t, out in terms) / max(1, len(terms)):.2%}; "
                f"{same}/{len(without)} sentences without a term byte-identical to the unconstrained search; "
                f"BLEU {score(glossed, refs).bleu:.2f}"
            )


if __name__ == "__main__":
    main()
