"""What a run writes about itself: RUN/metrics.jsonl (one JSON object per log step and validation), RUN/train.log
(human-readable), TensorBoard events when tensorboard is installed. Rank 0 only."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tqdm import tqdm

from ..outputs import append_text, atomic_write_text, open_own


class RunLog:
    def __init__(self, run_dir: Path, enabled: bool, quiet: bool = False) -> None:
        self.run_dir, self.enabled, self.quiet = run_dir, enabled, quiet
        self.tb = None
        if enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter  # optional: only when tensorboard is installed

                self.tb = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:
                pass

    def text(self, message: str, *, echo: bool = True) -> None:
        if not self.enabled:
            return
        if echo and not self.quiet:
            tqdm.write(message, file=sys.stderr)
        append_text(self.run_dir / "train.log", message + "\n")  # never through a link out of the run

    def metrics(self, record: dict) -> None:
        if not self.enabled:
            return
        append_text(self.run_dir / "metrics.jsonl", json.dumps(record) + "\n")
        if self.tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("step", "kind"):
                    self.tb.add_scalar(f"{record['kind']}/{key}", value, record["step"])

    def truncate_after(self, step: int) -> None:
        """On resume, forget log lines of steps that the restored checkpoint does not contain."""
        path = self.run_dir / "metrics.jsonl"
        if self.enabled and path.is_file():
            with os.fdopen(open_own(path, os.O_RDONLY), encoding="utf-8") as f:  # not through a link out of the run
                lines = [line for line in f.read().splitlines() if line.strip()]
            kept = [line for line in lines if _step_of(line) <= step]
            atomic_write_text(path, "".join(line + "\n" for line in kept))


def _step_of(line: str) -> float:
    """A metrics line's step; a line torn by a kill during the write counts as past every step (dropped)."""
    try:
        record = json.loads(line)
    except ValueError:
        return float("inf")
    return record.get("step", 0) if isinstance(record, dict) else float("inf")
