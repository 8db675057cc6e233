# Over 500 lines on purpose: the loop and the Session whose steps it calls read together, in one sitting (DESIGN §5).
"""The training loop, one for every task (the paper's §5 training regime), readable in one sitting.

One process per device; several go through torchrun and DDP (rank 0 logs and saves). Each optimizer update takes
`accumulate` micro-batches per rank; the gradient all-reduce runs only on the last one (DDP's no_sync). The loss is
summed over the task's units (target tokens, examples) and divided by their count in the whole update on all ranks,
so W ranks with accumulate A compute the same update as one process with accumulate W * A.

Exact resume: a checkpoint holds weights, Adam moments, the RNG state of every rank and the `TrainerState` (step,
epoch, update within the epoch, ...); batches are a pure function of (seed, epoch), so a resumed run continues bit
for bit. What differs between tasks (data, model, loss, validation) is behind the `Task` interface (task.py); which
task a config trains is picked above this package (tasks.train).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ..config import ConfigError, TrainConfig
from ..data.batching import update_groups
from ..model import cpu_speed
from ..outputs import OutputError, claim_folder, exclusive, read_manifest, remove_if_bare, write_manifest
from .checkpoint import average_run, checkpoint_dirs, load_checkpoint, save_checkpoint, save_weights
from .distributed import Ranks, all_ranks_sum, broadcast_flag, broadcast_value, gather_rng, rank_seed, setup_distributed
from .optim import FORECAST_AFTER, build_optimizer, forecast, learning_rate
from .precision import autocast_for, check_precision, needs_trial, resolve_cpu_auto, time_modes
from .runlog import RunLog
from .state import TrainerState
from .task import Task


class TrainingError(RuntimeError):
    """Training cannot go on (diverged, repeated out-of-memory); the message says why and what was kept."""


def train_task(task_cls: type[Task], config: Any, run_dir: str | Path, *, quiet: bool = False) -> dict:
    """Train (or resume) `task_cls` on `config` (its run config: config/registry.py) in `run_dir`.

    Returns the final step, why it stopped, the best validation value and the resolved config."""
    run_dir = Path(run_dir)
    ranks, device = setup_distributed(config.train.device)
    check_precision(config.train, device)
    try:
        # glibc keeps freed blocks for this run only (train.cpu_speed; the setting is the whole process's)
        keep_memory = device.type == "cpu" and config.train.cpu_speed
        with open_run(run_dir, ranks, task_cls.name), cpu_speed.freed_memory_kept(keep_memory):
            runlog = RunLog(run_dir, ranks.main, quiet)
            task = task_cls.prepare(
                config, run_dir, main=ranks.main, log=runlog.text if ranks.main else _silent, barrier=ranks.barrier
            )
            result = run_training(
                task, task.config.train, run_dir, ranks=ranks, device=device, runlog=runlog, quiet=quiet
            )
    finally:
        if device.type == "cuda":  # train.cudnn_attention holds for the run only; then pick_device's setting again
            torch.backends.cuda.enable_cudnn_sdp(False)
    return {**result, "config": task.config}


def _silent(_: str) -> None:
    pass


@contextlib.contextmanager
def open_run(run_dir: Path, ranks: Ranks, task: str):
    """Rank 0 claims the run directory (new, empty, or a run of ours for the same task) and holds its lock for the
    whole training, so that a second training into the same folder is refused instead of racing."""
    if not ranks.main:
        yield
        return
    if read_manifest(run_dir) is None and (run_dir / "config.json").is_file() and checkpoint_dirs(run_dir):
        write_manifest(run_dir, "run", task=task)  # a run made before manifests existed: adopt it
    created = next((p for p in reversed([run_dir, *run_dir.parents]) if not p.exists()), None)  # the topmost new one
    claim_folder(run_dir, "run", task=task)
    manifest = read_manifest(run_dir) or {}
    if manifest.get("task", task) != task:
        raise OutputError(f"{run_dir}: holds a {manifest['task']} run, not a {task} run; use another --out")
    try:
        with exclusive(run_dir):
            yield
    except BaseException:
        if created is not None:  # refused before anything was written (missing data, a bad setting): no debris
            remove_if_bare(run_dir, created)
        raise


def check_setup(task: Task, tc: TrainConfig) -> None:
    """Everything that can be known before step 1 is checked before step 1 (not at the first validation)."""
    if tc.early_stop_metric not in task.metrics:
        raise ConfigError(
            f"train.early_stop_metric {tc.early_stop_metric!r} does not apply to this task "
            f"(choose from {', '.join(task.metrics)})"
        )
    if tc.early_stop_metric == "bleu" and not tc.valid_bleu:
        raise ConfigError("train.early_stop_metric is 'bleu' but train.valid_bleu is false")
    if tc.subword_sampling and not getattr(task, "samples_subwords", False):
        raise ConfigError(f"train.subword_sampling applies to translation and parsing runs, not to {task.name}")
    if tc.subtree_substitution and not getattr(task, "substitutes_subtrees", False):
        raise ConfigError(f"train.subtree_substitution applies to parsing runs, not to {task.name}")
    if tc.word_substitution and not getattr(task, "substitutes_words", False):
        raise ConfigError(f"train.word_substitution applies to parsing runs, not to {task.name}")
    if tc.patience > 0 and not task.has_validation:
        raise ConfigError(f"train.patience is {tc.patience} but there is no validation data (set data.valid)")
    task.check()


def run_training(
    task: Task,
    tc: TrainConfig,
    run_dir: Path,
    *,
    ranks: Ranks,
    device: torch.device,
    runlog: RunLog,
    quiet: bool = False,
) -> dict:
    """The loop: updates until max_steps, max_epochs, max_minutes or early stopping; validates, logs and saves."""
    check_setup(task, tc)
    run = Session.start(task, tc, run_dir, ranks, device, runlog)
    state = run.state
    if state.step >= tc.max_steps or run.epochs_done():
        runlog.text(
            f"nothing to do: the run is at step {state.step}, epoch {state.epoch} (train.max_steps "
            f"{tc.max_steps}, train.max_epochs {tc.max_epochs}); raise them with --set to train longer"
        )
        return {"step": state.step, "stopped": "max_steps", "best": state.best}
    bar = _progress_bar(tc, state, enabled=ranks.main and not quiet)
    try:
        with _ctrl_c() as ctrl_c:
            _train_epochs(task, tc, run, ranks, bar, ctrl_c)
    except KeyboardInterrupt:
        run.optimizer.zero_grad(set_to_none=True)
        bar.close()
        run.save("interrupted", collective=False)  # other ranks may be gone: no collective call here
        runlog.text(f"interrupted at step {state.step}; run the same command again to resume")
        raise
    finally:
        bar.close()
    return run.finish()


class _CtrlC:
    """Ctrl-C (SIGINT) while training: the first one is noted and acted on between two updates (so it can never be
    raised inside a finalizer, where Python would drop it); a second one interrupts at once."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


