"""Time `transduce prepare` on Multi30k En->De (29k pairs, vocabulary 8000): cold, then with a warm cache.

Figures: BENCHMARKS.md, "Paper-scale data" (the Multi30k prepare line).

    .venv/bin/python benchmarks/prepare_speed.py
Each figure is the wall-clock time of the real command in a fresh process (imports included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(out: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "transduce",
            "prepare",
            "--train",
            "multi30k/train",
            "--valid",
            "multi30k/val",
            "--test",
            "multi30k/test_2016_flickr",
            "--src",
            "en",
            "--tgt",
            "de",
            "--vocab-size",
            "8000",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def main() -> None:
    if not os.environ.get("TRANSDUCE_DATA"):
        sys.exit("set TRANSDUCE_DATA (the Makefile does) so that multi30k/ can be found")
    out = Path(tempfile.mkdtemp(prefix="prepare_speed-")) / "m30k"
    cold = run(out)
    warm = run(out)
    summary = json.loads((out / "summary.json").read_text())
    train = summary["splits"]["train"]
    print(
        json.dumps(
            {
                "cold_s": round(cold, 2),
                "warm_s": round(warm, 2),
                "train_pairs": train["sentences"],
                "padding_efficiency_4096": train["padding_efficiency"],
                "vocab_size": summary["vocab_size"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
