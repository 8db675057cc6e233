"""`Translator`: raw text in, raw text out, in input order. One path for `translate`, `evaluate` and validation."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast, overload

import numpy as np
import torch

from ..config import DecodeConfig
from ..config.memory import decoding_batch_tokens
from ..data.tokenizer import Tokenizer
from ..device import device_memory, pick_device
from ..model import Transformer
from ..runs import load_weights, open_run
from ..terminology import Constraints, Glossary
from . import front
from .ensemble import Ensemble
from .front import Decoded, PairScore, Translation
from .lexical import LexicalConstraint
from .search import beam_search, greedy_search, sample_search

__all__ = ["AttentionMaps", "Decoded", "PairScore", "Translation", "Translator"]


def _languages(path: str | Path) -> tuple[str, str]:
    """(source, target) language of a run directory or a weights file in one."""
    data = open_run(path, "translation").config.data
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


PRECISIONS = ("fp32", "bf16")


def decoding_autocast(precision: str, device: torch.device):
    """The arithmetic a Translator decodes and scores in: "fp32", or "bf16" (bfloat16 autocast: matrix products in
    bfloat16, log-softmax and the search's scores in float32), on a CPU only where it computes bfloat16 natively
    (avx512_bf16 / amx_bf16; elsewhere torch emulates it many times slower than float32) or on CUDA."""
    from ..config import ConfigError
    from ..model import cpu_speed

    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r} ({', '.join(PRECISIONS)})")
    if precision == "bf16":
        cpu_speed.refuse_emulated_bf16(device, "--precision bf16", "fp32")
    if precision == "fp32":
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16)  # training/precision.py is a layer above


class _Remembering:
    """A model for the search that keeps what its encoder computed (`memory`): the word links of the hypotheses are
    read over it afterwards, without running the encoder a second time."""

    def __init__(self, model: Transformer | Ensemble) -> None:
        self.model = model
        self.memory: Any = None  # (B, S, D), or an ensemble's list of them

    def encode(self, src: torch.Tensor):
        self.memory = self.model.encode(src)
        return self.memory

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


class Translator:
    def __init__(
        self,
        model: Transformer | Ensemble,
        tokenizer: Tokenizer,
        *,
        decode: DecodeConfig | None = None,
        precision: str = "fp32",
        language: str = "",
    ) -> None:
        if tokenizer.vocab_size != model.config.vocab_size:
            raise ValueError(f"tokenizer has {tokenizer.vocab_size} pieces, the model {model.config.vocab_size}")
        c, special = model.config, tokenizer.special
        if (c.pad_id, c.bos_id, c.eos_id) != (special.pad, special.bos, special.eos):
            raise ValueError(
                f"the tokenizer's special ids (pad, bos, eos) = {(special.pad, special.bos, special.eos)} differ "
                f"from the model's {(c.pad_id, c.bos_id, c.eos_id)}"
            )
        self.model, self.tokenizer = model, tokenizer
        self.decode = decode or DecodeConfig()
        self.precision = precision  # "fp32" or "bf16": what decoding and scoring compute in (decoding_autocast)
        self._autocast = decoding_autocast(precision, self.device)
        self.language = language  # the source language: split="sentences" splits by its rules ("": English's)

    @classmethod
    def from_run(cls, path: str | Path, *, device: str = "auto", precision: str = "fp32") -> Translator:
        """Load config, tokenizer and weights (safetensors) from a run directory or a weights file in one.
        `precision` "bf16" decodes and scores in bfloat16 autocast (decoding_autocast)."""
        run = open_run(path, "translation")
        model = Transformer(run.config.model)
        load_weights(model, run.weights)
        model.to(pick_device(device)).eval()
        config = run.config
        return cls(model, run.tokenizer(), decode=config.decode, precision=precision, language=config.data.src)

    @classmethod
    def from_runs(cls, paths: list[str | Path], *, device: str = "auto", precision: str = "fp32") -> Translator:
        """One run (from_run), or an ensemble of several (decoding/ensemble.py): the first run gives the decoding
        settings and the tokenizer; every other run must have the same vocabulary (Tokenizer.signature: pieces,
        scores and tokenizer settings) and languages."""
        from ..config import ConfigError

        if len(paths) == 1:
            return cls.from_run(paths[0], device=device, precision=precision)
        first = cls.from_run(paths[0], device=device, precision=precision)
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
        return cls(
            Ensemble(members), first.tokenizer, decode=first.decode, precision=precision, language=first.language
        )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_sources(self, sentences: list[str], tag: str = "") -> list[list[int]]:
        """Token ids + EOS (the tag's id first, if any), cut to what the model's positions allow
        (`front.source_ids`)."""
        return self._cut_sources(sentences, tag)[0]

    def _cut_sources(self, sentences: list[str], tag: str = "") -> tuple[list[list[int]], list[int]]:
        sources, cut = front.source_ids(self.tokenizer, sentences, self.model.config.max_len, tag)
        return [ids + [self.tokenizer.special.eos] for ids in sources], cut

    def _engine(self, settings: front.Options) -> front.Engine:
        """What front.decode_lines searches with: `settings`' searches in batches of `batch_tokens`, lowered where a
        batch's search could not fit the device's memory (config/memory.py); links read by the model's rule."""
        members = len(self.model.members) if isinstance(self.model, Ensemble) else 1
        available = device_memory(next(self.model.parameters()).device)[0]
        budget = decoding_batch_tokens(self.model.config, beam=settings.beam, members=members,
                                       batch_tokens=settings.batch_tokens, available=available)  # fmt: skip
        return front.Engine(
            tokenizer=self.tokenizer,
            max_len=self.model.config.max_len,
            language=self.language,
            search=lambda sources, lines, steering: self._search(sources, lines, settings, steering),
            groups=lambda sources: self._batches([[0] * (len(ids) + 1) for ids in sources], budget),
            align=self.alignments,
            link_rule=self._aligning_model().config.alignment_links,
        )

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
        pad = self.tokenizer.special.pad
        src = torch.full((len(sources), max(len(x) for x in sources)), pad, dtype=torch.long)
        for row, ids in enumerate(sources):
            src[row, : len(ids)] = torch.tensor(ids)
        return src.to(self.device)

    @overload
    def translate_nbest(self, sentences: str, **kwargs: Any) -> list[Translation]: ...

    @overload
    def translate_nbest(self, sentences: Sequence[str], **kwargs: Any) -> list[list[Translation]]: ...

    def translate_nbest(self, sentences, **kwargs):
        """Per sentence, its `nbest` best translations, best first (see `decode_lines`). One string is one
        sentence: its list of translations comes back (a list of strings gets a list per sentence)."""
        if isinstance(sentences, str):
            return self.decode_lines([sentences], **kwargs).hypotheses[0]
        return self.decode_lines(sentences, **kwargs).hypotheses

    def decode_lines(
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
        sampling_topk: int | None = None,
        sampling_topp: float | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        tag: str | None = None,
        split: str = "lines",
        alignment: bool = False,
        constraints: Sequence[Constraints | None] | None = None,
        prefixes: Sequence[str | None] | None = None,
        glossary: Glossary | None = None,
        progress: bool = False,
    ) -> Decoded:
        """Per line, its `nbest` best translations, best first (an empty line gets an empty list), and which lines
        held a sentence too long for the model's positions (cut into parts, each translated). Options left None are
        the run's decode.* settings; with `mbr` ("bleu"/"chrf") the beam's hypotheses are reordered by expected
        utility (decoding/front.py). A `sampling_topk` other than 1 samples one translation per sentence
        (DecodeConfig.sampling_topk, search.sample_search). A `tag` (one of data.corpora's, e.g. "<2de>") is put
        before every source. `split` "sentences" takes each line as a paragraph (documents/sentences.py);
        `alignment` also gives each translation's word links (Translation.alignment; model/alignment.py).
        Terminology (decoding/steering.py, decoding/lexical.py): `constraints` per line (terminology.Constraints:
        phrases that must appear, phrases that must not), `prefixes` per line (the translation starts with it), a
        `glossary` (terminology.Glossary: its terms found in a sentence become phrases that must appear)."""
        settings = front.options(
            self.decode,
            beam=beam,
            alpha=alpha,
            nbest=nbest,
            batch_tokens=batch_tokens,
            length_penalty=length_penalty,
            mbr=mbr,
            patience=patience,
            sampling_topk=sampling_topk,
            sampling_topp=sampling_topp,
            temperature=temperature,
            seed=seed,
            tag=tag,
            split=split,
            alignment=alignment,
        )
        engine = self._engine(settings)
        was_training = self.model.training
        self.model.eval()
        try:
            with self._autocast():
                requests = front.Requests(constraints, prefixes, glossary)
                return front.decode_lines(sentences, settings, engine, progress=progress, requests=requests)
        finally:
            self.model.train(was_training)

    def pair_alignments(
        self, sources: Sequence[str], targets: Sequence[str], *, tag: str = ""
    ) -> list[list[tuple[int, int]]]:
        """The word links of given (source, target) pairs (0-based source word - target word, words split at
        whitespace), read from the alignment attention as `decode_lines(alignment=True)` reads a translation's."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
        was_training = self.model.training
        self.model.eval()
        try:
            with self._autocast():
                pairs = (list(sources), list(targets))
                rule, max_len = self._aligning_model().config.alignment_links, self.model.config.max_len
                return front.pair_links(self.tokenizer, self.alignments, pairs, max_len=max_len, tag=tag, rule=rule)
        finally:
            self.model.train(was_training)

    @torch.inference_mode()
    def alignments(self, sources: list[list[int]], targets: list[list[int]]) -> list[np.ndarray]:
        """Per (source ids without EOS, target ids without EOS) pair, its alignment attention (model/alignment.py)
        (T, S), end of sentence excluded: one teacher-forced pass (the search's own weights; with
        model.full_context_alignment, the whole target in view; with model.alignment_head, its head's). An
        ensemble's are its first model's. A tag (the source's first id) is a position like any other:
        documents/words.py skips it."""
        out: list[np.ndarray] = [np.zeros((0, 0), np.float32) for _ in sources]
        eos = self.tokenizer.special.eos
        for batch in self._batches([[0] * max(len(s), len(t)) for s, t in zip(sources, targets)], 4096):
            src = self._padded([sources[i] + [eos] for i in batch])  # (B, S)
            memory = self._aligning_model().encode(src)  # (B, S, D)
            for i, weights in zip(batch, self._attention(memory, src, [targets[i] for i in batch])):
                out[i] = weights
        return out

    def _aligning_model(self) -> Transformer:
        return cast(Transformer, self.model.members[0] if isinstance(self.model, Ensemble) else self.model)

    def _attention(self, memory: torch.Tensor, src: torch.Tensor, targets: list[list[int]]) -> list[np.ndarray]:
        """Per row of `src` (B, S; EOS and padding after the pieces) and its target ids, the alignment attention
        (T_i, S_i) over the pieces (`alignments`)."""
        from ..model.alignment import alignment_weights

        model, special = self._aligning_model(), self.tokenizer.special
        tgt_in = self._padded([[special.bos] + ids for ids in targets])  # (B, T)
        weights = alignment_weights(model, tgt_in, memory, src)  # (B, T, S)
        lengths = src.ne(special.pad).sum(1).tolist()  # pieces + EOS
        out = []
        for row, ids in enumerate(targets):
            pieces = lengths[row] - 1
            out.append(weights[row, : len(ids), :pieces].float().cpu().numpy())  # (T_i, S_i): EOS and padding cut
        return out

    def _search(
        self, sources: list[list[int]], lines: list[int], settings: front.Options, steering: list | None = None
    ) -> list[list[Translation]]:
        """One batch through greedy, sampling or beam search: per source its `settings.nbest` hypotheses, best
        first; `lines` are the sources' indices in the input (each seeds its sentence's draws when sampling);
        `steering` per source its lexical constraints and prefix (decoding/lexical.py): beam search, even of 1."""
        eos = self.tokenizer.special.eos
        d, src = self.decode, self._padded([ids + [eos] for ids in sources])  # (B, S): pieces + EOS
        model = _Remembering(self.model) if settings.alignment else self.model
        search: dict[str, Any] = dict(
            alpha=settings.alpha,
            length_penalty_kind=settings.length_penalty,
            max_len_a=d.max_len_a,
            max_len_b=d.max_len_b,
        )
        if steering is not None:
            lexical = LexicalConstraint(steering, eos=eos, device=src.device)
            hyps = beam_search(
                model,
                src,
                beam=settings.beam,
                nbest=settings.nbest,
                patience=settings.patience,
                lexical=lexical,
                **search,
            )
        elif settings.sampling is not None:
            hyps = sample_search(model, src, sampling=settings.sampling, sentences=lines, **search)
        elif settings.beam == 1 and settings.nbest == 1:
            hyps = greedy_search(model, src, **search)
        else:
            hyps = beam_search(
                model, src, beam=settings.beam, nbest=settings.nbest, patience=settings.patience, **search
            )
        out = []
        for sent_hyps in hyps:
            texts = self.tokenizer.decode([h.tokens for h in sent_hyps])
            out.append([Translation(t, h.score, h.tokens) for t, h in zip(texts, sent_hyps)])
        if isinstance(model, _Remembering):  # the links, over the search's own encoder output (not computed again)
            self._point_hypotheses(out, model.memory, src)
        return out

    @torch.inference_mode()
    def _point_hypotheses(self, found: list[list[Translation]], memory: Any, src: torch.Tensor) -> None:
        """Each hypothesis's `attention` (front.Translation): `_attention` over the rows of `memory` (an ensemble's:
        its first model's) of the sentences the hypotheses belong to."""
        memory = memory[0] if isinstance(memory, list) else memory  # (B, S, D)
        rows = torch.tensor([r for r, sent in enumerate(found) for _ in sent], dtype=torch.long, device=src.device)
        flat = [h for sent in found for h in sent]
        if flat:
            targets = [h.tokens for h in flat]
            weights = self._attention(memory.index_select(0, rows), src.index_select(0, rows), targets)
            for h, attention in zip(flat, weights):
                h.attention = attention

    @overload
    def translate(self, sentences: str, **kwargs: Any) -> str: ...

    @overload
    def translate(self, sentences: Sequence[str], **kwargs: Any) -> list[str]: ...

    def translate(self, sentences, **kwargs):
        """Translate raw sentences; returns raw translations in input order (empty input -> empty output). One
        string is one sentence: its translation comes back as a string."""
        if isinstance(sentences, str):
            return self.translate([sentences], **kwargs)[0]
        return [hyps[0].text if hyps else "" for hyps in self.decode_lines(sentences, **kwargs).hypotheses]

    def translate_document(self, text: str, format: str = "text", **kwargs: Any) -> str:
        """A whole document translated, its layout kept: "text" (a paragraph a line), "html" or "xml" (markup kept,
        inline tags moved with their aligned words), "srt" or "vtt" (cue numbers and timings kept); `kwargs` are
        decode_lines' (beam, alpha, tag, split, ...). See decoding/documents.py."""
        from .documents import translate_document

        return translate_document(self, text, format, **kwargs).text

    @overload
    def score(  # type: ignore[overload-overlap]  # a str is a Sequence[str]: the str overload comes first
        self, sources: str, targets: str, *, batch_tokens: int | None = ..., tokens: bool = ..., tag: str = ...
    ) -> PairScore: ...

    @overload
    def score(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        *,
        batch_tokens: int | None = ...,
        tokens: bool = ...,
        tag: str = ...,
    ) -> list[PairScore]: ...

    def score(self, sources, targets, *, batch_tokens: int | None = None, tokens: bool = False, tag: str = ""):
        """The model's log-probability of each given (source, target) pair, teacher-forced: log P(Y | X) summed over
        the target's tokens and EOS (no length penalty), as the search's `log_prob` counts it (log-softmax over the
        whole vocabulary). Pairs go through in batches by length (`batch_tokens`, default decode.batch_tokens);
        a batch's padding never changes a score (the masks hide it). `tokens`: also each token's log-probability.
        `tag`: put before every source, as `translate --tag` does. A side longer than the model's positions is
        scored on its first pieces (PairScore.cut says so). Two strings are one pair: its PairScore comes back.
        The input is checked as `translate`'s is (front.check_pairs)."""
        if isinstance(sources, str) and isinstance(targets, str):
            return self.score([sources], [targets], batch_tokens=batch_tokens, tokens=tokens, tag=tag)[0]
        sources, targets, budget = front.check_pairs(self.decode, sources, targets, batch_tokens)
        src_ids, tgt_ids, cut = front.pair_ids(self.tokenizer, (sources, targets), self.model.config.max_len, tag)
        eos, was_cut = self.tokenizer.special.eos, set(cut)
        src_ids, tgt_ids = [ids + [eos] for ids in src_ids], [ids + [eos] for ids in tgt_ids]
        longest = [max(len(s), len(t)) for s, t in zip(src_ids, tgt_ids)]
        results: list[PairScore | None] = [None] * len(src_ids)
        was_training = self.model.training
        self.model.eval()
        try:
            with self._autocast():
                for batch in self._batches([[0] * n for n in longest], budget):
                    per_token = self._teacher_forced([src_ids[i] for i in batch], [tgt_ids[i] for i in batch])
                    for i, lp in zip(batch, per_token):
                        total = float(sum(lp))
                        results[i] = PairScore(total, len(lp), total / len(lp), lp if tokens else None, i in was_cut)
        finally:
            self.model.train(was_training)
        return cast(list[PairScore], results)

    @torch.inference_mode()
    def _teacher_forced(self, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
        """Per pair, the log-probability of each target token (EOS last) given the source and the tokens before."""
        src = self._padded(sources)  # (B, S)
        tgt = self._padded(targets)  # (B, T) target + EOS, PAD after
        tgt_in = torch.cat([torch.full_like(tgt[:, :1], self.tokenizer.special.bos), tgt[:, :-1]], dim=1)  # (B, T)
        if not isinstance(self.model, Ensemble):  # the logits of the real target positions only (no padding), and
            # log p(y_t) = z_{y_t} - logsumexp(z) without a whole log-softmax
            positions = (tgt.reshape(-1) != self.tokenizer.special.pad).nonzero().squeeze(1)  # row by row, in order
            logits = self.model(src, tgt_in, positions).float()  # (N, V)
            wanted = tgt.reshape(-1)[positions]
            flat = (logits.gather(1, wanted.unsqueeze(1)).squeeze(1) - torch.logsumexp(logits, dim=-1)).tolist()
            out, at = [], 0
            for ids in targets:
                out.append(flat[at : at + len(ids)])
                at += len(ids)
            return out
        models = self.model.members
        lprobs = torch.stack([torch.log_softmax(m(src, tgt_in).float(), dim=-1) for m in models])  # (M, B, T, V)
        # an ensemble's distribution is its members' mean (decoding/ensemble.py)
        lprobs = torch.logsumexp(lprobs, dim=0) - math.log(len(models))  # (B, T, V)
        picked = lprobs.gather(2, tgt.unsqueeze(2)).squeeze(2)  # (B, T)
        return [row[: len(ids)] for row, ids in zip(picked.tolist(), targets)]

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
        tgt_ids = self.tokenizer.encode_target([target])[0][: self.model.config.max_len - 1]
        src = torch.tensor([src_ids], device=self.device)
        tgt_in = torch.tensor([[self.tokenizer.special.bos] + tgt_ids], device=self.device)
        was_training = self.model.training
        self.model.eval()
        with self.model.recording_attention(), self._autocast():  # the arithmetic the translation was made in
            self.model(src, tgt_in)
        self.model.train(was_training)
        stack = lambda mods: torch.stack([m.weights[0] for m in mods]).cpu()
        pieces = lambda ids: [self.tokenizer.id_to_piece(int(i)) for i in ids]
        return AttentionMaps(
            source_pieces=pieces(src_ids[:-1]) + ["</s>"],
            target_pieces=["<s>"] + pieces(tgt_ids),
            encoder=stack([layer.self_attn for layer in self.model.encoder.layers]),
            decoder=stack([layer.self_attn for layer in self.model.decoder.layers]),
            cross=stack([layer.cross_attn for layer in self.model.decoder.layers]),
        )
