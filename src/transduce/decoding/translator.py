"""`Translator`: raw text in, raw text out, in input order. One path for `translate`, `evaluate` and validation."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, overload

import torch
from tqdm import tqdm

from ..config import Config, DecodeConfig, read_config
from ..data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from ..device import pick_device
from ..model import Transformer
from ..training.checkpoint import find_weights, load_weights
from .ensemble import Ensemble
from .mbr import mbr_rerank
from .search import beam_search, greedy_search


def _languages(path: str | Path) -> tuple[str, str]:
    """(source, target) language of a run directory or a weights file in one."""
    run_dir, _ = find_weights(path)
    data = read_config(run_dir / "config.json", Config).data
    return data.src, data.tgt


@dataclass
class AttentionMaps:
    """Attention weights of one sentence pair, per layer: tensors (layers, heads, queries, keys).

    Source pieces end with "</s>" (EOS); decoder queries are "<s>" + target pieces, target keys the same.
    """

    source_pieces: list[str]
    target_pieces: list[str]  # decoder input: "<s>" then the target pieces
    encoder: torch.Tensor  # (L, H, S, S)
    decoder: torch.Tensor  # (L, H, T, T)
    cross: torch.Tensor  # (L, H, T, S)


@dataclass
class Translation:
    text: str
    score: float
    tokens: list[int]


class Translator:
    def __init__(
        self, model: Transformer | Ensemble, tokenizer: Tokenizer, *, decode: DecodeConfig | None = None
    ) -> None:
        if tokenizer.vocab_size != model.config.vocab_size:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} pieces, the model {model.config.vocab_size}")
        self.model, self.tokenizer = model, tokenizer
        self.decode = decode or DecodeConfig()
        self.truncated: list[int] = []  # input indices cut to the model's max length in the last call

    @classmethod
    def from_run(cls, path: str | Path, *, device: str = "auto") -> Translator:
        """Load config, tokenizer and weights (safetensors) from a run directory or a weights file in one."""
        run_dir, weights = find_weights(path)
        config = read_config(run_dir / "config.json", Config)
        model = Transformer(config.model)
        load_weights(model, weights)
        model.to(pick_device(device)).eval()
        return cls(model, Tokenizer(run_dir / "tokenizer.model"), decode=config.decode)

    @classmethod
    def from_runs(cls, paths: list[str | Path], *, device: str = "auto") -> Translator:
        """One run (from_run), or an ensemble of several (decoding/ensemble.py): the first run gives the decoding
        settings and the tokenizer; every other run must have the same vocabulary (Tokenizer.signature: pieces,
        scores and tokenizer settings) and languages."""
        from ..config import ConfigError

        if len(paths) == 1:
            return cls.from_run(paths[0], device=device)
        first = cls.from_run(paths[0], device=device)
        signature, languages = first.tokenizer.signature(), _languages(paths[0])
        members: list[Transformer] = [cast(Transformer, first.model)]
        for path in paths[1:]:
            other = cls.from_run(path, device=device)
            if other.tokenizer.signature() != signature:
                raise ConfigError(
                    f"{path}: its tokenizer differs from that of {paths[0]}; an ensemble's models must share one "
                    "vocabulary (train them on the same data with the same data settings)"
                )
            if _languages(path) != languages:
                raise ConfigError(f"{path}: translates {_languages(path)}, not {languages} like {paths[0]}")
            members.append(cast(Transformer, other.model))
        return cls(Ensemble(members), first.tokenizer, decode=first.decode)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_sources(self, sentences: list[str]) -> list[list[int]]:
        """Token ids + EOS, cut to what the model's positions allow (indices recorded in self.truncated)."""
        limit = self.model.config.max_len - 1
        self.truncated = []
        out = []
        for i, ids in enumerate(self.tokenizer.encode(sentences)):
            if len(ids) + 1 > limit:
                self.truncated.append(i)
                ids = ids[: limit - 1]
            out.append(ids + [EOS_ID])
        return out

    def _batches(self, sources: list[list[int]], batch_tokens: int) -> list[list[int]]:
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]), reverse=True)
        batches: list[list[int]] = []
        current: list[int] = []
        longest = 0
        for i in order:
            longest_if = max(longest, len(sources[i]))
            if current and longest_if * (len(current) + 1) > batch_tokens:
                batches.append(current)
                current, longest_if = [], len(sources[i])
            current.append(i)
            longest = longest_if
        if current:
            batches.append(current)
        return batches

    def _padded(self, sources: list[list[int]]) -> torch.Tensor:
        """(B, S) token ids padded with PAD, on the model's device."""
        src = torch.full((len(sources), max(len(x) for x in sources)), PAD_ID, dtype=torch.long)
        for row, ids in enumerate(sources):
            src[row, : len(ids)] = torch.tensor(ids)
        return src.to(self.device)

    @overload
    def translate_nbest(self, sentences: str, **kwargs: Any) -> list[Translation]: ...

    @overload
    def translate_nbest(self, sentences: Sequence[str], **kwargs: Any) -> list[list[Translation]]: ...

    def translate_nbest(self, sentences, **kwargs):
        """Per sentence, its `nbest` best translations, best first (see `_translate_nbest`). One string is one
        sentence: its list of translations comes back (a list of strings gets a list per sentence)."""
        if isinstance(sentences, str):
            return self._translate_nbest([sentences], **kwargs)[0]
        return self._translate_nbest(list(sentences), **kwargs)

    def _translate_nbest(
        self,
        sentences: list[str],
        *,
        beam: int | None = None,
        alpha: float | None = None,
        nbest: int = 1,
        batch_tokens: int | None = None,
        length_penalty: str | None = None,
        mbr: str | None = None,
        patience: float | None = None,
        progress: bool = False,
    ) -> list[list[Translation]]:
        """Per sentence, its `nbest` best translations, best first; an empty line gets an empty list. With `mbr`
        ("bleu"/"chrf"; default the run's decode.mbr) the beam's hypotheses are reordered by expected utility."""
        d = self.decode
        beam = d.beam if beam is None else beam
        alpha = d.alpha if alpha is None else alpha
        penalty = d.length_penalty if length_penalty is None else length_penalty
        batch_tokens = d.batch_tokens if batch_tokens is None else batch_tokens
        mbr = d.mbr if mbr is None else mbr
        patience = d.patience if patience is None else patience
        from ..config import ConfigError, check_patience

        if not 1 <= nbest <= beam:
            raise ConfigError(f"nbest ({nbest}) must be between 1 and the beam size ({beam})")
        keep, nbest = nbest, (beam if mbr != "none" else nbest)  # MBR chooses among all the beam finishes
        check_patience(patience, beam, nbest)
        results: list[list[Translation]] = [[] for _ in sentences]
        todo = [i for i, s in enumerate(sentences) if s.strip()]  # an empty line gets an empty translation
        sources = self.encode_sources([sentences[i] for i in todo])
        self.truncated = [todo[j] for j in self.truncated]
        was_training = self.model.training
        self.model.eval()
        bar = tqdm(total=len(sentences), unit="sent", disable=not progress, file=sys.stderr, leave=False)
        try:
            for batch in self._batches(sources, batch_tokens):
                src = self._padded([sources[i] for i in batch])
                search: dict[str, Any] = dict(
                    alpha=alpha, length_penalty_kind=penalty, max_len_a=d.max_len_a, max_len_b=d.max_len_b
                )
                if beam == 1 and nbest == 1:
                    hyps = greedy_search(self.model, src, **search)
                else:
                    hyps = beam_search(self.model, src, beam=beam, nbest=nbest, patience=patience, **search)
                for j, sent_hyps in zip(batch, hyps):
                    texts = self.tokenizer.decode([h.tokens for h in sent_hyps])
                    found = [Translation(t, h.score, h.tokens) for t, h in zip(texts, sent_hyps)]
                    results[todo[j]] = mbr_rerank(found, mbr)[:keep]
                bar.update(len(batch))
        finally:
            bar.close()
            self.model.train(was_training)
        return results

    @overload
    def translate(self, sentences: str, **kwargs: Any) -> str: ...

    @overload
    def translate(self, sentences: Sequence[str], **kwargs: Any) -> list[str]: ...

    def translate(self, sentences, **kwargs):
        """Translate raw sentences; returns raw translations in input order (empty input -> empty output). One
        string is one sentence: its translation comes back as a string."""
        if isinstance(sentences, str):
            return self.translate([sentences], **kwargs)[0]
        return [hyps[0].text if hyps else "" for hyps in self._translate_nbest(list(sentences), **kwargs)]

    @torch.no_grad()
    def attention(self, source: str, target: str | None = None) -> AttentionMaps:
        """Attention weights for `source` and `target` (default: the model's own translation, beam search).

        A teacher-forced forward pass over the translation gives exactly the weights seen while decoding it.
        """
        if isinstance(self.model, Ensemble):
            from ..config import ConfigError

            raise ConfigError("attention maps are drawn for one model, not an ensemble")
        if target is None:
            target = self.translate([source])[0]
        src_ids = self.encode_sources([source])[0]
        tgt_ids = self.tokenizer.encode([target])[0][: self.model.config.max_len - 1]
        src = torch.tensor([src_ids], device=self.device)
        tgt_in = torch.tensor([[BOS_ID] + tgt_ids], device=self.device)
        was_training = self.model.training
        self.model.eval()
        with self.model.recording_attention():
            self.model(src, tgt_in)
        self.model.train(was_training)
        stack = lambda mods: torch.stack([m.weights[0] for m in mods]).cpu()
        pieces = lambda ids: [self.tokenizer.sp.id_to_piece(int(i)) for i in ids]
        return AttentionMaps(
            source_pieces=pieces(src_ids[:-1]) + ["</s>"],
            target_pieces=["<s>"] + pieces(tgt_ids),
            encoder=stack([layer.self_attn for layer in self.model.encoder.layers]),
            decoder=stack([layer.self_attn for layer in self.model.decoder.layers]),
            cross=stack([layer.cross_attn for layer in self.model.decoder.layers]),
        )
