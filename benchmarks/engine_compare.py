"""Our translator against CTranslate2 (float32 and int8) on the same weights: speed, BLEU, identical outputs.

Figures: BENCHMARKS.md, "CTranslate2 and serving" and "Decoding speed on CPU".

    .venv/bin/python benchmarks/engine_compare.py RUN [--beam 4] [--alpha 0.6] [--threads 2]
Exports RUN to CTranslate2 twice (float32, int8) into temporary folders, then decodes the test set (default:
Multi30k test_2016_flickr En->De) with transduce's Translator (its exact stop, and --patience 1: the engine's stop)
and, for each export, three ways:
    - "direct": the engine as its users drive it, one `translate_batch` call over all sentences (SentencePiece
      pieces in, pieces out; beam and length penalty given, everything else the engine's defaults, batch_type
      "tokens" with our 4,096-token batches);
    - "--engine ctranslate2": our wrapper's default path (one call, patience 1, suppressed PAD/BOS, scores);
    - "--exact": our wrapper's path that reproduces our search (one call per source length, patience 4).
All with the length penalty both engines share (|Y|^alpha, "length"). For each: sentences/s and target tokens/s
(tokenization, batching, search and detokenization included; loading and a 32-sentence warm-up excluded),
sacreBLEU and chrF, and the share of sentences identical to transduce's output. Everything runs one after the
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


class Direct:
    """One `translate_batch` call, as a CTranslate2 user writes it: pieces in, the best hypothesis's pieces out."""

    def __init__(self, wrapper: CTranslate2Translator, batch_tokens: int) -> None:
        self.engine, self.sp, self.batch_tokens = wrapper.engine, wrapper.tokenizer.sp, batch_tokens

    def translate(self, sentences: list[str], *, beam: int, alpha: float, length_penalty: str) -> list[str]:
        assert length_penalty == "length"
        pieces = self.sp.encode(sentences, out_type=str)
        results = self.engine.translate_batch(
            pieces, beam_size=beam, length_penalty=alpha, max_batch_size=self.batch_tokens, batch_type="tokens"
        )
        return self.sp.decode([r.hypotheses[0] for r in results])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--src", default="multi30k/test_2016_flickr.en.gz")
    parser.add_argument("--ref", default="multi30k/test_2016_flickr.de.gz")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--threads", type=int, default=0, help="0: torch's default")
    parser.add_argument("--batch-tokens", type=int, default=4096, help="the engine's batch size, in tokens")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    sources, references = read_lines(resolve_path(args.src)), read_lines(resolve_path(args.ref))
    options = {"beam": args.beam, "alpha": args.alpha, "length_penalty": "length"}
    ours = Translator.from_run(args.run, device="cpu")
    reference_hyps, seconds = timed(ours, sources, options)
    engines = [("transduce", reference_hyps, seconds)]
    hyps, seconds = timed(ours, sources, {**options, "patience": 1.0})
    engines.append(("transduce, --patience 1 (the engine's stop)", hyps, seconds))
    with tempfile.TemporaryDirectory(prefix="engine_compare-") as tmp:
        for quantization in ("float32", "int8"):
            folder = export_ctranslate2(args.run, Path(tmp) / quantization, quantization=quantization)
            wrapper = CTranslate2Translator(folder, threads=threads)
            hyps, seconds = timed(Direct(wrapper, args.batch_tokens), sources, options)
            engines.append((f"ctranslate2 {quantization}, direct translate_batch", hyps, seconds))
            hyps, seconds = timed(wrapper, sources, options)
            engines.append((f"ctranslate2 {quantization}, --engine ctranslate2", hyps, seconds))
            exact = CTranslate2Translator(folder, threads=threads, exact=True)
            hyps, seconds = timed(exact, sources, options)
            engines.append((f"ctranslate2 {quantization}, --exact", hyps, seconds))
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
