"""Interleaved A/B timing of training steps of m30k-d256, with one of transduce's CPU optimisations switched off in A.

Figures: BENCHMARKS.md, "CPU training throughput" (the bf16 step).

This machine's speed drifts by +-20% over minutes (other tenants), so comparing two separate benchmark runs says
little. Here both variants live in one process, start from the same weights, and run the same batches alternately
(A then B, then B then A, ...); the median of the per-batch time ratios A/B is the speed-up of the optimisation.

    .venv/bin/python benchmarks/train_step_ab.py dropout   [--steps 16] [--max-tokens 4500]
    .venv/bin/python benchmarks/train_step_ab.py workspace
    .venv/bin/python benchmarks/train_step_ab.py malloc
    .venv/bin/python benchmarks/train_step_ab.py bf16

dropout:   A uses torch.nn.functional.dropout; B transduce's Dropout (four mask bits per 64-bit random draw).
workspace: A projects to the vocabulary into a fresh (N, V) tensor; B into the logits workspace kept across steps.
malloc:    A sets glibc's mmap and trim thresholds to their starting values (128 KB), B calls train.keep_freed_memory();
           one model, the setting switched before each timed batch (plus one untimed batch to settle).
bf16:      A computes in float32; B under torch.autocast("cpu", bfloat16), as `train.precision = "bf16"` does
           (worth it only on a CPU with native bfloat16 arithmetic: AVX512_BF16 or AMX).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from transduce.config import load_config
from transduce.data import prepare
from transduce.model import cpu_speed
from transduce.model.cpu_speed import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, BitDropout, keep_freed_memory
from transduce.tasks.translation import TranslationTask
from transduce.training.optim import build_optimizer

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("feature", choices=["dropout", "workspace", "malloc", "bf16"])
    parser.add_argument("--steps", type=int, default=16, help="batches timed per variant")
    parser.add_argument("--max-tokens", type=int, default=4500)
    args = parser.parse_args()
    if not os.environ.get("TRANSDUCE_DATA"):
        sys.exit("set TRANSDUCE_DATA (the Makefile does) so that multi30k/ can be found")

    config = load_config(ROOT / "recipes" / "multi30k.toml", [f"train.max_tokens={args.max_tokens}"])
    data = prepare(config.data, Path(tempfile.mkdtemp(prefix="train_step_ab-")), log=lambda _: None)
    config = config.replace(model=dataclasses.replace(config.model, vocab_size=data.tokenizer.vocab_size))
    task = TranslationTask(config, data)

    use_torch_dropout = {"on": False}
    ours = BitDropout.forward

    def switchable(self, x):
        return F.dropout(x, self.p, self.training) if use_torch_dropout["on"] else ours(self, x)

    BitDropout.forward = switchable
    libc = ctypes.CDLL("libc.so.6") if args.feature == "malloc" else None
    if libc is None:
        keep_freed_memory()  # both variants as a CPU training run has it (cpu_speed.freed_memory_kept)
    variants = []
    for name in ("A", "B") if args.feature != "malloc" else ("A",):
        torch.manual_seed(0)
        model = cpu_speed.apply(task.build_model(), workspace_rows=args.max_tokens).train()
        if name == "A" and args.feature == "workspace":  # the plain projection, with the same (tied) weight
            weight = model.output.weight
            model.output = torch.nn.Linear(weight.size(1), weight.size(0), bias=False)
            model.output.weight = weight
        optimizer = build_optimizer(model, config.train)
        for group in optimizer.param_groups:
            group["lr"] = 1e-4
        variants.append((name, model, optimizer))

    if args.feature == "malloc":  # one model; the variant is the allocator setting
        variants = [variants[0], ("B", *variants[0][1:])]

    def step(variant, indices) -> float:
        name, model, optimizer = variant
        if libc is not None:
            if name == "A":
                libc.mallopt(M_MMAP_THRESHOLD, 128 << 10)
                libc.mallopt(M_TRIM_THRESHOLD, 128 << 10)
            else:
                keep_freed_memory()
            train_step(model, optimizer, batches[0])  # settle: let the allocator reach its new state
        use_torch_dropout["on"] = args.feature == "dropout" and name == "A"
        start = time.perf_counter()
        train_step(model, optimizer, indices)
        return time.perf_counter() - start

    def train_step(model, optimizer, indices) -> None:
        batch = task.collate(indices)
        bf16 = args.feature == "bf16" and model is variants[1][1]
        autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
        loss, _ = task.loss(model, batch, autocast)
        (loss / batch.n_tokens).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    batches = task.batches(max_tokens=args.max_tokens, seed=1, epoch=0)
    for indices in batches[:2]:  # warm-up
        for variant in variants:
            step(variant, indices)
    times = {"A": [], "B": []}
    for i, indices in enumerate(batches[2 : 2 + args.steps]):
        for variant in variants if i % 2 == 0 else variants[::-1]:
            times[variant[0]].append(step(variant, indices))
    ratios = [a / b for a, b in zip(times["A"], times["B"])]
    print(
        f"{args.feature}: A (off) median {statistics.median(times['A']):.3f} s/step, B (on) "
        f"{statistics.median(times['B']):.3f} s/step; speed-up A/B: median {statistics.median(ratios):.3f}, "
        f"mean {statistics.mean(ratios):.3f} over {len(ratios)} batches; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )


if __name__ == "__main__":
    main()
