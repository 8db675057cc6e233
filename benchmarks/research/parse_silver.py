"""Silver trees for self-training a parser: unlabelled English parsed by two parsers, kept where they agree exactly.

    TRANSDUCE_DATA=../shared/data .venv/bin/python benchmarks/research/parse_silver.py \
        RUN_A RUN_B --out runs/silver.trees

An experiment (docs/experiments.md, run 41), not a training mode. The sentences come from newstest2014.en (all of
it) and from reviews of IMDB train (drawn with seed 0): split after . ! or ? before a capital, a quote or a bracket,
and tokenized roughly as GUM is (Penn Treebank splits of punctuation and clitics, "..." apart, and hyphens between
letters as tokens of their own, GUM's HYPH); 3 to 50 tokens. It is an approximation written for this experiment
only: the parser itself never tokenizes. Two pools are parsed in turn, as for run 41: 12,000 sentences, then
24,000 more that are not in the first (drawn from a larger pool of 40,000). Each pool is parsed greedily (beam 1,
under the tree constraint) by both runs; a sentence becomes a silver tree when the two parses are the same string.
The trees are written sorted and without repeats (run 41 read the same set in shuffled order; training shuffles
anyway). Also written: OUT.sentences, every sentence parsed, one per line.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from pathlib import Path

from transduce.config import ClassifyDataConfig
from transduce.data import read_lines, resolve_path
from transduce.data.labelled import read_labelled
from transduce.decoding.parser import Parser
from transduce.outputs import atomic_write_text

CLITIC = re.compile(r"(?i)(\w)(n't|'s|'m|'d|'re|'ve|'ll)\b")


def split_sentences(text: str) -> list[str]:
    text = re.sub(r"<br\s*/?>", " ", text)  # IMDB keeps HTML line breaks
    text = re.sub(r"\s+", " ", text).strip()
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[\"'(A-Z])", text) if s]


def tokenize(s: str) -> list[str]:
    s = re.sub(r'^"', "`` ", s)
    s = re.sub(r'(?<=[\s(\[{])"', " `` ", s)
    s = s.replace('"', " '' ")
    s = s.replace("...", " ... ")
    s = re.sub(r"([,;:!?()\[\]{}$%&])", r" \1 ", s)
    s = re.sub(r"(?<=\w)-(?=\w)", " - ", s)
    s = s.replace("--", " -- ")
    s = CLITIC.sub(r"\1 \2", s)
    s = re.sub(r"([^.])\.\s*$", r"\1 .", s)
    return s.split()


def draw(need: int, news: list[list[str]], reviews: list[str]) -> list[str]:
    """`need` tokenized sentences: all of `news` (already tokenized), then `reviews` in a seeded order."""
    rng = random.Random(0)
    found = list(news)
    reviews = list(reviews)
    rng.shuffle(reviews)
    for text in reviews:
        if len(found) >= need * 1.3:
            break
        found += [tokenize(s) for s in split_sentences(text)]
    found = [t for t in found if 3 <= len(t) <= 50]
    rng.shuffle(found)
    return [" ".join(t) for t in found[:need]]


def pools() -> list[list[str]]:
    lines = read_lines(resolve_path("wmt14_en_de/newstest2014.en"))
    news = [tokenize(s) for line in lines for s in split_sentences(line)]  # once, for both pools
    # the line breaks alone are removed below: ClassifyDataConfig's strip_html would also cut "<3 ... >" from a review
    reviews, _, _ = read_labelled("imdb/train.jsonl.gz", ClassifyDataConfig(strip_html=False))
    first = draw(12000, news, reviews)
    seen = set(first)
    second: list[str] = []
    for s in draw(40000, news, reviews):
        if s not in seen:
            seen.add(s)
            second.append(s)
    return [first, second[:24000]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", help="a parsing run directory or weights file")
    ap.add_argument("run_b", help="a second one (another seed)")
    ap.add_argument("--out", required=True, help="the silver trees file (refused if it or OUT.sentences exists)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    out = Path(args.out)
    listing = out.with_name(out.name + ".sentences")
    for path in (out, listing):
        if path.exists():
            raise SystemExit(f"{path}: exists; give a new --out")
    parsers = [Parser.from_run(r, device=args.device) for r in (args.run_a, args.run_b)]
    sentences: list[str] = []
    agreed: set[str] = set()
    for pool in pools():
        sentences += pool
        a, b = (p.parse(pool, beam=1) for p in parsers)
        agreed.update(x for x, y in zip(a, b) if x and x == y)
        print(f"{len(pool):,} sentences parsed, {len(agreed):,} silver trees so far", file=sys.stderr)
    atomic_write_text(listing, "".join(s + "\n" for s in sentences))
    atomic_write_text(out, "".join(t + "\n" for t in sorted(agreed)))
    print(f"{out}: {len(agreed):,} silver trees from {len(sentences):,} sentences")


if __name__ == "__main__":
    main()
