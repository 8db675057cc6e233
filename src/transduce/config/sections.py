"""The shared sections of every run's config, and translation's: frozen dataclasses whose defaults are the paper's
base model (the paper's §3-§5).

`ModelConfig` and `TrainConfig` are every task's `model` and `train` sections; a translation run is one `Config` =
model + data + train + decode. The other tasks' run configs are in parsing.py and classification.py; loading.py
reads recipes and run directories into them.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .bounds import check_section, check_value
from .errors import ConfigError

ACTIVATIONS = ("relu", "swish", "gelu")  # model.activation's values
ALIGNMENT_LINKS = ("pieces", "target", "both", "grow")  # model.alignment_links's values (documents/words.py reads them)


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """The Transformer's shape. Defaults are the paper's base model (Table 3, row "base").

    `vocab_size` 0 means "take it from the tokenizer" (training fills it in before building the model).
    `layer_norm_eps`: LayerNorm divides by sqrt(variance + eps) (torch.nn.LayerNorm); the paper does not say.
    """

    vocab_size: int = 0  # the shared source/target vocabulary; 0 = the tokenizer's size (filled in by training)
    n_layers: int = 6  # N: layers of the encoder and of the decoder (§3.1)
    n_encoder_layers: int | None = None  # None: n_layers
    n_decoder_layers: int | None = None  # None: n_layers
    d_model: int = 512  # the width of the embeddings and of every sub-layer's output (§3.1)
    d_ff: int = 2048  # the inner width of the position-wise feed-forward networks (§3.3)
    n_heads: int = 8  # h: attention heads; d_model must be divisible by it (d_k = d_model / h, §3.2.2)
    dropout: float = 0.1  # P_drop: on every sub-layer's output and on the embedding sums (§5.4)
    attention_dropout: float = 0.0  # not in the paper; fairseq's attention_dropout, off by default
    activation_dropout: float = 0.0  # not in the paper; fairseq's: dropout after the FFN's ReLU, off by default
    max_len: int = 1024  # the most positions a sequence may have, EOS or BOS included (the positional encodings' table)
    norm_first: bool = False  # False = the paper's post-LN: LayerNorm(x + Dropout(Sublayer(x)))
    positional: str = "sinusoidal"  # or "learned" (Table 3 row E)
    attention_window: int | None = None  # r of Table 1's restricted self-attention; None = full
    tie_embeddings: bool = True  # one matrix: encoder input, decoder input, pre-softmax projection (§3.4)
    pad_id: int = 0  # the padding token's id: a zero embedding row (padding_idx); padded positions are masked
    bos_id: int = 2  # the decoder's first input (BOS; a Marian model starts from its pad row); set from the tokenizer
    eos_id: int = 3  # end of sentence: ends every source and every output; set from the tokenizer
    layer_norm_eps: float = 1e-5  # LayerNorm's eps, in sqrt(variance + eps) (torch's default; the paper does not say)
    activation: str = "relu"  # the FFN's non-linearity: "relu" (Eq. 2's max(0, x)), "swish" (x sigmoid(x), Marian's)
    # or "gelu" (exact, with erf)
    scale_embeddings: bool = True  # multiply token embeddings by sqrt(d_model) (§3.4); false: by 1 (a Marian option)
    output_bias: bool = False  # a bias on the pre-softmax projection (Marian's final_logits_bias); §3.4 has none
    alignment_layer: int = -1  # the decoder layer whose cross-attention gives word alignments (model/alignment.py),
    # from 0 (negative: from the last); -1, the last, with all heads, aligned best on gold links (BENCHMARKS.md)
    alignment_heads: int = 0  # how many of that layer's heads, the first ones, are averaged (CTranslate2's
    # convention); 0: all; guided alignment trains 1 (Garg et al. 2019)
    full_context_alignment: bool = False  # read (and train) those weights in a second decoder pass that sees the
    # whole target, no future mask (Garg et al. 2019's full target context; fairseq's and OpenNMT's option of the
    # name): links from the model only (a CTranslate2 export cannot give them)
    alignment_links: str = "pieces"  # how word links are read from those weights (documents/words.py): "pieces",
    # each target piece's word to its heaviest source piece's; over word masses, "target", each target word to its
    # heaviest source word; "both", only links also the source word's heaviest; "grow", the two directions joined
    # by grow-diag-final-and (docs/translation.md#word-alignments)
    alignment_head: bool = False  # an attention of its own gives the word alignments (model/alignment.py): its query
    # from the alignment layer's decoder state and the target token, its keys from the encoder output and the source
    # token; trained by guided alignment only, on detached inputs, so it never changes a translation (alignment_heads
    # is then unused; a CTranslate2 export cannot give its links)

    def __post_init__(self) -> None:
        check_section(self, "model")  # types, finiteness and bounds.BOUNDS (sizes: memory.py)
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"model.activation must be one of {', '.join(ACTIVATIONS)}, got {self.activation!r}")
        if self.positional not in ("sinusoidal", "learned"):
            raise ConfigError(f"model.positional must be 'sinusoidal' or 'learned', got {self.positional!r}")
        for name in ("pad_id", "bos_id", "eos_id"):
            if not 0 <= getattr(self, name) < (self.vocab_size or getattr(self, name) + 1):
                raise ConfigError(f"model.{name} ({getattr(self, name)}) must be a token id below vocab_size")
        if self.eos_id in (self.pad_id, self.bos_id):
            raise ConfigError(f"model.eos_id ({self.eos_id}) must differ from model.pad_id and model.bos_id")
        if not -self.decoder_layers <= self.alignment_layer < self.decoder_layers:
            raise ConfigError(
                f"model.alignment_layer ({self.alignment_layer}) must name one of the {self.decoder_layers} decoder "
                f"layers (0 to {self.decoder_layers - 1}, or -1 to -{self.decoder_layers} from the last)"
            )
        if self.alignment_links not in ALIGNMENT_LINKS:
            raise ConfigError(
                f"model.alignment_links must be one of {', '.join(ALIGNMENT_LINKS)}, got {self.alignment_links!r}"
            )
        if self.alignment_heads > self.n_heads:
            raise ConfigError(
                f"model.alignment_heads ({self.alignment_heads}) is more than the model's {self.n_heads} heads"
            )

    @property
    def encoder_layers(self) -> int:
        return self.n_layers if self.n_encoder_layers is None else self.n_encoder_layers

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def d_k(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def base(cls, *, vocab_size: int, **overrides) -> ModelConfig:
        """Table 3 "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1 (63.08M parameters with V=37000)."""
        return cls(vocab_size=vocab_size, **overrides)

    @classmethod
    def big(cls, *, vocab_size: int, **overrides) -> ModelConfig:
        """Table 3 "big": N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3 (214.25M parameters with V=37000)."""
        settings: dict[str, Any] = {"d_model": 1024, "d_ff": 4096, "n_heads": 16, "dropout": 0.3, **overrides}
        return cls(vocab_size=vocab_size, **settings)


