"""Training throughput of the reference model "m30k-d256" on Multi30k En->De, with model FLOPs utilisation.

Figures: BENCHMARKS.md, "CPU training throughput" and the training rows of "GPU".

m30k-d256 (the model eole was measured with): 3+3 layers, d_model 256, 4 heads, d_ff 1024, joint BPE 8000,
~4,000 target tokens per batch, fp32. Runs the real training loop (`transduce.train`) for --steps
updates, reads the tokens/s it logged, skips the first log window (warm-up), and compares the model's FLOPs with an
fp32 matmul peak measured in the same process.

    .venv/bin/python benchmarks/train_speed.py [--steps 50] [--max-tokens 4500] [--device cpu]
        [--set model.d_model=512 --set ... --name base]   # other models and options (issue 16's table)

On CUDA the report also gives a bf16 matrix-product peak (8192^3, measured in the same process: the peak of the
issue-16 targets) and the speed of the first 100 updates against the steady speed (the start-up target); on a CPU
with native bfloat16 (AVX512_BF16 / AMX) a bf16 2048^3 product's rate beside the float32 one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from transduce.config import load_config
from transduce.data import load_prepared
from transduce.data.batching import make_batches
from transduce.model import Transformer, cpu_speed
from transduce.tasks import train

ROOT = Path(__file__).resolve().parent.parent


def matmul_peak(device: torch.device, n: int = 2048, repeats: int = 10, dtype=torch.float32) -> float:
    """GFLOP/s of an n x n matrix product in `dtype` (best of `repeats`)."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 2):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def training_flops(src_len: int, tgt_len: int, rows: int, m) -> float:
    """Forward + backward FLOPs (3 x forward) of one padded batch: matmuls and attention products."""
    D, F, V = m.d_model, m.d_ff, m.vocab_size
    S, T = src_len * rows, tgt_len * rows  # padded token counts
    enc = m.encoder_layers * (S * 2 * (4 * D * D + 2 * D * F) + rows * 4 * src_len * src_len * D)
    dec = m.decoder_layers * (
        T * 2 * (4 * D * D + 2 * D * F)  # self-attention projections and FFN
        + T * 2 * 2 * D * D
        + S * 2 * 2 * D * D  # cross: q, o on target; k, v on memory
        + rows * 4 * tgt_len * tgt_len * D
        + rows * 4 * tgt_len * src_len * D
    )
    return 3.0 * (enc + dec + T * 2 * D * V)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=4500)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default=None, help="run directory (default: a temporary one)")
    parser.add_argument("--compile", action="store_true", help="train with torch.compile")
    parser.add_argument("--skip", type=int, default=1, help="log windows (of 10 steps) to skip as warm-up")
    parser.add_argument("--set", action="append", default=[], help="a recipe override (KEY=VALUE), repeatable")
    parser.add_argument("--name", default="m30k-d256", help="the model's name in the report")
    args = parser.parse_args()
    if not os.environ.get("TRANSDUCE_DATA"):
        sys.exit("set TRANSDUCE_DATA (the Makefile does) so that multi30k/ can be found")

    out = Path(args.out or tempfile.mkdtemp(prefix="train_speed-"))
    config = load_config(
        ROOT / "recipes" / "multi30k.toml",
        [
            f"train.max_steps={args.steps}",
            f"train.max_tokens={args.max_tokens}",
            "train.log_every=10",
            "train.valid_every=1000000",
            "train.save_every=1000000",
            f"train.device={args.device}",
            f"train.compile={'true' if args.compile else 'false'}",
            *args.set,
        ],
    )
    start = time.perf_counter()
    result = train(config, out, quiet=True)
    wall = time.perf_counter() - start
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    windows = [r for r in records if r["kind"] == "train"][args.skip :]  # early windows include warm-up
    tok_s = statistics.median(r["tokens_per_s"] for r in windows)

    m = result["config"].model
    data = load_prepared(out / "data")
    corpus = data.splits["train"]
    batches = make_batches(
        corpus.src_lengths, corpus.tgt_lengths, max_tokens=args.max_tokens, seed=config.train.seed, epoch=0
    )[: args.steps]
    flops = [
        training_flops(int(corpus.src_lengths[b].max()), int(corpus.tgt_lengths[b].max()), len(b), m) for b in batches
    ]
    tokens = [int(corpus.tgt_lengths[b].sum()) for b in batches]
    flops_per_token = sum(flops) / sum(tokens)
    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else (args.device if args.device != "auto" else "cpu")
    )
    peak = matmul_peak(device)
    achieved = tok_s * flops_per_token / 1e9
    # the first 100 updates (warm-up included) against the steady median: the target tokens of updates 1-100 over the
    # seconds from the session's start (data prepared, model built) to the end of update 100
    early = [r for r in records if r["kind"] == "train" and r["step"] <= 100]
    first_100 = sum(r["tokens"] for r in early) / early[-1]["elapsed"] if early and early[-1]["step"] == 100 else None
    report = {
        "model": args.name,
        "overrides": args.set,
        "parameters": Transformer(m).num_parameters(),
        "steps": args.steps,
        "max_tokens": args.max_tokens,
        "target_tokens_per_batch": statistics.mean(tokens),
        "target_tokens_per_s": round(tok_s),
        "seconds_per_step": round(statistics.mean(tokens) / tok_s, 3),
        "model_gflop_per_s": round(achieved, 1),
        "matmul_peak_gflop_per_s": round(peak, 1),
        "mfu": round(achieved / peak, 3),
        "first_100_steps_tokens_per_s": None if first_100 is None else round(first_100),
        "first_100_share_of_steady": None if first_100 is None else round(first_100 / tok_s, 3),
        "wall_s": round(wall, 1),
        "compile": args.compile,
        "window_tokens_per_s": [round(r["tokens_per_s"]) for r in windows],
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "device": str(device),
    }
    if device.type == "cuda":
        bf16_peak = matmul_peak(device, n=8192, dtype=torch.bfloat16)
        report["bf16_matmul_peak_gflop_per_s"] = round(bf16_peak, 1)
        report["share_of_bf16_peak"] = round(achieved / bf16_peak, 4)
        report["gpu"] = torch.cuda.get_device_name(device)
    elif cpu_speed.native_bf16():  # the CPU's own bfloat16 product (AVX512_BF16 / AMX), beside the float32 peak
        report["bf16_matmul_peak_gflop_per_s"] = round(matmul_peak(device, dtype=torch.bfloat16), 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