@contextlib.contextmanager
def _ctrl_c():
    handler = _CtrlC()
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield handler
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield handler
    finally:
        signal.signal(signal.SIGINT, previous)


def _train_epochs(task: Task, tc: TrainConfig, run: Session, ranks: Ranks, bar: tqdm, ctrl_c: _CtrlC) -> None:
    """Epochs of updates until the run stops (max_steps, max_epochs, time limit, early stopping)."""
    state = run.state
    while state.stopped is None:
        groups = update_groups(
            task.batches(max_tokens=tc.max_tokens, seed=tc.seed, epoch=state.epoch),
            world_size=ranks.world_size,
            rank=ranks.rank,
            accumulate=tc.accumulate,
        )
        if tc.max_epochs:  # the bar counts to whichever limit comes first
            run.target = min(
                tc.max_steps, state.step - state.update_in_epoch + (tc.max_epochs - state.epoch) * len(groups)
            )
            bar.total = run.target
        for u in range(state.update_in_epoch, len(groups)):
            ctrl_c.check()  # a Ctrl-C since the last update stops here, between two updates
            updated = run.update(groups[u])  # False: skipped (out of GPU memory), the data moves on all the same
            state.update_in_epoch = u + 1
            epoch_end = u + 1 == len(groups)
            if epoch_end:
                state.finish_epoch()
            if not updated:
                continue
            bar.update(1)
            if run.after_update(epoch_end, bar):
                break
        if run.epochs_done() and state.stopped is None:
            state.stopped = "max_epochs"


