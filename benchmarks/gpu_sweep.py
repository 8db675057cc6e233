"""Several seeds of several recipe candidates, trained side by side on one GPU, judged on validation (issue 17).

Figures: BENCHMARKS.md, "GPU" (the sweep row); each candidate's result: docs/experiments.md.

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
the run's first test split (test_2016_flickr for Multi30k) for the first seed of that candidate (a finished recipe,
not a candidate being chosen). Writes OUT/summary.json (after every step, so a sweep cut short still leaves one) and
prints a table: per run the updates, training seconds and BLEU; per candidate the mean and spread over the seeds
whose runs did all their updates (a run stopped by train.max_minutes is listed but left out of the means). Refuses
an OUT that already holds one of the runs: `transduce train` would resume it, find it finished, and its old results
would be reported again. Training seconds are measured while sharing the GPU with the other runs: an upper bound on
a run alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
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


def test_options(run: Path) -> list[str]:
    """Beam 4, alpha 1.0 on the run's first test split, in the run's own languages (RUN/config.json)."""
    data = json.loads((run / "config.json").read_text())["data"]
    split = data["test"][0]
    return ["--beam", "4", "--alpha", "1.0", "--src", f"{split}.{data['src']}.gz", "--ref", f"{split}.{data['tgt']}.gz"]


def test_bleu(run: Path, device: str, env: dict) -> float | None:
    cmd = decode_command(run / "averaged.safetensors", device, *test_options(run))
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
    parser.add_argument(
        "--test", action="append", default=[], help="decode test_2016_flickr for the first seed of NAME"
    )
    parser.add_argument(
        "--test-best",
        action="store_true",
        help="also decode test_2016_flickr for the first seed of the best candidate on validation",
    )
    args = parser.parse_args()
    candidates = {name: [*args.all, *sets] for name, sets in map(parse_candidate, args.candidate)}
    queue = [(name, seed) for seed in args.seeds for name in candidates]
    taken = [str(run) for name, seed in queue if (run := args.out / f"{name}-s{seed}").exists() and any(run.iterdir())]
    if taken:  # `transduce train` would resume a finished run, do nothing, and its old results would be reported
        raise SystemExit(f"gpu_sweep: {', '.join(taken)} already hold runs; give a new --out")
    args.out.mkdir(parents=True, exist_ok=True)
    sweep = Sweep(args, candidates)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` stops the sweep: its runs stop with it
    try:
        sweep.run(queue)
    finally:
        for _, proc in sweep.running.values():  # an exception here leaves no training behind
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    sweep.report()


class Sweep:
    def __init__(self, args: argparse.Namespace, candidates: dict[str, list[str]]):
        self.args, self.candidates = args, candidates
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        self.running: dict[tuple[str, int], tuple[str, subprocess.Popen]] = {}
        self.results: dict[tuple[str, int], dict] = {}
        self.t0 = time.time()

    def run(self, queue: list[tuple[str, int]]) -> None:
        args = self.args
        while queue or self.running:
            while queue and len(self.running) < args.parallel:
                name, seed = queue.pop(0)
                cmd = train_command(args.recipe, self.dir(name, seed), seed, self.candidates[name], args.device,
                                    args.precision)  # fmt: skip
                with open(args.out / f"{name}-s{seed}.log", "w") as log:  # the child keeps its own handle
                    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
                self.running[(name, seed)] = ("train", proc)
            time.sleep(2)
            for key, (stage, proc) in list(self.running.items()):
                if proc.poll() is None:
                    continue
                del self.running[key]
                getattr(self, f"after_{stage}")(key, proc)
                self.write_summary()

    def dir(self, name: str, seed: int) -> Path:
        return self.args.out / f"{name}-s{seed}"

    def say(self, key: tuple[str, int], what: str) -> None:
        print(f"[{time.time() - self.t0:6.0f} s] {key[0]}-s{key[1]} {what}: {self.results[key]}", flush=True)

    def decode(self, key: tuple[str, int], stage: str, *options: str) -> None:
        cmd = decode_command(self.dir(*key) / "averaged.safetensors", self.args.device, *options)
        self.running[key] = (stage, subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=self.env))

    def after_train(self, key: tuple[str, int], proc: subprocess.Popen) -> None:
        name, seed = key
        self.results[key] = {"candidate": name, "seed": seed, "sets": self.candidates[name], "rc": proc.returncode}
        self.results[key].update(finished(self.dir(name, seed)))
        self.say(key, "trained")
        if proc.returncode == 0 and (self.dir(name, seed) / "averaged.safetensors").exists():
            self.decode(key, "valid", "--beam", "1", "--beam", "4", "--alpha", "1.0")

    def after_valid(self, key: tuple[str, int], proc: subprocess.Popen) -> None:
        result = self.results[key]
        result["valid_rc"] = proc.returncode
        for row in rows_of(proc.stdout.read() if proc.stdout else ""):
            result["valid_greedy" if row["beam"] == 1 else "valid_beam4"] = row["bleu"]
        self.say(key, "validation")
        if key[0] in self.args.test and key[1] == self.args.seeds[0]:
            self.decode(key, "test", *test_options(self.dir(*key)))

    def after_test(self, key: tuple[str, int], proc: subprocess.Popen) -> None:
        rows = rows_of(proc.stdout.read() if proc.stdout else "")
        self.results[key].update(test_rc=proc.returncode, test2016_beam4=rows[0]["bleu"] if rows else None)
        self.say(key, "test2016")

    def candidate_scores(self) -> dict[str, dict]:
        """Per candidate, the validation BLEU of its runs that did all their updates (not those cut by the clock)."""
        scores: dict[str, dict] = {}
        for name, sets in self.candidates.items():
            runs = [r for r in self.results.values() if r["candidate"] == name and "valid_beam4" in r]
            runs = [r for r in runs if r.get("stopped_by") == "max_steps"]
            if runs:
                beam4 = [r["valid_beam4"] for r in runs]
                sd = statistics.stdev(beam4) if len(beam4) > 1 else None
                greedy = statistics.fmean(r["valid_greedy"] for r in runs if "valid_greedy" in r)
                seeds = [r["seed"] for r in runs]
                scores[name] = {"sets": sets, "seeds": seeds, "valid_beam4": beam4, "mean": statistics.fmean(beam4),
                                "sd": sd, "greedy_mean": greedy}  # fmt: skip
        return scores

    def best(self, scores: dict[str, dict]) -> str | None:
        """The highest mean among the candidates whose every seed finished and was decoded."""
        whole = [n for n, c in scores.items() if len(c["seeds"]) == len(self.args.seeds)]
        return max(whole, key=lambda n: scores[n]["mean"], default=None)

    def write_summary(self, best: str | None = None) -> dict[str, Any]:
        scores = self.candidate_scores()
        best = best or self.best(scores)
        weights = self.dir(best, self.args.seeds[0]) / "averaged.safetensors" if best else None
        summary = {"runs": list(self.results.values()), "candidates": scores, "best_on_validation": best,
                   "best_weights": str(weights) if weights and weights.exists() else ""}  # fmt: skip
        (self.args.out / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary

    def report(self) -> None:
        print("\n| run | rc | stopped by | updates | train s | valid greedy | valid beam 4 |")
        print("|---|---|---|---|---|---|---|")
        for r in self.results.values():
            cells = [r["rc"], r.get("stopped_by", "-"), r.get("updates", "-"), r.get("train_s", "-")]
            cells += [r.get("valid_greedy", "-"), r.get("valid_beam4", "-")]
            print(f"| {r['candidate']}-s{r['seed']} | " + " | ".join(map(str, cells)) + " |")
        summary = self.write_summary()
        print("\n(means over the runs that did all their updates)")
        print("| candidate | settings | seeds | valid beam 4 mean | spread (sd) | greedy mean |")
        print("|---|---|---|---|---|---|")
        for name, c in summary["candidates"].items():
            sd = "-" if c["sd"] is None else f"{c['sd']:.2f}"
            print(f"| {name} | {' '.join(c['sets']) or '(recipe)'} | {len(c['seeds'])} | {c['mean']:.2f} | {sd} | "
                  f"{c['greedy_mean']:.2f} |")  # fmt: skip
        best, first = summary["best_on_validation"], self.args.seeds[0]
        if not self.args.test_best or best in self.args.test:
            return
        chosen = self.results.get((best, first), {}) if best else {}
        if "valid_beam4" not in chosen:
            print(f"best on validation: {best}; no test decode (no candidate has every seed finished and decoded)")
            return
        chosen["test2016_beam4"] = test_bleu(self.dir(best, first), self.args.device, self.env)
        print(f"best on validation: {best}; seed {first} on test2016: {chosen['test2016_beam4']}")
        self.write_summary(best)


if __name__ == "__main__":
    main()
