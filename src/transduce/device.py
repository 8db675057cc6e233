"""The device a model runs on, for training and decoding alike (both import it from here)."""

from __future__ import annotations

import torch

from .config import ConfigError


def pick_device(name: str = "auto") -> torch.device:
    """ "auto" (CUDA when present, else CPU), "cpu", "cuda", "cuda:N"; anything else, or a GPU that is not there,
    is a ConfigError (one line), not a traceback at the first tensor moved."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"unknown device {name!r} (use auto, cpu, cuda or cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {name!r}: no CUDA GPU is available on this machine (use --device cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device {name!r}: this machine has {torch.cuda.device_count()} GPU(s)")
    elif device.type != "cpu":
        raise ConfigError(f"device {name!r} is not supported (use auto, cpu, cuda or cuda:N)")
    if device.type == "cuda":
        # cuDNN's attention plans a kernel per new shape (about 10 ms of host time each in issue 16's profile;
        # decoding meets a new key length at every step): the flash and memory-efficient kernels need none.
        # train.cudnn_attention turns it back on for a training run.
        torch.backends.cuda.enable_cudnn_sdp(False)
    return device


def device_memory(device: torch.device) -> tuple[int, str]:
    """The memory a model on `device` has, in bytes, and the words for it: a GPU's own, else this machine's (0 when
    unknown: config/memory.py then refuses nothing)."""
    from .config.memory import available_memory

    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory, f"GPU {device}"
    return available_memory(), "this machine"


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, which a container or `taskset` narrows (os.cpu_count()
    where the platform has no affinity). The bound of every thread count a user gives (`serve --threads`,
    `train.num_threads`): beyond it OpenMP fails inside the library (SIGSEGV at 100,000, "Thread creation failed" at
    2,000, a MemoryError at 300) instead of saying what is wrong."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def check_threads(key: str, threads: int) -> None:
    """A thread count of `key` above the usable cores is refused in one line (0: the library's default)."""
    cores = usable_cores()
    if threads > cores:
        raise ConfigError(f"{key} = {threads} is more than the {cores} cores this process may run on (at most {cores})")
