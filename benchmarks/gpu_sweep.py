"""Several seeds of several recipe candidates, trained side by side on one GPU, judged on validation (issue 17).

    python benchmarks/gpu_sweep.py --out runs/sweep --seeds 1 2 3 \
        --candidate recipe= --candidate wd=train.weight_decay=0.0001 \
        --candidate enc4dec2=model.n_encoder_layers=4,model.n_decoder_layers=2 [--parallel 12] [--test recipe] \
        [--all train.max_minutes=5]

One CPU run of a candidate moves validation BLEU by 0.4-0.9 from seed to seed (BENCHMARKS.md), as much as the
changes being compared; a small model leaves a GPU mostly idle, so one GPU trains many runs at once and a candidate
gets a mean over seeds. Each run is `transduce train RECIPE --set train.device=cuda --set train.precision=P --set
train.num_threads=1 --set train.seed=S` (P: --precision, bf16 unless told) plus the candidate's settings, a process
of its own (logs in OUT/NAME-sS.log). When a run ends its averaged weights are decoded on all of Multi30k validation
(greedy, and beam 4 with alpha 1.0, the recipe's decoding) by benchmarks/tune_decode.py. `--test NAME` also decodes
test_2016_flickr for seed 1 of that candidate (a finished recipe, not a candidate being chosen). Writes
OUT/summary.json and prints a table: per run the updates, training seconds and BLEU; per candidate the mean and
spread over seeds. Training seconds are measured while sharing the GPU with the other runs: an upper bound on a run
alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def parse_candidate(text: str) -> tuple[str, list[str]]:
    name, _, sets = text.partition("=")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise SystemExit(f"gpu_sweep: bad candidate name {name!r} (letters, digits, '_', '.', '-')")
    return name, [s for s in sets.split(",") if s]


def train_command(recipe: str, run: Path, seed: int, sets: list[str], device: str, precision: str) -> list[str]:
    base = [f"train.device={device}", f"train.precision={precision}", "train.num_threads=1", f"train.seed={seed}"]
    base += sets
    return [
        sys.executable,
        "-m",
        "transduce",
        "train",
        recipe,
        "--out",
        str(run),
        *[a for s in base for a in ("--set", s)],
    ]


def decode_command(weights: Path, device: str, *extra: str) -> list[str]:
    return [sys.executable, str(HERE / "tune_decode.py"), str(weights), "--device", device, *extra]


def finished(run: Path) -> dict:
    """Updates and training seconds from RUN/train.log's line 'finished at step N (...); ... in S s'."""
    text = (run / "train.log").read_text() if (run / "train.log").exists() else ""
    m = re.findall(r"finished at step (\d+) \(([^)]*)\); ([\d,]+) target tokens in (\d+) s", text)
    if not m:
        return {}
    step, why, tokens, seconds = m[-1]
    return {"updates": int(step), "stopped_by": why, "tokens": int(tokens.replace(",", "")), "train_s": int(seconds)}


TEST = ["--beam", "4", "--alpha", "1.0", "--src", "multi30k/test_2016_flickr.en.gz"]
TEST += ["--ref", "multi30k/test_2016_flickr.de.gz"]


def test_bleu(run: Path, device: str, env: dict) -> float | None:
    cmd = decode_command(run / "averaged.safetensors", device, *TEST)
    rows = rows_of(subprocess.run(cmd, capture_output=True, text=True, env=env).stdout)
    return rows[0]["bleu"] if rows else None


