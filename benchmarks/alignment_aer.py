"""Alignment error rate (issue 73) on the Hansards English-French gold links ($TRANSDUCE_DATA/align_gold_enfr: 447
pairs, sure and possible links; PROVENANCE.md there): AER = 1 - (|A & S| + |A & P|) / (|A| + |S|).

The first half of the pairs chooses, the second half reports:
- each `--run` (an En->Fr model): the links of the gold pairs as `score-pairs --alignment` reads them
  (`Translator.pair_alignments`), for every decoder layer, every count of first heads averaged and every way of
  reading links (model.alignment_links, `--rules`); the setting with the lowest AER on the first half is reported
  on the second (beside the run's own setting, as trained);
- `--eflomal`: `transduce align` (eflomal, both directions, grow-diag-final-and) over `--aligner-corpus` (the
  model's training corpus) plus the 447 gold sentences, as aligners are run; its links of the gold pairs.

    python benchmarks/alignment_aer.py --run runs/enfr --run runs/enfr-guided --eflomal \
        --aligner-corpus multi30k/train
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from transduce.config.sections import ALIGNMENT_LINKS
from transduce.data import resolve_path
from transduce.data.text import data_root
from transduce.decoding.translator import Translator
from transduce.model.alignment import head_count, layer_index

Links = set[tuple[int, int]]


def read_gold(folder: Path) -> tuple[list[str], list[str], list[Links], list[Links]]:
    """English and French sentences, and per pair its sure and possible links (0-based; possible includes sure)."""
    en = (folder / "en.txt").read_text(encoding="utf-8").splitlines()
    fr = (folder / "fr.txt").read_text(encoding="utf-8").splitlines()
    sure: list[Links] = [set() for _ in en]
    possible: list[Links] = [set() for _ in en]
    for k, line in enumerate((folder / "en-fr.talp").read_text(encoding="utf-8").splitlines()):
        for token in line.split():
            kind = "p" if "p" in token else "-"
            i, j = (int(x) - 1 for x in token.split(kind))
            possible[k].add((i, j))
            if kind == "-":
                sure[k].add((i, j))
    return en, fr, sure, possible


def aer(found: list[Links], sure: list[Links], possible: list[Links]) -> float:
    a_s = sum(len(a & s) for a, s in zip(found, sure))
    a_p = sum(len(a & p) for a, p in zip(found, possible))
    total = sum(len(a) for a in found) + sum(len(s) for s in sure)
    return 100.0 * (1.0 - (a_s + a_p) / total)


def model_links(
    translator: Translator, en: list[str], fr: list[str], layer: int, heads: int, rule: str = "target"
) -> list[Links]:
    model = translator.model
    saved = model.config
    model.config = dataclasses.replace(saved, alignment_layer=layer, alignment_heads=heads, alignment_links=rule)
    try:
        return [set(links) for links in translator.pair_alignments(en, fr)]
    finally:
        model.config = saved


def eflomal_links(corpus: str, en: list[str], fr: list[str]) -> list[Links]:
    """`transduce align` over the corpus's pairs followed by the gold pairs; the gold pairs' links."""
    with tempfile.TemporaryDirectory() as tmp:
        src, tgt = Path(tmp) / "all.en", Path(tmp) / "all.fr"
        for path, lang, extra in ((src, "en", en), (tgt, "fr", fr)):
            text = gzip.open(resolve_path(f"{corpus}.{lang}.gz"), "rt", encoding="utf-8").read()
            path.write_text(text + "".join(line + "\n" for line in extra), encoding="utf-8")
        out = Path(tmp) / "all.align"
        cmd = [sys.executable, "-m", "transduce", "align", "--src", str(src), "--tgt", str(tgt), "--out", str(out)]
        subprocess.run(cmd, check=True)
        lines = out.read_text(encoding="utf-8").splitlines()[-len(en) :]
    return [{tuple(map(int, t.split("-"))) for t in line.split()} for line in lines]  # type: ignore[misc]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", action="append", default=[], help="an En->Fr run (repeatable)")
    p.add_argument("--eflomal", action="store_true")
    p.add_argument("--aligner-corpus", default="multi30k/train", help="PREFIX: PREFIX.en.gz and PREFIX.fr.gz")
    p.add_argument("--gold", default=None, help="the gold folder (default: $TRANSDUCE_DATA/align_gold_enfr)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rules", default=",".join(ALIGNMENT_LINKS), help="model.alignment_links values to try on dev")
    args = p.parse_args()
    rules = args.rules.split(",")
    torch.set_num_threads(args.threads)
    gold = Path(args.gold) if args.gold else Path(data_root() or ".") / "align_gold_enfr"
    en, fr, sure, possible = read_gold(gold)
    half = len(en) // 2
    dev, test = slice(0, half), slice(half, len(en))
    print(f"gold: {len(en)} pairs; choose on pairs 1-{half}, report on {half + 1}-{len(en)}")
    print(f"{'aligner':<58} {'AER dev':>8} {'AER test':>9}")
    if args.eflomal:
        links = eflomal_links(args.aligner_corpus, en, fr)
        score = lambda part: aer(links[part], sure[part], possible[part])
        print(f"{'eflomal (' + args.aligner_corpus + ' + gold sentences)':<58} {score(dev):8.2f} {score(test):9.2f}")
    for run in args.run:
        translator = Translator.from_run(run)
        config = translator.model.config
        results = {}
        tried = [*rules, *([config.alignment_links] if config.alignment_links not in rules else [])]  # + its own
        # an alignment head reads the layer it was trained on, and has no heads to choose: only the rule varies
        layers = [layer_index(config)] if config.alignment_head else range(config.decoder_layers)
        counts = [head_count(config)] if config.alignment_head else range(1, config.n_heads + 1)
        for layer, heads, rule in itertools.product(layers, counts, tried):
            links = model_links(translator, en, fr, layer, heads, rule)
            results[layer, heads, rule] = (
                aer(links[dev], sure[dev], possible[dev]),
                aer(links[test], sure[test], possible[test]),
            )
            print(
                f"  {run} layer {layer} heads 1-{heads} {rule}: dev {results[layer, heads, rule][0]:.2f}",
                file=sys.stderr,
            )
        own = (layer_index(config), head_count(config), config.alignment_links)
        best = min(results, key=lambda key: results[key][0])
        for what, key in (("as trained", own), ("chosen on dev", best)):
            name = f"{run} {what} (layer {key[0]}, heads 1-{key[1]}, links {key[2]})"
            print(f"{name:<58} {results[key][0]:8.2f} {results[key][1]:9.2f}")


if __name__ == "__main__":
    main()
