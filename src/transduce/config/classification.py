"""A classification run's config (tasks/classification.py trains it, decoding/classifier.py predicts with it): the
encoder's `model` section, the classification `head`, labelled-text data and the shared `train` section."""

from __future__ import annotations

from dataclasses import dataclass, field

from .bounds import check_section
from .sections import ConfigError, ModelConfig, TrainConfig

POOLINGS = ("mean", "cls", "flatten")


@dataclass(frozen=True, kw_only=True)
class HeadConfig:
    """pooling: "mean" (masked mean over real tokens), "cls" (output at a prepended class token, BOS), "flatten"
    (all max_len positions concatenated, the form of the first IMDB experiments). The head: Linear -> ReLU -> Linear."""

    pooling: str = "mean"  # "mean" (over real tokens), "cls" (a prepended class token) or "flatten" (see above)
    hidden: int = 0  # 0 = d_model
    n_classes: int = 0  # 0 = from the training labels

    def __post_init__(self) -> None:
        check_section(self, "head")  # types, finiteness and bounds.BOUNDS
        if self.pooling not in POOLINGS:
            raise ConfigError(f"head.pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")


@dataclass(frozen=True, kw_only=True)
class ClassifyDataConfig:
    train: str = ""  # training rows: .tsv (text<TAB>label) or .jsonl, plain or .gz
    valid: str = ""  # empty: hold out valid_fraction of the training rows
    test: str = ""  # test rows, a file as `train`; empty = none
    valid_fraction: float = 0.05  # without `valid`: the share of training rows held out (drawn with train.seed)
    text_field: str = "text"  # JSONL keys
    label_field: str = "label"  # the JSONL key of the label (TSV: the last column)
    vocab_size: int = 8000  # pieces of the SentencePiece vocabulary learned from the training texts
    model_type: str = "bpe"  # SentencePiece model: "bpe" or "unigram"
    lowercase: bool = False  # lowercase the text before SentencePiece
    strip_html: bool = True  # "<br />" and other tags become spaces
    max_len: int = 256  # tokens kept per text (see truncate)
    # keep the first max_len tokens ("start"), the last ("end"), or the first quarter and the last three quarters
    # ("head_tail", after Sun et al. 2019, "How to Fine-Tune BERT for Text Classification", where it did best on IMDB)
    truncate: str = "start"

    def __post_init__(self) -> None:
        check_section(self, "data")  # types, finiteness and bounds.BOUNDS
        if self.truncate not in ("start", "end", "head_tail"):
            raise ConfigError(f"data.truncate must be 'start', 'end' or 'head_tail', got {self.truncate!r}")
        if self.model_type not in ("bpe", "unigram"):
            raise ConfigError(f"data.model_type must be 'bpe' or 'unigram', got {self.model_type!r}")


@dataclass(frozen=True, kw_only=True)
class ClassifierRunConfig:
    model: ModelConfig = field(default_factory=lambda: ModelConfig(n_layers=2, d_model=128, d_ff=256, n_heads=4))
    head: HeadConfig = field(default_factory=HeadConfig)
    data: ClassifyDataConfig = field(default_factory=ClassifyDataConfig)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            lr_schedule="constant",
            peak_lr=1e-3,
            warmup_steps=100,
            label_smoothing=0.0,
            max_epochs=5,
            early_stop_metric="accuracy",
            max_tokens=16384,
        )
    )