def _progress_bar(tc: TrainConfig, state: TrainerState, *, enabled: bool) -> tqdm:
    interval = 0.2 if sys.stderr.isatty() else 30.0
    return tqdm(
        total=tc.max_steps,
        initial=state.step,
        disable=not enabled,
        unit="step",
        file=sys.stderr,
        dynamic_ncols=True,
        mininterval=interval,
    )


@dataclasses.dataclass
class Session:
    """One training session's context: what the loop's steps share (not a trainer hierarchy: one plain class)."""

    task: Task
    tc: TrainConfig
    run_dir: Path
    ranks: Ranks
    device: torch.device
    runlog: RunLog
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    state: TrainerState
    net: torch.nn.Module = dataclasses.field(init=False)
    autocast: Any = dataclasses.field(init=False)
    started: float = dataclasses.field(default_factory=time.perf_counter)
    start_elapsed: float = 0.0
    recent_losses: list[tuple[int, torch.Tensor]] = dataclasses.field(default_factory=list)
    window: dict = dataclasses.field(default_factory=dict)
    consecutive_oom: int = 0
    lr: float = 0.0
    clock: float = 0.0  # rank 0's elapsed seconds after the last update (the same on every rank)
    target: int = 0  # the update the run ends at if no time limit or early stop comes first
    forecast_from: tuple[int, float] | None = None  # (step, time) after the session's first update

    @classmethod
    def start(
        cls, task: Task, tc: TrainConfig, run_dir: Path, ranks: Ranks, device: torch.device, runlog: RunLog
    ) -> Session:
        """Build the model (the same initial weights on every rank), the optimizer, and restore the newest
        checkpoint when there is one."""
        if tc.num_threads:
            torch.set_num_threads(tc.num_threads)
        torch.manual_seed(tc.seed)
        model = task.build_model().to(device)
        if device.type == "cpu" and tc.cpu_speed:
            cpu_speed.apply(model, workspace_rows=tc.max_tokens, float32_logits=tc.fp32_logits)
        if ranks.rank:
            torch.manual_seed(rank_seed(tc.seed, ranks.rank, 0))  # each rank its own dropout masks
        optimizer = build_optimizer(model, tc)
        state = _restore(run_dir, model, optimizer, ranks, tc, runlog)
        run = cls(task, tc, run_dir, ranks, device, runlog, model, optimizer, state, start_elapsed=state.elapsed)
        run.clock, run.target = state.elapsed, tc.max_steps
        run.net, run.autocast = _wrap(model, tc, ranks, device, run.pick_precision())
        run.reset_window()
        runlog.text(
            f"model: {_parameters(model):,} parameters; device {device}; world size {ranks.world_size}; "
            f"{task.description}; {tc.max_tokens} tokens per micro-batch x {tc.accumulate} accumulated x "
            f"{ranks.world_size} ranks"
        )
        model.train()
        return run

    def pick_precision(self) -> str:
        """train.precision for this session: as set, or for 'auto' on a CPU with native bf16 the pick stored in the
        run, else the faster in a short trial (rank 0 decides, alone; every rank takes its pick); stored in the
        state, so in checkpoints."""
        tc, state = self.tc, self.state
        if not needs_trial(tc, self.device):
            return tc.precision
        pick = "fp32"
        if self.ranks.main:
            pick, line = resolve_cpu_auto(
                state.precision, state.step > 0, lambda: time_modes(self.task, self.model, tc, self.device)
            )
            self.runlog.text(line)
        pick = "bf16" if broadcast_value(float(pick == "bf16"), self.ranks, self.device) else "fp32"
        state.precision = pick
        return pick

    @property
    def d_model(self) -> int:
        """The model width in the learning-rate schedule (Eq. 3); every task's model carries its ModelConfig."""
        config = getattr(self.model, "config", None)
        if config is None:
            raise ConfigError(f"{type(self.model).__name__} has no ModelConfig (.config): the schedule needs d_model")
        return int(config.d_model)

    def elapsed(self) -> float:
        return self.start_elapsed + time.perf_counter() - self.started

    def epochs_done(self) -> bool:
        return bool(self.tc.max_epochs) and self.state.epoch >= self.tc.max_epochs

    def update(self, group: list) -> bool:
        """One optimizer update from this rank's micro-batches; False when it was skipped (out of GPU memory)."""
        micro: list = []
        for ix in group:  # a task may cut one batch into several (translation's subword sampling)
            collated = self.task.collate(ix) if ix is not None else None
            micro.extend(collated if isinstance(collated, list) else [collated])
        n_tokens = sum(b.n_tokens for b in micro if b is not None)
        n_all = all_ranks_sum(float(n_tokens), self.ranks, self.device)
        try:
            loss_sum, nll_sum = _accumulate(
                self.task, self.net, micro, n_all, self.ranks.world_size, self.device, self.autocast
            )
            self.consecutive_oom = 0
        except torch.cuda.OutOfMemoryError:
            if self.ranks.world_size > 1:
                raise  # ranks cannot skip an update alone
            self.skip_out_of_memory()
            return False
        self.lr = learning_rate(
            self.state.step + 1, self.tc, self.d_model, elapsed=self.clock, decay_start=self.state.decay_start
        )
        for group_ in self.optimizer.param_groups:
            group_["lr"] = self.lr
        if self.tc.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.tc.clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        self.state.target_tokens += n_tokens
        self.recent_losses.append((self.state.step, loss_sum))
        w = self.window
        w["loss"] += loss_sum
        w["nll"] += nll_sum
        w["tokens"] += n_tokens
        w["real"] += sum(b.n_real for b in micro if b is not None)
        w["padded"] += sum(b.n_padded for b in micro if b is not None)
        return True

    def skip_out_of_memory(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        self.state.oom_skips += 1
        self.consecutive_oom += 1
        self.runlog.text(
            f"warning: out of GPU memory at step {self.state.step + 1}; skipped that batch "
            f"({self.state.oom_skips} skipped so far)"
        )
        if self.consecutive_oom >= 3:
            raise TrainingError("out of GPU memory on 3 updates in a row; lower train.max_tokens")

    def reset_window(self) -> None:
        zero = torch.zeros((), device=self.device)
        self.window = {
            "loss": zero,
            "nll": zero.clone(),
            "tokens": 0,
            "real": 0,
            "padded": 0,
            "time": time.perf_counter(),
        }

    def check_finite(self, saving: bool = False) -> None:
        """NaN/inf in any loss since the last check stops training (one host sync for the whole window); before
        anything is saved (a checkpoint, the best weights), the weights themselves are checked too: an update can
        make them NaN with a finite loss (a learning rate of 1e30), and NaN weights are never saved."""
        bad = _first_bad(self.recent_losses)
        what = "stopped without saving" if saving else "stopped"
        if bad is not None:
            raise TrainingError(
                f"loss became {bad[1]} at step {bad[0]}; {what}. The last good checkpoint is "
                f"{_last_checkpoint(self.run_dir)}"
            )
        self.recent_losses.clear()
        if saving and not bool(torch.stack([torch.isfinite(p).all() for p in self.model.parameters()]).all()):
            raise TrainingError(
                f"the weights hold NaN or infinite values at step {self.state.step}; {what}. The last good "
                f"checkpoint is {_last_checkpoint(self.run_dir)}"
            )

    def log_window(self, bar: tqdm) -> None:
        self.check_finite()
        w, now, unit = self.window, time.perf_counter(), self.task.unit
        tok = max(1, w["tokens"])
        tokens = w["tokens"] * self.ranks.world_size  # under DDP rank 0's count x ranks
        record = {
            "kind": "train",
            "step": self.state.step,
            "epoch": self.state.epoch,
            "lr": self.lr,
            "loss": float(w["loss"]) / tok,
            "nll": float(w["nll"]) / tok,
            "tokens": tokens,
            "tokens_per_s": tokens / (now - w["time"]),
            "padding_efficiency": w["real"] / max(1, w["padded"]),
            "elapsed": self.elapsed(),
        }
        record["ppl"] = math.exp(min(record["nll"], 50.0))
        self.runlog.metrics(record)
        self.runlog.text(
            f"step {record['step']}: loss {record['loss']:.4f}, nll {record['nll']:.4f}, lr "
            f"{self.lr:.3e}, {record['tokens_per_s']:,.0f} {unit}/s, padding efficiency "
            f"{record['padding_efficiency']:.3f}",
            echo=False,
        )  # the bar shows it live
        bar.set_postfix(
            loss=f"{record['loss']:.3f}",
            lr=f"{self.lr:.2e}",
            **{f"{unit.split()[-1]}/s": f"{record['tokens_per_s']:,.0f}"},
            refresh=False,
        )
        self.reset_window()

    def validate(self) -> None:
        """Validate (rank 0), keep the best weights, count validations without improvement; stop on patience."""
        state, tc = self.state, self.tc
        stop = False
        self.check_finite(saving=True)  # NaN weights are never validated into best.safetensors
        if self.ranks.main:
            key, higher_is_better = self.task.metrics[tc.early_stop_metric]
            result = self.task.validate(self.model, self.device)
            value = result.get(key)
            if value is None:
                raise ConfigError(
                    f"train.early_stop_metric is {tc.early_stop_metric!r} but validation does not compute it"
                )
            better = math.isfinite(value) and (
                state.best is None or (value > state.best if higher_is_better else value < state.best)
            )
            if better:
                state.best, state.bad_validations = value, 0
                save_weights(self.model, self.run_dir / "best.safetensors", metadata={"step": state.step, key: value})
            else:
                state.bad_validations += 1
            self.runlog.metrics({"kind": "valid", "step": state.step, **result, "elapsed": self.elapsed()})
            self.runlog.text(
                f"step {state.step}: "
                + ", ".join(f"{k} {v:.4g}" for k, v in result.items())
                + (" (best so far)" if better else f" (no improvement for {state.bad_validations})")
            )
            stop = tc.patience > 0 and state.bad_validations >= tc.patience
        if broadcast_flag(stop, self.ranks, self.device):
            state.stopped = "early_stop"

    def save(self, reason: str, collective: bool = True) -> None:
        self.check_finite(saving=True)
        rank_rng = gather_rng(self.ranks, self.device) if collective else {}
        if self.ranks.main:
            self.state.elapsed = self.elapsed()
            path = save_checkpoint(
                self.run_dir,
                step=self.state.step,
                model=self.model,
                optimizer=self.optimizer,
                trainer=self.state.to_checkpoint(),
                keep_last=self.tc.keep_last,
                extra_tensors=rank_rng,
            )
            self.runlog.text(f"step {self.state.step}: saved {path} ({reason})")

    def after_update(self, epoch_end: bool, bar: tqdm) -> bool:
        """Log, validate, save and check the time limit as due after an update; True when training stops."""
        state, tc = self.state, self.tc
        last = state.step >= tc.max_steps or self.epochs_done()
        if state.step % tc.log_every == 0 or last:
            self.log_window(bar)
        if self.task.has_validation and (state.step % tc.valid_every == 0 or last or (epoch_end and tc.max_epochs)):
            self.validate()
        if state.step % tc.save_every == 0 or last or state.stopped:
            self.save(state.stopped or "periodic")
        self.check_time_limit(last)
        self.forecast()
        if last or state.stopped:
            state.stopped = state.stopped or ("max_steps" if state.step >= tc.max_steps else "max_epochs")
            return True
        return False

    def forecast(self) -> None:
        """FORECAST_AFTER updates into the session, say where the time budget ends the run against the schedule
        (a warning when it cuts it). Timed from the end of the first update, so its warm-up does not count."""
        now, step = time.perf_counter(), self.state.step
        if self.forecast_from is None:
            self.forecast_from = (step, now)
            return
        first, then = self.forecast_from
        if step - first != FORECAST_AFTER or self.state.stopped:
            return
        rate = FORECAST_AFTER / max(now - then, 1e-9)
        line, _ = forecast(step, rate, self.elapsed(), self.target, self.tc, self.d_model)
        self.runlog.text(line)

    def check_time_limit(self, last: bool) -> None:
        """Past train.max_minutes (rank 0's clock decides, for every rank): validate and save the final weights,
        unless this step already did."""
        state, tc = self.state, self.tc
        if not tc.max_minutes or state.stopped:
            return
        self.clock = broadcast_value(self.elapsed(), self.ranks, self.device)
        if tc.lr_clock and state.decay_start is None and state.step >= tc.warmup_steps:
            state.decay_start = self.clock
        if self.clock < tc.max_minutes * 60:
            return
        if self.task.has_validation and state.step % tc.valid_every and not last:
            self.validate()
        state.stopped = "max_minutes"
        if state.step % tc.save_every and not last:
            self.save("time limit")

    def finish(self) -> dict:
        state = self.state
        self.runlog.text(
            f"finished at step {state.step} ({state.stopped}); {state.target_tokens:,} {self.task.unit} "
            f"in {self.elapsed():.0f} s; best validation: {state.best}"
        )
        if self.tc.average_last and self.ranks.main:  # the paper's §6.1: the mean of the last checkpoints
            last = min(self.tc.average_last, len(checkpoint_dirs(self.run_dir)))
            out = average_run(self.run_dir, last)
            self.runlog.text(f"averaged the last {last} checkpoints into {out}")
        self.ranks.barrier()
        return {"step": state.step, "stopped": state.stopped, "best": state.best}


def _restore(run_dir: Path, model, optimizer, ranks: Ranks, tc: TrainConfig, runlog: RunLog) -> TrainerState:
    checkpoints = checkpoint_dirs(run_dir)
    if not checkpoints:
        return TrainerState()
    trainer = load_checkpoint(checkpoints[-1], model, optimizer, rank=ranks.rank)
    state = TrainerState.from_checkpoint(trainer)
    if ranks.rank and not trainer["rng_restored"]:  # saved without this rank's generator state
        torch.manual_seed(rank_seed(tc.seed, ranks.rank, state.step))
    runlog.truncate_after(state.step)
    runlog.text(
        f"resumed from {checkpoints[-1]} at step {state.step} (epoch {state.epoch}, update "
        f"{state.update_in_epoch} of that epoch)"
    )
    return state


def _wrap(model: torch.nn.Module, tc: TrainConfig, ranks: Ranks, device: torch.device, precision: str):
    """DDP over ranks, torch.compile when asked, and the run's precision (resolved: precision.py); on CUDA TF32 is on
    unless it is 'fp32'."""
    net: torch.nn.Module = model
    if ranks.world_size > 1:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    if tc.compile:
        net = torch.compile(net, dynamic=True)  # type: ignore[assignment]  # batch shapes change every step
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(tc.cudnn_attention)
    if device.type == "cuda" and precision != "fp32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return net, autocast_for(precision, device)


def _parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied tensors are counted once


def _accumulate(
    task: Task, net, micro: list, n_tokens_all: float, world_size: int, device, autocast
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward over one update's micro-batches; gradients all-reduced on the last one only."""
    loss_total = torch.zeros((), device=device)
    nll_total = torch.zeros((), device=device)
    for i, batch in enumerate(micro):
        weight = world_size / max(n_tokens_all, 1.0)  # DDP averages over ranks: undo it, divide by all tokens
        if batch is None:  # this rank ran out of batches in the epoch's last update: a zero-weight step
            batch, weight = task.collate(np.array([0])), 0.0
            batch = batch[0] if isinstance(batch, list) else batch
        batch = batch.to(device)
        last = i == len(micro) - 1
        sync = contextlib.nullcontext() if last or not hasattr(net, "no_sync") else net.no_sync()
        with sync:
            loss, nll = task.loss(net, batch, autocast)
            (loss * weight).backward()
        if weight:
            loss_total += loss.detach()
            nll_total += nll.detach()
    return loss_total, nll_total


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
