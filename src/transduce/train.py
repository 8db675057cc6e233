"""The training loop (PAPER.md §4), readable in one sitting.

One process per device; several go through torchrun and DDP (rank 0 logs and saves). Each optimizer update takes
`accumulate` micro-batches per rank; the gradient all-reduce runs only on the last one (DDP's no_sync). The loss is
summed over non-pad target tokens and divided by the target-token count of the whole update on all ranks, so W
ranks with accumulate A compute the same update as one process with accumulate W * A.

Exact resume: a checkpoint holds weights, Adam moments, the step, the RNG state and the data position (epoch,
update within the epoch); batches are a pure function of (seed, epoch), so a resumed run continues bit for bit.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from .batching import make_batches, update_groups
from .checkpoint import (atomic_write_text, checkpoint_dirs, load_checkpoint, save_checkpoint, save_weights)
from .outputs import OutputError, claim_folder, exclusive, read_manifest
from .config import Config, ConfigError, read_config, save_config
from .data import Batch, ParallelCorpus, Prepared, collate, prepare
from .loss import label_smoothed_nll
from .metrics import score
from .model import Transformer
from .optim import build_optimizer, learning_rate
from .translate import Translator, pick_device


class TrainingError(RuntimeError):
    """Training cannot go on (diverged, repeated out-of-memory); the message says why and what was kept."""


@dataclasses.dataclass
class Ranks:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed(device_name: str) -> tuple[Ranks, torch.device]:
    """Single process, or the process group that torchrun describes in the environment (NCCL on GPU, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Ranks(), pick_device(device_name)
    ranks = Ranks(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    device = pick_device(device_name)
    if device.type == "cuda":
        device = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return ranks, device


class RunLog:
    """metrics.jsonl (one JSON object per line) and train.log (text), written by rank 0 only."""

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
        with open(self.run_dir / "train.log", "a", encoding="utf-8") as f:
            f.write(message + "\n")

    def metrics(self, record: dict) -> None:
        if not self.enabled:
            return
        with open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self.tb is not None:
            for key, value in record.items():
                if isinstance(value, (int, float)) and key not in ("step", "kind"):
                    self.tb.add_scalar(f"{record['kind']}/{key}", value, record["step"])

    def truncate_after(self, step: int) -> None:
        """On resume, forget log lines of steps that the restored checkpoint does not contain."""
        path = self.run_dir / "metrics.jsonl"
        if self.enabled and path.is_file():
            lines = [l for l in path.read_text(encoding="utf-8").splitlines() if l.strip()]
            kept = [l for l in lines if json.loads(l).get("step", 0) <= step]
            atomic_write_text(path, "".join(l + "\n" for l in kept))


def _same_run(saved: Config, new: Config) -> None:
    """Resuming: the model and the data must be the ones the run was started with; train/decode may change."""
    for section in ("model", "data"):
        a, b = dataclasses.asdict(getattr(saved, section)), dataclasses.asdict(getattr(new, section))
        if section == "model" and not b["vocab_size"]:
            b["vocab_size"] = a["vocab_size"]
        changed = [k for k in a if a[k] != b[k]]
        if changed:
            raise ConfigError(f"this run directory was started with different {section} settings "
                              f"({', '.join(f'{section}.{k}: {a[k]!r} -> {b[k]!r}' for k in changed)}); "
                              "use a new --out to train a different model")


@contextlib.contextmanager
def open_run(run_dir: Path, ranks: Ranks, task: str):
    """Rank 0 claims the run directory (new, empty, or a run of ours for the same task) and holds its lock for the
    whole training, so that a second training into the same folder is refused instead of racing."""
    if not ranks.main:
        yield
        return
    claim_folder(run_dir, "run", task=task)
    manifest = read_manifest(run_dir) or {}
    if manifest.get("task", task) != task:
        raise OutputError(f"{run_dir}: holds a {manifest['task']} run, not a {task} run; use another --out")
    with exclusive(run_dir):
        yield


def prepare_run(config: Config, run_dir: Path, ranks: Ranks, log) -> tuple[Config, Prepared]:
    """Write or check config.json, prepare the data (rank 0 first), copy the tokenizer; returns the resolved config.

    Once a run has its tokenizer, its data is frozen: inputs whose contents changed are refused (data.prepare).
    """
    config_path = run_dir / "config.json"
    saved = read_config(config_path) if config_path.is_file() else None
    if saved is not None:
        _same_run(saved, config)
    frozen = (run_dir / "tokenizer.model").is_file()
    data = None
    if ranks.main:
        data = prepare(config.data, run_dir / "data", max_tokens=config.train.max_tokens, log=log, frozen=frozen)
    if ranks.world_size > 1:
        dist.barrier()
    if data is None:
        data = prepare(config.data, run_dir / "data", max_tokens=config.train.max_tokens, log=lambda _: None,
                       frozen=True)
    vocab = data.tokenizer.vocab_size
    if config.model.vocab_size and config.model.vocab_size != vocab:
        raise ConfigError(f"model.vocab_size is {config.model.vocab_size} but the tokenizer in {run_dir / 'data'} "
                          f"has {vocab} pieces; leave model.vocab_size unset (0) or make them equal")
    config = config.replace(model=dataclasses.replace(config.model, vocab_size=vocab))
    if ranks.main:
        save_config(config, config_path)
        if not (run_dir / "tokenizer.model").is_file():
            data.tokenizer.copy_to(run_dir / "tokenizer.model")
    return config, data


@torch.no_grad()
def validate(model: Transformer, data: Prepared, config: Config, device: torch.device) -> dict:
    """Validation loss and perplexity on the whole valid split; BLEU on its first valid_max_sentences sentences."""
    was_training = model.training
    model.eval()
    corpus = data.splits["valid"]
    loss_sum = nll_sum = tokens = 0.0
    for indices in make_batches(corpus.src_lengths, corpus.tgt_lengths, max_tokens=config.train.max_tokens,
                                seed=0, epoch=0, shuffle=False):
        batch = collate(corpus, indices).to(device)
        logits = model(batch.src, batch.tgt_in, batch.positions)  # real target positions only, as in training
        loss, nll = label_smoothed_nll(logits, batch.target, eps=config.train.label_smoothing,
                                       pad_id=model.config.pad_id)
        loss_sum, nll_sum, tokens = loss_sum + float(loss), nll_sum + float(nll), tokens + batch.n_tokens
    result = {"valid_loss": loss_sum / tokens, "valid_nll": nll_sum / tokens,
              "valid_ppl": math.exp(min(nll_sum / tokens, 50.0))}
    if config.train.valid_bleu:
        sources, references = data.texts("valid")
        n = config.train.valid_max_sentences
        translator = Translator(model, data.tokenizer, decode=config.decode)
        hyps = translator.translate(sources[:n], beam=config.train.valid_beam)
        result["valid_bleu"] = score(hyps, references[:n]).bleu
    model.train(was_training)
    return result


def _first_bad(losses: list[tuple[int, torch.Tensor]]) -> tuple[int, float] | None:
    """The first (step, value) whose loss is NaN or infinite; one host sync for the whole window."""
    if not losses:
        return None
    values = torch.stack([v for _, v in losses]).tolist()
    for (step, _), value in zip(losses, values):
        if not math.isfinite(value):
            return step, value
    return None


class TranslationTask:
    """What the loop needs to know about translation: batches, the loss, validation. (classify.py has the other.)"""

    metrics = {"loss": ("valid_loss", False), "bleu": ("valid_bleu", True)}  # name -> (key, higher is better)
    unit = "target tokens"  # what the loss is normalised by (Batch.n_tokens)

    def __init__(self, config: Config, data: Prepared) -> None:
        self.config, self.data = config, data
        self.corpus: ParallelCorpus = data.splits["train"]
        self.has_validation = "valid" in data.splits
        self.description = f"{len(self.corpus):,} training pairs"

    def build_model(self) -> Transformer:
        model = Transformer(self.config.model)
        model.logits_workspace = True  # this loop consumes each batch's logits before the next forward
        model.workspace_rows = self.config.train.max_tokens  # a batch has at most this many target tokens
        return model

    def batches(self, *, max_tokens: int, seed: int, epoch: int) -> list[np.ndarray]:
        return make_batches(self.corpus.src_lengths, self.corpus.tgt_lengths, max_tokens=max_tokens, seed=seed,
                            epoch=epoch)

    def collate(self, indices: np.ndarray) -> Batch:
        return collate(self.corpus, indices)

    def loss(self, net, batch: Batch, autocast) -> tuple[torch.Tensor, torch.Tensor]:
        """(label-smoothed loss, nll), summed over the batch's target tokens (batch.n_tokens of them)."""
        with autocast():
            logits = net(batch.src, batch.tgt_in, batch.positions)  # (n_tokens, V): padding never projected
        return label_smoothed_nll(logits, batch.target, eps=self.config.train.label_smoothing,
                                  pad_id=self.config.model.pad_id, reuse_logits=True)

    def validate(self, model, device: torch.device) -> dict:
        return validate(model, self.data, self.config, device)

    def check(self) -> None:
        """Every training and validation pair must fit the model's positions (+1 for EOS on the source side and
        BOS on the decoder input)."""
        limit = self.config.model.max_len
        for name in ("train", "valid"):
            corpus = self.data.splits.get(name)
            if corpus is None or not len(corpus):
                continue
            longest = int(max(corpus.src_lengths.max(), corpus.tgt_lengths.max()))
            if longest > limit:
                raise ConfigError(f"the prepared {name} split has a sentence of {longest - 1} tokens, but "
                                  f"model.max_len is {limit} positions (tokens + 1); set data.max_len to at most "
                                  f"{limit - 1} or raise model.max_len")


def train(config: Config, run_dir: str | Path, *, quiet: bool = False) -> dict:
    """Train (or resume) a translation model in `run_dir`. Returns final step, best validation, stop reason."""
    run_dir = Path(run_dir)
    ranks, device = setup_distributed(config.train.device)
    with open_run(run_dir, ranks, "translation"):
        runlog = RunLog(run_dir, ranks.main, quiet)
        config, data = prepare_run(config, run_dir, ranks, runlog.text)
        result = run_training(TranslationTask(config, data), config.train, run_dir, ranks=ranks, device=device,
                              runlog=runlog, quiet=quiet)
    return {**result, "config": config}


def check_setup(task, tc) -> None:
    """Everything that can be known before step 1 is checked before step 1 (not at the first validation)."""
    if tc.early_stop_metric not in task.metrics:
        raise ConfigError(f"train.early_stop_metric {tc.early_stop_metric!r} does not apply to this task "
                          f"(choose from {', '.join(task.metrics)})")
    if tc.early_stop_metric == "bleu" and not getattr(tc, "valid_bleu", True):
        raise ConfigError("train.early_stop_metric is 'bleu' but train.valid_bleu is false")
    if tc.patience > 0 and not task.has_validation:
        raise ConfigError(f"train.patience is {tc.patience} but there is no validation data (set data.valid)")
    task.check()


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt(3) parameters, from <malloc.h>


def keep_freed_memory() -> bool:
    """On Linux/glibc, let malloc keep and reuse freed blocks up to 32 MB instead of returning them to the OS.

    A training step allocates and frees the same activations every step; by default glibc maps each large one
    afresh, and the kernel then faults in and zeroes every 4 KB page again (about 100,000 faults per m30k-d256 step).
    With these two mallopt(3) settings the faults drop twelve-fold and a CPU step gets ~7% faster
    (BENCHMARKS.md). The process keeps its peak memory instead of shrinking between steps. Returns whether applied.
    """
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 1 << 30))


