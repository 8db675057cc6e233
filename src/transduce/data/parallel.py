"""Parallel text -> validated, encoded, cached token ids (corpus.py holds them and the `Batch` the model trains on).

Every bad input gets a one-line `DataError` naming the file (and line, where there is one). `prepare` writes its
cache (NumPy arrays, never pickles) into a temporary folder and renames it into place, so an interrupted or failed
run leaves nothing half-written, and a second run with the same inputs and options reuses the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from ..config import DataConfig
from ..outputs import (
    OutputError,
    claim_folder,
    exclusive,
    exclusive_output,
    names_file,
    read_manifest,
    refuse_link,
    remove_if_bare,
    remove_leftovers,
    remove_own_folder,
)
from .cache import reuse_or_build
from .formats import count_rows
from .inputs import Input, Inputs, check_line_counts, chunk_jobs, split_inputs, with_tokenizer
from .joining import join_chunks
from .marian import load_tokenizer
from .prepared import Prepared, load_prepared
from .stream import (
    CHUNK_LINES,
    chunk_folder,
    count_lines,
    encode_chunk,
    read_chunk_stats,
    sample_lines,
)
from .text import DataError, file_digest
from .tokenizer import Tokenizer, TokenizerError
from .workers import start_worker

# prepare ----------------------------------------------------------------------------------------------------------
PARTIAL = "data (unfinished)"  # the manifest kind of a prepare's work folder, kept until the cache is complete


def _input_digests(files: Inputs) -> dict[str, str]:
    return {str(path): file_digest(path) for path in _all_files(files)}


def _all_files(files: Inputs) -> list[Path]:
    return list(dict.fromkeys(path for inputs in files.values() for one in inputs for path in one.files))


# DataConfig fields that do not change what `prepare` writes (and so stay out of the cache key; data.tokenizer's
# contents are in it, `_cache_key`, its path is not)
NOT_IN_KEY = ("workers", "prepared", "tokenizer")
# the fields that only say how a vocabulary is learned: with data.tokenizer none is, and they are the tokenizer's
VOCABULARY_OPTIONS = ("vocab_size", "model_type", "lowercase", "split_digits", "vocab_sample")


def _cache_key(config: DataConfig, files: Inputs, digests: dict[str, str], tokenizer: str = "") -> str:
    """The options (data.corpora's weights and tags among them) and the inputs' contents, with data.tokenizer's
    contents (`tokenizer`, its digest) where it is given (the cache's layout is the manifest's, outputs.FORMAT)."""
    left_out = NOT_IN_KEY + (VOCABULARY_OPTIONS if tokenizer else ())
    options = {k: v for k, v in asdict(config).items() if k not in left_out}
    for name in ("corpora", "valid_tag"):  # unset: the key of a one-corpus cache stays as it was before them
        if not options[name]:
            del options[name]
    for corpus in options.get("corpora", ()):  # nor does a corpus without links (or join) change the key it had
        if not corpus["align"]:
            del corpus["align"]
        if corpus["join"] == 1:
            del corpus["join"]
    h = hashlib.sha256()
    given = {"tokenizer": tokenizer} if tokenizer else {}  # a learned vocabulary's keys stay as they always were
    h.update(json.dumps({"options": options, **given}, sort_keys=True).encode())
    for split, inputs in sorted(files.items()):
        h.update(f"{split}:".encode() + ":".join(":".join(digests[str(p)] for p in i.files) for i in inputs).encode())
    return h.hexdigest()[:16]


def _percentiles(lengths: np.ndarray) -> dict:
    if len(lengths) == 0:
        return {}
    p = np.percentile(lengths, [50, 90, 99])
    return {"p50": int(p[0]), "p90": int(p[1]), "p99": int(p[2]), "max": int(lengths.max())}


def prepare(
    config: DataConfig, out_dir: str | Path, *, max_tokens: int = 4096, log=print, frozen: bool = False
) -> Prepared:
    """Train the joint SentencePiece model on (a sample of) the training sides (or take data.tokenizer's), encode
    every split in chunks on every core, and cache it all in `out_dir` (see stream.py; memory bounded whatever the
    corpus size).

    The cache is reused when the inputs' contents and the options are unchanged. `frozen` (a run being resumed):
    a cache that no longer matches is refused, naming the file that changed, instead of being prepared again;
    the run's model was trained on the old vocabulary and token ids. A prepare that was interrupted continues from
    the chunks it finished (kept beside `out_dir` in .partial-NAME-KEY until the cache is complete).
    """
    if not frozen:  # refused before the inputs are read (exclusive_output and atomic_folder refuse it too)
        refuse_link(out_dir)
    out_dir = Path(out_dir).absolute()  # `--out .` has a name and a parent: the lock and leftovers are beside it
    check_vocab_sample(config)
    config, tokenizer_digest = with_tokenizer(config)
    files = split_inputs(config)
    stats = _input_stats(files)  # before the digests: a file changed while it is read shows at the end
    digests = _input_digests(files)
    key = _cache_key(_keyed_paths(config), files, digests, tokenizer_digest)
    work = out_dir.parent / f".partial-{out_dir.name}-{key}"

    def build(tmp: Path) -> dict:
        summary = _prepare_resumable(config, files, tmp, key, max_tokens, work, log)
        changed = [p for p, st in _input_stats(files).items() if st != stats[p]]
        if changed:
            raise DataError(f"{changed[0]}: changed while it was being prepared; run the command again")
        return {**summary, "input_stats": stats}

    if frozen:  # a run being resumed, and every DDP rank after the first: only reads a finished cache (or refuses)
        reuse_or_build(out_dir, key, digests, build, frozen=True, log=log)
        return load_prepared(out_dir)
    created = next((p for p in reversed(out_dir.parents) if not p.exists()), None)  # the topmost new parent
    out_dir.parent.mkdir(parents=True, exist_ok=True)  # the lock file lives beside the output
    try:
        # one prepare into out_dir at a time: the lock covers the temporary and partial folders beside it too
        with exclusive_output(out_dir, "preparing data"):
            remove_leftovers(out_dir.parent, out_dir.name, exact=True)  # what a killed prepare left (ours only)
            summary = reuse_or_build(out_dir, key, digests, build, frozen=frozen, log=log)
            if summary is not None:
                remove_own_folder(work, PARTIAL)
    except BaseException:
        if created is not None:  # refused or failed: the folders made for it go again when nothing is in them
            remove_if_bare(created)
        raise
    if summary is not None:
        log(format_summary(summary))
    return load_prepared(out_dir)


def _keyed_paths(config: DataConfig) -> DataConfig:
    """The data paths as the cache key reads them: a relative prefix normalised (`./p/tr`, `p//tr` and `p/../p/tr`
    are `p/tr`: one cache), so the key of a path spelt plainly, and of an absolute one, stays what it was (a run
    being resumed finds its cache by it). Where the files are is in the key anyway: their contents' digests."""

    def keyed(prefix: str) -> str:
        return prefix if not prefix or Path(prefix).is_absolute() else os.path.normpath(prefix)

    corpora = tuple(replace(c, prefix=keyed(c.prefix), align=keyed(c.align)) for c in config.corpora)
    return replace(
        config,
        train=keyed(config.train),
        valid=keyed(config.valid),
        test=tuple(map(keyed, config.test)),
        corpora=corpora,
    )


def check_vocab_sample(config: DataConfig) -> None:
    """data.vocab_sample at SentencePiece's floor or above, refused before anything is made (SentencePiece's own
    refusal was an internal check's text, after a .partial folder was made)."""
    if not config.tokenizer and config.vocab_sample < MIN_VOCAB_SAMPLE:
        raise DataError(
            f"data.vocab_sample (prepare --vocab-sample) must be at least {MIN_VOCAB_SAMPLE} (SentencePiece samples "
            f"no fewer sentences), got {config.vocab_sample}"
        )


def _input_stats(files: Inputs) -> dict[str, list[int]]:
    """Size and modification time of each input (training_text.py checks them before reading the text again)."""
    return {str(p): [p.stat().st_size, p.stat().st_mtime_ns] for p in _all_files(files)}


def _prepare_resumable(config: DataConfig, files: dict, out: Path, key: str, max_tokens: int, work: Path, log) -> dict:
    """The work folder's steps (each kept when done): the tokenizer, then the chunks; then the cache in `out`."""
    stem = work.name[: -len(key)]  # ".partial-NAME-"
    for stale in work.parent.glob(f"{stem}*"):
        rest = stale.name[len(stem) :]
        if stale != work and len(rest) == len(key) and all(c in "0123456789abcdef" for c in rest):
            try:  # an interrupted prepare of other inputs or options into this folder (not one at work now)
                with exclusive(stale, "preparing data"):
                    remove_own_folder(stale, PARTIAL)
            except (OutputError, OSError):
                pass
    manifest = read_manifest(work)
    if manifest is not None and manifest.get("chunk_lines") != CHUNK_LINES:  # made with other chunk boundaries
        remove_own_folder(work, PARTIAL)
    resumed = work.is_dir()
    claim_folder(work, PARTIAL, cache_key=key, chunk_lines=CHUNK_LINES)
    try:
        with exclusive(work, "preparing data"):
            if resumed:
                log(f"data: continuing the interrupted prepare kept in {work}")
            return _prepare_into(config, files, out, work, max_tokens, log)
    except (DataError, TokenizerError):
        remove_own_folder(work, PARTIAL)  # the inputs or options are at fault: once fixed, their key differs
        raise
    except (OSError, KeyboardInterrupt):
        log(f"data: the finished part is kept in {work}; the same command continues from it")
        raise


def _vocabulary(config: DataConfig, files: dict, work: Path, log) -> Path:
    """WORK/tokenizer.model: data.tokenizer's copied as it is (no vocabulary learned), else learned from the
    training files unless an interrupted run already learned it."""
    tokenizer_path = work / "tokenizer.model"
    if config.tokenizer:  # an existing vocabulary (data.tokenizer): taken as it is, no vocabulary learned
        given = Path(config.tokenizer)
        log(f"data: encoding with the vocabulary of {given} ({config.vocab_size} pieces)")
        for src, dst in ((given, tokenizer_path), (given.with_suffix(".json"), tokenizer_path.with_suffix(".json"))):
            if src.is_file():
                with names_file(dst):  # a full disk's error names the copy (shutil's names its source)
                    shutil.copyfile(src, dst)
    elif not tokenizer_path.is_file():
        _learn_vocabulary(config, files, tokenizer_path, log)
    return tokenizer_path


def _prepare_into(config: DataConfig, files: dict, out: Path, work: Path, max_tokens: int, log) -> dict:
    from .batching import make_batches, padding_efficiency

    tokenizer_path = _vocabulary(config, files, work, log)
    tokenizer = load_tokenizer(tokenizer_path)
    tag_ids = {tag: _tag_id(tokenizer, tag, config) for tag in config.tags}
    id_dtype = "uint16" if tokenizer.vocab_size <= 1 << 16 else "int32"
    chunk_stats = _encode_chunks(config, files, work, str(tokenizer_path), id_dtype, tag_ids, log)

    for name in ("tokenizer.model", "tokenizer.json"):
        if (work / name).is_file():  # a given SentencePiece model may have no settings file beside it
            with names_file(out / name):
                shutil.copyfile(work / name, out / name)
    summary: dict[str, Any] = {  # summary.json
        "src": config.src,
        "tgt": config.tgt,
        "vocab_size": tokenizer.vocab_size,
        "special_ids": vars(tokenizer.special),
        "options": {k: v for k, v in asdict(config).items() if k not in NOT_IN_KEY},
        "splits": {},
    }
    for split, stats in chunk_stats.items():
        folders = [chunk_folder(work / "chunks", split, i) for i in range(len(stats))]
        for k, one in enumerate(files[split]):
            for side, path in zip(("src", "tgt"), one.pair):
                if not any(s["nonblank"][side == "tgt"] for s in stats if s.get("corpus", 0) == k):
                    raise DataError(f"{path}: the file is empty")
        links = any(one.align for one in files[split])
        corpus = join_chunks(split, folders, out, id_dtype, text=split != "train", links=links)
        info: dict[str, Any] = {
            "files": [str(p) for one in files[split] for p in one.pair],
            **_counts(stats),
        }
        if links:  # pairs that keep word links, and those whose pieces hold other words than their line
            info["links"] = {k: sum(s[k] for s in stats) for k in ("linked", "unlinked")}
        if split == "train":
            info["corpora"] = _corpora_info(files[split], stats)
        for side, arr, lengths in (("src", corpus.src, corpus.src_lengths), ("tgt", corpus.tgt, corpus.tgt_lengths)):
            n = int(arr.offsets[-1])
            info[f"{side}_tokens"] = n
            info[f"{side}_unk_rate"] = round(sum(s[f"{side}_unk"] for s in stats) / max(1, n), 6)
            info[f"{side}_length"] = {k: v - 1 for k, v in _percentiles(lengths).items()}  # without the EOS
        if split == "train" and len(corpus):
            batches = make_batches(corpus.src_lengths, corpus.tgt_lengths, max_tokens=max_tokens, seed=0, epoch=0)
            info["batches"] = len(batches)
            info["padding_efficiency"] = round(padding_efficiency(corpus, batches), 4)
            info["max_tokens"] = max_tokens
        summary["splits"][split] = info
    for corpus in summary["splits"]["train"]["corpora"]:
        if not corpus["sentences"]:
            raise DataError(f"{corpus['files'][0]}: no usable training pairs (all empty, too long or unbalanced)")
    return summary


def _corpora_info(inputs: list[Input], stats: list[dict]) -> list[dict]:
    """Each training corpus's share of the split (summary.json): its files, its first kept pair, its counts, its
    weight, tag and format."""
    out, first = [], 0
    for k, one in enumerate(inputs):
        counts = _counts([s for s in stats if s.get("corpus", 0) == k])
        out.append({"files": [str(p) for p in one.pair], "first": first, **counts, "weight": one.weight,
                    "tag": one.tag, "format": one.format, "langs": list(one.langs),
                    **({"align": str(one.align)} if one.align else {}),
                    **({"join": one.join} if one.join > 1 else {})})  # fmt: skip
        first += counts["sentences"]
    return out


def _counts(stats: list[dict]) -> dict[str, Any]:
    """Lines read, pairs kept and pairs dropped (by reason) over some chunks' stats."""
    reasons = dict.fromkeys(k for s in stats for k in s["dropped"])
    return {
        "lines": sum(s["lines"] for s in stats),
        "sentences": sum(s["sentences"] for s in stats),
        "dropped": {k: sum(s["dropped"].get(k, 0) for s in stats) for k in reasons},
    }


def _tag_id(tokenizer: Tokenizer, tag: str, config: DataConfig) -> int:
    """A tag's one token id; a tag that is not a token of data.tokenizer's vocabulary is refused, naming the key."""
    try:
        return tokenizer.tag_id(tag)
    except TokenizerError:
        key = "data.valid_tag" if tag == config.valid_tag else "data.corpora"
        known = f"its tags: {', '.join(tokenizer.tags)}" if tokenizer.tags else "it was learned with no tags"
        raise DataError(  # the given vocabulary named, not the work folder's copy of it
            f"{key}: the tag {tag!r} is not a tag of the vocabulary {config.tokenizer} ({known}); a given vocabulary "
            "(data.tokenizer) must hold every tag"
        ) from None


def _learn_vocabulary(config: DataConfig, files: dict, tokenizer_path: Path, log) -> None:
    """Every split's files checked (not empty, as long as each other) before anything is made; then the joint
    SentencePiece model learned from the seeded sample of the training sides."""
    counts = {}
    for inputs in files.values():
        for one in inputs:
            if one.format == "lines":
                counts[one] = [count_lines(one.src), count_lines(one.tgt)]
                check_line_counts(one.src, one.tgt, *counts[one])
            else:
                counts[one] = [count_rows(one.src, one.format)] * 2
                if not counts[one][0]:
                    raise DataError(f"{one.src}: the file is empty")
    train = [path for one in files["train"] for path in one.pair]
    train_counts = [n for one in files["train"] for n in counts[one]]
    blocks = [one.side_blocks(side, CHUNK_LINES) for one in files["train"] for side in (0, 1)]
    total = sum(train_counts)
    if total > config.vocab_sample:
        log(f"data: the vocabulary is trained on {config.vocab_sample:,} of {total:,} training sentences")
    sample = _Counted(
        sample_lines(
            train, train_counts, config.vocab_sample, seed=VOCAB_SAMPLE_SEED, errors=config.errors, blocks=blocks
        )  # fmt: skip
    )
    try:
        Tokenizer.train(
            sample,
            tokenizer_path,
            vocab_size=config.vocab_size,
            model_type=config.model_type,
            lowercase=config.lowercase,
            split_digits=config.split_digits,
            max_sentences=config.vocab_sample,
            tags=config.tags,
        )
    except TokenizerError:
        if not sample.count:
            raise DataError(f"{train[0]}: every training line is blank (on both sides)") from None
        raise


class _Counted:
    """An iterator of lines that counts what it gave."""

    def __init__(self, lines: Iterator[str]) -> None:
        self.lines, self.count = lines, 0

    def __iter__(self) -> Iterator[str]:
        for line in self.lines:
            self.count += 1
            yield line


VOCAB_SAMPLE_SEED = 20170612  # the seeded sample of training sentences the vocabulary is learned from
MIN_VOCAB_SAMPLE = 101  # SentencePiece's input_sentence_size must be 0 (all) or above 100


def _encode_chunks(
    config: DataConfig, files: Inputs, work: Path, tokenizer: str, id_dtype: str, tag_ids: dict[str, int], log
) -> dict:
    """Every split's chunks encoded (in `workers` processes, at most two chunks each in flight) or found finished
    in work/chunks: a split's corpora one after the other, the chunks numbered on across them. Returns each split's
    chunk stats, in order."""
    chunks = work / "chunks"
    chunks.mkdir(exist_ok=True)
    remove_leftovers(chunks, "")  # chunks a killed worker left half-written
    workers = config.workers or os.cpu_count() or 1
    pool = None
    if workers > 1 and sum(i.src.stat().st_size for i in files["train"]) > CHUNK_LINES * 16:  # over a chunk or so
        pool = ProcessPoolExecutor(
            workers, mp_context=get_context("spawn"), initializer=start_worker, initargs=(os.getpid(),)
        )
    results: dict[str, list] = {}
    pending: deque = deque()
    done = reused = 0
    try:
        for split, inputs in files.items():
            results[split] = []
            for job in chunk_jobs(config, split, inputs, chunks, tokenizer, id_dtype, tag_ids, CHUNK_LINES):
                stats = read_chunk_stats(chunk_folder(chunks, split, job.index))
                if (
                    stats is not None
                    and stats.get("first_line") == job.first_line
                    and stats.get("corpus", 0) == job.corpus
                ):
                    results[split].append(stats)
                    reused += 1
                    continue
                if pool is None:
                    results[split].append(encode_chunk(job))
                else:
                    results[split].append(None)
                    pending.append((split, len(results[split]) - 1, pool.submit(encode_chunk, job)))
                    while len(pending) >= 2 * workers:
                        s, i, future = pending.popleft()
                        results[s][i] = future.result()
                done += 1
        while pending:
            s, i, future = pending.popleft()
            results[s][i] = future.result()
    except BrokenProcessPool as err:  # a worker was killed (out of memory, a signal): one line, the work kept
        raise OSError(f"an encoding worker process died ({err}); try fewer --workers") from None
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    if reused:
        log(f"data: {reused} chunk(s) of {CHUNK_LINES:,} pairs found finished, {done} encoded")
    return results


def format_summary(summary: dict) -> str:
    lines = [f"data: {summary['src']}-{summary['tgt']}, joint SentencePiece vocabulary of {summary['vocab_size']}"]
    for split, info in summary["splits"].items():
        dropped = ", ".join(f"{k} {v}" for k, v in info["dropped"].items() if v) or "none"
        lines.append(
            f"  {split:<18} {info['sentences']:>9,} pairs  tokens {info['src_tokens']:,} / {info['tgt_tokens']:,}"
            f"  unk {info['src_unk_rate']:.4%} / {info['tgt_unk_rate']:.4%}"
            f"  length p50/p90/p99/max {'/'.join(str(v) for v in info['src_length'].values())}"
            f" | {'/'.join(str(v) for v in info['tgt_length'].values())}  dropped: {dropped}"
        )
        for k, corpus in enumerate(info.get("corpora", [])[1:] and info["corpora"]):  # several: each one's share
            tag = f", tag {corpus['tag']}" if corpus["tag"] else ""
            join = f", joined 2-{corpus['join']} a unit" if corpus.get("join", 1) > 1 else ""
            lines.append(f"  {'':<18} corpus {k + 1}: {corpus['sentences']:,} pairs of {corpus['files'][0]} "
                         f"(weight {corpus['weight']:g}{tag}{join})")  # fmt: skip
        if "links" in info:
            linked, lost = info["links"]["linked"], info["links"]["unlinked"]
            why = f" ({lost:,} pairs without: their pieces hold other words than their line)" if lost else ""
            lines.append(f"  {'':<18} word links for {linked:,} pairs{why}")
        if "padding_efficiency" in info:
            lines.append(
                f"  {'':<18} {info['batches']:,} batches of <= {info['max_tokens']} tokens per side, "
                f"padding efficiency {info['padding_efficiency']:.3f}"
            )
    return "\n".join(lines)
