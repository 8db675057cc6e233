"""Speed measures for training on CPU, kept apart so that transformer.py reads as the paper (train.cpu_speed).

The training loop applies them when it trains on CPU and `train.cpu_speed` is true (the default): `apply` to the
model, `freed_memory_kept` around the run (the allocator setting is the process's, so it is restored at the end); they
change how fast a step runs, not what it computes (dropout draws a different random stream). Each is justified by
a measurement of `benchmarks/train_step_ab.py`, which runs one step with the measure off and on, batches
interleaved, in one process (docs/experiments.md, 2 AMD EPYC cores, m30k-d256 on Multi30k, 4,500 tokens per batch):

| measure                                    | step speed-up measured          |
|--------------------------------------------|---------------------------------|
| `BitDropout`: four mask bits per draw      | 1.077 (`train_step_ab.py dropout`)   |
| `WorkspaceLinear`: logits kept across steps| 1.017 and 1.079 (`... workspace`)    |
| `keep_freed_memory`: glibc keeps freed     | 1.073 (`... malloc`)                 |
| blocks instead of returning them           |                                 |
| `bucket_rows`: bf16 products on a bounded  | 1.17 over a whole 2,400-update run   |
| set of row counts (bf16 only)              | (Intel Xeon, AMX; see below)         |

The label-smoothed loss's `reuse_logits` (training/loss.py) belongs with the workspace: it turns the logits into
their gradient in place (128 -> 97 ms for 4,693 x 8,000 logits).

`train.precision = "bf16"` (bfloat16 autocast on a CPU with native bfloat16 arithmetic, `native_bf16`) is not one
of these measures but relies on them: the workspace then holds bfloat16 logits (the projection runs in bfloat16),
the loss reduces them in float32 row chunks, and attention runs in float32 (model/transformer.py). Together: a
step 2.66x faster than float32 (`train_step_ab.py bf16`, 2 AMD EPYC cores with AVX512_BF16); with the logits
widened to a float32 (N, V) copy and bfloat16 attention it was 1.36x.

Under bf16 the products go to oneDNN, which builds (and caches, up to 1,024) one kernel per matrix shape: 0.65 ms a
call for a 4,000 x 256 x 1,024 product on a known shape, 6.3 ms on a new one (2 cores of an Intel Xeon with AMX).
Every batch brings new row counts (sentences x length), so a run kept building kernels and its cache kept growing:
the step rate fell from 8,300 to about 6,200 target tokens/s over 2,400 updates, and the process held 4.8 GB by
update 300, still growing.
`bucket_rows` pads each bf16 product's rows (zeros, sliced off after) to one of at most 16 sizes per power of two
(at most 1/16 more rows), so the shapes repeat: the rate holds (8,500) and the process stays at 1.9 GB. Float32
products (MKL, no per-shape kernels) are left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import platform
import sys
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ConfigError
from .transformer import MultiHeadAttention, Transformer

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt(3) parameters, from <malloc.h>
# glibc's starting values of both (mallopt(3): "The default value ... is 128*1024"), restored after a run: glibc has
# no call that reads a mallopt parameter back (mallinfo2 and malloc_info report usage, not settings)
MALLOC_DEFAULTS = {M_MMAP_THRESHOLD: 128 << 10, M_TRIM_THRESHOLD: 128 << 10}


def apply(model: nn.Module, *, workspace_rows: int) -> nn.Module:
    """The model's measures, on a model about to be trained on CPU: its dropout modules become `BitDropout`, its
    linear maps pad their rows to `bucket_rows` under bf16 autocast, and a
    Transformer's output projection a `WorkspaceLinear` reserved for `workspace_rows` rows (the allocator's measure,
    the process's, is scoped by `freed_memory_kept`). Returns the model
    (changed in place; parameters and state_dict keys are unchanged)."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Dropout:
                setattr(module, name, BitDropout(child.p))
        if type(module) is nn.Linear:
            module.__class__ = BucketedLinear  # the same parameters; pads rows under bf16 autocast only
        if isinstance(module, MultiHeadAttention):
            module.linear = bucketed_linear
    if isinstance(model, Transformer) and not model.config.output_bias:  # the workspace product has no bias
        weight = model.output.weight
        assert isinstance(weight, nn.Parameter), "the output projection's weight is a model parameter"
        model.output = WorkspaceLinear(weight, rows=workspace_rows)
    return model