def rank_seed(seed: int, rank: int, step: int) -> int:
    """A seed of its own for each DDP rank (rank 0 keeps train.seed), so ranks do not draw identical dropout."""
    return seed + 1_000_003 * rank + step


def run_training(task, tc, run_dir: Path, *, ranks: Ranks, device: torch.device, runlog: RunLog,
                 quiet: bool = False) -> dict:
    """The loop, for any task with build_model / batches / collate / loss / validate (see TranslationTask)."""
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    if device.type == "cpu":
        keep_freed_memory()
    check_setup(task, tc)
    torch.manual_seed(tc.seed)
    model = task.build_model().to(device)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    if ranks.rank:
        torch.manual_seed(rank_seed(tc.seed, ranks.rank, 0))  # each rank its own dropout masks
    optimizer = build_optimizer(model, tc)
    state = {"epoch": 0, "update_in_epoch": 0, "best": None, "bad_validations": 0, "elapsed": 0.0,
             "oom_skips": 0, "target_tokens": 0}
    step = 0
    checkpoints = checkpoint_dirs(run_dir)
    if checkpoints:
        trainer = load_checkpoint(checkpoints[-1], model, optimizer, rank=ranks.rank)
        if ranks.rank and not trainer.pop("rng_restored", False):  # saved without this rank's state
            torch.manual_seed(rank_seed(tc.seed, ranks.rank, trainer["step"]))
        trainer.pop("rng_restored", None)
        step = trainer.pop("step")
        trainer.pop("optimizer", None)
        state.update(trainer)
        runlog.truncate_after(step)
        runlog.text(f"resumed from {checkpoints[-1]} at step {step} (epoch {state['epoch']}, "
                    f"update {state['update_in_epoch']} of that epoch)")
    epochs_done = lambda: tc.max_epochs and state["epoch"] >= tc.max_epochs  # noqa: E731
    if step >= tc.max_steps or epochs_done():
        runlog.text(f"nothing to do: the run is at step {step}, epoch {state['epoch']} (train.max_steps "
                    f"{tc.max_steps}, train.max_epochs {tc.max_epochs}); raise them with --set to train longer")
        return {"step": step, "stopped": "max_steps", "best": state["best"]}

    runlog.text(f"model: {model.num_parameters():,} parameters; device {device}; world size {ranks.world_size}; "
                f"{task.description}; {tc.max_tokens} tokens per micro-batch x {tc.accumulate} "
                f"accumulated x {ranks.world_size} ranks")
    net: torch.nn.Module = model
    if ranks.world_size > 1:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    if tc.compile:
        net = torch.compile(net, dynamic=True)  # batch shapes change every step
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" \
        else contextlib.nullcontext

    def save(reason: str, collective: bool = True) -> None:
        bad = _first_bad(recent_losses)
        if bad is not None:
            raise TrainingError(f"loss became {bad[1]} at step {bad[0]}; stopped without saving. "
                                f"The last good checkpoint is {_last_checkpoint(run_dir)}")
        rank_rng = _gather_rng(ranks, device) if collective and ranks.world_size > 1 else {}
        if ranks.main:
            state["elapsed"] = elapsed()
            path = save_checkpoint(run_dir, step=step, model=model, optimizer=optimizer, trainer=dict(state),
                                   keep_last=tc.keep_last, extra_tensors=rank_rng)
            runlog.text(f"step {step}: saved {path} ({reason})")

    start_time, start_elapsed = time.perf_counter(), state["elapsed"]
    elapsed = lambda: start_elapsed + time.perf_counter() - start_time  # noqa: E731
    recent_losses: list[tuple[int, torch.Tensor]] = []  # (step, loss sum) since the last finiteness check
    window = {"loss": torch.zeros((), device=device), "nll": torch.zeros((), device=device), "tokens": 0,
              "real": 0, "padded": 0, "time": time.perf_counter()}
    bar = tqdm(total=tc.max_steps, initial=step, disable=not ranks.main or quiet, unit="step", file=sys.stderr,
               dynamic_ncols=True, mininterval=0.2 if sys.stderr.isatty() else 30.0)
    stopped, consecutive_oom = "max_steps", 0
    net.train()
    try:
        while step < tc.max_steps and stopped == "max_steps" and not epochs_done():
            batches = task.batches(max_tokens=tc.max_tokens, seed=tc.seed, epoch=state["epoch"])
            groups = update_groups(batches, world_size=ranks.world_size, rank=ranks.rank, accumulate=tc.accumulate)
            if tc.max_epochs:  # the bar counts to whichever limit comes first
                bar.total = min(tc.max_steps, step - state["update_in_epoch"]
                                + (tc.max_epochs - state["epoch"]) * len(groups))
            epoch_end = False
            for u in range(state["update_in_epoch"], len(groups)):
                micro = [task.collate(ix) if ix is not None else None for ix in groups[u]]
                n_tokens = sum(b.n_tokens for b in micro if b is not None)
                if ranks.world_size > 1:
                    total = torch.tensor(float(n_tokens), device=device)
                    dist.all_reduce(total)
                    n_tokens_all = float(total)
                else:
                    n_tokens_all = float(n_tokens)
                try:
                    loss_sum, nll_sum = _accumulate(task, net, micro, n_tokens_all, ranks.world_size, device,
                                                    autocast)
                    consecutive_oom = 0
                except torch.cuda.OutOfMemoryError:
                    if ranks.world_size > 1:
                        raise
                    optimizer.zero_grad(set_to_none=True)
                    torch.cuda.empty_cache()
                    state["oom_skips"] += 1
                    consecutive_oom += 1
                    runlog.text(f"warning: out of GPU memory at step {step + 1}; skipped that batch "
                                f"({state['oom_skips']} skipped so far)")
                    if consecutive_oom >= 3:
                        raise TrainingError("out of GPU memory on 3 updates in a row; lower train.max_tokens")
                    continue
                lr = learning_rate(step + 1, tc, model.config.d_model)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                if tc.clip_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                state["update_in_epoch"] = u + 1
                if u + 1 == len(groups):  # the epoch is complete: the next update starts the next epoch
                    state["epoch"] += 1
                    state["update_in_epoch"] = 0
                    epoch_end = True
                state["target_tokens"] += n_tokens
                recent_losses.append((step, loss_sum))
                window["loss"] += loss_sum
                window["nll"] += nll_sum
                window["tokens"] += n_tokens
                window["real"] += sum(b.n_real for b in micro if b is not None)
                window["padded"] += sum(b.n_padded for b in micro if b is not None)
                bar.update(1)
                last = step >= tc.max_steps or bool(epochs_done())

                if step % tc.log_every == 0 or last:
                    bad = _first_bad(recent_losses)
                    if bad is not None:
                        raise TrainingError(f"loss became {bad[1]} at step {bad[0]}; stopped. The last good "
                                            f"checkpoint is {_last_checkpoint(run_dir)}")
                    recent_losses.clear()
                    now = time.perf_counter()
                    tok = max(1, window["tokens"])
                    record = {"kind": "train", "step": step, "epoch": state["epoch"], "lr": lr,
                              "loss": float(window["loss"]) / tok, "nll": float(window["nll"]) / tok,
                              "tokens_per_s": window["tokens"] * ranks.world_size / (now - window["time"]),
                              "padding_efficiency": window["real"] / max(1, window["padded"]),
                              "elapsed": elapsed()}
                    record["ppl"] = math.exp(min(record["nll"], 50.0))
                    runlog.metrics(record)
                    runlog.text(f"step {step}: loss {record['loss']:.4f}, nll {record['nll']:.4f}, lr {lr:.3e}, "
                                f"{record['tokens_per_s']:,.0f} {task.unit}/s, padding efficiency "
                                f"{record['padding_efficiency']:.3f}", echo=False)  # the bar shows it live
                    bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{lr:.2e}",
                                    **{f"{task.unit.split()[-1]}/s": f"{record['tokens_per_s']:,.0f}"},
                                    refresh=False)
                    window.update(loss=torch.zeros((), device=device), nll=torch.zeros((), device=device),
                                  tokens=0, real=0, padded=0, time=time.perf_counter())

                if task.has_validation and (step % tc.valid_every == 0 or last or
                                            (epoch_end and tc.max_epochs)):
                    stopped = _validate_and_track(task, model, device, step, state, runlog, ranks, run_dir, tc,
                                                  elapsed)
                if step % tc.save_every == 0 or last or stopped != "max_steps":
                    save("periodic" if stopped == "max_steps" else stopped)
                if tc.max_minutes and elapsed() >= tc.max_minutes * 60 and stopped == "max_steps":
                    stopped = "max_minutes"
                    if task.has_validation and step % tc.valid_every and not last:  # validate the final weights
                        _validate_and_track(task, model, device, step, state, runlog, ranks, run_dir, tc, elapsed)
                    if step % tc.save_every:
                        save("time limit")
                if last or stopped != "max_steps":
                    break
            if epochs_done() and stopped == "max_steps":
                stopped = "max_epochs"
    except KeyboardInterrupt:
        optimizer.zero_grad(set_to_none=True)
        bar.close()
        save("interrupted", collective=False)  # other ranks may be gone: no collective call here
        runlog.text(f"interrupted at step {step}; run the same command again to resume")
        raise
    finally:
        bar.close()
    runlog.text(f"finished at step {step} ({stopped}); {state['target_tokens']:,} {task.unit} in "
                f"{elapsed():.0f} s; best validation: {state['best']}")
    if ranks.world_size > 1:
        dist.barrier()
    return {"step": step, "stopped": stopped, "best": state["best"]}


