"""`Parser`: words in, trees out, in input order (the parsing predictor, as translator.py is translation's).

Decoding is batched beam search restricted by `constraints.TreeConstraint`, so every output is one well-formed tree
whose leaves are exactly the input words (no repair step, no excluded sentence); a model with the word pointer
(model/pointer.py) gets, at every step, the next word of each row as the constraint counts them (`PointerGuide`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast, overload

import numpy as np
import torch
from tqdm import tqdm

from ..config import (
    ConfigError,
    ParseDecodeConfig,
    ParserModelConfig,
    ParsingRunConfig,
)
from ..config.bounds import check_value
from ..data.pointers import pointer_targets, word_positions
from ..data.text import DataError
from ..data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from ..data.treebank import TARGET_VOCAB, TargetVocab, encode_words
from ..data.trees import Tree, delinearize, escape_word, linearize, normalize, parse_tree, to_string
from ..device import pick_device
from ..model import PointerTransformer
from ..model.pointer import PointerCache
from ..runs import find_weights, load_weights
from ..runs import read_run_config as read_task_config
from .constraints import LEAF, TreeConstraint, TreeState
from .ensemble import Ensemble, EnsembleCache
from .front import check_sentences
from .search import beam_search, greedy_search
from .translator import AttentionMaps


def _load_model(config: ParserModelConfig, weights: Path, device: str) -> PointerTransformer:
    model = PointerTransformer(config)
    load_weights(model, weights)
    return model.to(pick_device(device)).eval()


def read_run_config(path: Path) -> ParsingRunConfig:
    """A parsing run's config.json, refusing another task's run by name (and what takes it)."""
    return read_task_config(path.parent, "parsing")


class Parser:
    """Words in, trees out, in input order: batched beam search under the tree constraint.

    Every output is one well-formed tree whose leaves are exactly the input words (escaped -LRB-/-RRB- where a word
    holds a bracket); an empty sentence gives no tree."""

    def __init__(
        self,
        model: PointerTransformer | Ensemble,
        tokenizer: Tokenizer,
        vocab: TargetVocab,
        *,
        decode: ParseDecodeConfig | None = None,
    ) -> None:
        if vocab.size != model.config.vocab_size:
            raise ValueError(f"the vocabulary has {vocab.size} tokens, the model {model.config.vocab_size}")
        if vocab.offset != tokenizer.vocab_size:
            raise ValueError(
                f"the target vocabulary starts at {vocab.offset}, the tokenizer has {tokenizer.vocab_size} pieces"
            )
        self.model, self.tokenizer, self.vocab = model, tokenizer, vocab
        self.decode = decode or ParseDecodeConfig()
        self.constraint = vocab.constraint(self.decode.max_open_run or None)
        pointer = cast(ParserModelConfig, model.config)
        self.leaves = self.constraint.kinds.eq(LEAF).numpy() if pointer.word_pointer else None
        self.last_piece = pointer.word_pointer_last  # the pointer also reads each word's last piece

    @classmethod
    def from_run(cls, path: str | Path, *, device: str = "auto") -> Parser:
        """Config, tokenizer, target vocabulary and weights (safetensors) of a run directory or a weights file."""
        return cls.from_runs([path], device=device)

    @classmethod
    def from_runs(cls, paths: Sequence[str | Path], *, device: str = "auto") -> Parser:
        """One run, or an ensemble of several (decoding/ensemble.py: the mean of the members' next-token
        distributions at each step, under one tree constraint): the first run gives the decoding settings; every
        other run must have the same tokenizer (Tokenizer.signature), target vocabulary and word-pointer reads,
        checked for every run before any weights are loaded. Each member decodes in batches of the first run's
        decode.batch_tokens, so memory grows with the number of members."""
        runs = []
        for path in paths:
            run_dir, weights = find_weights(path)
            config = read_run_config(run_dir / "config.json")
            tokenizer = Tokenizer(run_dir / "tokenizer.model")
            runs.append((path, weights, config, tokenizer, TargetVocab.load(run_dir / TARGET_VOCAB)))
        first_path, _, first, tokenizer, vocab = runs[0]
        reads = lambda config: "+".join(config.model.pointer_reads) or "nothing"
        for path, _, config, other_tokenizer, other_vocab in runs[1:]:
            if other_tokenizer.signature() != tokenizer.signature():
                raise ConfigError(
                    f"{path}: its tokenizer differs from that of {first_path}; an ensemble's models must share one "
                    "vocabulary (train them on the same trees with the same data settings)"
                )
            if other_vocab != vocab:
                raise ConfigError(f"{path}: its target vocabulary (labels and tags) differs from that of {first_path}")
            if reads(config) != reads(first):
                raise ConfigError(
                    f"{path}: its word pointer reads {reads(config)}, that of {first_path} {reads(first)}; "
                    "an ensemble's parsers must read the same positions"
                )
        members = [_load_model(config.model, weights, device) for _, weights, config, _, _ in runs]
        model = members[0] if len(members) == 1 else Ensemble(members)
        return cls(model, tokenizer, vocab, decode=first.decode)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @overload
    def parse(self, sentences: str, **kwargs: Any) -> str: ...

    @overload
    def parse(self, sentences: Sequence[str], **kwargs: Any) -> list[str]: ...

    def parse(self, sentences, *, beam=None, alpha=None, progress=False):
        """Whitespace-tokenized sentences -> one-line PTB trees ("" for an empty sentence), in input order. One
        string is one sentence: its tree comes back as a string."""
        if isinstance(sentences, str):
            return self.parse([sentences], beam=beam, alpha=alpha, progress=progress)[0]
        return [
            "" if t is None else to_string(t)
            for t in self.parse_trees(sentences, beam=beam, alpha=alpha, progress=progress)
        ]

    def parse_trees(
        self, sentences: Sequence[str], *, beam: int | None = None, alpha: float | None = None, progress: bool = False
    ) -> list[Tree | None]:
        """Like `parse`, as `Tree`s (None for an empty sentence). Raw words are escaped (-LRB-/-RRB-) on the way in."""
        if isinstance(sentences, str):
            raise TypeError("parse_trees takes a list of sentences: parse_trees([sentence])")
        return self.parse_words(
            [[escape_word(w) for w in s.split()] for s in check_sentences(sentences)],
            beam=beam,
            alpha=alpha,
            progress=progress,
        )

    def _sources(self, sentences: Sequence[list[str]]) -> tuple[list[list[int]], list[list[int]]]:
        """Piece ids + EOS per sentence, and its word starts (encode_words); a sentence the model's positions cannot
        hold is refused (a parse must cover every word, so it cannot be cut as a translation input is)."""
        limit = self.model.config.max_len - 1
        ids, starts = encode_words(self.tokenizer, sentences)
        for i, (words_, pieces) in enumerate(zip(sentences, ids)):
            if len(pieces) + 1 > limit or len(words_) + 3 > limit:
                raise DataError(
                    f"line {i + 1}: {len(words_)} words ({len(pieces)} pieces) do not fit the model's "
                    f"{self.model.config.max_len} positions; split the sentence"
                )
        return [p + [EOS_ID] for p in ids], starts

    def _batches(self, sources: list[list[int]], todo: list[int], budget: int) -> list[list[int]]:
        """Sentences by falling length, batched while sentences x longest source x beam stays within `budget`."""
        order = sorted(todo, key=lambda i: len(sources[i]), reverse=True)
        batches: list[list[int]] = []
        for i in order:
            if batches and len(sources[batches[-1][0]]) * (len(batches[-1]) + 1) <= budget:
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    @torch.no_grad()
    def parse_words(
        self,
        sentences: Sequence[list[str]],
        *,
        beam: int | None = None,
        alpha: float | None = None,
        progress: bool = False,
    ) -> list[Tree | None]:
        """Sentences given as lists of words in treebank form -> trees (None for an empty sentence)."""
        d = self.decode
        beam = d.beam if beam is None else beam
        alpha = d.alpha if alpha is None else alpha
        check_value("decode.beam", beam, name="beam", kind=int)  # the bounds of config/bounds.py
        check_value("decode.alpha", alpha, name="alpha")
        sources, starts = self._sources(sentences)
        todo = [i for i, s in enumerate(sentences) if s]
        results: list[Tree | None] = [None] * len(sentences)
        was_training = self.model.training
        self.model.eval()
        bar = tqdm(total=len(todo), unit="sent", disable=not progress, file=sys.stderr, leave=False)
        try:
            for batch in self._batches(sources, todo, max(1, d.batch_tokens // beam)):
                trees = self._parse_batch(
                    [sentences[i] for i in batch], [sources[i] for i in batch], [starts[i] for i in batch], beam, alpha
                )
                for i, tree in zip(batch, trees):
                    results[i] = tree
                bar.update(len(batch))
        finally:
            bar.close()
            self.model.train(was_training)
        return results

    def _parse_batch(
        self, sentences: list[list[str]], sources: list[list[int]], starts: list[list[int]], beam: int, alpha: float
    ) -> list[Tree]:
        d = self.decode
        src = torch.full((len(sources), max(map(len, sources))), PAD_ID, dtype=torch.long)
        for row, ids in enumerate(sources):
            src[row, : len(ids)] = torch.tensor(ids)
        constraint: Any = self.constraint.for_sentences(
            [len(s) for s in sentences],
            [pointer_targets(s, last=self.last_piece).tolist() for s in starts] if self.leaves is not None else None,
        )
        model: Any = self.model
        if self.leaves is not None:  # the pointer reads the constraint's count of words: one object plays both
            model = constraint = PointerGuide(self.model, constraint)
        options: dict[str, Any] = {
            "max_len_a": d.max_len_a,
            "max_len_b": d.max_len_b,
            "alpha": alpha,
            "length_penalty_kind": d.length_penalty,
            "constraint": constraint,
        }
        src = src.to(self.device)
        found = greedy_search(model, src, **options) if beam == 1 else beam_search(model, src, beam=beam, **options)
        trees = []
        for words_, hyps in zip(sentences, found):
            if not hyps:  # the constraint always leaves a way to finish: this would be a bug, not a user error
                raise RuntimeError(f"the constrained search found no tree for {' '.join(words_)!r}")
            trees.append(delinearize(self.vocab.decode(hyps[0].tokens), words_))
        return trees

    def target_ids(self, tree: Tree) -> list[int]:
        """The target ids of a tree (normalized as for training; labels the model never saw are UNK)."""
        return self.vocab.encode(linearize(normalize(tree), keep_tags=self.vocab.keep_tags))

    @torch.no_grad()
    def attention(self, source: str, target: str | None = None) -> AttentionMaps:
        """Attention weights of a sentence and a tree (one-line PTB; default: the model's own parse): a teacher-forced
        forward pass over the tree's target tokens gives exactly the weights seen while decoding it. Source pieces
        end with "</s>"; target tokens are "<s>" then the linearized tree."""
        if isinstance(self.model, Ensemble):
            raise ConfigError("attention maps are drawn for one model, not an ensemble")
        words_ = [escape_word(w) for w in source.split()]
        if not words_:
            raise ConfigError("the sentence to draw is empty")
        (src_ids,), (starts,) = self._sources([words_])
        tree = self.parse_words([words_])[0] if target is None else parse_tree(target, source="--tgt")
        assert tree is not None
        tgt_ids = self.target_ids(tree)[: self.model.config.max_len - 1]
        was_training = self.model.training
        self.model.eval()
        word_pos = None
        if self.leaves is not None:
            ids = np.asarray(tgt_ids, dtype=np.int64)
            pos = word_positions(np.asarray(starts), ids, self.leaves, last=self.last_piece)
            word_pos = torch.from_numpy(pos).unsqueeze(0).to(self.device)
        with self.model.recording_attention():
            self.model(
                torch.tensor([src_ids], device=self.device),
                torch.tensor([[BOS_ID] + tgt_ids], device=self.device),
                word_pos=word_pos,
            )
        self.model.train(was_training)
        stack = lambda mods: torch.stack([m.weights[0] for m in mods]).cpu()
        return AttentionMaps(
            source_pieces=[self.tokenizer.sp.id_to_piece(int(i)) for i in src_ids[:-1]] + ["</s>"],
            target_pieces=["<s>"] + self.vocab.decode(tgt_ids),
            encoder=stack([layer.self_attn for layer in self.model.encoder.layers]),
            decoder=stack([layer.self_attn for layer in self.model.decoder.layers]),
            cross=stack([layer.cross_attn for layer in self.model.decoder.layers]),
        )


class PointerGuide:
    """One constrained search over a parser with the word pointer, to which it is both the model and the tree
    constraint (decoding/search.py knows neither pointers nor trees). As the constraint, it passes every call on and
    keeps the newest state it returned: the search replaces its state with each one, so that is the state of the rows
    about to be decoded. As the model, before each step it writes what the pointer reads there (the next word of each
    row, TreeConstraint.pointer) into the model's cache, every member's for an ensemble, then steps the model."""

    def __init__(self, model: PointerTransformer | Ensemble, constraint: TreeConstraint) -> None:
        self.model, self.constraint, self.config = model, constraint, model.config
        self.state: TreeState | None = None

    def encode(self, src: torch.Tensor) -> Any:
        return self.model.encode(src)

    def pad_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.pad_mask(tokens)

    def start_decoding(self, memory: Any, src_pad_mask: torch.Tensor) -> Any:
        return self.model.start_decoding(memory, src_pad_mask)

    def decode_step(self, tokens: torch.Tensor, cache: Any) -> torch.Tensor:
        assert self.state is not None, "the search starts the constraint before its first step"
        pointer = self.constraint.pointer(self.state)
        for member in cache.caches if isinstance(cache, EnsembleCache) else [cache]:
            cast(PointerCache, member).word_pos = pointer
        return self.model.decode_step(tokens, cache)

    def _keep(self, state: TreeState) -> TreeState:
        self.state = state
        return state

    def start(self, max_len: torch.Tensor) -> TreeState:
        return self._keep(self.constraint.start(max_len))

    def allowed(self, state: TreeState) -> torch.Tensor:
        return self.constraint.allowed(state)

    def advance(self, state: TreeState, tokens: torch.Tensor) -> TreeState:
        return self._keep(self.constraint.advance(state, tokens))

    def reorder(self, state: TreeState, index: torch.Tensor) -> TreeState:
        return self._keep(self.constraint.reorder(state, index))

    def select(self, state: TreeState, index: torch.Tensor) -> TreeState:
        return self._keep(self.constraint.select(state, index))