def rows_of(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--recipe", default="multi30k-60min")
    parser.add_argument("--candidate", action="append", required=True, help="NAME=SET[,SET...] (SET: key=value)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--all", action="append", default=[], metavar="SET", help="a setting for every run")
    parser.add_argument("--parallel", type=int, default=12)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", default="bf16", help="train.precision of every run (bf16 or fp32)")
    parser.add_argument("--test", action="append", default=[], help="decode test_2016_flickr for seed 1 of NAME")
    parser.add_argument(
        "--test-best",
        action="store_true",
        help="also decode test_2016_flickr for seed 1 of the best candidate on validation",
    )
    args = parser.parse_args()
    candidates = {name: [*args.all, *sets] for name, sets in map(parse_candidate, args.candidate)}
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    queue = [(name, seed) for seed in args.seeds for name in candidates]
    running: dict[tuple[str, int], tuple[str, subprocess.Popen]] = {}
    results: dict[tuple[str, int], dict] = {}
    t0 = time.time()
    while queue or running:
        while queue and len(running) < args.parallel:
            name, seed = queue.pop(0)
            run = args.out / f"{name}-s{seed}"
            log = open(args.out / f"{name}-s{seed}.log", "w")
            cmd = train_command(args.recipe, run, seed, candidates[name], args.device, args.precision)
            running[(name, seed)] = ("train", subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
        time.sleep(2)
        for key, (stage, proc) in list(running.items()):
            if proc.poll() is None:
                continue
            name, seed = key
            run = args.out / f"{name}-s{seed}"
            if stage == "train":
                info = {"candidate": name, "seed": seed, "sets": candidates[name], "rc": proc.returncode}
                info.update(finished(run))
                results[key] = info
                print(f"[{time.time() - t0:6.0f} s] {name}-s{seed} trained: {info}", flush=True)
                weights = run / "averaged.safetensors"
                if proc.returncode == 0 and weights.exists():
                    cmd = decode_command(weights, args.device, "--beam", "1", "--beam", "4", "--alpha", "1.0")
                    running[key] = ("valid", subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env))
                else:
                    del running[key]
            elif stage == "valid":
                out = proc.stdout.read() if proc.stdout else ""
                for row in rows_of(out):
                    results[key]["valid_greedy" if row["beam"] == 1 else "valid_beam4"] = row["bleu"]
                print(f"[{time.time() - t0:6.0f} s] {name}-s{seed} validation: {results[key]}", flush=True)
                if name in args.test and seed == args.seeds[0]:
                    cmd = decode_command(run / "averaged.safetensors", args.device, *TEST)
                    running[key] = ("test", subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env))
                else:
                    del running[key]
            else:
                out = proc.stdout.read() if proc.stdout else ""
                rows = rows_of(out)
                results[key]["test2016_beam4"] = rows[0]["bleu"] if rows else None
                print(f"[{time.time() - t0:6.0f} s] {name}-s{seed} test2016: {results[key]}", flush=True)
                del running[key]
    summary: dict[str, Any] = {"runs": list(results.values()), "candidates": {}}
    print("\n| run | rc | updates | train s | valid greedy | valid beam 4 |\n|---|---|---|---|---|---|")
    for r in results.values():
        print(
            f"| {r['candidate']}-s{r['seed']} | {r['rc']} | {r.get('updates', '-')} | {r.get('train_s', '-')} | "
            f"{r.get('valid_greedy', '-')} | {r.get('valid_beam4', '-')} |"
        )
    print(
        "\n| candidate | settings | seeds | valid beam 4 mean | spread (sd) | greedy mean |\n|---|---|---|---|---|---|"
    )
    for name, sets in candidates.items():
        scores = [r["valid_beam4"] for r in results.values() if r["candidate"] == name and "valid_beam4" in r]
        greedy = [r["valid_greedy"] for r in results.values() if r["candidate"] == name and "valid_greedy" in r]
        if not scores:
            print(f"| {name} | {' '.join(sets) or '(recipe)'} | 0 | - | - | - |")
            continue
        mean, sd = statistics.fmean(scores), statistics.stdev(scores) if len(scores) > 1 else 0.0
        summary["candidates"][name] = {"sets": sets, "valid_beam4": scores, "mean": mean, "sd": sd}
        print(
            f"| {name} | {' '.join(sets) or '(recipe)'} | {len(scores)} | {mean:.2f} | {sd:.2f} | "
            f"{statistics.fmean(greedy):.2f} |"
        )
    best = max(summary["candidates"], key=lambda n: summary["candidates"][n]["mean"], default=None)
    summary["best_on_validation"] = best
    if args.test_best and best is not None and best not in args.test:
        chosen = results.get((best, args.seeds[0]), {})
        if "valid_beam4" in chosen:
            chosen["test2016_beam4"] = test_bleu(args.out / f"{best}-s{args.seeds[0]}", args.device, env)
            print(f"best on validation: {best}; seed {args.seeds[0]} on test2016: {chosen['test2016_beam4']}")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