MAX_JOIN = 16  # data.corpora's join: at most this many pairs a unit
# a tag: <NAME>, >>NAME<< (Marian's form) or __NAME__ (fairseq's), NAME of ASCII letters, digits, _ and -: a form that
# words of plain text do not take by accident (issue 76: the tag `man` was a piece of "woman")
TAG_FORM = re.compile(r"<[A-Za-z0-9][A-Za-z0-9_-]*>|>>[A-Za-z0-9][A-Za-z0-9_-]*<<|__[A-Za-z0-9][A-Za-z0-9_-]*__")


@dataclass(frozen=True, kw_only=True)
class CorpusConfig:
    """One training corpus of several (`[[data.corpora]]`): its files, its share of each epoch and its tag.

    `weight`: each epoch draws weight x (its pairs) of this corpus: 2 takes every pair twice, 0.5 a seeded half, so a
    small corpus can be upsampled and a big one downsampled. `tag` (e.g. `<bt>`, `<2de>`): one token of the
    vocabulary (a SentencePiece control symbol: put in by id, never read from text) put before every source of
    this corpus; `translate --tag` puts it before the input at inference."""

    prefix: str  # the corpus's files: PREFIX.{src} and PREFIX.{tgt} (plain or .gz)
    src: str = ""  # its source suffix; empty: data.src
    tgt: str = ""  # its target suffix; empty: data.tgt
    weight: float = 1.0  # each epoch draws weight x its size of its pairs (> 0)
    tag: str = ""  # a token put before each of its sources; empty: none
    # word links of its pairs for guided alignment (train.guided_alignment): a file of Pharaoh links, one line per
    # pair (`transduce align` writes one); empty: none (docs/training.md#guided-alignment)
    align: str = ""
    # 1: each pair is one training pair; N >= 2: runs of 2 to N consecutive pairs (seeded) joined into one, a space
    # between the sentences: several sentences a unit, as `translate --split sentences` sends a paragraph the
    # splitter cannot cut (docs/training.md#several-sentences-a-unit-joined-pairs)
    join: int = 1

    def __post_init__(self) -> None:
        if not self.prefix:
            raise ConfigError("data.corpora: every corpus needs a prefix (PREFIX.src, PREFIX.tgt)")
        check_corpus(self.weight, self.tag, f"data.corpora ({self.prefix})")
        if isinstance(self.join, bool) or not isinstance(self.join, int) or not 1 <= self.join <= MAX_JOIN:
            raise ConfigError(f"data.corpora ({self.prefix}): join must be a whole number from 1 to {MAX_JOIN}, "
                              f"got {self.join!r}")  # fmt: skip
        if self.join > 1 and self.align:
            raise ConfigError(
                f"data.corpora ({self.prefix}): join and align do not go together (the links are of single pairs); "
                "list the corpus twice: once with its links, once joined"
            )