# Dropout masks --------------------------------------------------------------------------------------------------------
def _keep_thresholds(keep: float) -> Tensor:
    """Comparison thresholds for the four int16 pieces of one non-negative int64 (63 random bits, little-endian):
    three pieces are uniform over [-32768, 32767], the most significant one over [0, 32767]."""
    t16 = min(round(keep * 65536) - 32768, 32767)  # P(piece < t16) = keep, to within 2^-17 (rounding)
    t15 = min(round(keep * 32768), 32767)  # P(piece < t15) = keep, to within 2^-16
    pieces = [t16, t16, t16, t15] if sys.byteorder == "little" else [t15, t16, t16, t16]
    return torch.tensor(pieces, dtype=torch.int16)


class BitDropout(nn.Module):
    """Inverted dropout (zero with probability p, scale the rest by 1 / (1 - p)), four mask bits per random draw.

    On CPU, torch draws a dropout mask one element at a time from its Mersenne-Twister generator through a generic
    Bernoulli sampler (MKL's vectorised sampler is only used on Intel processors): 10-15 ms for a 4,700 x 256
    activation on this project's AMD machine. Here each 64-bit draw of the same generator gives four mask bits:
    its four 16-bit pieces are compared with a threshold, so the drop probability is p to within 2^-16 (5 ms for
    the same tensor, mask and product included). Seeding and resuming go through torch's generator as before.
    On other devices (and in eval mode) it is `F.dropout`.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {p}")
        self.p = p
        self.thresholds = _keep_thresholds(1.0 - p)  # CPU only, and not a buffer (DDP would broadcast int16)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        n = x.numel()
        words = torch.empty((n + 3) // 4, dtype=torch.int64).random_()  # 63 uniform random bits each
        keep = (words.view(torch.int16).view(-1, 4) < self.thresholds).view(-1)[:n].view(x.shape)
        return x * keep.to(x.dtype).mul_(1.0 / (1.0 - self.p))

    def extra_repr(self) -> str:
        return f"p={self.p}"


def native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU computes in bfloat16 natively (the avx512_bf16 or amx_bf16 flag, Linux): where it does,
    bfloat16 matrix products run several times faster than float32 (778 against 167 GFLOP/s on 2 cores of an AMD
    EPYC with AVX512_BF16); where it does not, torch emulates them far slower than float32."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def refuse_emulated_bf16(device: torch.device, setting: str, instead: str) -> None:
    """Refuse bfloat16 arithmetic (`setting` says which option asked for it) on a CPU without native bfloat16, where
    torch would emulate it many times slower than float32; `instead` names what to use."""
    if device.type == "cpu" and not native_bf16():
        raise ConfigError(
            f"{setting} on CPU needs native bfloat16 arithmetic (the avx512_bf16 or amx_bf16 CPU flag), which this "
            f"CPU lacks: bfloat16 would run far slower than float32 here; use {instead}"
        )


def cpu_autocast_dtype() -> torch.dtype | None:
    """The dtype of the CPU autocast region we are in, None outside one (torch >= 2.4 API, older spelling kept)."""
    if hasattr(torch, "get_autocast_dtype"):
        return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None
    return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None


# The logits workspace -------------------------------------------------------------------------------------------------
_is_compiling: Callable[[], bool] = getattr(torch.compiler, "is_compiling", lambda: False)  # torch >= 2.3


def bucket_rows(n: int) -> int:
    """The row count a bf16 product of n rows is padded to: n itself up to 32, else n rounded up to a multiple of
    2^(bits(n) - 5), one of 16 sizes per power of two (at most n / 16 rows added)."""
    if n <= 32:
        return n
    step = 1 << (n.bit_length() - 5)
    return -(-n // step) * step


def bucketed_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """F.linear; under CPU bfloat16 autocast with x's rows (all dimensions but the last) padded with zeros to
    `bucket_rows` and the padded rows' outputs dropped, so that oneDNN meets a bounded set of shapes."""
    if x.device.type != "cpu" or cpu_autocast_dtype() != torch.bfloat16 or _is_compiling():
        return F.linear(x, weight, bias)  # (under torch.compile the bucket would fix the row count in the graph)
    rows = x.numel() // x.size(-1)
    padded = bucket_rows(rows)
    if padded == rows:
        return F.linear(x, weight, bias)
    flat = F.pad(x.reshape(rows, x.size(-1)), (0, 0, 0, padded - rows))
    return F.linear(flat, weight, bias)[:rows].view(*x.shape[:-1], weight.size(0))


class BucketedLinear(nn.Linear):
    """nn.Linear through `bucketed_linear` (what `apply` turns a model's linear maps into; same parameters)."""

    def forward(self, x: Tensor) -> Tensor:
        return bucketed_linear(x, self.weight, self.bias)


