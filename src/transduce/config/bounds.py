"""The bounds of every number a run config holds, in one table (issue 65): the sections' `__post_init__`
(sections.py, parsing.py, classification.py) and the command-line flags (cli/common.py) both read it, so a recipe,
`--set`, a run's config.json, a flag and a keyword argument of the Python API meet the same limits.

Every number must also be finite: NaN and infinity are refused for every float setting, whatever its bounds. A
setting can also be refused for what it costs, not for its value alone: memory.py estimates what a model and a batch
need before anything is allocated.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

MAX_BEAM = 64  # a beam allocates beam x sentences decoder rows: bounded so a typo cannot exhaust memory
MAX_BATCH_TOKENS = 1_000_000  # decode.batch_tokens: the source tokens decoded together
MAX_SEED = 2**32 - 1  # numpy's seed sequences and torch's generators take every seed up to here


@dataclass(frozen=True)
class Bound:
    """The values a numeric setting may take: [low, high], either end open (excluded) or absent."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is refused
    high_open: bool = False  # high itself is refused

    def holds(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self) -> str:
        """The range in words: "between 1 and 64", "above 0", "in [0, 1)", "at least 1"."""
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            if not self.low_open and not self.high_open:
                return f"between {low} and {high}"
            return f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"above {low}" if self.low_open else f"at least {low}"
        return f"below {high}" if self.high_open else f"at most {high}"


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,}" if isinstance(value, int) and abs(value) >= 10_000 else f"{value:g}"


POSITIVE = Bound(1)  # a count: 1 or more
COUNT = Bound(0)  # a count where 0 means "none", "off" or "take it from elsewhere"
ABOVE_ZERO = Bound(0.0, low_open=True)
NON_NEGATIVE = Bound(0.0)
RATE = Bound(0.0, 1.0, high_open=True)  # a probability that must leave something: dropout, label smoothing
SHARE = Bound(0.0, 1.0)
SEED = Bound(0, MAX_SEED)

