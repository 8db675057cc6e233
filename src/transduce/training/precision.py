"""train.precision: which arithmetic the updates run in, and how "auto" decides on a CPU.

On CUDA "auto" is bf16 autocast (with TF32). On a CPU without native bfloat16 (no avx512_bf16 / amx_bf16 flag) it is
float32: there torch emulates bfloat16 far slower. On a CPU with it, how much bf16 pays depends on the model and the
machine (2.66x the step speed for multi30k's model on one AMD EPYC; the demo's 0.7M-parameter model 1.3x in the trial
on the same kind of CPU), so "auto" times forward and backward passes of the run's own model on its own first batches,
the two modes alternating on each batch (TRIAL_BATCHES rounds), and keeps bf16 only where it is clearly faster
beyond the noise: the median of the rounds' bf16/float32 ratios at most BF16_MARGIN, and bf16 the faster in every
round. A machine busy enough that the rounds disagree gets float32, saying so (under load one timing kept bf16 where
it was ~3.5x slower: issue 65). The trial leaves no trace: the weights are untouched, the gradients and the random
state restored. The pick is stored in every checkpoint, so a resumed run keeps it whatever the machine's load then.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..config import TrainConfig
from ..model import cpu_speed

TRIAL_BATCHES = 5  # timed rounds (one batch in each mode), after one untimed warm-up batch each
BF16_MARGIN = 0.85  # bf16 rounds, so it is picked only where it clearly pays: at most 0.85x float32's time per batch


def check_precision(tc: TrainConfig, device: torch.device) -> None:
    """Refuse bf16 on a CPU without native bfloat16 arithmetic, where it would run many times slower than float32."""
    if tc.precision == "bf16":
        cpu_speed.refuse_emulated_bf16(device, "train.precision = 'bf16'", "'fp32' or 'auto'")


def autocast_for(precision: str, device: torch.device) -> Callable[[], Any]:
    """The autocast context of a resolved precision ('fp32' or 'bf16'; on CUDA 'auto' is bf16)."""
    if precision == "fp32":
        return contextlib.nullcontext
    if device.type == "cuda":
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    if precision == "bf16":
        return lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext


def needs_trial(tc: TrainConfig, device: torch.device) -> bool:
    return tc.precision == "auto" and device.type == "cpu" and cpu_speed.native_bf16()


Trial = Callable[[], tuple[list[float], list[float]]]


def resolve_cpu_auto(saved: str | None, resumed: bool, trial: Trial) -> tuple[str, str]:
    """The precision of a CPU run with train.precision = 'auto' on a CPU with native bf16, and the line to log.

    `saved`: the pick stored in the run's checkpoint (None when there is none); `resumed`: whether the run already
    trained (a run saved before picks were stored trained in float32, the earlier meaning of 'auto' on CPU);
    `trial()`: seconds per batch in (fp32, bf16), one of each per round, the rounds in order."""
    if saved in ("fp32", "bf16"):
        return saved, f"train.precision 'auto': {saved}, as picked when this run started"
    if resumed:
        return "fp32", "train.precision 'auto': fp32, as this run was trained so far"
    fp32, bf16 = trial()
    ratios = [b / max(f, 1e-12) for f, b in zip(fp32, bf16)]  # paired: the same batch in both modes
    clearly = float(np.median(ratios)) <= BF16_MARGIN
    steady = max(ratios) < 1.0  # bf16 the faster in every round: the difference is not the machine's noise
    pick = "bf16" if clearly and steady else "fp32"
    noisy = "; the rounds disagree (a busy machine?): too noisy to pick bf16" if clearly and not steady else ""
    return pick, (
        f"train.precision 'auto': {pick} (a trial on the first batches: {np.median(fp32):.3f} s per batch in "
        f"float32, {np.median(bf16):.3f} s in bfloat16, {len(ratios)} rounds{noisy}); set train.precision to fix it"
    )


def time_modes(
    task: Any, model: torch.nn.Module, tc: TrainConfig, device: torch.device
) -> tuple[list[float], list[float]]:
    """Seconds per forward and backward pass of `model` over the run's first batches, in float32 and in bf16
    autocast: one round per batch, the modes alternating within it. Weights, gradients and random state are as
    before."""
    batches = _first_batches(task, tc)
    modes: dict[str, Callable[[], Any]] = {
        "fp32": contextlib.nullcontext,
        "bf16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    }
    seconds: dict[str, list[float]] = {name: [] for name in modes}
    rng = torch.get_rng_state()
    try:
        for autocast in modes.values():  # warm-up: allocations, workspace, oneDNN's kernel choices
            _pass(task, model, batches[0], device, autocast)
        for batch in batches[1:]:
            for name, autocast in modes.items():
                start = time.perf_counter()
                _pass(task, model, batch, device, autocast)
                seconds[name].append(time.perf_counter() - start)
    finally:
        model.zero_grad(set_to_none=True)
        torch.set_rng_state(rng)
    return seconds["fp32"], seconds["bf16"]


def _first_batches(task: Any, tc: TrainConfig) -> list:
    """One warm-up batch and TRIAL_BATCHES timed ones: the first of epoch 0 (repeated if the data is shorter)."""
    order = task.batches(max_tokens=tc.max_tokens, seed=tc.seed, epoch=0)
    picked = [order[i % len(order)] for i in range(TRIAL_BATCHES + 1)]
    out = []
    for ix in picked:
        collated = task.collate(ix)
        out.append(collated[0] if isinstance(collated, list) else collated)
    return out


def _pass(task: Any, model: torch.nn.Module, batch: Any, device: torch.device, autocast: Callable[[], Any]) -> None:
    loss, _ = task.loss(model, batch.to(device), autocast)
    loss.backward()
    model.zero_grad(set_to_none=True)
