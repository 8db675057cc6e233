"""One process per device; more go through torchrun and PyTorch DDP (NCCL on GPUs, gloo on CPU). Nothing here
launches processes: torchrun describes the group in the environment and this module joins it."""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist

from ..device import pick_device


@dataclasses.dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()


def setup_distributed(device_name: str) -> tuple[Ranks, torch.device]:
    """Single process, or the process group that torchrun describes in the environment."""
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


def rank_seed(seed: int, rank: int, step: int) -> int:
    """A seed of its own for each DDP rank (rank 0 keeps train.seed), so ranks do not draw identical dropout."""
    return seed + 1_000_003 * rank + step


def gather_rng(ranks: Ranks, device: torch.device) -> dict[str, torch.Tensor]:
    """Every other rank's CPU generator state, gathered (rank 0 saves them: each rank resumes exactly)."""
    if ranks.world_size == 1:
        return {}
    moved = torch.get_rng_state().to(device)
    gathered = [torch.empty_like(moved) for _ in range(ranks.world_size)]
    dist.all_gather(gathered, moved)
    return {f"rng.torch.rank{r}": t.cpu() for r, t in enumerate(gathered) if r}


def all_ranks_sum(value: float, ranks: Ranks, device: torch.device) -> float:
    """The sum of `value` over all ranks (the token count of an update, for normalising the loss)."""
    if ranks.world_size == 1:
        return value
    total = torch.tensor(value, device=device)
    dist.all_reduce(total)
    return float(total)


def broadcast_flag(flag: bool, ranks: Ranks, device: torch.device) -> bool:
    """Rank 0's decision (stop early, time is up), on every rank (on `device`: NCCL takes CUDA tensors only)."""
    return bool(broadcast_value(float(flag), ranks, device))


def broadcast_value(value: float, ranks: Ranks, device: torch.device) -> float:
    """Rank 0's number (its clock, for train.lr_clock), on every rank."""
    if ranks.world_size == 1:
        return value
    moved = torch.tensor([value], dtype=torch.float64, device=device)
    dist.broadcast(moved, src=0)
    return float(moved[0])