# "section.key" -> its bound. A key shared by several tasks' sections (model.*, train.*, decode.*) has one bound;
# a task's section may narrow it further in its own __post_init__ (ParseDecodeConfig's max_len_a, say).
BOUNDS: dict[str, Bound] = {
    # model (sections.ModelConfig, parsing.ParserModelConfig): sizes are bounded by memory.py, not here
    "model.vocab_size": COUNT,  # 0: the tokenizer's size
    "model.n_layers": POSITIVE,
    "model.n_encoder_layers": COUNT,
    "model.n_decoder_layers": COUNT,
    "model.d_model": POSITIVE,
    "model.d_ff": POSITIVE,
    "model.n_heads": POSITIVE,
    "model.alignment_heads": COUNT,  # 0: all heads
    "model.alignment_layer": Bound(-1024, 1023),  # a decoder layer, from the last when negative (ModelConfig checks)
    "model.dropout": RATE,
    "model.attention_dropout": RATE,
    "model.activation_dropout": RATE,
    "model.max_len": Bound(2),  # EOS or BOS and one token
    "model.attention_window": Bound(0, 2**31 - 1),  # past the longest sequence a window is full attention
    "model.pad_id": COUNT,
    "model.bos_id": COUNT,
    "model.eos_id": COUNT,
    "model.layer_norm_eps": ABOVE_ZERO,
    # data (translation's, parsing's and classification's sections)
    "data.vocab_size": Bound(5),  # the four special pieces and one more
    "data.max_len": POSITIVE,
    "data.max_ratio": Bound(1.0),  # a longer/shorter ratio is never below 1: a bound below it drops every pair
    "data.vocab_sample": Bound(101),  # SentencePiece samples no fewer sentences (data/parallel.py MIN_VOCAB_SAMPLE)
    "data.workers": COUNT,  # 0: one per core
    "data.valid_fraction": RATE,
    # train
    "train.max_steps": POSITIVE,
    "train.max_tokens": POSITIVE,
    "train.accumulate": POSITIVE,
    "train.pad_multiple": POSITIVE,
    "train.lr_scale": ABOVE_ZERO,
    "train.peak_lr": ABOVE_ZERO,
    "train.warmup_steps": POSITIVE,
    "train.adam_beta1": RATE,
    "train.adam_beta2": RATE,
    "train.adam_eps": ABOVE_ZERO,
    "train.weight_decay": NON_NEGATIVE,
    "train.label_smoothing": RATE,
    "train.clip_norm": NON_NEGATIVE,  # 0: off
    "train.valid_every": POSITIVE,
    "train.valid_max_sentences": POSITIVE,
    "train.valid_beam": Bound(1, MAX_BEAM),
    "train.patience": COUNT,
    "train.save_every": POSITIVE,
    "train.keep_last": POSITIVE,
    "train.average_last": COUNT,
    "train.subword_sampling": RATE,
    "train.subtree_substitution": SHARE,
    "train.log_every": POSITIVE,
    "train.max_minutes": NON_NEGATIVE,  # 0: no limit
    "train.max_epochs": COUNT,
    "train.seed": SEED,
    "train.num_threads": COUNT,  # 0: torch's default
    "train.guided_alignment": NON_NEGATIVE,  # 0: off
    # decode (translation's and parsing's sections)
    "decode.beam": Bound(1, MAX_BEAM),
    "decode.alpha": Bound(0.0, 10.0),
    "decode.max_len_a": Bound(0.0, 100.0),  # outputs are cut to the model's positions in any case
    "decode.max_len_b": Bound(0, 1_000_000),
    "decode.nbest": Bound(1, MAX_BEAM),
    "decode.batch_tokens": Bound(1, MAX_BATCH_TOKENS),
    "decode.patience": Bound(0.0, 100.0),  # 0: the exact stop
    "decode.sampling_topk": COUNT,  # 0: the whole vocabulary
    "decode.sampling_topp": Bound(0.0, 1.0, low_open=True),
    "decode.temperature": Bound(0.0, 100.0, low_open=True),
    "decode.seed": SEED,
    "decode.max_open_run": COUNT,
    # head (classification)
    "head.hidden": COUNT,  # 0: d_model
    "head.n_classes": COUNT,  # 0: from the training labels
}


def check_value(key: str, value: object, *, name: str | None = None, kind: type = float) -> None:
    """Refuse `value` for the setting `key` ("decode.beam") unless it is a finite number of `kind` (int: an integer;
    float: an int or a float) within BOUNDS[key]. The message names `name` (a flag, "--beam", or a keyword argument),
    else the key."""
    shown = name or key
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{shown} must be an integer, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{shown} must be a number, got {value!r}")
    number = typing.cast(float, value)
    if not math.isfinite(number):
        raise ConfigError(f"{shown} must be a finite number, got {value!r}")
    bound = BOUNDS.get(key)
    if bound is not None and not bound.holds(number):
        raise ConfigError(f"{shown} must be {bound.describe()}, got {value!r}")


@functools.cache
def _field_types(cls: Any) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def check_section(section: Any, name: str) -> None:
    """Every field of a config section (a frozen dataclass) against its annotation (bool, int, float, str, a tuple of
    strings, or None where the annotation allows it; fields of other types are the section's own to check) and, for
    numbers, against BOUNDS["name.field"]: one check wherever the section is built (a recipe, `--set`, a run's
    config.json, the Python API)."""
    for field_name, annotation in _field_types(section.__class__):
        value = getattr(section, field_name)
        key = f"{name}.{field_name}"
        union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
        options = typing.get_args(annotation) if union else ()
        if options:
            if value is None and type(None) in options:
                continue
            annotation = next(option for option in options if option is not type(None))
        if annotation in (int, float):
            check_value(key, value, kind=annotation)
        elif annotation is bool and not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        elif annotation is str and not isinstance(value, str):
            raise ConfigError(f"{key} must be a string, got {value!r}")
        elif typing.get_origin(annotation) is tuple and typing.get_args(annotation)[:1] == (str,):
            if not (isinstance(value, tuple) and all(isinstance(item, str) for item in value)):
                raise ConfigError(f"{key} must be a list of strings, got {value!r}")
