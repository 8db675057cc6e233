"""English constituency parsing as sequence transduction: the paper's §6.3, after Vinyals et al. (2015), "Grammar as
a Foreign Language". The same encoder-decoder Transformer reads a sentence and writes its linearized tree.

The parts, by role: the run config in config/parsing.py; trees, their linearization and the target vocabulary in
data/trees.py and data/treebank.py (prepared and cached like translation's data); the model with the word pointer in
model/pointer.py and what the pointer reads in data/pointers.py; subtree substitution in data/augment.py; the
`Parser` (constrained beam search) in decoding/parser.py; the `transduce parse` command in cli/parsing.py. This
module is the `Task`: tree data on the translation task's sequence-to-sequence machinery (batches, model, loss),
with validation by
loss and F1 scored like EVALB (tasks/evalb.py: COLLINS.prm plus DELETE_LABEL ROOT, strict, gold tags put back,
the usual published setting) on the first `train.valid_max_sentences` trees of the valid file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ..config import ConfigError, ParsingRunConfig, read_config, save_config
from ..data.augment import substitute_subtrees, tree_phrases
from ..data.corpus import Batch, ParallelCorpus, TokenArrays
from ..data.pointers import word_positions
from ..data.tokenizer import UNK_ID
from ..data.treebank import TARGET_VOCAB, ParseCorpus, ParseData, join_words, prepare_trees
from ..data.trees import Tree
from ..decoding.constraints import LEAF
from ..decoding.parser import Parser
from ..model import PointerTransformer
from . import evalb
from .base import has_trained, same_run
from .translation import SequenceTask

SUBSTITUTION_STREAM = 0x5B2  # numpy's generator for train.subtree_substitution: (seed, epoch, this)


class ParsingTask(SequenceTask):
    """Tree data on the translation task's sequence-to-sequence machinery (batches, model, loss), validation loss
    and F1, and a Parser."""

    name: ClassVar[str] = "parsing"
    sampled_parts: ClassVar[tuple[str, ...]] = ("src", "starts")  # subword sampling redraws the source words' pieces
    substitutes_subtrees: ClassVar[bool] = True  # train.subtree_substitution applies (and redraws "tgt" too)
    metrics: ClassVar[dict[str, tuple[str, bool]]] = {"loss": ("valid_loss", False), "f1": ("valid_f1", True)}

    def __init__(self, config: ParsingRunConfig, data: ParseData) -> None:
        self.config, self.data = config, data
        self.splits = dict[str, ParallelCorpus](data.splits)
        self.corpus = data.splits["train"]
        self.has_validation = bool(len(data.splits.get("valid", ())))
        self.description = f"{len(self.corpus):,} training trees"
        # the word pointer reads the words used so far off the leaves of the target (an UNK leaf, a tag only the
        # valid file has, is not counted: that sentence's pointer then lags one word behind, in the valid loss only)
        kinds = data.vocab.constraint().kinds.numpy()
        self.leaves = kinds == LEAF if config.model.word_pointer else None
        self._words: list[list[str | None]] | None = None  # the training words, read back for subword sampling
        self._phrases: list[list[tuple[int, int, int, int]]] | None = None  # each training tree's, for substitution
        self._kept: list[list[list[int]]] | None = None  # each training word's prepared pieces
        self._prefix: list[list[int]] | None = None  # what each training source holds before its first word

    def redraws(self) -> bool:
        train = self.config.train
        return super().redraws() or train.subtree_substitution > 0

    def draw_parts(self) -> tuple[str, ...]:
        return (*self.sampled_parts, "tgt") if self.config.train.subtree_substitution > 0 else self.sampled_parts

    def draw_options(self) -> dict[str, Any]:
        return {**super().draw_options(), "substitution": self.config.train.subtree_substitution}

    def training_words(self) -> list[list[str | None]]:
        """Each training sentence's words as its prepared pieces spell them (the tokenizer's normalisation
        applied); None for a word with an UNK piece, whose text the pieces no longer hold."""
        prepared = self.data.splits["train"]
        spans = [
            prepared.src[i][a:b].tolist()
            for i in range(len(prepared))
            for a, b in zip(prepared.starts[i][:-1], prepared.starts[i][1:])
        ]
        texts = self.data.tokenizer.sp.decode(spans) if spans else []
        flat = iter(None if UNK_ID in span else text for span, text in zip(spans, texts))
        return [[next(flat) for _ in range(len(prepared.starts[i]) - 1)] for i in range(len(prepared))]

    def sampled_corpus(self, *, seed: int, epoch: int) -> ParseCorpus:
        """One epoch's training corpus, drawn from (seed, epoch) (the same within one process only: `epoch_corpus`
        keeps each draw).
        - train.subword_sampling: every word is cut into pieces at random (BPE-dropout for the recipe's BPE pieces),
          each word on its own as in `encode_words`. A word with an UNK piece, and a sentence whose sampled pieces
          exceed data.max_len, keep their prepared pieces.
        - train.subtree_substitution: then each tree, with that probability, gets one constituent replaced by one of
          the same label (`substitute_subtrees`), its words with the pieces this epoch drew for them.
        The word starts follow the pieces; without substitution the targets are the prepared ones."""
        prepared, train = self.data.splits["train"], self.config.train
        prefixes = self._prefixes()
        budgets = [self.config.data.max_len - len(prefix) for prefix in prefixes]
        groups = [prefix[0] if prefix else 0 for prefix in prefixes]  # a tagged treebank's tag id; untagged: 0
        sentences = self._sampled_words(seed, epoch, budgets) if train.subword_sampling > 0 else self._prepared_words()
        tgt = prepared.tgt
        if train.subtree_substitution > 0:
            if self._phrases is None:
                kinds = self.data.vocab.constraint().kinds.numpy()
                self._phrases = [tree_phrases(prepared.tgt[i], kinds) for i in range(len(prepared))]
            rng = np.random.default_rng([seed, epoch, SUBSTITUTION_STREAM])
            sentences, targets = substitute_subtrees(
                sentences,
                [prepared.tgt[i] for i in range(len(prepared))],
                self._phrases,
                rate=train.subtree_substitution,
                rng=rng,
                max_len=self.config.data.max_len,
                budgets=budgets,
                groups=groups,
            )
            tgt = TokenArrays.from_lists([t.tolist() for t in targets])
        src, starts = join_words(sentences, prefixes)
        return ParseCorpus(TokenArrays.from_lists(src), tgt, TokenArrays.from_lists(starts))

    def _prefixes(self) -> list[list[int]]:
        """What each prepared training source holds before its first word: its treebank's tag (data.corpora), or nothing
        (made once). The words' pieces may fill data.max_len less that."""
        if self._prefix is None:
            prepared = self.data.splits["train"]
            self._prefix = [prepared.src[i][: prepared.starts[i][0]].tolist() for i in range(len(prepared))]
        return self._prefix

    def _prepared_words(self) -> list[list[list[int]]]:
        """Each training sentence's words as their prepared pieces (made once; callers copy before changing)."""
        if self._kept is None:
            prepared = self.data.splits["train"]
            self._kept = [
                [prepared.src[i][a:b].tolist() for a, b in zip(prepared.starts[i][:-1], prepared.starts[i][1:])]
                for i in range(len(prepared))
            ]
        return self._kept

    def _sampled_words(self, seed: int, epoch: int, budgets: Sequence[int]) -> list[list[list[int]]]:
        """Each training sentence's words cut into pieces at random (train.subword_sampling); a sentence over its
        budget of pieces keeps its prepared ones."""
        if self._words is None:
            self._words = self.training_words()
        kept = self._prepared_words()
        known = [w for sentence in self._words for w in sentence if w is not None]
        sampled = iter(
            self.data.tokenizer.encode_sampled(
                known, alpha=self.config.train.subword_sampling, seed=self.sampler_seed(seed, epoch)
            )
            if known
            else []
        )
        out: list[list[list[int]]] = []
        for i, sentence in enumerate(self._words):
            drawn = [(next(sampled) if word is not None else []) or kept[i][k] for k, word in enumerate(sentence)]
            out.append(drawn if sum(len(p) for p in drawn) <= budgets[i] else kept[i])
        return out

    def collate_pairs(self, corpus: ParallelCorpus, indices: np.ndarray, **options) -> Batch:
        """The pairs as a Batch, with the word pointer's positions (B, T) or (B, T, 2) when the model has one."""
        batch = super().collate_pairs(corpus, indices, **options)
        if self.leaves is None:
            return batch
        assert isinstance(corpus, ParseCorpus)
        last = self.config.model.word_pointer_last
        rows = [  # a loop over sentences, as in data.collate
            word_positions(corpus.starts[i], corpus.tgt[i], self.leaves, last=last) for i in indices
        ]
        word_pos = torch.zeros(*batch.tgt_in.shape, *rows[0].shape[1:], dtype=torch.long)  # the reads' layout
        for row, pos in enumerate(rows):
            word_pos[row, : len(pos)] = torch.from_numpy(pos)
        return dataclasses.replace(batch, word_pos=word_pos)

    @classmethod
    def prepare(
        cls,
        config: ParsingRunConfig,
        run_dir: Path,
        *,
        main: bool,
        log: Callable[[str], None],
        barrier: Callable[[], None],
    ) -> ParsingTask:
        """Check config.json against a run being resumed, prepare the data (rank 0 first), then every rank loads it;
        rank 0 writes the resolved config, the tokenizer and the target vocabulary into the run directory."""
        run_dir = Path(run_dir)
        config_path = run_dir / "config.json"
        frozen = has_trained(run_dir)
        if frozen:
            same_run(read_config(config_path, ParsingRunConfig), config)
        if main:
            prepare_trees(config.data, run_dir / "data", log=log, frozen=frozen)
        barrier()
        data = prepare_trees(config.data, run_dir / "data", log=lambda _: None, frozen=True)
        size = data.vocab.size
        if config.model.vocab_size and config.model.vocab_size != size:
            raise ConfigError(
                f"model.vocab_size is {config.model.vocab_size} but the data in {run_dir / 'data'} "
                f"has {size} tokens ({data.vocab.offset} pieces + target tokens); leave "
                "model.vocab_size unset (0)"
            )
        config = config.replace(model=dataclasses.replace(config.model, vocab_size=size))
        if main:
            save_config(config, config_path)
            if not frozen:
                data.vocab.save(run_dir / TARGET_VOCAB)
                data.tokenizer.copy_to(run_dir / "tokenizer.model")
        task = cls(config, data)
        task.attach(run_dir, main=main, barrier=barrier, fresh=not frozen)
        return task

    @torch.no_grad()
    def validate(self, model: PointerTransformer, device: torch.device) -> dict[str, float]:
        """Loss and perplexity on the whole valid split; F1 (and the rest of `score_parses`) on its first
        train.valid_max_sentences trees, parsed with beam train.valid_beam under the tree constraint."""
        was_training, config = model.training, self.config
        model.eval()
        result = self.validation_loss(model, device)
        n = config.train.valid_max_sentences
        if n > 0:
            parsed = self.predictor(model).parse_words(self.data.valid_words[:n], beam=config.train.valid_beam)
            scores = score_parses(self.data.valid_gold[:n], parsed, tagged=config.data.keep_tags)
            result.update({f"valid_{k}": v for k, v in scores.items()})
        model.train(was_training)
        return result

    def build_model(self) -> PointerTransformer:
        return PointerTransformer(self.config.model)

    def logits(self, net, batch: Batch) -> torch.Tensor:
        return net(batch.src, batch.tgt_in, batch.positions, batch.word_pos)  # the word pointer reads word_pos

    def predictor(self, model: PointerTransformer) -> Parser:
        return Parser(model, self.data.tokenizer, self.data.vocab, decode=self.config.decode)


def score_parses(gold: Sequence[Tree | None], test: Sequence[Tree | None], *, tagged: bool = True) -> dict[str, float]:
    """EVALB figures of parses against gold trees (COLLINS.prm + DELETE_LABEL ROOT, strict): `f1` with the gold POS
    tags put back into the parses (the usual published setting: brackets are scored, tags are given), `exact` (the
    complete-match rate in that setting); with `tagged` (the parser outputs POS tags), `f1_tagged` with its own tags
    and `tag_accuracy`. Without tags ("XX") punctuation cannot be deleted by tag, so only the first two apply."""
    retagged = [evalb.put_gold_tags(t, g) if t is not None and g is not None else t for t, g in zip(test, gold)]
    with_gold = evalb.score_corpus(gold, retagged, evalb.default_params(), strict=True)
    scores = {"f1": with_gold.f1, "exact": with_gold.all.complete_match}
    if tagged:
        own = evalb.score_corpus(gold, test, evalb.default_params(), strict=True)
        scores.update(f1_tagged=own.f1, tag_accuracy=own.all.tagging_accuracy)
    return scores
