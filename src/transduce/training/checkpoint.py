"""Training's side of the run directory: checkpoints (atomic saves, exact resume) and their averaging; what every
command reads of a run (config, weights, tokenizer) is runs.py. Tensors in safetensors, metadata in JSON.

    RUN/config.json                     the resolved Config
    RUN/tokenizer.model (+ .json)       the joint SentencePiece model
    RUN/data/                           the prepared data cache (data.prepare)
    RUN/checkpoints/step-00001000/      model.safetensors, optimizer.safetensors, trainer.json
    RUN/best.safetensors (+ .json)      the best weights by the validation metric
    RUN/averaged.safetensors (+ .json)  written by `transduce average`
    RUN/metrics.jsonl, RUN/train.log    one JSON line per log step; a human-readable log
    RUN/subwords/epoch-000003/          train.subword_sampling / subtree_substitution: that epoch's draw (tasks/)

Every file is written to a temporary name and renamed into place; a checkpoint folder appears only when complete,
so a kill at any moment leaves the previous checkpoint loadable. Nothing here unpickles anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file, save_model

from ..outputs import (
    OutputError,
    atomic_folder,
    atomic_write,
    atomic_write_text,
    refuse_link,
    remove_leftovers,
    remove_own_folder,
)
from ..runs import (  # the run directory's files, read by every command that opens a run (runs.py)
    CHECKPOINTS,
    CheckpointError,
    checkpoint_dirs,
    find_weights,
    fit_weights,
    load_weights,
    read_run_config,
    save_weights,
    written,
)

__all__ = [
    "CheckpointError",
    "atomic_write_text",
    "save_weights",
    "load_weights",
    "save_checkpoint",
    "load_checkpoint",
    "checkpoint_dirs",
    "average_run",
    "find_weights",
    "fit_weights",
    "read_run_config",
]


# Optimizer and trainer state -----------------------------------------------------------------------------------------
def _optimizer_to_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    sd = optimizer.state_dict()
    tensors = {}
    for index, state in sd["state"].items():
        for key, value in state.items():
            tensors[f"state.{index}.{key}"] = value if torch.is_tensor(value) else torch.tensor(value)
    return tensors, {"param_groups": sd["param_groups"]}


def _optimizer_from_tensors(tensors: dict, meta: dict) -> dict:
    state: dict = {}
    for name, value in tensors.items():
        _, index, key = name.split(".", 2)
        state.setdefault(int(index), {})[key] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def rng_state() -> dict:
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    return tensors


def set_rng_state(tensors: dict, rank: int = 0) -> bool:
    """Restore the generator state saved for `rank` (rank 0's is "rng.torch"); False when the checkpoint has none."""
    key = "rng.torch" if rank == 0 else f"rng.torch.rank{rank}"
    if key not in tensors:
        return False
    torch.set_rng_state(tensors[key])
    if rank == 0 and "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    return True


def checkpoint_epoch(path: Path) -> int | None:
    """The epoch a checkpoint resumes into (passes completed), or None when its trainer.json cannot be read."""
    try:
        return int(json.loads((path / "trainer.json").read_text(encoding="utf-8"))["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_checkpoint(
    run_dir: str | Path,
    *,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer: dict,
    keep_last: int,
    extra_tensors: dict | None = None,
) -> Path:
    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    remove_leftovers(root, "step-")  # left by a run killed while saving
    final = root / f"step-{step:08d}"
    with atomic_folder(final, "checkpoint") as tmp:
        meta = {"transduce": "weights", "step": str(step)}
        written(save_model, model, str(tmp / "model.safetensors"), metadata=meta, path=final / "model.safetensors")
        opt_tensors, opt_meta = _optimizer_to_tensors(optimizer)
        tensors = {**opt_tensors, **rng_state(), **(extra_tensors or {})}
        written(save_file, tensors, str(tmp / "optimizer.safetensors"), path=final / "optimizer.safetensors")
        (tmp / "trainer.json").write_text(
            json.dumps({**trainer, "step": step, "optimizer": opt_meta}, indent=2), encoding="utf-8"
        )
    for old in checkpoint_dirs(run_dir)[:-keep_last]:
        remove_own_folder(old, "checkpoint")
    return final


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, rank: int = 0) -> dict:
    """Restore model (and optimizer, this rank's RNG) from a checkpoint folder; returns the trainer state, with
    "rng_restored" telling whether the checkpoint held this rank's generator state."""
    load_weights(model, path / "model.safetensors")
    try:
        trainer = json.loads((path / "trainer.json").read_text(encoding="utf-8"))
        tensors = load_file(str(path / "optimizer.safetensors"))
    except Exception as err:  # a damaged checkpoint: JSON, OS or safetensors errors
        raise CheckpointError(
            f"{path}: cannot read the checkpoint ({err}); move it aside to resume from the previous one"
        ) from None
    restored = False
    if optimizer is not None:
        opt = {k: v for k, v in tensors.items() if k.startswith("state.")}
        # Adam's moments with a NaN would put NaN into every weight at the first step after the resume, and the
        # run would then name this checkpoint as its last good one
        check_finite(
            opt, path / "optimizer.safetensors", "optimizer state", f"move {path} aside to resume from the previous one"
        )
        try:
            optimizer.load_state_dict(_optimizer_from_tensors(opt, trainer["optimizer"]))
        except ValueError:  # torch: a parameter group of another size than the optimizer's
            raise CheckpointError(
                f"{path}: its optimizer state is for other weights than this run trains (train.alignment_only or "
                "train.guided_alignment of a model.alignment_head changed since the run started); resume with them "
                "as they were"
            ) from None
        restored = set_rng_state(tensors, rank)
    return {**trainer, "rng_restored": restored}


# Averaging (the paper's §6.1: the last 5 checkpoints for base models, the last 20 for big) ----------------------
def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the weights in `paths` (model.safetensors files or checkpoint folders)."""
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        file = path / "model.safetensors" if path.is_dir() else path
        state = load_file(str(file))
        if total and state.keys() != total.keys():
            raise CheckpointError(f"{file}: its tensors differ from the other checkpoints'")
        # one NaN would make that tensor of the average NaN: refused before anything is written
        check_finite(state, file, "weights", "the average would hold them too (move that checkpoint aside)")
        for name, tensor in state.items():
            total[name] = total[name] + tensor.double() if name in total else tensor.double()
    return {name: (t / len(paths)).float() for name, t in total.items()}


def check_finite(tensors: dict[str, torch.Tensor], file: Path, what: str, then: str) -> None:
    """Refuse (CheckpointError, naming `file` and the first such tensor, then saying `then`) tensors that hold NaN
    or infinite values: what a diverged run or a damaged file leaves, never usable further."""
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{file}: {what} {name} holds NaN or infinite values; {then}")


def _is_own_weights(path: Path) -> bool:
    """True for a safetensors file whose header carries our mark (every weights file transduce writes has it)."""
    try:
        with safe_open(str(path), "pt") as f:
            return "transduce" in (f.metadata() or {})
    except Exception:  # not safetensors at all (safetensors raises its own error types)
        return False


def _is_own_sidecar(path: Path, key: str) -> bool:
    try:
        return key in json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def check_weights_target(out: Path, sidecar_key: str) -> None:
    """Refuse a weights destination that is not ours: the file itself and its .json side file."""
    if out.suffix != ".safetensors":
        raise OutputError(f"{out}: weights are written as safetensors; give a name ending in .safetensors")
    refuse_link(out)  # its header would be read, and the weights put, where the link points
    refuse_link(out.with_suffix(".json"))
    if out.is_dir() or (out.exists() and not _is_own_weights(out)):
        raise OutputError(f"{out}: exists and is not a weights file written by transduce; choose another name")
    side = out.with_suffix(".json")
    if side.exists() and not _is_own_sidecar(side, sidecar_key):
        raise OutputError(f"{out}: its side file {side} exists and was not written by transduce; choose another name")
    if out.exists() and not side.exists():  # ours but of another kind: a checkpoint's weights, best.safetensors, ...
        raise OutputError(f"{out}: holds other weights of this run (not an average); choose another name")


def average_run(run_dir: str | Path, last: int, out: str | Path | None = None) -> Path:
    if last < 1:
        raise CheckpointError(f"--last must be at least 1, got {last}")
    dirs = checkpoint_dirs(run_dir)
    if not dirs:
        raise CheckpointError(f"{run_dir}: no checkpoints to average")
    if len(dirs) < last:
        raise CheckpointError(
            f"{run_dir}: asked for the last {last} checkpoints, only {len(dirs)} are kept (raise train.keep_last)"
        )
    chosen = dirs[-last:]
    out = Path(out) if out else Path(run_dir) / "averaged.safetensors"
    check_weights_target(out, "averaged")
    averaged = average_checkpoints(chosen)
    names = ",".join(p.name for p in chosen)
    meta = {"transduce": "weights", "averaged": names}
    atomic_write(out, lambda tmp: written(save_file, averaged, tmp, metadata=meta, path=out))
    atomic_write_text(out.with_suffix(".json"), json.dumps({"averaged": [p.name for p in chosen]}, indent=2) + "\n")
    return out
