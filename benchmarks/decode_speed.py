"""Decoding speed and quality of a trained run on a test set (default: Multi30k test_2016_flickr En->De).

Figures: BENCHMARKS.md, "Decoding speed on CPU" and the decoding row of "GPU".

    .venv/bin/python benchmarks/decode_speed.py runs/m30k [--beam 4] [--beam 1] [--batch-tokens 4096] [--precision bf16]
For each beam size: sentences/s and target tokens/s of Translator.translate (tokenization, batching, search and
detokenization included; model loading excluded), sacreBLEU and chrF, and the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch

from transduce.data import read_lines, resolve_path
from transduce.decoding.translator import Translator
from transduce.metrics import score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--src", default="multi30k/test_2016_flickr.en.gz")
    parser.add_argument("--ref", default="multi30k/test_2016_flickr.de.gz")
    parser.add_argument("--beam", type=int, action="append")
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="as translate's --precision")
    args = parser.parse_args()
    sources, references = read_lines(resolve_path(args.src)), read_lines(resolve_path(args.ref))
    translator = Translator.from_run(args.run, device=args.device, precision=args.precision)
    translator.translate(sources[:32], beam=4)  # warm-up
    results = []
    for beam in args.beam or [4, 1]:
        start = time.perf_counter()
        hyps = translator.translate(sources, beam=beam, batch_tokens=args.batch_tokens)
        seconds = time.perf_counter() - start
        tokens = sum(len(t) + 1 for t in translator.tokenizer.encode(hyps))  # + EOS, as engines count
        s = score(hyps, references)
        results.append(
            {
                "beam": beam,
                "sentences": len(sources),
                "seconds": round(seconds, 2),
                "sentences_per_s": round(len(sources) / seconds, 1),
                "target_tokens_per_s": round(tokens / seconds),
                "bleu": round(s.bleu, 2),
                "chrf": round(s.chrf, 1),
                "bleu_signature": s.bleu_signature,
            }
        )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "run": args.run,
                "precision": args.precision,
                "threads": torch.get_num_threads(),
                "results": results,
                "peak_rss_mb": round(peak_mb),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