def check_corpus(weight: float, tag: str, what: str) -> None:
    """A corpus's weight (finite, > 0) and tag (`check_tag`)."""
    if not (weight > 0 and math.isfinite(weight)):
        raise ConfigError(f"{what}: the weight must be a finite number above 0, got {weight}")
    check_tag(tag, f"{what}: tag")


def check_tag(tag: str, what: str) -> None:
    """A tag is empty (none) or `TAG_FORM`, up to 32 characters: `<2de>`, `<bt>`, `>>fr<<`, `__de__`."""
    if tag and (not TAG_FORM.fullmatch(tag) or len(tag) > 32):
        raise ConfigError(
            f"{what} {tag!r}: a tag is <NAME>, >>NAME<< or __NAME__ (NAME: ASCII letters, digits, _ and -), up to 32 "
            "characters"
        )


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where the parallel text is and how it becomes token ids (the paper's §5.1: one shared subword vocabulary).

    `train`, `valid`, `test` are file prefixes: PREFIX.{src} and PREFIX.{tgt}, optionally gzipped. More training
    corpora, each with its weight and tag, are `corpora` (`[[data.corpora]]` tables): after `train`'s pairs (weight
    1, no tag), if it is set, or alone.
    """

    train: str = ""  # training text: the file prefix of PREFIX.{src} and PREFIX.{tgt} (plain or .gz)
    # more training corpora, after `train`'s (or alone): [[data.corpora]] tables of prefix, src, tgt, weight, tag
    # (CorpusConfig; docs/training.md#several-corpora-weights-and-tags)
    corpora: tuple[CorpusConfig, ...] = ()
    valid: str = ""  # validation text, a file prefix as `train`; empty = no validation
    test: tuple[str, ...] = ()  # test sets, file prefixes as `train`: encoded and kept beside the prepared data
    valid_tag: str = ""  # a tag (see corpora) put before every validation source, and before validation's inputs
    src: str = "en"  # the source side's file suffix (PREFIX.en)
    tgt: str = "de"  # the target side's file suffix (PREFIX.de)
    vocab_size: int = 8000  # pieces of the joint SentencePiece vocabulary that both sides share (§5.1)
    model_type: str = "bpe"  # SentencePiece model: "bpe" or "unigram"
    lowercase: bool = False  # lowercase the text before SentencePiece (the tokenizer keeps the setting for later input)
    split_digits: bool = False  # SentencePiece: every digit its own piece
    max_len: int = 256  # training pairs longer than this (in tokens, either side) are dropped
    max_ratio: float = 9.0  # training pairs with a longer/shorter length ratio beyond this are dropped (fairseq)
    errors: str = "strict"  # invalid UTF-8: "strict" refuses naming the line, "replace" substitutes U+FFFD
    # the vocabulary is learned from a seeded random sample of this many training sentences (both sides counted;
    # all of them when the corpus is smaller): SentencePiece's advice for large corpora, and bounded memory
    vocab_sample: int = 2_000_000
    workers: int = 0  # processes that encode the corpus; 0 = one per core (os.cpu_count()). Same cache either way
    # a folder made by `transduce prepare`: training reads it (memory-mapped, never writes it) instead of preparing
    # RUN/data; the keys above are then taken from the folder (and recorded in the run's config.json)
    prepared: str = ""
    # an existing vocabulary: a SentencePiece .model file, or a folder holding tokenizer.model (a run, a prepared
    # data folder); the corpus is encoded with it and no vocabulary is learned (the keys vocab_size, model_type,
    # lowercase, split_digits, vocab_sample are then the tokenizer's). Its contents are in the cache key, not its path
    tokenizer: str = ""

    def __post_init__(self) -> None:
        check_section(self, "data")  # types, finiteness and bounds.BOUNDS
        if self.model_type not in ("bpe", "unigram"):
            raise ConfigError(f"data.model_type must be 'bpe' or 'unigram', got {self.model_type!r}")
        if self.errors not in ("strict", "replace"):
            raise ConfigError(f"data.errors must be 'strict' or 'replace', got {self.errors!r}")
        check_tag(self.valid_tag, "data.valid_tag")
        if self.valid_tag and not self.valid:
            raise ConfigError("data.valid_tag tags the validation sources, but data.valid is empty")
        trained = [c.tag for c in self.corpora if c.tag]
        if self.valid_tag and self.valid_tag not in trained:
            has = f"theirs: {', '.join(dict.fromkeys(trained))}" if trained else "none has a tag"
            raise ConfigError(
                f"data.valid_tag {self.valid_tag!r} is the tag of no training corpus (data.corpora; {has}): the "
                "model would be validated on a tag it never trained with"
            )

    @property
    def tags(self) -> tuple[str, ...]:
        """The corpora's tags and data.valid_tag, each once, in order: the vocabulary's tag tokens (tokenizer.py)."""
        return tuple(dict.fromkeys(t for t in (*(c.tag for c in self.corpora), self.valid_tag) if t))


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """The training recipe. Defaults: the paper's (§5.3 Adam and Eq. 3, §5.4 label smoothing 0.1)."""

    max_steps: int = 100_000  # total optimizer updates; resuming counts from the saved step
    max_tokens: int = 4096  # per micro-batch, per side, padded tokens
    accumulate: int = 1  # micro-batches per update (and per rank)
    pad_multiple: int = 1  # pad training batches' lengths up to a multiple of this (8 or 16: bounded GPU shapes)
    lr_schedule: str = "noam"  # "noam" = Eq. 3 x lr_scale; "inverse_sqrt" (fairseq's), "constant" or "linear"
    # (linear: warm-up to peak_lr, then down to 0 at max_steps)
    lr_clock: bool = False  # linear: also decay with the wall clock, reaching 0 at max_minutes if that comes first
    # (the hour ends with the rate at 0 however fast the machine is; the price: a resumed run is not bit-identical)
    lr_scale: float = 1.0  # noam: Eq. 3's rate times this
    peak_lr: float = 5e-4  # inverse_sqrt, constant and linear: the rate reached at the end of the warm-up
    warmup_steps: int = 4000  # updates of rising rate (Eq. 3's warmup_steps; the others warm up linearly)
    adam_beta1: float = 0.9  # Adam's beta1 (§5.3)
    adam_beta2: float = 0.98  # Adam's beta2 (§5.3)
    adam_eps: float = 1e-9  # Adam's epsilon (§5.3)
    weight_decay: float = 0.0  # Adam's weight decay (an L2 term in the gradient); 0 = none, as in the paper
    label_smoothing: float = 0.1  # eps_ls of §5.4: the probability mass spread over the vocabulary
    clip_norm: float = 0.0  # 0 = off, as in the paper
    valid_every: int = 1000  # validate every this many updates (and at the end)
    valid_bleu: bool = True  # translation: validation also decodes and scores BLEU, not only the loss
    valid_max_sentences: int = 500  # validation decodes (BLEU, F1) only the first this many sentences
    valid_beam: int = 1  # the beam of validation's decoding (1 = greedy, for speed)
    early_stop_metric: str = "loss"  # "loss", "bleu" (translation), "accuracy" (classification), "f1" (parsing)
    patience: int = 0  # validations without improvement before stopping; 0 = never stop early
    save_every: int = 1000  # save a checkpoint every this many updates (and at the end)
    keep_last: int = 5  # checkpoints kept in the run directory; older ones are removed
    average_last: int = 0  # at the end, average the last N kept checkpoints into RUN/averaged.safetensors (0: no)
    subword_sampling: float = 0.0  # SentencePiece sampling of the training text, drawn anew each epoch (translation:
    # both sides; parsing: the source words) (BPE-dropout rate for a BPE tokenizer, the smoothing alpha for a unigram
    # one; Kudo 2018, Provilkov et al. 2020)
    subtree_substitution: float = 0.0  # parsing: the share of training trees in which, each epoch, one constituent is
    # replaced by one of the same label from a training tree (its words and its subtree; Shi et al. 2021, "SUB2")
    log_every: int = 50  # log the training loss and speed every this many updates
    max_minutes: float = 0.0  # stop (and save) after this much wall-clock time; 0 = no limit
    max_epochs: int = 0  # stop after this many passes over the training data; 0 = no limit
    seed: int = 1  # seeds the initialisation, the batch order and dropout (a resumed run continues exactly)
    device: str = "auto"  # "auto", "cpu", "cuda", "cuda:1", ...
    compile: bool = False  # torch.compile the model (as `transduce train --compile`)
    # CUDA: let scaled_dot_product_attention use cuDNN's kernel, for the whole run (its validation decoding too).
    # Off by default: cuDNN plans a kernel for every new (batch, length) shape (about 10 ms of host time each, issue
    # 16's profile), which held the first 100 updates of a Multi30k run on an H200 to 1/18 of the steady speed
    # (BENCHMARKS.md); the flash and memory-efficient kernels need no plan. Ignored on CPU.
    cudnn_attention: bool = False
    num_threads: int = 0  # torch intra-op threads on CPU; 0 = torch's default
    # at most the cores this process may run on (its CPU affinity): more is refused at the start, and on resume
    cpu_speed: bool = True  # on CPU, apply model/cpu_speed.py (faster dropout masks, logits workspace, malloc)
    # "auto": bf16 autocast on CUDA; on a CPU with native bfloat16 arithmetic (AVX512_BF16 or AMX: 2.66x the step
    # speed on one such CPU, BENCHMARKS.md) bf16 if a short trial on the run's first batches finds it clearly faster
    # (training/precision.py; the pick is logged and kept on resume), else float32; "bf16": bf16 autocast, on CPU only
    # where it is native; "fp32": never autocast
    precision: str = "auto"
    # fine-tuning (translation): a run directory, or a weights file inside one, whose weights the new run starts
    # from (RUN/averaged.safetensors, else best, else the newest checkpoint), with its model settings (dropout may
    # change, shapes may not) and its tokenizer; the optimizer, schedule, step and early stopping start afresh.
    # Empty: train from a random initialisation (docs/training.md#fine-tuning-a-trained-model)
    init_from: str = ""
    # translation: the weight of guided alignment's loss (Garg et al. 2019): the cross-entropy between the alignment
    # attention (model.alignment_layer, model.alignment_heads) and the word links of data.corpora's align files,
    # added to the loss; 0 = off. Garg et al.'s setting: 0.05 with alignment_heads 1 (docs/training.md#guided-alignment)
    guided_alignment: float = 0.0
    # translation, fine-tuning: train model.alignment_head alone, every other weight kept as train.init_from's run
    # has it (the translations stay byte for byte that run's); needs train.init_from, model.alignment_head and
    # train.guided_alignment; validation cannot see the head, so the newest is kept as best and patience never ends
    # the run
    alignment_only: bool = False

    def __post_init__(self) -> None:
        check_section(self, "train")  # types, finiteness and bounds.BOUNDS
        if self.lr_schedule not in ("noam", "inverse_sqrt", "constant", "linear"):
            raise ConfigError(
                f"train.lr_schedule must be 'noam', 'inverse_sqrt', 'constant' or 'linear', got {self.lr_schedule!r}"
            )
        if self.precision not in ("auto", "fp32", "bf16"):
            raise ConfigError(f"train.precision must be 'auto', 'fp32' or 'bf16', got {self.precision!r}")
        if self.early_stop_metric not in ("loss", "bleu", "accuracy", "f1"):
            raise ConfigError(
                f"train.early_stop_metric must be 'loss', 'bleu', 'accuracy' or 'f1', got {self.early_stop_metric!r}"
            )
        if self.average_last > self.keep_last:
            raise ConfigError(
                f"train.average_last must be between 0 and train.keep_last ({self.keep_last}), got {self.average_last}"
            )
        if self.guided_alignment and self.compile:
            # the alignment weights are recorded by a hook put on for each loss (model/alignment.py): under
            # torch.compile every change of the model's hooks is a new graph
            raise ConfigError("train.guided_alignment does not run with train.compile (--compile); turn one off")
        if self.alignment_only and not self.guided_alignment:
            raise ConfigError(
                "train.alignment_only trains the alignment head by guided alignment: set train.guided_alignment"
            )
        if self.lr_clock and (self.lr_schedule != "linear" or self.max_minutes <= 0):
            raise ConfigError(
                "train.lr_clock needs train.lr_schedule = 'linear' and a train.max_minutes budget to decay over, "
                f"got lr_schedule {self.lr_schedule!r}, max_minutes {self.max_minutes}"
            )