def _gather_rng(ranks: Ranks, device: torch.device) -> dict[str, torch.Tensor]:
    """Every rank's CPU generator state, gathered to all ranks (rank 0 saves them: exact resume of each rank)."""
    state = torch.get_rng_state()
    moved = state.to(device)
    gathered = [torch.empty_like(moved) for _ in range(ranks.world_size)]
    dist.all_gather(gathered, moved)
    return {f"rng.torch.rank{r}": t.cpu() for r, t in enumerate(gathered) if r}


def _accumulate(task, net, micro: list, n_tokens_all: float, world_size: int, device,
                autocast) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward over one update's micro-batches; gradients all-reduced on the last one only."""
    loss_total = torch.zeros((), device=device)
    nll_total = torch.zeros((), device=device)
    for i, batch in enumerate(micro):
        weight = world_size / max(n_tokens_all, 1.0)  # DDP averages over ranks: undo it, divide by all tokens
        if batch is None:  # this rank ran out of batches in the epoch's last update: a zero-weight step
            batch, weight = task.collate(np.array([0])), 0.0
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


def _validate_and_track(task, model, device, step, state, runlog, ranks, run_dir, tc, elapsed) -> str:
    """Validate (rank 0), keep the best weights, count validations without improvement; returns the stop reason."""
    metric_name, higher_is_better = task.metrics[tc.early_stop_metric]
    verdict = torch.zeros(1)
    if ranks.main:
        result = task.validate(model, device)
        value = result.get(metric_name)
        if value is None:
            raise ConfigError(f"train.early_stop_metric is {tc.early_stop_metric!r} but validation does not "
                              f"compute it (is train.valid_bleu false?)")
        better = state["best"] is None or (value > state["best"] if higher_is_better else value < state["best"])
        if better:
            state["best"], state["bad_validations"] = value, 0
            save_weights(model, run_dir / "best.safetensors", metadata={"step": step, metric_name: value})
        else:
            state["bad_validations"] += 1
        runlog.metrics({"kind": "valid", "step": step, **result, "elapsed": elapsed()})
        runlog.text(f"step {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in result.items())
                    + (" (best so far)" if better else f" (no improvement for {state['bad_validations']})"))
        verdict[0] = float(tc.patience > 0 and state["bad_validations"] >= tc.patience)
    if ranks.world_size > 1:
        dist.broadcast(verdict, src=0)
    return "early_stop" if verdict[0] else "max_steps"


def _last_checkpoint(run_dir: Path) -> str:
    dirs = checkpoint_dirs(run_dir)
    return str(dirs[-1]) if dirs else "(none saved yet)"
