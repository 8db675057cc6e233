"""A parsing run's config (tasks/parsing.py trains it, decoding/parser.py decodes with it): parsing's `model` section
(the shared one plus the word pointer), the shared `train` section, tree data, and parsing's `decode` section with
the paper's §6.3 settings."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .bounds import check_section
from .sections import ConfigError, DecodeConfig, ModelConfig, TrainConfig, check_corpus


@dataclass(frozen=True, kw_only=True)
class ParserModelConfig(ModelConfig):
    """A parser's Transformer (model/pointer.py): the shared model section plus the word pointer (not in the paper).

    With leaves that are tags only, the decoder has to count the leaves it wrote to know which word comes next; the
    pointer gives each decoder input (a projection of) the encoder state of the next word to cover instead
    (data/pointers.py says what it reads, docs/parsing.md why)."""

    word_pointer: bool = False  # each decoder input also gets the encoder state of the next word
    word_pointer_output: bool = False  # with word_pointer: that word's state is also added before the output layer
    word_pointer_last: bool = False  # with word_pointer: the pointer reads the word's last piece as well as its first

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("word_pointer_output", "word_pointer_last"):
            if getattr(self, name) and not self.word_pointer:
                raise ConfigError(f"model.{name} needs model.word_pointer = true")
        if self.alignment_head:  # trained by guided alignment, which translation runs have alone
            raise ConfigError("model.alignment_head applies to translation runs, not to parsing")

    @property
    def pointer_reads(self) -> list[str]:
        """What the word pointer reads per decoder step, in the order of the word positions' last axis: "first" (the
        next word's first piece), then "last" (its last piece, word_pointer_last). [] without the word pointer."""
        if not self.word_pointer:
            return []
        return ["first"] + ["last"] * self.word_pointer_last


@dataclass(frozen=True, kw_only=True)
class TreeCorpusConfig:
    """One more training treebank (`[[data.corpora]]` of parsing): its tree file, its share of each epoch, its tag."""

    file: str  # a tree file (plain or .gz, also under $TRANSDUCE_DATA)
    weight: float = 1.0  # each epoch draws weight x its trees (> 0)
    tag: str = ""  # a token put before each of its sources (a treebank embedding); empty: none

    def __post_init__(self) -> None:
        if not self.file:
            raise ConfigError("data.corpora: every treebank needs a file")
        check_corpus(self.weight, self.tag, f"data.corpora ({self.file})")


@dataclass(frozen=True, kw_only=True)
class ParseDataConfig:
    """Tree files (one bracketed tree per line, or spanning lines; plain or .gz). Relative paths that do not exist
    here are looked up under $TRANSDUCE_DATA, so `gum_const/train.trees.gz` works from anywhere.

    `corpora`: more training treebanks (`[[data.corpora]]` tables, e.g. the WSJ sample
    `ptb_sample_nltk/treebank.trees.gz`), after data.train's trees; they are normalized the same way (traces, function
    tags and indices removed, root relabelled ROOT). Each has a `weight` (each epoch draws weight x its trees) and
    may have a `tag`: a token put before each of its sources, so that the model can keep its treebank's conventions
    apart from data.train's (a treebank embedding, as in Stymne et al. 2018); validation and `parse` input have
    none, so the parser answers in data.train's conventions. The tag takes one of max_len's positions. `keep_tags`:
    the target keeps the POS tags (the parser then tags too); false writes every preterminal as "XX" (Vinyals et al.
    2015). `vocab_size`: SentencePiece pieces for the words (the target tokens come on top). `max_len`: training
    and validation trees whose source pieces or target tokens exceed it are dropped and counted."""

    train: tuple[str, ...] = ()  # training tree files (see above: plain or .gz, also under $TRANSDUCE_DATA)
    valid: str = ""  # the validation tree file; empty = no validation
    # more training treebanks after data.train's: [[data.corpora]] tables of file, weight, tag (see above)
    corpora: tuple[TreeCorpusConfig, ...] = ()
    keep_tags: bool = True  # the target keeps the POS tags (the parser tags too); false: every one is "XX"
    vocab_size: int = 4000  # SentencePiece pieces for the words (the target's tree tokens come on top)
    model_type: str = "bpe"  # SentencePiece model: "bpe" or "unigram"
    max_len: int = 400  # training and validation trees with more source pieces or target tokens are dropped

    def __post_init__(self) -> None:
        check_section(self, "data")  # types, finiteness and bounds.BOUNDS
        if self.model_type not in ("bpe", "unigram"):
            raise ConfigError(f"data.model_type must be 'bpe' or 'unigram', got {self.model_type!r}")

    @property
    def tags(self) -> tuple[str, ...]:
        """The corpora's tags, each once, in order: tag tokens of the words' vocabulary (data/tokenizer.py)."""
        return tuple(dict.fromkeys(c.tag for c in self.corpora if c.tag))


@dataclass(frozen=True, kw_only=True)
class ParseDecodeConfig(DecodeConfig):
    """Decoding for parsing. Defaults are the paper's §6.3 settings: beam 21, alpha 0.3, and a maximum output length
    of input length + 300 (max_len_a 1, max_len_b 300), always capped by the model's positions (model.max_len - 1).

    The search measures the input in source pieces, which are at least as many as the words, so the limit is at least
    the paper's. A linearized tree needs at least |words| + 3 tokens ("(ROOT", a leaf per word, ")", EOS); requiring
    max_len_a >= 1 and max_len_b >= 3 guarantees that room, so the tree constraint can always finish a tree.
    `batch_tokens` bounds source pieces x beam per batch (the decoder's rows grow with the beam)."""

    beam: int = 21
    alpha: float = 0.3
    max_len_a: float = 1.0
    max_len_b: int = 300
    batch_tokens: int = 8192  # inputs decoded together: their source pieces x beam stays within this
    max_open_run: int = 0  # most opening brackets in a row (0: no bound); the training trees open at most 7

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_len_a < 1.0 or self.max_len_b < 3:
            raise ConfigError(
                f"decode.max_len_a ({self.max_len_a}) must be >= 1 and decode.max_len_b "
                f"({self.max_len_b}) >= 3: a tree over n words needs n + 3 output tokens"
            )
        if self.max_open_run == 1:
            raise ConfigError(f"decode.max_open_run must be 0 (no bound) or >= 2, got {self.max_open_run}")


@dataclass(frozen=True, kw_only=True)
class ParsingRunConfig:
    """A parsing run: the same Transformer with the word pointer (`model`, joint tied vocabulary), tree data, the
    shared `train` section and parsing's `decode` section. `model.vocab_size` 0 is filled in from the pieces plus the
    target tokens."""

    model: ParserModelConfig = field(default_factory=ParserModelConfig)
    data: ParseDataConfig = field(default_factory=ParseDataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: ParseDecodeConfig = field(default_factory=ParseDecodeConfig)

    def __post_init__(self) -> None:
        if type(self.model) is ModelConfig:  # the shared section given as it is: a parser's, with no pointer
            shared = {f.name: getattr(self.model, f.name) for f in dataclasses.fields(ModelConfig)}
            object.__setattr__(self, "model", ParserModelConfig(**shared))
        if self.data.max_len >= self.model.max_len:
            raise ConfigError(
                f"data.max_len ({self.data.max_len}) must be below model.max_len "
                f"({self.model.max_len}): a sequence also needs EOS (source) or BOS (target)"
            )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **sections) -> ParsingRunConfig:
        return dataclasses.replace(self, **sections)
