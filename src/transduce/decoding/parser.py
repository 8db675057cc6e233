"""`Parser`: words in, trees out, in input order (the parsing predictor, as translator.py is translation's).

Decoding is batched beam search restricted by `constraints.TreeConstraint`, so every output is one well-formed tree
whose leaves are exactly the input words (no repair step, no excluded sentence); a model with the word, span or tree
pointer gets the constraint's reads (data/pointers.py) at every step.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
import torch
from tqdm import tqdm

from ..config import ConfigError, ModelConfig, ParseDecodeConfig, ParsingRunConfig, config_from_dict, read_config_dict
from ..data.pointers import pointer_targets, word_positions
from ..data.text import DataError
from ..data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from ..data.treebank import TARGET_VOCAB, TargetVocab, encode_words
from ..data.trees import Tree, delinearize, escape_word, linearize, normalize, parse_tree, to_string
from ..device import pick_device
from ..model import Transformer
from ..training.checkpoint import find_weights, load_weights
from .constraints import LEAF
from .ensemble import Ensemble
from .search import beam_search, greedy_search
from .translator import AttentionMaps


def _load_model(config: ModelConfig, weights: Path, device: str) -> Transformer:
    model = Transformer(config)
    load_weights(model, weights)
    return model.to(pick_device(device)).eval()


def read_run_config(path: Path) -> ParsingRunConfig:
    """A parsing run's config.json (config.read_config_dict), refusing another task's run by name."""
    raw = read_config_dict(path)
    if raw.get("task", "parsing") != "parsing":
        raise ConfigError(f"{path}: a {raw['task']} run, not a parsing run")
    return config_from_dict(raw, ParsingRunConfig)


class Parser:
    """Words in, trees out, in input order: batched beam search under the tree constraint.

    Every output is one well-formed tree whose leaves are exactly the input words (escaped -LRB-/-RRB- where a word
    holds a bracket); an empty sentence gives no tree."""

    def __init__(
        self,
        model: Transformer | Ensemble,
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
        self.leaves = self.constraint.kinds.eq(LEAF).numpy() if model.config.word_pointer else None
        self.span, self.tree = model.config.span_pointer, model.config.tree_position
        self.kinds = self.constraint.kinds.numpy() if self.span or self.tree else None

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
            [[escape_word(w) for w in s.split()] for s in sentences], beam=beam, alpha=alpha, progress=progress
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
        if beam < 1:
            raise ConfigError(f"beam must be at least 1, got {beam}")
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
        last = self.model.config.word_pointer_last
        constraint = self.constraint.for_sentences(
            [len(s) for s in sentences],
            [pointer_targets(s, last=last).tolist() for s in starts] if self.leaves is not None else None,
            span=self.span,
            tree=self.tree,
        )
        options: dict[str, Any] = {
            "max_len_a": d.max_len_a,
            "max_len_b": d.max_len_b,
            "alpha": alpha,
            "length_penalty_kind": d.length_penalty,
            "constraint": constraint,
        }
        src = src.to(self.device)
        found = (
            greedy_search(self.model, src, **options)
            if beam == 1
            else beam_search(self.model, src, beam=beam, **options)
        )
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
            last = self.model.config.word_pointer_last
            ids = np.asarray(tgt_ids, dtype=np.int64)
            pos = word_positions(
                np.asarray(starts), ids, self.leaves, last=last, kinds=self.kinds, span=self.span, tree=self.tree
            )
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