MBR_UTILITIES = ("none", "bleu", "chrf")  # decode.mbr: off, or the sentence metric of decoding/mbr.py


@dataclass(frozen=True, kw_only=True)
class DecodeConfig:
    """Inference (the paper's §6.1): beam 4, GNMT length penalty alpha 0.6, max length = a * |x| + b with a=1, b=50."""

    beam: int = 4  # the beam size; 1 = greedy search
    alpha: float = 0.6  # the length penalty's alpha (see length_penalty)
    length_penalty: str = "gnmt"  # "gnmt": ((5+|Y|)/6)^alpha; "length": |Y|^alpha; "none"
    max_len_a: float = 1.0  # the longest output is max_len_a * |source| + max_len_b tokens
    max_len_b: int = 50  # see max_len_a
    nbest: int = 1  # hypotheses returned per input, best first (at most beam)
    batch_tokens: int = 4096  # inputs decoded together: their longest source x their count stays within this
    # Beam search's stop. 0: a sentence ends when no unfinished hypothesis can beat its finished ones (exact for the
    # beam). p > 0: also once beam x p hypotheses have finished (CTranslate2's patience; fairseq's rule at 1): fewer
    # steps, and a translation may change.
    patience: float = 0.0
    # Minimum Bayes risk: "bleu" or "chrf" returns, of the beam's finished hypotheses, the one with the highest
    # expected sentence-level utility against the others (decoding/mbr.py); "none": the most probable (the paper).
    mbr: str = "none"
    # Random sampling in place of the search (decoding/search.py, sample_search), e.g. for back-translation (Edunov
    # et al. 2018): each token drawn from softmax(logits / temperature) restricted to the sampling_topk most probable
    # (0: all; 1: greedy search, no sampling: CTranslate2's convention), then to the smallest set whose probability
    # reaches sampling_topp (nucleus sampling, Holtzman et al. 2020). One translation per sentence (beam 1); the draws
    # of each sentence come from its own generator seeded by (seed, its index in the input): the same seed gives the
    # same output whatever the batching.
    sampling_topk: int = 1  # sample from the K most probable tokens (0: all; 1: greedy search, no sampling)
    sampling_topp: float = 1.0  # then from the smallest set whose probability reaches P (needs top-k 0 or > 1)
    temperature: float = 1.0  # sampling from softmax(logits / temperature)
    seed: int = 0  # sampling's seed: with each sentence's index in the input, it seeds the sentence's draws

    def __post_init__(self) -> None:
        check_section(self, "decode")  # types, finiteness and bounds.BOUNDS
        if self.mbr not in MBR_UTILITIES:
            raise ConfigError(f"decode.mbr must be one of {', '.join(MBR_UTILITIES)}, got {self.mbr!r}")
        if self.nbest > self.beam:
            raise ConfigError(f"decode.beam ({self.beam}) and decode.nbest ({self.nbest}) need 1 <= nbest <= beam")
        if self.length_penalty not in ("gnmt", "length", "none"):
            raise ConfigError(f"decode.length_penalty must be 'gnmt', 'length' or 'none', got {self.length_penalty!r}")
        check_patience(self.patience, self.beam, self.nbest)


def check_sampling(topk: int, topp: float, temperature: float) -> None:
    """decode.sampling_topk / sampling_topp / temperature (and their flags): their bounds.BOUNDS (top-k >= 0, top-p
    in (0, 1], T in (0, 100])."""
    check_value("decode.sampling_topk", topk, name="the sampling top-k", kind=int)
    check_value("decode.sampling_topp", topp, name="the sampling top-p")
    check_value("decode.temperature", temperature, name="the sampling temperature")


def check_patience(patience: float, beam: int, nbest: int) -> None:
    """decode.patience (and --patience): 0 (the exact stop) or enough finished hypotheses for the n-best list."""
    check_value("decode.patience", patience, name="the patience")
    if patience and beam * patience < nbest:
        ends = f"a patience of {patience} ends a sentence after {beam * patience:g} finished hypotheses"
        raise ConfigError(f"{ends}, fewer than the {nbest} asked for")


@dataclass(frozen=True, kw_only=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **sections) -> Config:
        return dataclasses.replace(self, **sections)
