"""A run directory, opened: the one place that knows what a run holds and how each command reads it.

    RUN/config.json                     the resolved Config (its `task` says which predictor takes it)
    RUN/transduce-manifest.json         the format and kind of the folder (outputs.py)
    RUN/tokenizer.model (+ .json)       the vocabulary: our joint SentencePiece model, or a Marian import's
    RUN/best.safetensors, averaged.safetensors, checkpoints/step-N/model.safetensors   the weights

Every command that reads a trained model (translate, evaluate, attention, the exports, serve, the predictors'
`from_run`) opens it through `open_run`: the weights a path names (`find_weights`: a run directory, a weights file
inside one, or a checkpoint folder), the run's config read as its task's (`read_run_config`, refusing a run of
another task in one line), and its tokenizer. Writing weights (`save_weights`) and reading them into a model
(`load_weights`: every tensor of its shape, no NaN) live here too, so the predictors, the exports and the server
import nothing from training/. Nothing here unpickles anything: tensors are safetensors, the rest JSON.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_model

from .data.marian import load_tokenizer
from .data.text import file_digest
from .data.tokenizer import Tokenizer
from .outputs import CT2_EXPORT, atomic_write, atomic_write_text, read_manifest, write_manifest

CHECKPOINTS = "checkpoints"


class CheckpointError(ValueError):
    pass


def written(save: Callable[..., None], *args: Any, path: str | Path, **kwargs: Any) -> None:
    """safetensors' save, with its I/O failures (a full disk) as the OSError they are: safetensors raises its own
    SafetensorError, which would otherwise reach the user as a traceback, and carries the errno only in its text:
    "IoError(Os { code: 28, ... })" in some versions, "I/O error: No space left on device (os error 28)" in 0.8."""
    try:
        save(*args, **kwargs)
    except SafetensorError as err:
        found = re.search(r"(?:code: |os error )(\d+)", str(err))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None


def save_weights(model: torch.nn.Module, path: str | Path, metadata: dict | None = None) -> None:
    """Model weights as safetensors; tied tensors are stored once (safetensors' save_model)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"transduce": "weights", **{k: str(v) for k, v in (metadata or {}).items()}}
    atomic_write(path, lambda tmp: written(save_model, model, tmp, metadata=meta, path=path))
    if metadata is not None:
        atomic_write_text(path.with_suffix(".json"), json.dumps(metadata, indent=2) + "\n")


def load_weights(model: torch.nn.Module, path: str | Path) -> None:
    path = Path(path)
    try:
        state = load_file(str(path))
    except Exception as err:  # OSError, or safetensors' own SafetensorError for a corrupt file
        raise CheckpointError(f"{path}: cannot read weights ({err})") from None
    fit_weights(model, state, path)


def fit_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], path: Path, *, fresh: str = "") -> None:
    """Put `state` (read from `path`) into `model`: every tensor the model has (a tied one once), of its shape;
    with `fresh` (a name prefix, such as "alignment_head."), the model's tensors under it may be absent from `state`
    (they keep their initialisation)."""
    own = model.state_dict()
    missing = [k for k in own if k not in state and not _is_alias(own, k, state)]
    missing = [k for k in missing if not (fresh and k.startswith(fresh))]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    for name, tensor in state.items():
        if own[name].shape != tensor.shape:
            raise CheckpointError(
                f"{path}: {name} has shape {tuple(tensor.shape)}, the model expects "
                f"{tuple(own[name].shape)} (a different config or vocabulary?)"
            )
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):  # would decode to "⁇ ⁇ ⁇"
            raise CheckpointError(f"{path}: {name} holds NaN or infinite values; load an earlier checkpoint")
    model.load_state_dict(state, strict=False)


def _is_alias(own: dict, name: str, state: dict) -> bool:
    """True when the model's `name` shares storage with a tensor present in `state` (tied embeddings are saved
    once). `own`: the model's state_dict, built once by the caller."""
    ptr = own[name].data_ptr()
    return any(own[k].data_ptr() == ptr for k in state if k in own)


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first (by step number: names outgrow their zero padding past 10^8 steps)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and p.name[5:].isdigit()]
    return sorted((p for p in found if (p / "model.safetensors").is_file()), key=lambda p: int(p.name[5:]))


# What takes a run of each task: the refusal of a run given to another task's command names it (issue 65 item 7).
TAKEN_BY = {
    "translation": "`transduce translate`, `evaluate`, `attention`, `export` and `serve` (Translator.from_run) take it",
    "classification": "`transduce classify predict` / `classify evaluate` and `serve` (Classifier.from_run) take it",
    "parsing": "`transduce parse`, `attention` and `serve` (Parser.from_run) take it",
}


