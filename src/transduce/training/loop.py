"""The training loop, one for every task (the paper's §5 training regime), readable in one sitting.

`run_training` is the loop, nanoGPT's train.py in shape: for each update, the batch -> the loss and its backward ->
the optimizer step (`Session.update`), then the log line, validation, the checkpoint and the stop checks as they fall
due (progress.py, budget.py). What those steps share (the model, the optimizer, the `TrainerState`) is a
`RunContext` (session.py); `Session` adds how a session starts and makes an update.

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
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ..config import ConfigError, TrainConfig
from ..config.memory import check_fits, run_shape
from ..data.batching import update_groups
from ..device import check_threads, device_memory
from ..model import cpu_speed
from ..outputs import OutputError, claim_folder, empty_folder, exclusive, read_manifest, remove_if_bare
from .budget import check_time_limit, log_forecast
from .checkpoint import average_run, checkpoint_dirs, load_checkpoint
from .distributed import Ranks, all_ranks_sum, broadcast_value, rank_seed, setup_distributed
from .init_from import load_initial
from .optim import build_optimizer, learning_rate
from .precision import autocast_for, check_precision, needs_trial, resolve_cpu_auto, time_modes
from .progress import TrainingError, log_window, save, validate
from .runlog import RunLog
from .session import RunContext, TimeBudget, new_window
from .state import TrainerState
from .task import Task

__all__ = ["Session", "TrainingError", "check_setup", "open_run", "run_training", "train_task"]


def train_task(task_cls: type[Task], config: Any, run_dir: str | Path, *, quiet: bool = False) -> dict:
    """Train (or resume) `task_cls` on `config` (its run config: config/registry.py) in `run_dir`.

    Returns the final step, why it stopped, the best validation value and the resolved config."""
    run_dir = Path(run_dir)
    ranks, device = setup_distributed(config.train.device)
    check_precision(config.train, device)
    available, where = device_memory(device)
    check_fits(run_shape(config), available=available, where=where)  # before the data is prepared or a byte allocated
    check_task_settings(task_cls, config.train)
    check_threads("train.num_threads", config.train.num_threads)  # a resumed run's config.json too
    # glibc keeps freed blocks for this run only (train.cpu_speed; the setting is the whole process's)
    keep_memory = device.type == "cpu" and config.train.cpu_speed
    with _global_switches_restored(), open_run(run_dir, ranks, task_cls.name), cpu_speed.freed_memory_kept(keep_memory):
        runlog = RunLog(run_dir, ranks.main, quiet)
        task = task_cls.prepare(
            config, run_dir, main=ranks.main, log=runlog.text if ranks.main else _silent, barrier=ranks.barrier
        )
        result = run_training(task, task.config.train, run_dir, ranks=ranks, device=device, runlog=runlog, quiet=quiet)
    return {**result, "config": task.config}


@contextlib.contextmanager
def _global_switches_restored() -> Iterator[None]:
    """The process-wide switches a run sets for itself where it starts (`_wrap`: TF32 matmuls and convolutions
    unless train.precision is 'fp32', cuDNN's attention as train.cudnn_attention; both on CUDA only) hold for that
    run only: they are back as they were (pick_device's setting, or the caller's) when it ends, however it ends, so
    a later run or predictor in the process computes as it asked. The flags can be read and set on any build."""
    matmul, cudnn, cudnn_sdp = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.cudnn_sdp_enabled(),
    )
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
        torch.backends.cuda.enable_cudnn_sdp(cudnn_sdp)


def _silent(_: str) -> None:
    pass


@contextlib.contextmanager
def open_run(run_dir: Path, ranks: Ranks, task: str):
    """Rank 0 claims the run directory (new, empty, or a run of ours, of this version's format, for the same task)
    and holds its lock for the whole training, so that a second training into the same folder is refused instead of
    racing."""
    if not ranks.main:
        yield
        return
    created = next((p for p in reversed([run_dir, *run_dir.parents]) if not p.exists()), None)  # the topmost new one
    users_empty = created is None and run_dir.is_dir() and not any(run_dir.iterdir())  # adopted: theirs to keep
    claim_folder(run_dir, "run", task=task)
    manifest = read_manifest(run_dir) or {}
    if manifest.get("task", task) != task:
        raise OutputError(f"{run_dir}: holds a {manifest['task']} run, not a {task} run; use another --out")
    try:
        with exclusive(run_dir):
            yield
    except BaseException as err:
        # a refused start (a user's mistake, found before the first checkpoint: a bad setting, a tag or weights the
        # data or --init-from cannot take) leaves nothing it made, its prepared data included; an interrupted or
        # failed one keeps what it finished (a prepare continues from its finished chunks)
        refused = isinstance(err, ValueError) and not checkpoint_dirs(run_dir)
        if created is not None and refused:
            shutil.rmtree(created, ignore_errors=True)
        elif created is not None:
            remove_if_bare(run_dir, created)
        elif users_empty and refused:  # the user's empty folder stays, empty again
            empty_folder(run_dir)
        elif users_empty:  # (no manifest or lock left in it)
            remove_if_bare(run_dir, keep=True)
        raise


def check_setup(task: Task, tc: TrainConfig) -> None:
    """Everything that can be known before step 1 is checked before step 1 (not at the first validation)."""
    check_task_settings(task, tc)
    if tc.patience > 0 and not task.has_validation:
        raise ConfigError(f"train.patience is {tc.patience} but there is no validation data (set data.valid)")
    task.check()


def check_task_settings(task: type[Task] | Task, tc: TrainConfig) -> None:
    """The training settings a task's kind decides (its metrics, what it can sample or fine-tune; `task`: its class or
    an instance): checked before its data is prepared (issue 65: a bad setting was refused only after it)."""
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
    if tc.init_from and not getattr(task, "fine_tunes", False):
        raise ConfigError(f"train.init_from applies to translation runs, not to {task.name}")
    if tc.guided_alignment and not getattr(task, "guides_alignment", False):
        raise ConfigError(f"train.guided_alignment applies to translation runs, not to {task.name}")


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
    """The loop: updates until max_steps, max_epochs, max_minutes or early stopping; logs, validates and saves."""
    check_setup(task, tc)
    run = Session.start(task, tc, run_dir, ranks, device, runlog)
    state = run.state
    if state.step >= tc.max_steps or _epochs_done(tc, state):
        runlog.text(
            f"nothing to do: the run is at step {state.step}, epoch {state.epoch} (train.max_steps "
            f"{tc.max_steps}, train.max_epochs {tc.max_epochs}); raise them with --set to train longer"
        )
        return {"step": state.step, "stopped": "max_steps", "best": state.best}
    bar = _progress_bar(tc, state, enabled=ranks.main and not quiet)
    try:
        with _ctrl_c() as ctrl_c:
            for group, epoch_end, target in _updates(task, tc, state, ranks):
                ctrl_c.check()  # a Ctrl-C since the last update stops here, between two updates
                updated = run.update(group)  # batch -> loss and backward -> optimizer step; False: skipped (OOM)
                state.update_in_epoch += 1  # the data moves on past a skipped update all the same
                if epoch_end:
                    state.finish_epoch()
                if not updated:
                    continue
                bar.total = run.budget.target = target
                bar.update(1)
                last = state.step >= tc.max_steps or _epochs_done(tc, state)
                if state.step % tc.log_every == 0 or last:
                    log_window(run, bar)
                if task.has_validation and (state.step % tc.valid_every == 0 or last or (epoch_end and tc.max_epochs)):
                    validate(run)  # may stop the run (train.patience)
                if state.step % tc.save_every == 0 or last or state.stopped:
                    save(run, state.stopped or "periodic")
                check_time_limit(run, last=last)  # may stop the run (train.max_minutes)
                log_forecast(run)
                if last or state.stopped:
                    break
        # the loop ends by a break above, or when the last epoch's last updates were skipped (out of GPU memory)
        state.stopped = state.stopped or ("max_steps" if state.step >= tc.max_steps else "max_epochs")
    except KeyboardInterrupt:
        run.optimizer.zero_grad(set_to_none=True)
        bar.close()
        save(run, "interrupted", collective=False)  # other ranks may be gone: no collective call here
        runlog.text(f"interrupted at step {state.step}; run the same command again to resume")
        raise
    finally:
        bar.close()
    return _finish(run)


def _updates(task: Task, tc: TrainConfig, state: TrainerState, ranks: Ranks) -> Iterator[tuple[list, bool, int]]:
    """This rank's micro-batch groups, update after update from where `state` stands (batches are a pure function of
    seed and epoch), until train.max_epochs (without it, for ever: max_steps, the clock or early stopping end the
    loop); each with whether it ends its epoch and the update the run ends at if nothing stops it earlier."""
    while not _epochs_done(tc, state):
        groups = update_groups(
            task.batches(max_tokens=tc.max_tokens, seed=tc.seed, epoch=state.epoch),
            world_size=ranks.world_size,
            rank=ranks.rank,
            accumulate=tc.accumulate,
        )
        target = tc.max_steps
        if tc.max_epochs:  # whichever limit comes first
            target = min(tc.max_steps, state.step - state.update_in_epoch + (tc.max_epochs - state.epoch) * len(groups))
        for u in range(state.update_in_epoch, len(groups)):
            yield groups[u], u + 1 == len(groups), target


def _epochs_done(tc: TrainConfig, state: TrainerState) -> bool:
    return bool(tc.max_epochs) and state.epoch >= tc.max_epochs


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


def _finish(run: Session) -> dict:
    """The last lines: what was trained, and the paper's §6.1 average of the last checkpoints when asked."""
    state, tc = run.state, run.tc
    run.runlog.text(
        f"finished at step {state.step} ({state.stopped}); {state.target_tokens:,} {run.task.unit} "
        f"in {run.elapsed():.0f} s; best validation: {state.best}"
    )
    if tc.average_last and run.ranks.main:
        last = min(tc.average_last, len(checkpoint_dirs(run.run_dir)))
        out = average_run(run.run_dir, last)
        run.runlog.text(f"averaged the last {last} checkpoints into {out}")
    run.ranks.barrier()
    return {"step": state.step, "stopped": state.stopped, "best": state.best}


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


