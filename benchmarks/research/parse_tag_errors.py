"""A parser's tagging errors by how often each word occurs in the training trees (where its errors fall).

    transduce parse runs/X/averaged.safetensors --words-from-gold --gold gum_const/dev.trees --beam 1 > parses.txt
    .venv/bin/python benchmarks/research/parse_tag_errors.py parses.txt
Reads the parses (the lines of `transduce parse` output that hold a tree; `--gold` adds score lines, which are
skipped), the gold trees line for line, and the training trees (default: the gum-parse recipe's, GUM train plus the
WSJ sample), all normalized as for training. Prints, for words seen 0, 1-4, 5-49 and 50+ times in training, their
share of the words, tagging accuracy and error count, then the commonest (gold tag, predicted tag, band) confusions.
"""

from __future__ import annotations

import argparse
from collections import Counter

from transduce.data import resolve_path
from transduce.data.trees import parse_tree, read_trees, tags, words

BANDS = ((0, 0, "unseen"), (1, 4, "1-4"), (5, 49, "5-49"), (50, None, "50+"))


def band(count: int) -> str:
    return next(name for low, high, name in BANDS if count >= low and (high is None or count <= high))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parses")
    parser.add_argument("--gold", default="gum_const/dev.trees")
    parser.add_argument("--train", nargs="+", default=["gum_const/train.trees.gz", "ptb_sample_nltk/treebank.trees.gz"])
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    gold = read_trees(resolve_path(args.gold), normalized=True)
    seen = Counter(w for path in args.train for t in read_trees(resolve_path(path), normalized=True) for w in words(t))
    with open(args.parses, encoding="utf-8") as f:
        parsed = [parse_tree(line) for line in f if line.startswith("(")]
    if len(parsed) != len(gold):
        raise SystemExit(f"{args.parses}: {len(parsed)} trees, but {args.gold} has {len(gold)}")
    right: Counter[str] = Counter()
    total: Counter[str] = Counter()
    confusions: Counter[tuple[str, str, str]] = Counter()
    for g, p in zip(gold, parsed):
        for word, gold_tag, tag in zip(words(g), tags(g), tags(p)):
            b = band(seen[word])
            total[b] += 1
            right[b] += gold_tag == tag
            if gold_tag != tag:
                confusions[(gold_tag, tag, b)] += 1
    n = sum(total.values())
    for _, _, name in BANDS:
        if total[name]:
            share, accuracy = total[name] / n, right[name] / total[name]
            errors = total[name] - right[name]
            print(f"{name:7s} {total[name]:6d} words ({share:6.1%})  tagged right {accuracy:7.2%}  errors {errors}")
    print(f"all     {n:6d} words  tagged right {sum(right.values()) / n:7.2%}  errors {n - sum(right.values())}")
    for (gold_tag, tag, name), count in confusions.most_common(args.top):
        print(f"{count:5d}  {gold_tag} read as {tag}  ({name})")


if __name__ == "__main__":
    main()
