"""`CTranslate2Translator`: translate, score and align with a folder written by `export_ctranslate2` (ctranslate2.py),
through the interface of `transduce.decoding.translator.Translator`.

Decoding: what is the same in both engines and what is not.
    - Length penalty: our "length" (score = log P / |Y|^alpha) is CTranslate2's `length_penalty=alpha`, with |Y|
      counting EOS in both (the engine is asked to keep the end token, `return_end_token=True`, which makes its
      lengths count it; we strip it from the output). "none" is `length_penalty=0`. Our "gnmt",
      ((5 + |Y|) / 6)^alpha, has no counterpart in the engine's beam search: asking for it there raises ValueError.
    - Greedy search (beam 1): the engine returns the raw log-probability (`length_penalty=0`) and we divide it by
      our penalty, any of the three, as `search.greedy_search` does (greedy's tokens do not depend on it).
    - Maximum output length |x| + 50 (decode.max_len_a * |x| + decode.max_len_b, at most max_len - 1, counting
      EOS): the engine takes one maximum per call. By default all sentences go through one call with the maximum of
      the longest source (a sentence may then run past its own |x| + 50, never past max_len - 1); with `exact=True`
      sentences are decoded in groups of equal source length, each with its own maximum. We force EOS at the last
      position; the engine is given one step less and stops there, which gives the same tokens.
    - PAD and BOS are never produced: we mask them after the log-softmax, the engine (`suppress_sequences`) before
      it, so its log-probabilities are renormalised over the other tokens and its scores are a little higher, by
      -log(1 - p(PAD) - p(BOS)) per step. Not negligible by construction: with tied embeddings PAD's row stays zero,
      so its logit is 0 (on the tests' toy model, up to 0.2% of a sentence's score).
    - Beam search: both expand 2 x beam candidates per sentence and step, finish a hypothesis only when its EOS is
      among the top `beam` candidates, and keep the `beam` best that do not end in EOS. The engine ends a sentence
      once beam x patience hypotheses have finished and returns the best of those by normalised score; ours stops
      once no unfinished hypothesis can beat its n-best. While both run, their unfinished hypotheses are the same;
      so, apart from rounding and the renormalisation above, the engine's best translation never has a higher
      model score than ours (tested where they differ). The default is the engine's own patience, 1 (its speed);
      `exact=True` uses 4: on the tests' 250-update model, patience 1 / 2 / 4 gave 64 / 69 / 70 of 70 toy sentences
      identical to ours with the "length" penalty (70 / 70 / 70 with "none"; measured 2026-11-23; the tests assert
      30 of 30 at patience 4 with `exact=True`).
      A hypothesis that reaches the maximum length counts its forced EOS in |Y| with us, not in the engine.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np

from ..config import Config, ConfigError, DecodeConfig, config_from_dict
from ..config.bounds import check_value
from ..data.marian import load_tokenizer
from ..data.tokenizer import Tokenizer
from ..decoding import front
from ..decoding.front import Decoded, PairScore, Translation
from ..decoding.search import Sampling, length_penalty
from ..outputs import MANIFEST, read_manifest
from ..runs import find_weights
from .ctranslate2 import ExportError, _ctranslate2, _pieces, export_ctranslate2, is_export


@dataclasses.dataclass(frozen=True)
class _Search:
    """One call's search settings: the engine's options and how to score a greedy hypothesis."""

    engine: dict
    greedy: bool
    penalty: str
    alpha: float

    def score(self, log_prob: float, length: int) -> float:
        """The reported score. Beam: the engine's, log P / |Y|^alpha. Greedy: log P / lp(|Y|) with our penalty
        (any of gnmt, length, none: greedy's tokens do not depend on it), |Y| counting EOS, as `greedy_search`."""
        if not self.greedy:
            return log_prob
        return log_prob / float(length_penalty(float(length), kind=self.penalty, alpha=self.alpha))


NO_CONSTRAINTS = "CTranslate2 has no lexical constraints (its issue #739)"  # every refusal of them says so
ENGINE_MIN_TEMPERATURE = 1e-6  # the lowest sampling temperature handed to CTranslate2 (see _search)


def _search(
    *, beam: int, nbest: int, alpha: float, penalty: str, patience: float, sampling: Sampling | None = None
) -> _Search:
    """`translate_batch` options that give our search's semantics (see the module docstring)."""
    if penalty not in ("gnmt", "length", "none"):
        raise ConfigError(f"unknown length penalty {penalty!r} (gnmt, length, none)")
    if beam > 1 and penalty == "gnmt":
        raise ConfigError(
            "CTranslate2 has no GNMT length penalty ((5 + |Y|) / 6)^alpha for beam search; use "
            "length_penalty='length' (|Y|^alpha, the form both engines share) or 'none'"
        )
    exponent = alpha if penalty == "length" and beam > 1 else 0.0  # greedy: the raw log P, penalised by us
    engine = {
        "beam_size": beam,
        "num_hypotheses": nbest,
        "length_penalty": exponent,
        "patience": patience,
        "return_scores": True,
        "return_end_token": True,
        "min_decoding_length": 0,
        "max_input_length": 0,
    }
    if sampling is not None:  # the engine's names for the same settings
        engine.update(
            sampling_topk=sampling.topk,
            sampling_topp=sampling.topp,
            # the engine divides the logits by T in float32: below ENGINE_MIN_TEMPERATURE they overflow to inf and
            # NaN; so low a temperature draws among the best-scored tokens only, as a lower one would
            sampling_temperature=max(sampling.temperature, ENGINE_MIN_TEMPERATURE),
        )
    return _Search(engine, beam == 1, penalty, alpha)


class CTranslate2Translator:
    """`Translator`'s interface (translate, translate_nbest) on a CTranslate2 export.

    `CTranslate2Translator(folder)` loads a folder written by `export_ctranslate2`; `from_run(path)` accepts either
    such a folder or a run directory (or weights file), which it exports into a temporary folder, loads, and
    deletes (the engine and SentencePiece keep their models in memory). The defaults are the run's [decode]
    settings, except that a run decoding with the GNMT length penalty gets "length" (|Y|^alpha), the form both
    engines share, for beam search (`self.decode` says which).

    Two ways to drive the engine. The default runs at the engine's speed: a whole input in one `translate_batch`
    call (the engine batches and sorts by length itself, `batch_tokens` tokens a batch), patience 1, the maximum
    output length of the longest source. `exact=True` reproduces our search's output: one call per source length
    (each its own maximum) and patience 4 (the engine ends a sentence after beam x patience finished hypotheses;
    4 decodes a little longer and brings it to our search's result, see above). `patience` overrides either.
    Thread-safe as the engine is.
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        decode: DecodeConfig | None = None,
        device: str = "cpu",
        compute_type: str | None = None,
        threads: int = 0,
        exact: bool = False,
        patience: float | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        ct2 = _ctranslate2()
        folder = Path(folder)
        if not is_export(folder):
            raise ExportError(f"{folder}: not a transduce CTranslate2 export (no {MANIFEST})")
        self.manifest = read_manifest(folder) or {}
        self.max_len = self.manifest["model"]["max_len"]
        check_value("model.max_len", self.max_len, name=f"{folder / MANIFEST}: model.max_len", kind=int)
        if decode is None:  # the export's decode settings, read as a run's config.json is (keys, types, bounds)
            decode = config_from_dict({"decode": self.manifest["decode"]}, Config).decode
            if decode.length_penalty == "gnmt":
                decode = dataclasses.replace(decode, length_penalty="length")
        self.decode = decode
        self.tokenizer = tokenizer or load_tokenizer(folder / "tokenizer.model")
        self.pieces = json.loads((folder / "shared_vocabulary.json").read_text(encoding="utf-8"))
        if self.pieces != _pieces(self.tokenizer):
            raise ExportError(f"{folder}: the vocabulary does not match the SentencePiece model")
        self.piece_ids = {piece: i for i, piece in enumerate(self.pieces)}
        self.compute_type = compute_type or _compute_type(ct2, self.manifest.get("quantization"), device)
        self.engine = ct2.Translator(str(folder), device=device, compute_type=self.compute_type, intra_threads=threads)
        self.exact = exact
        self.patience = (4.0 if exact else 1.0) if patience is None else patience

    @classmethod
    def from_run(cls, path: str | Path, *, quantization: str | None = None, **kwargs) -> CTranslate2Translator:
        """An export folder, or a run directory / weights file exported on the fly into a temporary folder."""
        if is_export(path):
            return cls(path, **kwargs)
        with tempfile.TemporaryDirectory(prefix="transduce-ct2-") as tmp:
            folder = export_ctranslate2(path, Path(tmp) / "model", quantization=quantization)
            run_dir, _ = find_weights(path)
            return cls(folder, tokenizer=load_tokenizer(run_dir / "tokenizer.model"), **kwargs)

    def encode_sources(self, sentences: list[str], tag: str = "") -> list[list[int]]:
        """Token ids (without EOS: the engine adds it), tagged and cut as `Translator.encode_sources` does."""
        return self._cut_sources(sentences, tag)[0]

    def _cut_sources(self, sentences: list[str], tag: str = "") -> tuple[list[list[int]], list[int]]:
        return front.source_ids(self.tokenizer, sentences, self.max_len, tag)

    def max_output(self, source_length: int) -> int:
        """Output tokens allowed, EOS included: `search._max_lengths`'s rule, in the same float32 arithmetic."""
        d = self.decode
        length = int(np.float32(d.max_len_a) * np.float32(source_length) + np.float32(d.max_len_b))
        return min(max(length, 1), self.max_len - 1)

    def translate_nbest(self, sentences: list[str], **kwargs) -> list[list[Translation]]:
        """Per sentence, its `nbest` best translations, best first (see `decode_lines`)."""
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
        sampling_topk: int | None = None,
        sampling_topp: float | None = None,
        temperature: float | None = None,
        seed: int | None = None,
        tag: str | None = None,
        split: str = "lines",
        alignment: bool = False,
        constraints=None,
        prefixes: list[str | None] | None = None,
        glossary=None,
        progress: bool = False,
    ) -> Decoded:
        """`Translator.decode_lines` (decoding/front.py) on the engine; its patience is this translator's.
        Sampling uses the engine's own sampler and random generator (`ctranslate2.set_random_seed(seed)`): the same
        settings, not the same draws as the torch engine, nor independent of the batching. `prefixes` go to the
        engine's `target_prefix`; constraints and glossaries are refused (CTranslate2 has no lexical constraints)."""
        if any(c for c in constraints or ()) or (glossary is not None and len(glossary)):
            raise ConfigError(f"{NO_CONSTRAINTS}: constraints and glossaries need --engine torch; it takes a prefix")
        settings = front.options(
            self.decode,
            beam=beam,
            alpha=alpha,
            nbest=nbest,
            batch_tokens=batch_tokens,
            length_penalty=length_penalty,
            mbr=mbr,
            patience=self.patience,
            sampling_topk=sampling_topk,
            sampling_topp=sampling_topp,
            temperature=temperature,
            seed=seed,
            tag=tag,
            split=split,
            alignment=alignment,
        )
        if settings.alignment and self.align_refusal:  # before the search, not after it
            raise ExportError(self.align_refusal)
        if settings.sampling is not None:
            _ctranslate2().set_random_seed(settings.sampling.seed)
        requests = front.Requests(prefixes=prefixes)
        return front.decode_lines(sentences, settings, self._engine(settings), progress=progress, requests=requests)

    def _engine(self, settings: front.Options) -> front.Engine:
        """What front.decode_lines searches with: the engine's search of `settings` (a steering's prefix as its
        target_prefix), one call per `_calls` group, links by the export's rule."""
        search = _search(
            beam=settings.beam,
            nbest=settings.nbest,
            alpha=settings.alpha,
            patience=settings.patience,
            penalty=settings.length_penalty,
            sampling=settings.sampling,
        )

        def decode(sources: list[list[int]], lines: list[int], steering) -> list[list[Translation]]:  # lines: RNG
            longest = max(len(ids) for ids in sources)
            prefixes = _prefixes(steering, len(sources))
            return self._decode(sources, self.max_output(longest), settings.batch_tokens, search, prefixes)

        language = self.manifest.get("languages", {}).get("source", "")
        return front.Engine(
            self.tokenizer, self.max_len, language, decode, self._calls, self.alignments, self.link_rule
        )

    @property
    def align_refusal(self) -> str:
        """Why the engine cannot give the model's word alignments, "" when it can."""
        model = self.manifest["model"]
        if "alignment_layer" not in model:
            return "this export predates word alignments (its alignment heads are unknown): export again"
        if model.get("full_context_alignment"):
            return (
                "this model reads word alignments with the full target in view (model.full_context_alignment), "
                "which CTranslate2 cannot give: align with the run itself (--engine torch)"
            )
        if model.get("alignment_head"):
            return (
                "this model reads word alignments from an alignment head of its own (model.alignment_head), which "
                "CTranslate2 cannot run: align with the run itself (--engine torch)"
            )
        return ""

    @property
    def can_align(self) -> bool:
        """Whether the engine gives the model's word alignments (`align_refusal` says why not)."""
        return not self.align_refusal

    def pair_alignments(self, sources: list[str], targets: list[str], *, tag: str = "") -> list[list[tuple[int, int]]]:
        """`Translator.pair_alignments` on the engine."""
        pairs, rule = (sources, targets), self.link_rule
        return front.pair_links(self.tokenizer, self.alignments, pairs, max_len=self.max_len, tag=tag, rule=rule)

    @property
    def link_rule(self) -> str:
        """How word links are read from the weights (model.alignment_links; exports made before it: "pieces")."""
        return self.manifest["model"].get("alignment_links", "pieces")

    def alignments(self, sources: list[list[int]], targets: list[list[int]]) -> list[np.ndarray]:
        """`Translator.alignments` through the engine's `return_attention` (the export's decoder has the run's
        alignment layer and heads): each target forced as the prefix of a one-step search."""
        if self.align_refusal:
            raise ExportError(self.align_refusal)
        results = self.engine.translate_batch(
            [[self.pieces[i] for i in ids] for ids in sources],
            target_prefix=[[self.pieces[i] for i in ids] for ids in targets],
            max_decoding_length=max(map(len, targets), default=0) + 1,
            max_batch_size=self.decode.batch_tokens,
            batch_type="tokens",
            beam_size=1,
            return_attention=True,
            max_input_length=0,
        )
        out = []
        for ids, target, result in zip(sources, targets, results):
            weights = np.asarray(result.attention[0], dtype=np.float32)  # (T', S): a row per output token
            out.append(weights[: len(target), : len(ids)])
        return out

    def _calls(self, sources: list[list[int]]) -> list[list[int]]:
        """Positions in `sources` per engine call: all in one (the default), or one call per source length, longest
        first (`exact`: each length its own maximum output)."""
        if not self.exact:
            return [list(range(len(sources)))] if sources else []
        groups: dict[int, list[int]] = {}
        for j, ids in enumerate(sources):
            groups.setdefault(len(ids), []).append(j)
        return [groups[length] for length in sorted(groups, reverse=True)]

    def translate(self, sentences: list[str], **kwargs) -> list[str]:
        """Translate raw sentences; returns raw translations in input order (empty input -> empty output)."""
        return [hyps[0].text if hyps else "" for hyps in self.translate_nbest(sentences, **kwargs)]

    def _decode(
        self,
        sources: list[list[int]],
        max_output: int,
        batch_tokens: int,
        search: _Search,
        prefixes: list[list[int]] | None = None,
    ) -> list[list[Translation]]:
        """Sources of one length through the engine; hypotheses back to our ids and text. `prefixes`: per source
        the ids its output starts with (the engine's target_prefix)."""
        longest_prefix = max(map(len, prefixes or [[]]))
        if longest_prefix + 1 > max_output:
            raise ConfigError(f"a prefix of {longest_prefix} tokens and EOS exceed the output limit {max_output}")
        if max_output <= 1:  # only EOS fits: we force it at once, the engine cannot be asked for 0 steps
            return [[Translation("", 0.0, [])] for _ in sources]
        given = {"target_prefix": [[self.pieces[i] for i in ids] for ids in prefixes or []]} if longest_prefix else {}
        results = self.engine.translate_batch(
            [[self.pieces[i] for i in ids] for ids in sources],
            max_decoding_length=max_output - 1,
            **given,
            max_batch_size=batch_tokens,
            batch_type="tokens",
            suppress_sequences=self._suppressed(),
            **search.engine,
        )
        eos = self.pieces[self.tokenizer.special.eos]
        out = []
        for result in results:
            hyps = []
            for tokens, score in zip(result.hypotheses, result.scores):
                ids = [self.piece_ids[t] for t in (tokens[:-1] if tokens and tokens[-1] == eos else tokens)]
                hyps.append((ids, search.score(float(score), len(ids) + 1)))  # EOS: generated, or ours forced
            texts = self.tokenizer.decode([ids for ids, _ in hyps])
            out.append([Translation(text, score, ids) for text, (ids, score) in zip(texts, hyps)])
        return out

    def score(
        self,
        sources: list[str],
        targets: list[str],
        *,
        batch_tokens: int | None = None,
        tokens: bool = False,
        tag: str = "",
    ) -> list[PairScore]:
        """`Translator.score` on the engine's `score_batch`: its log-probability of each target token, EOS
        included (the engine adds EOS to both sides), summed. Input checked and cut as Translator.score's."""
        sources, targets, budget = front.check_pairs(self.decode, sources, targets, batch_tokens)
        src_ids, tgt_ids, cut = front.pair_ids(self.tokenizer, (sources, targets), self.max_len, tag)
        results = self.engine.score_batch(
            [[self.pieces[i] for i in ids] for ids in src_ids],
            [[self.pieces[i] for i in ids] for ids in tgt_ids],
            max_batch_size=budget,
            batch_type="tokens",
            max_input_length=0,
        )
        out, was_cut = [], set(cut)
        for j, result in enumerate(results):
            lp = [float(x) for x in result.log_probs]
            out.append(PairScore(sum(lp), len(lp), sum(lp) / len(lp), lp if tokens else None, j in was_cut))
        return out

    def _suppressed(self) -> list[list[str]]:
        """PAD and BOS, which our search never produces either."""
        special = self.tokenizer.special
        return [[self.pieces[special.pad]], [self.pieces[special.bos]]]


def _prefixes(steering, n: int) -> list[list[int]] | None:
    """Per source the prefix's ids (empty where none), or None when no source has one."""
    if steering is None or not any(s is not None and s.prefix for s in steering):
        return None
    return [list(s.prefix) if s is not None else [] for s in steering][:n]


def _compute_type(ct2: ModuleType, quantization: str | None, device: str) -> str:
    """The engine's compute type: the exported weight type when the device computes in it, else "default" (the
    engine converts to a type it does compute in, e.g. float16 to float32 on a CPU, and logs a warning)."""
    if quantization is None:
        return "float32"
    if device == "auto":
        device = "cuda" if ct2.get_cuda_device_count() > 0 else "cpu"
    return quantization if quantization in ct2.get_supported_compute_types(device) else "default"