class Session(RunContext):
    """The run's shared parts (session.py's RunContext) with how a session starts and how it makes one update."""

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
            cpu_speed.apply(model, workspace_rows=tc.max_tokens)
        if ranks.rank:
            torch.manual_seed(rank_seed(tc.seed, ranks.rank, 0))  # each rank its own dropout masks
        optimizer = build_optimizer(model, tc)
        state = _restore(run_dir, model=model, optimizer=optimizer, ranks=ranks, tc=tc, runlog=runlog, task=task.name)
        precision = _pick_precision(task, tc, model=model, state=state, ranks=ranks, device=device, runlog=runlog)
        net, autocast = _wrap(model, tc, ranks, device, precision)
        budget = TimeBudget(start_elapsed=state.elapsed, target=tc.max_steps)
        run = cls(
            task=task,
            tc=tc,
            run_dir=run_dir,
            ranks=ranks,
            device=device,
            runlog=runlog,
            model=model,
            net=net,
            autocast=autocast,
            optimizer=optimizer,
            state=state,
            budget=budget,
            window=new_window(device),
        )
        runlog.text(
            f"model: {_parameters(model):,} parameters; device {device}; world size {ranks.world_size}; "
            f"{task.description}; {tc.max_tokens} tokens per micro-batch x {tc.accumulate} accumulated x "
            f"{ranks.world_size} ranks"
        )
        model.train()
        return run

    def update(self, group: list) -> bool:
        """One optimizer update from this rank's micro-batches: the batch -> the loss and its backward -> the
        optimizer step; False when it was skipped (out of GPU memory)."""
        micro = _micro_batches(self.task, group)
        n_tokens = sum(b.n_tokens for b in micro if b is not None)
        n_all = all_ranks_sum(float(n_tokens), self.ranks, self.device)
        try:
            loss_sum, nll_sum = _accumulate(self, micro, n_all)
            self.consecutive_oom = 0
        except torch.cuda.OutOfMemoryError:
            if self.ranks.world_size > 1:
                raise  # ranks cannot skip an update alone
            self.skip_out_of_memory()
            return False
        lr = learning_rate(
            self.state.step + 1, self.tc, self.d_model, elapsed=self.budget.clock, decay_start=self.state.decay_start
        )
        _optimizer_step(self.model, self.optimizer, lr=lr, clip_norm=self.tc.clip_norm)
        self.state.step += 1
        self.state.target_tokens += n_tokens
        self.recent_losses.append((self.state.step, loss_sum))
        w = self.window
        w["loss"] += loss_sum
        w["nll"] += nll_sum
        w["tokens"] += n_tokens
        w["real"] += sum(b.n_real for b in micro if b is not None)
        w["padded"] += sum(b.n_padded for b in micro if b is not None)
        w["lr"] = lr
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


