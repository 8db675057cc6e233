"""What a model and a training batch need in memory, estimated from the settings alone, before anything is allocated
(issue 65: `model.n_layers = 99999999999` or `train.max_tokens = 10**12` used to grow until the kernel killed the
process, or someone else's).

The estimate is a lower bound, so that it refuses only what cannot fit: the parameters counted are the embeddings,
the positional tables and the layers' weights and biases (not the parser's word pointer, nor the LayerNorms' final
ones), at 4 bytes each (float32, as every model is built); training adds their gradients and Adam's two moments
(12 bytes more each) and a batch of `train.max_tokens` tokens per side, counting per token and layer only its
d_model-wide input, the attention's query, key, value and output and the feed-forward layer's hidden values, and the
target's logits, at 2 bytes a value (the least any precision stores). A setting whose estimate exceeds the memory the
process can still take (`available_memory`: the machine's, less what is in use, within `ulimit -v` and a container's
limit; or the GPU's that trains) is refused in one line naming the setting that costs the most and the estimate.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from .errors import ConfigError

PARAMETER_BYTES = 4  # float32 weights
TRAINING_BYTES = 16  # a weight, its gradient, Adam's two moments
ACTIVATION_BYTES = 2  # bf16: the least a saved activation takes


@dataclasses.dataclass(frozen=True)
class Shape:
    """The numbers the estimate reads, with the settings they come from."""

    vocab: int  # model.vocab_size, else the data's (training fills model.vocab_size in from the tokenizer)
    d_model: int
    d_ff: int
    encoder_layers: int
    decoder_layers: int  # 0: an encoder only (classification)
    max_len: int
    tied: bool
    learned: bool = False  # learned positions are parameters; sinusoidal ones a table that is not trained
    head: int = 0  # the classification head's weights
    tokens: int = 0  # a training batch's tokens per side; 0: no training
    # field -> its setting where not the usual one (_SETTINGS): "data.vocab_size", "model.n_encoder_layers"
    names: tuple[tuple[str, str], ...] = ()

    def parameters(self) -> int:
        d, f = self.d_model, self.d_ff
        attention = 4 * d * d + 4 * d  # the query, key, value and output projections with their biases (§3.2.2)
        feed_forward = 2 * d * f + f + d  # §3.3
        encoder = self.encoder_layers * (attention + feed_forward + 4 * d)  # and two LayerNorms
        decoder = self.decoder_layers * (2 * attention + feed_forward + 6 * d)  # and three LayerNorms
        matrices = 1 if self.decoder_layers == 0 or self.tied else 3  # tied: one for both inputs and the output
        positions = self.positions() if self.learned else 0
        return matrices * self.vocab * d + positions + encoder + decoder + self.head

    def positions(self) -> int:
        """The positional tables' values: one (max_len, d_model) table per stack (§3.5)."""
        return (1 if self.decoder_layers == 0 else 2) * self.max_len * self.d_model

    def batch_bytes(self) -> int:
        """A training batch's saved activations and logits (see the module's docstring)."""
        per_token = (self.encoder_layers + self.decoder_layers) * (5 * self.d_model + self.d_ff)
        logits = self.vocab if self.decoder_layers else 0
        return self.tokens * (per_token + logits) * ACTIVATION_BYTES

    def parts(self) -> dict[str, int]:
        """Bytes per part: parameters (and the sinusoidal tables), then (training) gradients with Adam's moments, and a
        batch."""
        n = self.parameters()
        weights = (n + (0 if self.learned else self.positions())) * PARAMETER_BYTES
        if not self.tokens:
            return {"parameters": weights}
        return {
            "parameters": weights,
            "gradients and Adam's moments": n * (TRAINING_BYTES - PARAMETER_BYTES),
            f"a batch of {self.tokens:,} tokens": self.batch_bytes(),
        }

    def total(self) -> int:
        return sum(self.parts().values())


def machine_memory() -> int:
    """This machine's physical memory in bytes (POSIX sysconf); 0 where it cannot be read (nothing is refused)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not a POSIX system
        return 0


def available_memory() -> int:
    """The memory this process can still take, in bytes: the least of the machine's physical memory, what the
    system reports available (MemAvailable: free and reclaimable), a cgroup's limit (a container's) less its use, and
    the address-space limit (`ulimit -v`) less what the process maps already. 0 where none can be read."""
    known = [n for n in (machine_memory(), _meminfo_available(), _cgroup_room(), _address_space_room()) if n > 0]
    return min(known, default=0)


def _meminfo_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _cgroup_room() -> int:
    """A cgroup v2 limit less its current use (0: none, or not readable)."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return 0
        return max(1, int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        return 0


def _address_space_room() -> int:
    """RLIMIT_AS (`ulimit -v`) less the process's mapped size (VmSize); 0 where there is no such limit."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft == resource.RLIM_INFINITY:
            return 0
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return max(1, soft - int(line.split()[1]) * 1024)
        return soft
    except (ImportError, OSError, ValueError, IndexError):
        return 0


def size(n: float) -> str:
    """Bytes in binary units: 512 B, 3.2 GiB, 1.7e+04 PiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.3g} PiB"


