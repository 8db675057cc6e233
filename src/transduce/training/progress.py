"""The loop's steps after an update, each one job: the log line (`log_window`), the NaN/inf check (`check_finite`),
validation with the best weights and early stopping (`validate`), the checkpoint (`save`).

Each reads and writes the `RunContext` (session.py) that the loop passes; rank 0 logs, validates and saves, the other
ranks take part in the collective calls (rank 0's early-stop decision, the RNG states a checkpoint holds). A task may
add figures of its own to the log lines (`log_extras`: translation's guided alignment loss).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from tqdm import tqdm

from ..config import ConfigError
from .checkpoint import checkpoint_dirs, save_checkpoint, save_weights
from .distributed import broadcast_flag, gather_rng
from .session import RunContext, new_window


class TrainingError(RuntimeError):
    """Training cannot go on (diverged, repeated out-of-memory); the message says why and what was kept."""


def log_window(run: RunContext, bar: tqdm) -> None:
    """One record in metrics.jsonl and train.log for the window since the last one, the bar's figures; a new window."""
    check_finite(run)
    w, now, unit = run.window, time.perf_counter(), run.task.unit
    tok = max(1, w["tokens"])
    tokens = w["tokens"] * run.ranks.world_size  # under DDP rank 0's count x ranks
    record = {
        "kind": "train",
        "step": run.state.step,
        "epoch": run.state.epoch,
        "lr": w["lr"],
        "loss": float(w["loss"]) / tok,
        "nll": float(w["nll"]) / tok,
        "tokens": tokens,
        "tokens_per_s": tokens / (now - w["time"]),
        "padding_efficiency": w["real"] / max(1, w["padded"]),
        "elapsed": run.elapsed(),
    }
    record["ppl"] = math.exp(min(record["nll"], 50.0))
    extras: dict[str, float] = getattr(
        run.task, "log_extras", dict
    )()  # a task's own figures (translation: the alignment loss)
    record.update(extras)
    run.runlog.metrics(record)
    run.runlog.text(
        f"step {record['step']}: loss {record['loss']:.4f}, nll {record['nll']:.4f}, "
        + "".join(f"{name.replace('_', ' ')} {value:.4f}, " for name, value in extras.items())
        + f"lr {record['lr']:.3e}, {record['tokens_per_s']:,.0f} {unit}/s, padding efficiency "
        f"{record['padding_efficiency']:.3f}",
        echo=False,
    )  # the bar shows it live
    bar.set_postfix(
        loss=f"{record['loss']:.3f}",
        lr=f"{record['lr']:.2e}",
        **{f"{unit.split()[-1]}/s": f"{record['tokens_per_s']:,.0f}"},
        refresh=False,
    )
    run.window = new_window(run.device)


def check_finite(run: RunContext, *, saving: bool = False) -> None:
    """NaN/inf in any loss since the last check stops training (one host sync for the whole window); before
    anything is saved (a checkpoint, the best weights), the weights themselves are checked too: an update can
    make them NaN with a finite loss (a learning rate of 1e30), and NaN weights are never saved."""
    bad = _first_bad(run.recent_losses)
    what = "stopped without saving" if saving else "stopped"
    if bad is not None:
        raise TrainingError(
            f"loss became {bad[1]} at step {bad[0]}; {what}. The last good checkpoint is "
            f"{_last_checkpoint(run.run_dir)}"
        )
    run.recent_losses.clear()
    if saving and not bool(torch.stack([torch.isfinite(p).all() for p in run.model.parameters()]).all()):
        raise TrainingError(
            f"the weights hold NaN or infinite values at step {run.state.step}; {what}. The last good "
            f"checkpoint is {_last_checkpoint(run.run_dir)}"
        )


def validate(run: RunContext) -> None:
    """Validate (rank 0), keep the best weights, count validations without improvement; stop on patience."""
    state, tc = run.state, run.tc
    stop = False
    check_finite(run, saving=True)  # NaN weights are never validated into best.safetensors
    if run.ranks.main:
        key, higher_is_better = run.task.metrics[tc.early_stop_metric]
        if state.best is not None and state.best_metric != tc.early_stop_metric:  # changed on resume (issue 65, 2b)
            run.runlog.text(
                f"train.early_stop_metric is {tc.early_stop_metric!r}, the best so far was by "
                f"{state.best_metric!r}: the best weights and the patience count start anew"
            )
            state.best, state.bad_validations = None, 0
        result = run.task.validate(run.model, run.device)
        value = result.get(key)
        if value is None:
            raise ConfigError(f"train.early_stop_metric is {tc.early_stop_metric!r} but validation does not compute it")
        # train.alignment_only: the translation cannot change, so validation cannot see what trains; the newest
        # head is kept as the best and no validation counts against patience
        frozen = tc.alignment_only
        better = math.isfinite(value) and (
            frozen or state.best is None or (value > state.best if higher_is_better else value < state.best)
        )
        if better:
            state.best, state.best_metric, state.bad_validations = value, tc.early_stop_metric, 0
            save_weights(run.model, run.run_dir / "best.safetensors", metadata={"step": state.step, key: value})
        else:
            state.bad_validations += 1
        run.runlog.metrics({"kind": "valid", "step": state.step, **result, "elapsed": run.elapsed()})
        shown = " (best so far)" if better else f" (no improvement for {state.bad_validations})"
        run.runlog.text(
            f"step {state.step}: "
            + ", ".join(f"{k} {v:.4g}" for k, v in result.items())
            + (" (alignment only: the newest head kept as best)" if frozen and better else shown)
        )
        stop = tc.patience > 0 and state.bad_validations >= tc.patience
    if broadcast_flag(stop, run.ranks, run.device):
        state.stopped = "early_stop"


def save(run: RunContext, reason: str, *, collective: bool = True) -> None:
    """A checkpoint of the weights, Adam's moments, every rank's RNG state and the trainer state (rank 0 writes).
    `collective=False` where other ranks may be gone (a Ctrl-C): no collective call, rank 0's RNG only."""
    check_finite(run, saving=True)
    rank_rng = gather_rng(run.ranks, run.device) if collective else {}
    if run.ranks.main:
        run.state.elapsed = run.elapsed()
        path = save_checkpoint(
            run.run_dir,
            step=run.state.step,
            model=run.model,
            optimizer=run.optimizer,
            trainer=run.state.to_checkpoint(),
            keep_last=run.tc.keep_last,
            extra_tensors=rank_rng,
        )
        run.runlog.text(f"step {run.state.step}: saved {path} ({reason})")


def _first_bad(losses: list[tuple[int, torch.Tensor]]) -> tuple[int, float] | None:
    """The first (step, value) whose loss is NaN or infinite; one host sync for the whole window."""
    if not losses:
        return None
    values = torch.stack([v for _, v in losses]).tolist()
    for (step, _), value in zip(losses, values):
        if not math.isfinite(value):
            return step, value
    return None


def _last_checkpoint(run_dir: Path) -> str:
    dirs = checkpoint_dirs(run_dir)
    return str(dirs[-1]) if dirs else "(none saved yet)"
