"""Parallel text -> validated, encoded, cached token ids; and the `Batch` the model trains on.

Every bad input gets a one-line `DataError` naming the file (and line, where there is one). `prepare` writes its
cache (NumPy arrays, never pickles) into a temporary folder and renames it into place, so an interrupted or failed
run leaves nothing half-written, and a second run with the same inputs and options reuses the cache.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import DataConfig
from .cache import reuse_or_build
from .text import DataError, file_digest, find_side, read_lines, read_parallel
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, TokenizerError

CACHE_VERSION = 1


# Token arrays -----------------------------------------------------------------------------------------------------
@dataclass
class TokenArrays:
    """Variable-length sequences stored flat: sequence i is ids[offsets[i]:offsets[i+1]]."""

    ids: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_lists(cls, seqs: list[list[int]]) -> TokenArrays:
        lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
        offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter((t for s in seqs for t in s), dtype=np.int32, count=int(offsets[-1]))
        return cls(ids, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def save(self, stem: Path) -> None:
        np.save(f"{stem}.ids.npy", self.ids, allow_pickle=False)
        np.save(f"{stem}.offsets.npy", self.offsets, allow_pickle=False)

    @classmethod
    def load(cls, stem: Path) -> TokenArrays:
        return cls(np.load(f"{stem}.ids.npy", allow_pickle=False), np.load(f"{stem}.offsets.npy", allow_pickle=False))


@dataclass
class ParallelCorpus:
    src: TokenArrays
    tgt: TokenArrays

    def __len__(self) -> int:
        return len(self.src)

    # Lengths as the model sees them: source + EOS; target + BOS (decoder input) or + EOS (target output).
    @property
    def src_lengths(self) -> np.ndarray:
        return self.src.lengths + 1

    @property
    def tgt_lengths(self) -> np.ndarray:
        return self.tgt.lengths + 1


@dataclass
class Batch:
    """Padded tensors for one micro-batch. tgt_in = BOS + y (teacher forcing), tgt_out = y + EOS (§3)."""

    src: torch.Tensor  # (B, S)
    tgt_in: torch.Tensor  # (B, T)
    tgt_out: torch.Tensor  # (B, T)
    n_tokens: int  # non-pad target tokens
    n_padded: int  # padded source + target positions (for padding efficiency)
    n_real: int  # real source + target positions
    positions: torch.Tensor  # (n_tokens,) flat indices of the non-pad target positions in B*T
    target: torch.Tensor  # (n_tokens,) tgt_out at those positions
    word_pos: torch.Tensor | None = None  # (B, T) parsing's word pointer: source position of the next word; (B, T, C)
    # with more reads (model.word_pointer_last: its last piece too; model.span_pointer: the open constituent's start)

    def to(self, device: torch.device) -> Batch:
        nb = device.type == "cuda"
        return Batch(
            src=self.src.to(device, non_blocking=nb),
            tgt_in=self.tgt_in.to(device, non_blocking=nb),
            tgt_out=self.tgt_out.to(device, non_blocking=nb),
            n_tokens=self.n_tokens,
            n_padded=self.n_padded,
            n_real=self.n_real,
            positions=self.positions.to(device, non_blocking=nb),
            target=self.target.to(device, non_blocking=nb),
            word_pos=None if self.word_pos is None else self.word_pos.to(device, non_blocking=nb),
        )


def padded_width(longest: int, multiple: int, limit: int | None) -> int:
    """`longest` rounded up to a multiple of `multiple` (at most `limit`): with a multiple of 8 or 16, a GPU sees a
    bounded set of sequence lengths, so its kernels, attention plans and graphs are reused across batches."""
    width = -(-longest // multiple) * multiple
    return max(longest, min(width, limit)) if limit is not None else width


def collate(corpus: ParallelCorpus, indices: np.ndarray, *, pad_multiple: int = 1, limit: int | None = None) -> Batch:
    """Padded tensors for the pairs `indices`; lengths padded up to a multiple of `pad_multiple` (<= `limit`)."""
    n = len(indices)
    src_len = corpus.src_lengths[indices]
    tgt_len = corpus.tgt_lengths[indices]
    src = np.full((n, padded_width(int(src_len.max()), pad_multiple, limit)), PAD_ID, dtype=np.int64)
    tgt_in = np.full((n, padded_width(int(tgt_len.max()), pad_multiple, limit)), PAD_ID, dtype=np.int64)
    tgt_out = tgt_in.copy()
    for row, i in enumerate(indices):  # a loop over sentences (about 100 per batch), never over tokens
        s, t = corpus.src[i], corpus.tgt[i]
        src[row, : len(s)] = s
        src[row, len(s)] = EOS_ID
        tgt_in[row, 0] = BOS_ID
        tgt_in[row, 1 : len(t) + 1] = t
        tgt_out[row, : len(t)] = t
        tgt_out[row, len(t)] = EOS_ID
    n_tokens = int(tgt_len.sum())
    positions = np.flatnonzero(tgt_out != PAD_ID)
    return Batch(
        torch.from_numpy(src),
        torch.from_numpy(tgt_in),
        torch.from_numpy(tgt_out),
        n_tokens,
        n_padded=src.size + tgt_in.size,
        n_real=int(src_len.sum()) + n_tokens,
        positions=torch.from_numpy(positions),
        target=torch.from_numpy(tgt_out.reshape(-1)[positions]),
    )


# prepare ----------------------------------------------------------------------------------------------------------
@dataclass
class Prepared:
    """A prepared data folder: tokenizer, encoded splits, and the summary that `prepare` printed."""

    root: Path
    tokenizer: Tokenizer
    splits: dict[str, ParallelCorpus]
    summary: dict

    def texts(self, split: str) -> tuple[list[str], list[str]]:
        """The raw (kept) sentences of a split, for BLEU against real references."""
        src = read_lines(self.root / f"{split}.src.txt")
        tgt = read_lines(self.root / f"{split}.tgt.txt")
        return src, tgt


def _split_prefixes(config: DataConfig) -> dict[str, str]:
    if not config.train:
        raise DataError("no training data: set data.train (a file prefix, e.g. multi30k/train)")
    splits = {"train": config.train}
    if config.valid:
        splits["valid"] = config.valid
    for prefix in config.test:
        splits[Path(prefix).name] = prefix
    return splits


def _input_digests(files: dict[str, tuple[Path, Path]]) -> dict[str, str]:
    return {str(path): file_digest(path) for pair in files.values() for path in pair}


def _cache_key(config: DataConfig, files: dict[str, tuple[Path, Path]], digests: dict[str, str]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({"version": CACHE_VERSION, "options": asdict(config)}, sort_keys=True).encode())
    for split, (src, tgt) in sorted(files.items()):
        h.update(f"{split}:{digests[str(src)]}:{digests[str(tgt)]}".encode())
    return h.hexdigest()[:16]


def _percentiles(lengths: np.ndarray) -> dict:
    if len(lengths) == 0:
        return {}
    p = np.percentile(lengths, [50, 90, 99])
    return {"p50": int(p[0]), "p90": int(p[1]), "p99": int(p[2]), "max": int(lengths.max())}


def prepare(
    config: DataConfig, out_dir: str | Path, *, max_tokens: int = 4096, log=print, frozen: bool = False
) -> Prepared:
    """Train the joint SentencePiece model on the training sides, encode every split, cache it all in `out_dir`.

    The cache is reused when the inputs' contents and the options are unchanged. `frozen` (a run being resumed):
    a cache that no longer matches is refused, naming the file that changed, instead of being prepared again;
    the run's model was trained on the old vocabulary and token ids.
    """
    out_dir = Path(out_dir)
    prefixes = _split_prefixes(config)
    files = {split: (find_side(p, config.src), find_side(p, config.tgt)) for split, p in prefixes.items()}
    digests = _input_digests(files)
    key = _cache_key(config, files, digests)
    build = lambda tmp: _prepare_into(config, files, tmp, key, max_tokens)
    summary = reuse_or_build(out_dir, key, digests, build, frozen=frozen, log=log)
    if summary is not None:
        log(format_summary(summary))
    return load_prepared(out_dir)


def _encode_split(
    config: DataConfig, tokenizer: Tokenizer, split: str, src_lines: list[str], tgt_lines: list[str]
) -> tuple[list[int], list[list[int]], list[list[int]], dict[str, int]]:
    """Token ids of the pairs kept (their line indices) and what was dropped: empty pairs from train and valid, too
    long pairs (data.max_len) from train and valid, too unbalanced ones (data.max_ratio) from train. Test sets stay
    whole."""
    is_test = split not in ("train", "valid")
    keep = [i for i, (a, b) in enumerate(zip(src_lines, tgt_lines)) if is_test or (a.strip() and b.strip())]
    dropped = {"empty": len(src_lines) - len(keep)}
    src_ids = tokenizer.encode([src_lines[i] for i in keep])
    tgt_ids = tokenizer.encode([tgt_lines[i] for i in keep])
    if is_test:
        return keep, src_ids, tgt_ids, dropped
    ok = []
    dropped["too_long"] = dropped["ratio"] = 0
    for j, (a, b) in enumerate(zip(src_ids, tgt_ids)):
        la, lb = len(a), len(b)
        if la > config.max_len or lb > config.max_len:
            dropped["too_long"] += 1
        elif split == "train" and max(la, lb) > config.max_ratio * max(1, min(la, lb)):
            dropped["ratio"] += 1
        else:
            ok.append(j)
    return [keep[j] for j in ok], [src_ids[j] for j in ok], [tgt_ids[j] for j in ok], dropped


def _prepare_into(config: DataConfig, files: dict, out: Path, key: str, max_tokens: int) -> dict:
    from .batching import make_batches, padding_efficiency

    raw = {}
    for split, (src_path, tgt_path) in files.items():
        raw[split] = read_parallel(src_path, tgt_path, errors=config.errors)

    train_src, train_tgt = raw["train"]
    tokenizer = Tokenizer.train(
        (line for line in train_src + train_tgt if line.strip()),
        out / "tokenizer.model",
        vocab_size=config.vocab_size,
        model_type=config.model_type,
        lowercase=config.lowercase,
        split_digits=config.split_digits,
    )

    summary: dict[str, Any] = {  # summary.json
        "cache_key": key,
        "src": config.src,
        "tgt": config.tgt,
        "vocab_size": tokenizer.vocab_size,
        "special_ids": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
        "options": asdict(config),
        "splits": {},
    }
    for split, (src_lines, tgt_lines) in raw.items():
        keep, src_ids, tgt_ids, dropped = _encode_split(config, tokenizer, split, src_lines, tgt_lines)
        corpus = ParallelCorpus(TokenArrays.from_lists(src_ids), TokenArrays.from_lists(tgt_ids))
        corpus.src.save(out / f"{split}.src")
        corpus.tgt.save(out / f"{split}.tgt")
        for side, lines in (("src", src_lines), ("tgt", tgt_lines)):
            (out / f"{split}.{side}.txt").write_text("".join(lines[i] + "\n" for i in keep), encoding="utf-8")
        info = {
            "files": [str(p) for p in files[split]],
            "lines": len(src_lines),
            "sentences": len(corpus),
            "dropped": dropped,
        }
        for side, arr in (("src", corpus.src), ("tgt", corpus.tgt)):
            n = int(arr.offsets[-1])
            info[f"{side}_tokens"] = n
            info[f"{side}_unk_rate"] = round(float((arr.ids == UNK_ID).sum()) / max(1, n), 6)
            info[f"{side}_length"] = _percentiles(arr.lengths)
        if split == "train" and len(corpus):
            batches = make_batches(corpus.src_lengths, corpus.tgt_lengths, max_tokens=max_tokens, seed=0, epoch=0)
            info["batches"] = len(batches)
            info["padding_efficiency"] = round(padding_efficiency(corpus, batches), 4)
            info["max_tokens"] = max_tokens
        summary["splits"][split] = info
    if not len(TokenArrays.load(out / "train.src")):
        raise DataError(f"{files['train'][0]}: no usable training pairs (all empty, too long or unbalanced)")
    return summary


def load_prepared(root: str | Path) -> Prepared:
    root = Path(root)
    try:
        summary = json.loads((root / "summary.json").read_text(encoding="utf-8"))
        tokenizer = Tokenizer(root / "tokenizer.model")
        splits = {
            name: ParallelCorpus(TokenArrays.load(root / f"{name}.src"), TokenArrays.load(root / f"{name}.tgt"))
            for name in summary["splits"]
        }
    except (OSError, KeyError, ValueError, TokenizerError) as err:
        raise DataError(f"{root}: not a prepared data folder ({err})") from None
    return Prepared(root, tokenizer, splits, summary)


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
        if "padding_efficiency" in info:
            lines.append(
                f"  {'':<18} {info['batches']:,} batches of <= {info['max_tokens']} tokens per side, "
                f"padding efficiency {info['padding_efficiency']:.3f}"
            )
    return "\n".join(lines)
