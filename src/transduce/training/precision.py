"""train.precision: which arithmetic the updates run in, and how "auto" decides on a CPU.

On CUDA "auto" is bf16 autocast (with TF32). On a CPU without native bfloat16 (no avx512_bf16 / amx_bf16 flag) it is
float32: there torch emulates bfloat16 far slower. On a CPU with it, how much bf16 pays depends on the model and the
machine (2.66x the step speed for multi30k's model on one AMD EPYC; the demo's 0.7M-parameter model 1.3x in the trial
on the same kind of CPU), so "auto" times a few forward and backward passes of the run's own model on its own first
batches in each mode and keeps bf16 where it is clearly faster (BF16_MARGIN), float32 otherwise. The trial leaves no
trace: the weights are untouched, the gradients and the random state restored. The pick is stored in every
checkpoint, so a resumed run keeps it whatever the machine's load then.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..config import ConfigError, TrainConfig
from ..model import cpu_speed

TRIAL_BATCHES = 3  # timed batches per mode, after one untimed warm-up batch each
BF16_MARGIN = 0.85  # bf16 rounds, so it is picked only where it clearly pays: at most 0.85x float32's time per batch


def check_precision(tc: TrainConfig, device: torch.device) -> None:
    """Refuse bf16 on a CPU without native bfloat16 arithmetic, where it would run many times slower than float32."""
    if tc.precision == "bf16" and device.type == "cpu" and not cpu_speed.native_bf16():
        raise ConfigError(
            "train.precision = 'bf16' on CPU needs native bfloat16 arithmetic (the avx512_bf16 or amx_bf16 CPU "
            "flag), which this CPU lacks: bfloat16 would run far slower than float32 here; use 'fp32' or 'auto'"
        )


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


def resolve_cpu_auto(saved: str | None, resumed: bool, trial: Callable[[], tuple[float, float]]) -> tuple[str, str]:
    """The precision of a CPU run with train.precision = 'auto' on a CPU with native bf16, and the line to log.

    `saved`: the pick stored in the run's checkpoint (None when there is none); `resumed`: whether the run already
    trained (a run saved before picks were stored trained in float32, the earlier meaning of 'auto' on CPU);
    `trial()`: seconds per batch in (fp32, bf16)."""
    if saved in ("fp32", "bf16"):
        return saved, f"train.precision 'auto': {saved}, as picked when this run started"
    if resumed:
        return "fp32", "train.precision 'auto': fp32, as this run was trained so far"
    fp32, bf16 = trial()
    pick = "bf16" if bf16 <= BF16_MARGIN * fp32 else "fp32"
    return pick, (
        f"train.precision 'auto': {pick} (a trial on the first batches: {fp32:.3f} s per batch in float32, "
        f"{bf16:.3f} s in bfloat16); set train.precision to fix it"
    )


def time_modes(task: Any, model: torch.nn.Module, tc: TrainConfig, device: torch.device) -> tuple[float, float]:
    """Seconds per forward and backward pass of `model` over the run's first batches, in float32 and in bf16
    autocast (the modes alternate, the median of each counts). Weights, gradients and random state are as before."""
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
    return float(np.median(seconds["fp32"])), float(np.median(seconds["bf16"]))


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
