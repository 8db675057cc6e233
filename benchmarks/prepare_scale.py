"""`transduce prepare` and `transduce train` at the paper's data scale (issue 48), on a generated corpus.

Figures: BENCHMARKS.md, "Paper-scale data" (the table and the wmt14-base line).

    .venv/bin/python benchmarks/prepare_scale.py --pairs 4500000 [--scratch DIR] [--workers N] [--no-train]

Builds a plain-text En-De corpus of N pairs in a scratch folder (never in the repository) by cycling through the
shipped sentence pairs (Multi30k train + newstest2014: 32,003 pairs, so the text repeats; a real WMT corpus has more
distinct words, which makes the vocabulary step slower and the ids longer), with Multi30k's validation split. Then,
each in a fresh process with its memory sampled every 0.1 s (the whole process tree: the encoding workers count):

- `transduce prepare` (joint BPE 16,000): wall time, pairs/s, peak RSS, the cache's size on disk;
- `transduce train RECIPE --set data.prepared=CACHE` (default: the Multi30k recipe's d_model 256 model; e.g.
  wmt14-base) until its first update (or --updates N) is logged: wall time and peak RSS. --reuse measures training
  alone on a cache an earlier call kept (--keep).

Prints one JSON object. Needs TRANSDUCE_DATA (the Makefile sets it) and about 160 bytes of disk a pair.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def shipped_pairs(root: Path) -> tuple[bytes, bytes, int]:
    """The shipped training-quality pairs, each side as one block of lines."""
    sides = []
    for lang in ("en", "de"):
        text = gzip.open(root / f"multi30k/train.{lang}.gz", "rb").read()
        text += (root / f"wmt14_en_de/newstest2014.{lang}").read_bytes()
        sides.append(text if text.endswith(b"\n") else text + b"\n")
    n = sides[0].count(b"\n")
    assert n == sides[1].count(b"\n"), "the shipped sides differ in length"
    return sides[0], sides[1], n


def build_corpus(root: Path, folder: Path, pairs: int) -> None:
    """folder/train.{en,de} with `pairs` lines (the shipped pairs cycled), folder/valid.{en,de} = Multi30k val."""
    folder.mkdir(parents=True, exist_ok=True)
    en, de, n = shipped_pairs(root)
    for lang, block in (("en", en), ("de", de)):
        lines = block.split(b"\n")[:n]
        with open(folder / f"train.{lang}", "wb") as f:
            for _ in range(pairs // n):
                f.write(block)
            f.write(b"".join(line + b"\n" for line in lines[: pairs % n]))
        (folder / f"valid.{lang}").write_bytes(gzip.open(root / f"multi30k/val.{lang}.gz", "rb").read())


def tree_rss(pid: int) -> int:
    """Resident memory (bytes) of `pid` and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def monitored(cmd: list[str], *, until=None, log: Path) -> dict:
    """Run `cmd`, sampling its tree's RSS; stop it (SIGINT) once until() is true. Returns seconds and peak RSS."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        peak = 0
        reached = None
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            if until is not None and reached is None and until():
                reached = time.perf_counter() - start
                proc.send_signal(signal.SIGINT)
            time.sleep(0.1)
    seconds = time.perf_counter() - start
    if until is None and proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed (exit {proc.returncode}); see {log}")
    if until is not None and reached is None:
        sys.exit(f"{' '.join(cmd)} ended (exit {proc.returncode}) before its first update; see {log}")
    return {"seconds": round(reached if reached is not None else seconds, 1), "peak_rss_gb": round(peak / 1e9, 2)}


def updates_logged(run: Path, count: int):
    def reached() -> bool:
        path = run / "metrics.jsonl"
        return path.is_file() and path.read_text().count('"kind": "train"') >= count

    return reached


def disk_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, required=True)
    parser.add_argument("--scratch", type=Path, help="where the corpus, cache and run go (default: a new temp folder)")
    parser.add_argument("--workers", type=int, help="prepare's --workers (default: one per core)")
    parser.add_argument("--vocab-size", type=int, default=16000)
    parser.add_argument("--no-train", action="store_true", help="measure prepare only")
    parser.add_argument("--recipe", default="multi30k", help="the recipe trained on the cache (default: multi30k)")
    parser.add_argument("--updates", type=int, default=1, help="stop training after this many updates (default 1)")
    parser.add_argument("--reuse", action="store_true", help="SCRATCH/cache exists: measure training only")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    root = Path(os.environ.get("TRANSDUCE_DATA", ""))
    if not (root / "multi30k").is_dir():
        sys.exit("set TRANSDUCE_DATA (the Makefile does) so that multi30k/ and wmt14_en_de/ can be found")
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="prepare_scale-"))
    corpus, cache, run = scratch / "corpus", scratch / "cache", scratch / f"run-{Path(args.recipe).stem}"
    for folder in (run,) if args.reuse else (cache, run):
        if folder.exists():
            sys.exit(f"{folder}: exists; give a new --scratch")
    transduce = [sys.executable, "-m", "transduce"]
    result: dict = {"pairs": args.pairs}
    if not args.reuse:
        started = time.perf_counter()
        build_corpus(root, corpus, args.pairs)
        result.update(corpus_gb=round(disk_size(corpus) / 1e9, 2), generate_s=round(time.perf_counter() - started, 1))
        cmd = [*transduce, "prepare", "--train", str(corpus / "train"), "--valid", str(corpus / "valid")]
        cmd += ["--src", "en", "--tgt", "de", "--vocab-size", str(args.vocab_size), "--out", str(cache)]
        cmd += ["--workers", str(args.workers)] if args.workers else []
        prep = monitored(cmd, log=scratch / "prepare.log")
        summary = json.loads((cache / "summary.json").read_text())
        train = summary["splits"]["train"]
        result["prepare"] = {
            **prep,
            "pairs_per_s": round(args.pairs / prep["seconds"]),
            "cache_gb": round(disk_size(cache) / 1e9, 2),
            "train_pairs_kept": train["sentences"],
            "tokens_per_side": [train["src_tokens"], train["tgt_tokens"]],
        }
    if not args.no_train:
        cmd = [*transduce, "train", args.recipe, "--out", str(run), "--set", f"data.prepared={cache}"]
        cmd += ["--set", "train.log_every=1", "--set", "train.device=cpu"]
        reached = updates_logged(run, args.updates)
        result[f"train_{args.recipe}_to_update_{args.updates}"] = monitored(
            cmd, until=reached, log=run.with_suffix(".log")
        )
    print(json.dumps(result, indent=2))
    if not args.keep and args.scratch is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