def _restore(
    run_dir: Path, *, model, optimizer, ranks: Ranks, tc: TrainConfig, runlog: RunLog, task: str
) -> TrainerState:
    """The newest checkpoint's weights, Adam moments, RNG and trainer state; a fresh state when there is none (with
    train.init_from, on the weights of the run it names: init_from.py)."""
    checkpoints = checkpoint_dirs(run_dir)
    if not checkpoints:
        if tc.init_from:
            load_initial(model, init_from=tc.init_from, out=run_dir, task=task, main=ranks.main, log=runlog.text)
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


def _pick_precision(
    task: Task,
    tc: TrainConfig,
    *,
    model: torch.nn.Module,
    state: TrainerState,
    ranks: Ranks,
    device: torch.device,
    runlog: RunLog,
) -> str:
    """train.precision for this session: as set, or for 'auto' on a CPU with native bf16 the pick stored in the
    run, else the faster in a short trial (rank 0 decides, alone; every rank takes its pick); stored in the state,
    so in checkpoints."""
    if not needs_trial(tc, device):
        return tc.precision
    pick = "fp32"
    if ranks.main:
        pick, line = resolve_cpu_auto(state.precision, state.step > 0, lambda: time_modes(task, model, tc, device))
        runlog.text(line)
    pick = "bf16" if broadcast_value(float(pick == "bf16"), ranks, device) else "fp32"
    state.precision = pick
    return pick