class _ProjectIntoWorkspace(torch.autograd.Function):
    """h (N, D) @ W^T (D, V) written into a tensor that lives across training steps."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, owner: WorkspaceLinear) -> Tensor:
        # under CPU autocast (train.precision = "bf16") the product runs in its dtype, as F.linear's would
        dtype = cpu_autocast_dtype() or h.dtype
        ctx.dtypes = (h.dtype, weight.dtype)  # the gradients go back in the inputs' own dtypes
        h, cast = h.to(dtype), weight.to(dtype)
        n, vocab = h.size(0), weight.size(0)
        rows = bucket_rows(n) if dtype == torch.bfloat16 else n  # zero rows below the real ones: zero logits
        if rows > n:
            h = F.pad(h, (0, 0, 0, rows - n))
        if owner.workspace is None or owner.workspace.numel() < rows * vocab or owner.workspace.dtype != dtype:
            # sized for the largest batch to come at once: every regrowth is a fresh block to page in
            reserved = bucket_rows(owner.rows) if dtype == torch.bfloat16 else owner.rows
            owner.workspace = h.new_empty(max(rows, reserved) * vocab)
        ctx.save_for_backward(h, cast)
        ctx.workspace, ctx.n = owner.workspace, n
        return torch.mm(h, cast.t(), out=owner.workspace[: rows * vocab].view(rows, vocab))[:n]

    @staticmethod
    def backward(ctx, grad: Tensor):
        h, weight = ctx.saved_tensors
        rows, n = h.size(0), ctx.n
        if rows > n:  # the gradient of the padded rows is zero
            if grad.data_ptr() == ctx.workspace.data_ptr() and grad.is_contiguous():
                # the loss wrote the gradient into the logits in place: below it, the padded rows' logits, zeros
                grad = ctx.workspace[: rows * grad.size(1)].view(rows, grad.size(1))
            else:
                grad = F.pad(grad, (0, 0, 0, rows - n))
        grad = grad.to(h.dtype)
        return (grad @ weight)[:n].to(ctx.dtypes[0]), (grad.t() @ h).to(ctx.dtypes[1]), None


class WorkspaceLinear(nn.Module):
    """The pre-softmax projection (no bias) writing a training batch's (N, V) logits into one tensor kept across
    steps: on CPU a fresh logits tensor costs a page fault per 4 KB every step (the projection then runs at ~70%
    of its speed into warm memory). Each training call overwrites the previous one's logits, so the caller must
    consume them before the next forward (the training loop does). Decoding and evaluation (no gradient, or not
    2-D, or not on CPU) take the ordinary path. The weight is the model's own Parameter (tied or not)."""

    def __init__(self, weight: nn.Parameter, *, rows: int) -> None:
        super().__init__()
        self.weight = weight
        self.rows = rows  # reserved when the workspace is first made (the loop's max_tokens bounds N)
        self.workspace: Tensor | None = None

    def forward(self, h: Tensor) -> Tensor:
        if h.dim() == 2 and h.device.type == "cpu" and torch.is_grad_enabled() and self.training:
            return _ProjectIntoWorkspace.apply(h, self.weight, self)  # (N, V)
        return F.linear(h, self.weight)


# The allocator --------------------------------------------------------------------------------------------------------
def keep_freed_memory() -> bool:
    """On Linux/glibc, let malloc keep and reuse freed blocks up to 32 MB instead of returning them to the OS.

    A training step allocates and frees the same activations every step; by default glibc maps each large one
    afresh, and the kernel then faults in and zeroes every 4 KB page again (about 100,000 faults per m30k-d256 step).
    With these two mallopt(3) settings the faults drop twelve-fold. The process keeps its peak memory instead of
    shrinking between steps. Returns whether applied. For the process from then on: a run scopes it with
    `freed_memory_kept`.
    """
    return _mallopt({M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 1 << 30})


@contextlib.contextmanager
def freed_memory_kept(enabled: bool = True) -> Iterator[bool]:
    """`keep_freed_memory` for the block only (when `enabled`); yields whether it was applied.

    On leaving, both thresholds go back to glibc's defaults (`MALLOC_DEFAULTS`), as the values before cannot be
    read. Two differences from a process that never called mallopt remain: a value the environment had set
    (GLIBC_TUNABLES=glibc.malloc.mmap_threshold=..., MALLOC_MMAP_THRESHOLD_) is replaced by the default, and glibc's
    dynamic mmap threshold (raised each time a mapped block is freed) stays off, as after any mallopt of these
    parameters (mallopt(3), M_MMAP_THRESHOLD): blocks over 128 KB are mapped, as at start-up.
    """
    applied = enabled and keep_freed_memory()
    try:
        yield applied
    finally:
        if applied:
            _mallopt(MALLOC_DEFAULTS)


def _mallopt(settings: dict[int, int]) -> bool:
    """Set mallopt(3) parameters on Linux/glibc; whether every one was set (False elsewhere)."""
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return all([bool(libc.mallopt(param, value)) for param, value in settings.items()])
