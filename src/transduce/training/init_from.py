"""Fine-tuning's start (train.init_from): the run a new run starts from, the weights it takes, and their loading.

A fine-tune starts from RUN's weights and nothing else of its training: the optimizer (Adam's moments), the schedule,
the step count and early stopping start afresh (fairseq's `--reset-optimizer --reset-lr-scheduler`, OpenNMT-py's
`train_from` + `reset_optim`). The weights come in only when the new run has no checkpoint of its own, so a resumed
fine-tune continues from its own checkpoint exactly as any run; RUN is only read. NEW/init-from.json records RUN,
the weights file and its SHA-256 (of the very bytes loaded). Which model settings and tokenizer the new run takes
from RUN is the task's part (tasks/finetune.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load as load_bytes

from ..config import ConfigError, read_config_dict
from ..outputs import HF_EXPORT, atomic_write_text, lock_holder, read_manifest
from .checkpoint import CheckpointError, find_weights, fit_weights

RECORD = "init-from.json"  # NEW/init-from.json: {"run", "weights", "sha256"} of what the fine-tune started from
AVERAGED = "averaged.safetensors"
HEAD = "alignment_head."  # model.alignment_head's weights: a fine-tune may add the head to a run without one


def source_run(name: str, *, out: Path, task: str) -> tuple[Path, Path]:
    """train.init_from -> (RUN, the weights file): for a run directory its averaged weights, else the best, else
    the newest checkpoint's; a .safetensors file (or a checkpoint folder) inside a run as named. Refused in one line:
    no such path, not a run, a run of another task, the run being trained, no weights yet."""
    path = Path(name).expanduser().absolute()
    if not path.exists():
        raise CheckpointError(f"train.init_from {name}: no such run directory or weights file")
    hugging_face = _hugging_face_folder(path)
    if hugging_face is not None:
        raise CheckpointError(
            f"train.init_from {hugging_face}: a Hugging Face model folder, not a transduce run; import it first "
            f"(transduce import huggingface {hugging_face} --out RUN) and fine-tune from RUN"
        )
    try:
        run, weights = find_weights(path)
    except CheckpointError as err:
        raise CheckpointError(f"train.init_from: {err}") from None
    holder = lock_holder(run) if path == run else None
    if holder is not None:  # its best and averaged weights change while it trains; a checkpoint of it does not
        raise CheckpointError(
            f"train.init_from {run}: the run is still training ({holder}); wait for it to end, or name one of its "
            "checkpoints (RUN/checkpoints/step-N)"
        )
    manifest = read_manifest(run)
    if manifest is None or manifest.get("kind") != "run":
        raise CheckpointError(f"train.init_from {run}: not a run directory made by `transduce train`")
    found = manifest.get("task") or read_config_dict(run / "config.json").get("task", "translation")
    if found != task:
        raise ConfigError(f"train.init_from {run}: holds a {found} run; a {task} run starts only from a {task} run")
    if run.resolve() == out.absolute().resolve():
        raise ConfigError(f"train.init_from {run}: that is the run being trained (--out); name another run")
    if path == run and (run / AVERAGED).is_file():
        weights = run / AVERAGED
    if weights.suffix != ".safetensors":
        raise CheckpointError(f"train.init_from {weights}: not a weights file (.safetensors)")
    return run, weights


def _hugging_face_folder(path: Path) -> Path | None:
    """The folder `path` is in when it is a Hugging Face model (our export, or a config.json of theirs: a
    `model_type`, no run's sections); None otherwise."""
    folder = path if path.is_dir() else path.parent
    if (read_manifest(folder) or {}).get("kind") == HF_EXPORT:
        return folder
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return folder if isinstance(config, dict) and "model_type" in config and "model" not in config else None


def load_initial(
    model: torch.nn.Module, *, init_from: str, out: Path, task: str, main: bool, log: Callable[[str], None]
) -> None:
    """RUN's weights into `model` (the new run's first start); rank 0 writes NEW/init-from.json."""
    run, weights = source_run(init_from, out=out, task=task)
    try:
        data = weights.read_bytes()
        state = load_bytes(data)
    except Exception as err:  # OSError, or safetensors' own SafetensorError for a damaged file
        raise CheckpointError(f"train.init_from {weights}: cannot read weights ({err})") from None
    digest = hashlib.sha256(data).hexdigest()
    fresh = any(k.startswith(HEAD) for k in model.state_dict()) and not any(k.startswith(HEAD) for k in state)
    fit_weights(model, state, weights, fresh=HEAD if fresh else "")
    if fresh:
        log("model.alignment_head: new to this run, starts from a random initialisation")
    if main:
        record = {"run": str(run), "weights": str(weights), "sha256": digest}
        atomic_write_text(out / RECORD, json.dumps(record, indent=2) + "\n")
    log(f"fine-tuning from {weights} (sha256 {digest[:16]}); optimizer, schedule, step and early stopping start afresh")