def _wrap(model: torch.nn.Module, tc: TrainConfig, ranks: Ranks, device: torch.device, precision: str):
    """DDP over ranks, torch.compile when asked, and the run's precision (resolved: precision.py); on CUDA TF32 is on
    unless it is 'fp32', and cuDNN's attention as train.cudnn_attention says (train_task restores both when the run
    ends)."""
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


def _micro_batches(task: Task, group: list) -> list:
    """The batch: this rank's micro-batches of one update, collated (None: a zero-weight step, see _accumulate). A
    task may cut one batch into several (translation's subword sampling)."""
    micro: list = []
    for ix in group:
        collated = task.collate(ix) if ix is not None else None
        micro.extend(collated if isinstance(collated, list) else [collated])
    return micro


def _accumulate(run: Session, micro: list, n_tokens_all: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss and its backward over one update's micro-batches (`n_tokens_all`: their units on all ranks);
    gradients all-reduced on the last one only. Returns the (loss, nll) sums, on the device."""
    net: Any = run.net  # DDP's no_sync where it applies
    loss_total = torch.zeros((), device=run.device)
    nll_total = torch.zeros((), device=run.device)
    for i, batch in enumerate(micro):
        weight = run.ranks.world_size / max(n_tokens_all, 1.0)  # DDP averages over ranks: undo it, divide by all
        if batch is None:  # this rank ran out of batches in the epoch's last update: a zero-weight step
            batch, weight = run.task.collate(np.array([0])), 0.0
            batch = batch[0] if isinstance(batch, list) else batch
        batch = batch.to(run.device)
        last = i == len(micro) - 1
        sync = contextlib.nullcontext() if last or not hasattr(net, "no_sync") else net.no_sync()
        with sync:
            loss, nll = run.task.loss(net, batch, run.autocast)
            (loss * weight).backward()
        if weight:
            loss_total += loss.detach()
            nll_total += nll.detach()
    return loss_total, nll_total


def _optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, lr: float, clip_norm: float) -> None:
    """The optimizer step at the schedule's rate (Eq. 3 or the recipe's), after clipping the gradient norm."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    if clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
