"""What the tasks share beyond the loop's `Task` interface (training/task.py): the checks of a run being resumed."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..config import ConfigError
from ..training.checkpoint import checkpoint_dirs

# settings a resume may set otherwise: they do not change the data (data.prepared: the folder may move; its cache key
# is checked instead, translation.from_prepared; data.tokenizer: the same, its contents are in the cache key)
FREE_TO_CHANGE = {("data", "workers"), ("data", "prepared"), ("data", "tokenizer")}


def same_run(saved: Any, new: Any, sections: tuple[str, ...] = ("model", "data")) -> None:
    """Resuming: the model and the data must be those the run started with (training and decoding settings may
    change). A vocabulary size left at 0 in the new config is filled in from the run's."""
    for section in sections:
        a, b = dataclasses.asdict(getattr(saved, section)), dataclasses.asdict(getattr(new, section))
        if section == "model" and not b["vocab_size"]:
            b["vocab_size"] = a["vocab_size"]
        changed = [k for k in a if a[k] != b.get(k) and (section, k) not in FREE_TO_CHANGE]
        if changed:
            raise ConfigError(
                f"this run directory was started with different {section} settings "
                f"({', '.join(f'{section}.{k}: {a[k]!r} -> {b[k]!r}' for k in changed)}); "
                "use a new --out to train a different model"
            )


def has_trained(run_dir: Path) -> bool:
    """Whether the run has saved a checkpoint: from then on its settings and data are frozen (a run refused before
    step 1 may still be started again with other settings)."""
    return bool(checkpoint_dirs(run_dir))
