"""Scoring and sampling speed against beam-4 and greedy translation, one model, one thread count (issue 62's targets).

Figures: BENCHMARKS.md, "Workflows beyond one run (issue 62)".

    .venv/bin/python benchmarks/score_sample_speed.py RUN [--src multi30k/test_2016_flickr.en.gz] [--threads 2]
Times, in one process after a warm-up call of each, Translator.score on the (source, reference) pairs, translate at
beam 4 and greedy, and sampling at beam 1 (top-k 0 = the whole distribution, then top-k 10 with top-p 0.9), each
over the whole test set (tokenization and detokenization included, model loading excluded); prints items/s, the
ratios the issue sets (score-pairs >= 10x beam 4, sampling >= 0.9x greedy) and the mean output length, which
bounds what decoding costs (an untrained model's outputs run to the length limit).

With --flops, also the floating-point operations of each mode (torch's FlopCounterMode: the matrix products, which
are nearly all of the work; attention over a caption's few positions is not counted) and the rate of a 2048 x 2048
float32 matmul on the same threads: what each mode achieves against the machine's matmul rate, hence how fast
score-pairs could be at best.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from transduce.data import read_lines, resolve_path
from transduce.decoding.translator import Translator


def _timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    out = call()
    return time.perf_counter() - start, out


def _matmul_rate(n: int = 2048, repeats: int = 20) -> float:
    """FLOP/s of an n x n float32 matmul on the current threads (best of `repeats`)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b)[0] for _ in range(repeats))
    return 2 * n**3 / best


def _flops(call) -> int:
    with FlopCounterMode(display=False) as counter:
        call()
    return counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--src", default="multi30k/test_2016_flickr.en.gz")
    parser.add_argument("--ref", default="multi30k/test_2016_flickr.de.gz")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--flops", action="store_true", help="count each mode's FLOPs, time a matmul (see above)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sources, targets = read_lines(resolve_path(args.src)), read_lines(resolve_path(args.ref))
    t = Translator.from_run(args.run, device="cpu")
    modes = {
        "score-pairs": lambda: t.score(sources, targets),
        "translate, beam 4": lambda: t.translate(sources, beam=4),
        "translate, greedy": lambda: t.translate(sources, beam=1),
        "sampling, top-k 0": lambda: t.translate(sources, beam=1, sampling_topk=0, seed=1),
        "sampling, top-k 10, top-p 0.9": lambda: t.translate(
            sources, beam=1, sampling_topk=10, sampling_topp=0.9, seed=1
        ),
    }
    rates: dict[str, float] = {}
    print(f"{len(sources)} pairs, {args.threads} threads")
    print("| mode | items/s | mean output words |")
    print("|---|---|---|")
    for name, call in modes.items():
        call() if name == "score-pairs" else t.translate(sources[:50], beam=1)  # warm-up
        seconds, out = _timed(call)
        rates[name] = len(sources) / seconds
        words = "-" if name == "score-pairs" else f"{sum(len(s.split()) for s in out) / len(out):.1f}"
        print(f"| {name} | {rates[name]:,.1f} | {words} |")
    print(f"score-pairs / beam 4: {rates['score-pairs'] / rates['translate, beam 4']:.2f}x (target >= 10x)")
    print(f"sampling / greedy: {rates['sampling, top-k 0'] / rates['translate, greedy']:.2f}x (target >= 0.9x)")
    if not args.flops:
        return
    peak = _matmul_rate()
    print(f"\n2048 x 2048 float32 matmul, {args.threads} threads: {peak / 1e9:.1f} GFLOP/s")
    print("| mode | MFLOP per item | GFLOP/s | share of the matmul rate |")
    print("|---|---|---|---|")
    per_item = {}
    for name in ("score-pairs", "translate, beam 4", "translate, greedy"):
        per_item[name] = _flops(modes[name]) / len(sources)
        achieved = per_item[name] * rates[name]
        print(f"| {name} | {per_item[name] / 1e6:,.0f} | {achieved / 1e9:.1f} | {achieved / peak:.0%} |")
    needed = 10 * rates["translate, beam 4"] * per_item["score-pairs"]
    print(f"10x beam 4 needs score-pairs at {needed / 1e9:.1f} GFLOP/s = {needed / peak:.0%} of the matmul rate")


if __name__ == "__main__":
    main()
