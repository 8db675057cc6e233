"""Translation: the paper's task (§6.1). Parallel text, a joint SentencePiece vocabulary, the encoder-decoder
Transformer, label-smoothed cross-entropy over target tokens, validation loss and BLEU, a `Translator`."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ..config import Config, ConfigError, DataConfig, build_section, read_config, save_config
from ..config.memory import available_memory
from ..data import Batch, DataError, ParallelCorpus, Prepared, TokenArrays, collate, prepare
from ..data.alignments import batch_targets, word_starts
from ..data.batching import check_draw, corpus_draw, epoch_batches, make_batches
from ..data.prepared import open_prepared
from ..data.training_text import TEXT_COPY, TrainingText, corpus_bounds, corpus_weights, training_corpora
from ..decoding.translator import Translator
from ..metrics import score
from ..model import Transformer
from ..model.alignment import trained_alignment
from ..outputs import atomic_folder, atomic_write_text, read_manifest, remove_leftovers, remove_own_folder
from ..runs import record_tokenizer
from ..training.checkpoint import checkpoint_dirs, checkpoint_epoch
from ..training.guided import AlignmentWindow, guided_alignment_loss, prepare_alignment
from ..training.loss import label_smoothed_nll
from .base import has_trained, same_run
from .finetune import fine_tune_config

# RUN/subwords/epoch-N: one epoch's draw under parsing's train.subword_sampling or train.subtree_substitution
# (translation draws per batch, `TranslationTask.sampled_pairs`); RUN/subwords/text-SIDE: a gzipped training file,
# decompressed for sampling
SUBWORDS, DRAW = "subwords", "subword draw"


class SequenceTask:
    """What translation and parsing share: a ParallelCorpus of token ids (source + EOS, BOS + target), the
    encoder-decoder Transformer, token-count batches, the label-smoothed loss over target tokens, and the
    validation loss. Subclasses add their data, their validation score and their predictor."""

    unit: ClassVar[str] = "target tokens"  # what the loss is normalised by (Batch.n_tokens)
    samples_subwords: ClassVar[bool] = True  # train.subword_sampling applies
    sampled_parts: ClassVar[tuple[str, ...]] = ("src", "tgt")  # the corpus fields train.subword_sampling redraws
    config: Any
    data: Any
    corpus: ParallelCorpus
    splits: dict[str, ParallelCorpus]
    # set by `attach` (prepare): where the epochs' draws are kept, whether this is the main rank, the barrier
    run_dir: Path | None = None
    main: bool = True
    barrier: Callable[[], None] = staticmethod(lambda: None)

    def attach(self, run_dir: Path, *, main: bool, barrier: Callable[[], None], fresh: bool) -> None:
        """Where the draws go. A run that starts afresh (no checkpoint) may have other data than an earlier attempt
        in the same folder: the main rank removes that attempt's draws."""
        self.run_dir, self.main, self.barrier = Path(run_dir), main, barrier
        if main and fresh:
            for folder in (self.run_dir / SUBWORDS).glob("epoch-*"):
                remove_own_folder(folder, DRAW)
            for folder in (self.run_dir / SUBWORDS).glob("text-*"):
                remove_own_folder(folder, TEXT_COPY)

    def sampled_corpus(self, *, seed: int, epoch: int) -> ParallelCorpus:
        raise NotImplementedError  # translation and parsing draw their own

    def redraws(self) -> bool:
        """Whether each epoch trains on a draw of its own (`epoch_corpus`) rather than on the prepared corpus."""
        return self.config.train.subword_sampling > 0

    def draw_parts(self) -> tuple[str, ...]:
        """The corpus fields an epoch's draw holds (and RUN/subwords/epoch-N keeps)."""
        return self.sampled_parts

    def draw_options(self) -> dict[str, Any]:
        """The settings a kept draw was made with: one made with others is drawn again."""
        return {"rate": self.config.train.subword_sampling}

    @staticmethod
    def sampler_seed(seed: int, epoch: int) -> int:
        """The epoch's seed for SentencePiece's generator (one unsigned integer; repeatable within a process only)."""
        return (seed * 1_000_003 + epoch) % 2**32

    def epoch_corpus(self, *, seed: int, epoch: int) -> ParallelCorpus:
        """The training corpus of `epoch` under train.subword_sampling (parsing: or train.subtree_substitution),
        drawn by `sampled_corpus`. SentencePiece's sampler cannot be replayed:
        the same seed gives other pieces in another process (its generator mixes in per-process state; measured with
        sentencepiece 0.2.3). So the main rank draws each epoch once and keeps it in RUN/subwords/epoch-N, which
        every rank reads, and a resumed run reads again: the ranks see the same pieces and a resume is exact. A draw
        is reused only with the settings (`draw_options`) and the seed it was made with; draws older than both this
        epoch and the oldest kept checkpoint are removed (no resume can reach them)."""
        if self.run_dir is None:  # a task made outside `prepare` (no run directory): draw in memory
            return self.sampled_corpus(seed=seed, epoch=epoch)
        folder = self.run_dir / SUBWORDS / f"epoch-{epoch:06d}"
        made_with = {**self.draw_options(), "seed": seed, "epoch": epoch}
        if self.main:
            remove_leftovers(folder.parent, "epoch-")  # left by a run killed while saving a draw
            found = read_manifest(folder)
            if found is None or {k: found.get(k) for k in made_with} != made_with:
                drawn = self.sampled_corpus(seed=seed, epoch=epoch)
                with atomic_folder(folder, DRAW, **made_with) as tmp:
                    for part in self.draw_parts():
                        getattr(drawn, part).save(tmp / part)
            self._prune_draws(epoch)
        self.barrier()
        prepared = self.data.splits["train"]
        try:
            parts = {part: TokenArrays.load(folder / part) for part in self.draw_parts()}
        except (OSError, ValueError) as err:
            raise DataError(f"{folder}: cannot read this epoch's subword draw ({err})") from None
        if any(len(arr) != len(prepared) for arr in parts.values()):
            raise DataError(f"{folder}: this subword draw is not of this run's {len(prepared):,} training examples")
        return dataclasses.replace(prepared, **parts)

    def _prune_draws(self, epoch: int) -> None:
        assert self.run_dir is not None
        keep = epoch
        oldest = checkpoint_dirs(self.run_dir)[:1]
        if oldest:
            resumes_into = checkpoint_epoch(oldest[0])
            if resumes_into is None:
                return  # unreadable: keep every draw
            keep = min(epoch, resumes_into)
        for folder in (self.run_dir / SUBWORDS).glob("epoch-*"):
            if folder.name[6:].isdigit() and int(folder.name[6:]) < keep:
                remove_own_folder(folder, DRAW)

    def check(self) -> None:
        """Every training and validation pair must fit the model's positions (+1 for EOS on the source side and
        BOS on the decoder input); every training corpus's weight draws some of its pairs, and the weighted epoch
        fits in memory (`check_draw`)."""
        summary = self.data.summary
        try:
            check_draw(training_corpora(summary), corpus_bounds(summary), corpus_weights(summary), available_memory())
        except ValueError as err:
            raise ConfigError(str(err)) from None
        limit = self.config.model.max_len
        for name in ("train", "valid"):
            corpus = self.splits.get(name)
            if corpus is None or not len(corpus):
                continue
            longest = int(max(corpus.src_lengths.max(), corpus.tgt_lengths.max()))
            if longest > limit:
                raise ConfigError(
                    f"the prepared {name} split has a sequence of {longest - 1} tokens, but "
                    f"model.max_len is {limit} positions (tokens + 1); set data.max_len to at most "
                    f"{limit - 1} or raise model.max_len"
                )

    def build_model(self) -> Transformer:
        model = Transformer(self.config.model)
        prepare_alignment(model, self.config)  # model.alignment_head's checks, train.alignment_only's freezing
        return model

    def logits(self, net, batch: Batch) -> torch.Tensor:
        """The model's logits at the batch's real target positions, (n_tokens, V) (no padding)."""
        return net(batch.src, batch.tgt_in, batch.positions)

    def batches(self, *, max_tokens: int, seed: int, epoch: int) -> list[np.ndarray]:
        """The epoch's batches of the epoch's pairs (data.corpora's weights, `corpus_draw`); over the epoch's draw
        (`epoch_corpus`) when the task `redraws`."""
        if self.redraws():
            self.corpus = self.epoch_corpus(seed=seed, epoch=epoch)
        return self.weighted_batches(max_tokens=max_tokens, seed=seed, epoch=epoch)

    def weighted_batches(self, *, max_tokens: int, seed: int, epoch: int) -> list[np.ndarray]:
        """Batches of the epoch's pairs, drawn by the training corpora's weights (data.corpora, `corpus_draw`;
        all weights 1: every pair once), cut from self.corpus's lengths."""
        summary = self.data.summary
        draw = corpus_draw(corpus_bounds(summary), corpus_weights(summary), seed=seed, epoch=epoch)
        lengths = self.corpus.src_lengths, self.corpus.tgt_lengths
        return epoch_batches(*lengths, draw, max_tokens=max_tokens, seed=seed, epoch=epoch)

    def collate(self, indices: np.ndarray) -> Batch | list[Batch]:
        return self.collate_pairs(
            self.corpus, indices, pad_multiple=self.config.train.pad_multiple, limit=self.config.model.max_len
        )

    def collate_pairs(self, corpus: ParallelCorpus, indices: np.ndarray, **options) -> Batch:
        """Pairs `indices` of `corpus` as a padded Batch (data.collate's `options`); parsing adds its word pointer."""
        return collate(corpus, indices, special=self.data.tokenizer.special, **options)

    def loss(
        self, net, batch: Batch, autocast: Callable[[], AbstractContextManager]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(label-smoothed loss, nll), summed over the batch's target tokens (batch.n_tokens of them)."""
        with autocast():
            logits = self.logits(net, batch)  # (n_tokens, V): no padding
        # the logits are consumed here, before the next forward: the loss may turn them into their gradient
        return label_smoothed_nll(
            logits,
            batch.target,
            eps=self.config.train.label_smoothing,
            pad_id=self.config.model.pad_id,
            reuse_logits=True,
        )

    @torch.no_grad()
    def validation_loss(self, model: Transformer, device: torch.device) -> dict[str, float]:
        """Loss, nll and perplexity per target token on the whole valid split (real target positions only)."""
        corpus, train = self.splits["valid"], self.config.train
        loss_sum = nll_sum = tokens = 0.0
        for indices in make_batches(
            corpus.src_lengths, corpus.tgt_lengths, max_tokens=train.max_tokens, seed=0, epoch=0, shuffle=False
        ):
            batch = self.collate_pairs(corpus, indices).to(device)
            logits = self.logits(model, batch)
            loss, nll = label_smoothed_nll(
                logits, batch.target, eps=train.label_smoothing, pad_id=self.config.model.pad_id
            )
            loss_sum, nll_sum, tokens = loss_sum + float(loss), nll_sum + float(nll), tokens + batch.n_tokens
        return {
            "valid_loss": loss_sum / tokens,
            "valid_nll": nll_sum / tokens,
            "valid_ppl": math.exp(min(nll_sum / tokens, 50.0)),
        }


class TranslationTask(SequenceTask):
    """Batches of sentence pairs by token count, the label-smoothed loss, validation loss and BLEU."""

    name: ClassVar[str] = "translation"
    fine_tunes: ClassVar[bool] = True  # train.init_from applies (tasks/finetune.py)
    guides_alignment: ClassVar[bool] = True  # train.guided_alignment applies (training/guided.py)
    metrics: ClassVar[dict[str, tuple[str, bool]]] = {"loss": ("valid_loss", False), "bleu": ("valid_bleu", True)}

    def __init__(self, config: Config, data: Prepared) -> None:
        self.config, self.data = config, data
        self.splits = data.splits
        self.corpus: ParallelCorpus = data.splits["train"]
        self.has_validation = "valid" in data.splits
        self.description = f"{len(self.corpus):,} training pairs"
        self._text: TrainingText | None = None  # the training text, read batch by batch for subword sampling
        self._epoch = (config.train.seed, 0)
        self.links = data.links.get("train")  # each training pair's word links (data.corpora's align), or None
        self.align_window = AlignmentWindow()  # the guided alignment loss since the last log line
        if self.links is not None and config.train.guided_alignment:
            linked = data.summary["splits"]["train"]["links"]["linked"]
            self.description += f" ({linked:,} with word links: guided alignment {config.train.guided_alignment:g})"

    def check(self) -> None:
        """SequenceTask's checks, and train.guided_alignment's links: some training corpus must have them."""
        super().check()
        if self.links is None:
            check_links(self.config, linked=False)

    def batches(self, *, max_tokens: int, seed: int, epoch: int) -> list[np.ndarray]:
        """The epoch's batches, cut from the prepared lengths of the epoch's pairs (data.corpora: each corpus's
        weight x its size, `corpus_draw`); under train.subword_sampling each batch is drawn as it is collated,
        `collate`."""
        self._epoch = (seed, epoch)  # what the batches collated next are drawn from
        return self.weighted_batches(max_tokens=max_tokens, seed=seed, epoch=epoch)

    def collate(self, indices: np.ndarray) -> Batch | list[Batch]:
        """A padded batch; under train.subword_sampling the batch's pairs drawn anew, sorted by their sampled lengths
        and cut again into batches of at most train.max_tokens padded tokens per side (a draw lengthens pairs
        unevenly: uncut, the batch would be padded to its longest draw, about twice the tokens on Multi30k)."""
        tc, limit = self.config.train, self.config.model.max_len
        if tc.subword_sampling <= 0:
            batch = self.collate_pairs(self.corpus, indices, pad_multiple=tc.pad_multiple, limit=limit)
            return self._linked(batch, self.corpus, indices, indices)
        pairs = self.sampled_pairs(indices, *self._epoch)
        parts = make_batches(
            pairs.src_lengths, pairs.tgt_lengths, max_tokens=tc.max_tokens, seed=0, epoch=0, shuffle=False
        )
        return [
            self._linked(self.collate_pairs(pairs, part, pad_multiple=tc.pad_multiple, limit=limit), pairs, part,
                         indices[part])
            for part in parts
        ]  # fmt: skip

    def _linked(self, batch: Batch, corpus: ParallelCorpus, rows: np.ndarray, pairs: np.ndarray) -> Batch:
        """The batch with guided alignment's targets (train.guided_alignment): its `rows` of `corpus` are the
        training pairs `pairs`, whose word links are mapped to the rows' pieces (a draw of train.subword_sampling
        has other pieces, the same words)."""
        if self.links is None or not self.config.train.guided_alignment:
            return batch
        links = self.links
        rows_links = [(links[p], corpus.src[r], corpus.tgt[r]) for r, p in zip(rows, pairs)]
        width = (batch.tgt_in.shape[1], batch.src.shape[1])  # (T, S)
        index, prob, aligned = batch_targets(rows_links, self._word_starts, width)
        if not aligned:  # no pair of the batch has links: it trains as without guidance (fused attention)
            return batch
        return dataclasses.replace(
            batch, align_index=torch.from_numpy(index), align_prob=torch.from_numpy(prob), n_aligned=aligned
        )

    @functools.cached_property
    def _word_starts(self) -> np.ndarray:
        """(V,) whether each piece starts a word: how links on words reach pieces (data/alignments.py)."""
        return word_starts(self.data.tokenizer)

    def loss(
        self, net, batch: Batch, autocast: Callable[[], AbstractContextManager]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The label-smoothed loss and nll; with guided alignment's targets in the batch, plus train.guided_alignment
        x the alignment loss (training/guided.py), both summed over the batch's target tokens."""
        model = getattr(net, "module", net)  # under DDP the model is its module
        head = model.config.alignment_head and self.config.train.guided_alignment
        if (batch.align_index is None or batch.align_prob is None) and not head:
            return super().loss(net, batch, autocast)

        def forward() -> tuple[torch.Tensor, torch.Tensor]:
            return super(TranslationTask, self).loss(net, batch, autocast)

        (loss, nll), weights = trained_alignment(model, forward, batch.tgt_in, batch.src, autocast)  # (B, T, S)
        if batch.align_index is None or batch.align_prob is None:  # an alignment head runs on every batch: each
            return loss + 0.0 * weights.sum(), nll  # DDP rank has its gradient, train.alignment_only a backward
        align = guided_alignment_loss(weights, batch.align_index, batch.align_prob)
        self.align_window.add(align, batch.n_aligned)
        return loss + self.config.train.guided_alignment * align, nll

    def log_extras(self) -> dict[str, float]:
        """What the training log lines add (training/progress.py): the alignment loss per target position with
        links since the last line, under guided alignment."""
        return self.align_window.take()

    def sampled_pairs(self, indices: np.ndarray, seed: int, epoch: int) -> ParallelCorpus:
        """The pairs `indices` with both sides segmented at random (train.subword_sampling: BPE-dropout, or unigram
        sampling), read from the training text and drawn for this batch alone, so an epoch of any size costs no
        more memory or disk than its batches. A pair whose draw exceeds data.max_len keeps its prepared ids.

        The batches themselves are formed on the prepared lengths (a pure function of seed and epoch), so a resumed
        run takes up exactly the batches it was consuming, on every rank. The draw is seeded by (seed, epoch, batch);
        SentencePiece repeats a seeded draw within one process only (its generator mixes in per-process state,
        measured with sentencepiece 0.2.3), so across a resume the pieces are fresh draws from the same
        distribution, as an uninterrupted run's would have been."""
        if self._text is None:
            self._text = TrainingText(self.data.root, self.data.summary, self._scratch())
        texts = self._text.pairs(indices)
        alpha, tokenizer = self.config.train.subword_sampling, self.data.tokenizer
        draw = int(np.random.SeedSequence([seed, epoch, int(indices.min())]).generate_state(1)[0])
        sides = [
            tokenizer.encode_sampled(side, alpha=alpha, seed=(2 * draw + k) % 2**32, target=k == 1)
            for k, side in enumerate(texts)
        ]
        tags, starts = self._tags
        if any(tags):  # data.corpora's tags: each source begins with its corpus's, as prepared
            corpus = np.searchsorted(starts, indices, side="right")
            sides[0] = [[tags[k], *ids] if tags[k] else ids for k, ids in zip(corpus, sides[0])]
        prepared, limit = self.data.splits["train"], self.config.data.max_len
        src, tgt = [], []
        for i, a, b in zip(indices, *sides):
            long = len(a) > limit or len(b) > limit
            src.append(prepared.src[i].tolist() if long else a)
            tgt.append(prepared.tgt[i].tolist() if long else b)
        return ParallelCorpus(TokenArrays.from_lists(src), TokenArrays.from_lists(tgt))

    @functools.cached_property
    def _tags(self) -> tuple[list[int], np.ndarray]:
        """Each training corpus's tag id (0: none), and where corpora 1.. begin (made once, read per batch)."""
        corpora = training_corpora(self.data.summary)
        tags = [self.data.tokenizer.tag_id(c["tag"]) if c.get("tag") else 0 for c in corpora]
        return tags, corpus_bounds(self.data.summary)[1:-1]

    def _scratch(self) -> Path | None:
        """Where a gzipped training file is decompressed for sampling: RUN/subwords (one copy per run)."""
        return None if self.run_dir is None else self.run_dir / SUBWORDS

    @classmethod
    def prepare(
        cls, config: Config, run_dir: Path, *, main: bool, log: Callable[[str], None], barrier: Callable[[], None]
    ) -> TranslationTask:
        """Check config.json against a run being resumed, prepare the data (rank 0 first), copy the tokenizer.

        Once a run has saved a checkpoint, its settings and data are frozen: inputs whose contents changed are
        refused."""
        config_path = run_dir / "config.json"
        frozen = has_trained(run_dir)
        config = fine_tune_config(config, run_dir, frozen=frozen, main=main, log=log)  # train.init_from
        if config.data.prepared:  # a folder made by `transduce prepare`: read, never written
            data, config = from_prepared(config, run_dir, frozen=frozen, main=main, log=log)
        else:
            # before anything is prepared: the recipe says whether a corpus has links (a folder's, `check`)
            check_links(config, linked=any(c.align for c in config.data.corpora))
            if frozen:
                same_run(read_config(config_path, Config), config)
            if main:
                prepare(config.data, run_dir / "data", max_tokens=config.train.max_tokens, log=log, frozen=frozen)
            barrier()
            data = prepare(
                config.data, run_dir / "data", max_tokens=config.train.max_tokens, log=lambda _: None, frozen=True
            )
        vocab = data.tokenizer.vocab_size
        if config.model.vocab_size and config.model.vocab_size != vocab:
            advice = (  # a fine-tune's model.vocab_size is its run's (tasks/finetune.py): it cannot be left unset
                f"the vocabulary of train.init_from ({config.train.init_from}) is not the one its model was trained "
                "with"
                if config.train.init_from
                else "leave model.vocab_size unset (0) or make them equal"
            )
            raise ConfigError(
                f"model.vocab_size is {config.model.vocab_size} but the tokenizer in {data.root} has {vocab} "
                f"pieces; {advice}"
            )
        special = data.tokenizer.special  # the model's special ids are its vocabulary's (a Marian one's differ)
        model = dataclasses.replace(
            config.model, vocab_size=vocab, pad_id=special.pad, bos_id=special.bos, eos_id=special.eos
        )
        config = config.replace(model=model)
        if main:
            save_config(config, config_path)
            if not frozen:
                data.tokenizer.copy_to(run_dir / "tokenizer.model")
                record_tokenizer(run_dir)
        task = cls(config, data)
        task.attach(run_dir, main=main, barrier=barrier, fresh=not frozen)
        if config.train.subword_sampling > 0:  # the main rank checks the text (and decompresses it) first
            if main:
                task._text = TrainingText(data.root, data.summary, task._scratch())
            barrier()
        return task

    @torch.no_grad()
    def validate(self, model: Transformer, device: torch.device) -> dict[str, float]:
        """Loss and perplexity on the whole valid split; BLEU on its first train.valid_max_sentences sentences,
        decoded by the same Translator that `transduce translate` uses."""
        was_training, config = model.training, self.config
        model.eval()
        result = self.validation_loss(model, device)
        if config.train.valid_bleu:
            sources, references = self.data.texts("valid")
            n = config.train.valid_max_sentences
            hyps = self.predictor(model).translate(sources[:n], beam=config.train.valid_beam, tag=config.data.valid_tag)
            result["valid_bleu"] = score(hyps, references[:n]).bleu
        model.train(was_training)
        return result

    def predictor(self, model: Transformer) -> Translator:
        return Translator(model, self.data.tokenizer, decode=self.config.decode)


def check_links(config: Config, *, linked: bool) -> None:
    """train.guided_alignment needs word links: some training corpus must have an align file (`linked`)."""
    weight = config.train.guided_alignment
    if weight and not linked:
        raise ConfigError(
            f"train.guided_alignment is {weight:g} but no training corpus has word links: give one of "
            'data.corpora an align file (align = "F.align"; `transduce align` writes one)'
        )


PREPARED_RECORD = "prepared-data.json"  # RUN/prepared-data.json: the data.prepared folder a run trains on, and its key


def from_prepared(
    config: Config, run_dir: Path, *, frozen: bool, main: bool, log: Callable[[str], None]
) -> tuple[Prepared, Config]:
    """data.prepared: open the folder (memory-mapped; it is never written), put its data settings in place of the
    recipe's (the run's config.json records them and the folder's absolute path), and check a resumed run against
    RUN/prepared-data.json: the folder must hold the very data (cache key) the run started on."""
    folder = Path(config.data.prepared).absolute()
    if frozen and not folder.exists():  # the run trained on it: moved or deleted since
        raise DataError(
            f"{folder}: the prepared data this run trains on (data.prepared) is missing: moved or deleted? give a "
            "moved one with --set data.prepared=NEW (its cache key is checked); a deleted one, prepare again "
            "with the same inputs and options"
        )
    data = open_prepared(folder)
    known = {f.name for f in dataclasses.fields(DataConfig)}
    options: dict[str, Any] = {k: v for k, v in data.summary["options"].items() if k in known}
    data_config = build_section(
        DataConfig, {**options, "prepared": str(folder), "workers": config.data.workers}, "data"
    )
    recipe, mine = dataclasses.asdict(config.data), dataclasses.asdict(data_config)
    replaced = [k for k in options if recipe[k] != mine[k] and recipe[k] != getattr(DataConfig(), k)]
    if main and replaced:
        log(f"data: the recipe's {', '.join(f'data.{k}' for k in replaced)} replaced by the settings of {folder}")
    config = config.replace(data=data_config)
    record, key = run_dir / PREPARED_RECORD, data.summary.get("cache_key", "")
    if frozen:
        same_run(read_config(run_dir / "config.json", Config), config)
        started = None  # the key of the data the run started on: its record, or its own RUN/data
        for path in (record, run_dir / "data" / "summary.json"):
            try:
                started = json.loads(path.read_text(encoding="utf-8")).get("cache_key")
                break
            except (OSError, ValueError, AttributeError):
                continue
        if started is not None and started != key:
            raise DataError(
                f"{folder}: not the data this run started training on (cache key {key}, was {started}; prepared "
                "again?); the model was trained on that data: restore it, or train into a new --out"
            )
    if main and (not frozen or not record.is_file()):
        atomic_write_text(record, json.dumps({"folder": str(folder), "cache_key": key}, indent=2) + "\n")
    if main:
        log(f"data: reading {folder} (key {key}), memory-mapped")
    return data, config