def read_run_config(run_dir: Path, task: str) -> Any:
    """A run's config.json as the run config of `task` (a name of the task registry). A run of another task is
    refused in one line saying what the run is and which commands take it."""
    from .config import ConfigError, config_from_dict, read_config_dict, registry

    raw = read_config_dict(run_dir / "config.json")
    found = raw.get("task", registry.DEFAULT_TASK)
    if found != task and found in TAKEN_BY:
        raise ConfigError(f"{run_dir}: a {found} run, not a {task} run: {TAKEN_BY[found]}")
    return config_from_dict(raw, registry.entry(task).run_config)


def find_weights(path: str | Path) -> tuple[Path, Path]:
    """A run directory or a weights file inside one -> (run_dir, weights file).

    For a run directory: best.safetensors if validation kept one, else the newest checkpoint. A run of another
    format (outputs.FORMAT) is refused: every command that reads a model comes here.
    """
    run_dir, weights = _locate_weights(Path(path))
    read_manifest(run_dir)  # refuses a run of another format
    return run_dir, weights


def _locate_weights(path: Path) -> tuple[Path, Path]:
    if path.is_file():
        for run_dir in path.parents:
            if (run_dir / "config.json").is_file():
                return run_dir, path
        raise CheckpointError(
            f"{path}: not inside a run directory (no config.json beside it or in a folder above); "
            "keep weights in their run, e.g. transduce average RUN --output RUN/NAME.safetensors"
        )
    if path.is_dir() and (path / "model.safetensors").is_file():  # a checkpoint folder
        return path.parent.parent, path / "model.safetensors"
    if path.is_dir() and (read_manifest(path) or {}).get("kind") == CT2_EXPORT:  # its config.json: CTranslate2's
        raise CheckpointError(
            f"{path}: a CTranslate2 export, not a run directory (it holds no PyTorch weights): give it with "
            "--engine ctranslate2 (CTranslate2Translator.from_run in Python)"
        )
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path}: not a run directory (no config.json)")
    if (path / "best.safetensors").is_file():
        return path, path / "best.safetensors"
    dirs = checkpoint_dirs(path)
    if not dirs:
        raise CheckpointError(f"{path}: the run has no saved weights yet")
    return path, dirs[-1] / "model.safetensors"


@dataclass(frozen=True)
class OpenedRun:
    """A run directory opened for one task: where it is, the weights chosen, its config (the task's run config)."""

    folder: Path
    weights: Path
    config: Any

    def tokenizer(self) -> Tokenizer:
        """The run's vocabulary (RUN/tokenizer.model: ours, or a Marian import's), the one it was trained with
        (`check_tokenizer`)."""
        tokenizer = load_tokenizer(self.folder / "tokenizer.model")  # a damaged file: SentencePiece's refusal
        check_tokenizer(self.folder)
        return tokenizer


TOKENIZER_DIGEST = "tokenizer_sha256"  # the run manifest's record of the vocabulary it trained with


def record_tokenizer(folder: Path) -> None:
    """Record RUN/tokenizer.model's SHA-256 in the run's manifest (training writes it with the file)."""
    manifest = read_manifest(folder) or {}
    kind = manifest.pop("kind", "run")
    write_manifest(folder, kind, **{**manifest, TOKENIZER_DIGEST: file_digest(folder / "tokenizer.model")})


def check_tokenizer(folder: Path) -> None:
    """Refuse (CheckpointError, one line) a run whose RUN/tokenizer.model is not the one it trained with: another
    valid SentencePiece model of the same size loads without complaint and turns every id into other text (issue 76).
    A run made before the record, or an import, has none and is not checked."""
    recorded = (read_manifest(folder) or {}).get(TOKENIZER_DIGEST)
    path = folder / "tokenizer.model"
    if recorded and path.is_file() and file_digest(path) != recorded:
        raise CheckpointError(
            f"{path}: not the vocabulary this run was trained with (its SHA-256 differs from the one in "
            f"{folder / 'transduce-manifest.json'}); put the run's own tokenizer.model back"
        )


def open_run(path: str | Path, task: str) -> OpenedRun:
    """The run that `path` names (a run directory, a weights file inside one, a checkpoint folder), for `task`:
    its weights (`find_weights`) and its config read as that task's (`read_run_config`); a run of another task, of
    another format, or no run at all is refused in one line."""
    folder, weights = find_weights(path)
    return OpenedRun(folder, weights, read_run_config(folder, task))
