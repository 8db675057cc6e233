"""Our translator against CTranslate2 (float32 and int8) on the same weights: speed, BLEU, identical outputs.

    .venv/bin/python benchmarks/engine_compare.py RUN [--beam 4] [--alpha 0.6] [--threads 2]
Exports RUN to CTranslate2 twice (float32, int8) into temporary folders, then decodes the test set (default:
Multi30k test_2016_flickr En->De) with each engine and with transduce's Translator, with the length penalty both
engines share (|Y|^alpha, "length"); int8 also with the engine's own patience 1 (it stops a sentence after beam
finished hypotheses instead of 4 x beam: faster, not always our output). For each: sentences/s and target
tokens/s (tokenization, batching, search and detokenization included; loading and a 32-sentence warm-up excluded),
sacreBLEU and chrF, and the share of sentences identical to transduce's output. The engines run one after the
other in this process, on the same threads.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from transduce.data import read_lines, resolve_path
from transduce.decoding.translator import Translator
from transduce.export import CTranslate2Translator, export_ctranslate2
from transduce.metrics import score


def timed(translator, sources: list[str], options: dict) -> tuple[list[str], float]:
    translator.translate(sources[:32], **options)  # warm-up
    start = time.perf_counter()
    hyps = translator.translate(sources, **options)
    return hyps, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--src", default="multi30k/test_2016_flickr.en.gz")
    parser.add_argument("--ref", default="multi30k/test_2016_flickr.de.gz")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--threads", type=int, default=0, help="0: torch's default")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    sources, references = read_lines(resolve_path(args.src)), read_lines(resolve_path(args.ref))
    options = {"beam": args.beam, "alpha": args.alpha, "length_penalty": "length"}
    ours = Translator.from_run(args.run, device="cpu")
    reference_hyps, seconds = timed(ours, sources, options)
    engines = [("transduce", reference_hyps, seconds)]
    with tempfile.TemporaryDirectory(prefix="engine_compare-") as tmp:
        for quantization in ("float32", "int8"):
            folder = export_ctranslate2(args.run, Path(tmp) / quantization, quantization=quantization)
            for patience in (4.0, 1.0) if quantization == "int8" else (4.0,):
                engine = CTranslate2Translator(folder, threads=threads, patience=patience)
                hyps, seconds = timed(engine, sources, options)
                name = f"ctranslate2 {quantization}" + (", patience 1 (the engine's default)" if patience == 1 else "")
                engines.append((name, hyps, seconds))
    results = []
    for name, hyps, seconds in engines:
        s = score(hyps, references)
        tokens = sum(len(t) + 1 for t in ours.tokenizer.encode(hyps))  # + EOS
        same = sum(a == b for a, b in zip(hyps, reference_hyps))
        results.append(
            {
                "engine": name,
                "seconds": round(seconds, 2),
                "sentences_per_s": round(len(sources) / seconds, 1),
                "target_tokens_per_s": round(tokens / seconds),
                "bleu": round(s.bleu, 2),
                "chrf": round(s.chrf, 1),
                "identical_to_transduce": f"{same}/{len(sources)}",
            }
        )
    print(
        json.dumps(
            {
                "run": args.run,
                "beam": args.beam,
                "alpha": args.alpha,
                "length_penalty": "length",
                "threads": threads,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
