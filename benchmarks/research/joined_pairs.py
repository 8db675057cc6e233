"""Issue 73's paragraph experiments: a training corpus of consecutive pairs joined 2 or 3 a line, so that a model
fine-tuned on it alongside the single sentences learns to translate a unit of several sentences (what
`translate --split sentences` hands it where a sentence lacks final punctuation).

    python benchmarks/research/joined_pairs.py --src multi30k/train.en.gz --tgt multi30k/train.fr.gz \
        --out runs/joined/train --src-lang en --tgt-lang fr
    transduce train multi30k-bf16-pair --out runs/enfr-joined --init-from runs/enfr-base --set data.tgt=fr \
        --set 'data.corpora=[{prefix = "runs/joined/train", weight = 2.0}]' --set train.max_steps=900 ...

Writes OUT.SRC_LANG and OUT.TGT_LANG (new files only): pairs i..i+n-1 joined by a space, n drawn from (2, 3) by
random.Random(--seed), consecutive groups without overlap, in the corpus's order. Figures: BENCHMARKS.md,
"Paragraphs, alignments and markup (issue 73)".
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from transduce.data import read_lines, resolve_path
from transduce.outputs import atomic_write_text, refuse_existing_file


def joined(src: list[str], tgt: list[str], seed: int) -> tuple[list[str], list[str]]:
    rng, i, out_src, out_tgt = random.Random(seed), 0, [], []
    while i < len(src):
        n = rng.choice((2, 3))
        out_src.append(" ".join(src[i : i + n]))
        out_tgt.append(" ".join(tgt[i : i + n]))
        i += n
    return out_src, out_tgt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--out", required=True, help="the prefix of the two files written")
    p.add_argument("--src-lang", required=True)
    p.add_argument("--tgt-lang", required=True)
    p.add_argument("--seed", type=int, default=73)
    args = p.parse_args()
    src, tgt = read_lines(resolve_path(args.src)), read_lines(resolve_path(args.tgt))
    if len(src) != len(tgt):
        raise SystemExit(f"{args.src} has {len(src)} lines but {args.tgt} has {len(tgt)}")
    out_src, out_tgt = joined(src, tgt, args.seed)
    for lang, lines in ((args.src_lang, out_src), (args.tgt_lang, out_tgt)):
        path = Path(f"{args.out}.{lang}")
        refuse_existing_file(path, "joined pairs")
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "".join(line + "\n" for line in lines))
    print(f"{len(out_src):,} joined lines from {len(src):,} pairs")


if __name__ == "__main__":
    main()