def model_shape(model: Any, *, vocab: int = 0, decoder: bool = True, head: int = 0, tokens: int = 0) -> Shape:
    """The Shape of a ModelConfig (`vocab`, the data's vocab_size, when the model's is still 0)."""
    names = [("vocab", "data.vocab_size")] if not model.vocab_size else []
    names += [(f"{side}_layers", f"model.n_{side}_layers") for side in ("encoder", "decoder")]
    names = [(f, n) for f, n in names if f == "vocab" or getattr(model, f"n_{f}") is not None]
    return Shape(
        vocab=model.vocab_size or vocab,
        d_model=model.d_model,
        d_ff=model.d_ff,
        encoder_layers=model.encoder_layers,
        decoder_layers=model.decoder_layers if decoder else 0,
        max_len=model.max_len,
        tied=model.tie_embeddings,
        learned=model.positional == "learned",
        head=head,
        tokens=tokens,
        names=tuple(names),
    )


# the settings a Shape's fields come from, for naming the one that costs the most
_SETTINGS = {
    "vocab": "model.vocab_size",
    "d_model": "model.d_model",
    "d_ff": "model.d_ff",
    "encoder_layers": "model.n_layers",
    "decoder_layers": "model.n_layers",
    "max_len": "model.max_len",
    "tokens": "train.max_tokens",
    "head": "head.hidden",
}
_MODEST = {"vocab": 8000, "d_model": 512, "d_ff": 2048, "encoder_layers": 6, "decoder_layers": 6, "max_len": 1024,
           "head": 512 * 2048}  # fmt: skip


def costliest(shape: Shape) -> str:
    """The field whose value costs the most: the one that, set to a modest value (the base model's, 4,096 tokens),
    lowers the estimate the most."""
    modest = {**_MODEST, "tokens": 4096 if shape.tokens else 0}
    savings = {
        name: shape.total() - dataclasses.replace(shape, **{name: min(getattr(shape, name), modest[name])}).total()
        for name in modest
        if name != "decoder_layers" or shape.decoder_layers
    }
    return max(savings, key=lambda name: savings[name])


def check_fits(shape: Shape, *, available: int = 0, where: str = "") -> None:
    """Refuse a Shape whose estimate exceeds `available` bytes (default: the memory this process can still take,
    `available_memory`), in one line naming the costliest setting, the estimate and its parts."""
    available = available or available_memory()
    total = shape.total()
    if not available or total <= available:
        return
    field = costliest(shape)
    setting = {**_SETTINGS, **dict(shape.names)}[field]
    # the head's weights come from two settings: `names` holds the costlier one with its value (`with_head_setting`)
    shown = setting if field == "head" else f"{setting} = {getattr(shape, field):,}"
    parts = ", ".join(f"{name} {size(n)}" for name, n in shape.parts().items())
    purpose = "training" if shape.tokens else "the model"
    raise ConfigError(
        f"{shown}: {purpose} needs at least {size(total)} of memory ({parts}), more "
        f"than {where or 'this machine'}'s {size(available)} available"
    )


def run_shape(config: Any) -> Shape:
    """The training Shape of a run config (translation's, parsing's or classification's), before the data is read:
    the vocabulary is model.vocab_size, else data.vocab_size (0, not counted, when a prepared folder or an existing
    tokenizer gives it)."""
    data = config.data
    given = getattr(data, "prepared", "") or getattr(data, "tokenizer", "")
    vocab = 0 if given else getattr(data, "vocab_size", 0)
    head = getattr(config, "head", None)
    if head is None:
        return model_shape(config.model, vocab=vocab, tokens=config.train.max_tokens)
    shape = model_shape(
        config.model,
        vocab=vocab,
        decoder=False,
        head=head_weights(config.model, head, data.max_len),
        tokens=config.train.max_tokens,
    )
    return with_head_setting(shape, config.model, head, data.max_len)


def head_weights(model: Any, head: Any, max_len: int) -> int:
    """The classification head's two matrices (model/classifier.py): the first's input is d_model wide, or every
    position's state side by side with "flatten" pooling; the second gives n_classes (at least 2) logits."""
    width = model.d_model * (max_len + (head.pooling == "cls")) if head.pooling == "flatten" else model.d_model
    hidden = head.hidden or model.d_model
    return width * hidden + hidden * max(2, head.n_classes)


def with_head_setting(shape: Shape, model: Any, head: Any, max_len: int) -> Shape:
    """`shape` naming the head's costlier setting, with its value, for a refusal (head.hidden or head.n_classes)."""
    width = model.d_model * (max_len + (head.pooling == "cls")) if head.pooling == "flatten" else model.d_model
    hidden = head.hidden or model.d_model
    name = "head.hidden" if width * hidden >= hidden * head.n_classes else "head.n_classes"
    value = head.hidden if name == "head.hidden" else head.n_classes
    return dataclasses.replace(shape, names=(*shape.names, ("head", f"{name} = {value:,}")))


def decoding_batch_tokens(model: Any, *, beam: int, members: int, batch_tokens: int, available: int) -> int:
    """decode.batch_tokens, lowered where a batch's search could not fit in half of `available` bytes (0: as given;
    issue 76: `--beam 64 --batch-tokens 1000000`, both allowed, grew past 5 GB into a traceback). Per source token
    of a batch, each of the beam's rows (of each ensemble member) keeps every decoder layer's keys and values over
    the source (cross-attention) and over at least as many target positions (self-attention), 4 bytes a value: a
    lower bound, so half the memory is the budget. A batch always takes one sentence, however long."""
    if not available:
        return batch_tokens
    per_token = beam * members * 2 * 2 * model.d_model * model.decoder_layers * PARAMETER_BYTES
    return max(1, min(batch_tokens, available // (2 * per_token)))
