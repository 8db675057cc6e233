"""What translation's per-batch subword sampling costs in padding: the first N batches of an epoch, collated with and

Figures: BENCHMARKS.md, "Paper-scale data" (the per-batch subword sampling line).
without `train.subword_sampling`, on a shipped recipe's data (default: Multi30k, rate 0.1, max_tokens 4500).

    .venv/bin/python benchmarks/sampling_padding.py [--recipe multi30k] [--rate 0.1] [--batches 60]

Prints the real tokens drawn against the prepared ones, the padding efficiency (real / padded positions, both sides)
of the drawn batches and of the prepared ones, and how many batches the draw was cut into. Needs TRANSDUCE_DATA.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from transduce.config import load_config
from transduce.tasks import task_class


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="multi30k")
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--batches", type=int, default=60)
    args = parser.parse_args()
    config = load_config(args.recipe, [f"train.subword_sampling={args.rate}"])
    with tempfile.TemporaryDirectory() as tmp:
        task = task_class("translation").prepare(
            config, Path(tmp) / "run", main=True, log=lambda _: None, barrier=lambda: None
        )
        tc = config.train
        batches = task.batches(max_tokens=tc.max_tokens, seed=tc.seed, epoch=0)[: args.batches]
        prepared = task.data.splits["train"]
        totals = {"real": 0, "padded": 0, "prepared_real": 0, "prepared_padded": 0, "parts": 0, "largest_side": 0}
        for indices in batches:
            plain = task.collate_pairs(prepared, indices)
            totals["prepared_real"] += plain.n_real
            totals["prepared_padded"] += plain.n_padded
            for part in task.collate(indices):
                totals["real"] += part.n_real
                totals["padded"] += part.n_padded
                totals["parts"] += 1
                totals["largest_side"] = max(totals["largest_side"], part.src.numel(), part.tgt_in.numel())
    print(
        json.dumps(
            {
                "recipe": args.recipe,
                "rate": args.rate,
                "max_tokens": tc.max_tokens,
                "batches": len(batches),
                "drawn_batches": totals["parts"],
                "real_tokens_drawn_over_prepared": round(totals["real"] / totals["prepared_real"], 3),
                "padding_efficiency_drawn": round(totals["real"] / totals["padded"], 3),
                "padding_efficiency_prepared": round(totals["prepared_real"] / totals["prepared_padded"], 3),
                "largest_side_padded": totals["largest_side"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
