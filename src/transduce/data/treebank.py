"""Tree data for the parser (tasks/parsing.py): a treebank prepared into source pieces and target ids.

- Source: the sentence's words (treebank form: brackets inside words escaped as -LRB-/-RRB-) joined by spaces and
  cut into SentencePiece pieces, then EOS. Words are cut into pieces one by one, so each word's first piece is known
  whatever the tokenizer's normalisation does to the text (ParseCorpus.starts: what the word pointer reads).
- Target: `trees.linearize(trees.normalize(tree))`: "(LABEL" tokens, ")" and one leaf token (the POS tag, or "XX"
  with `data.keep_tags = false`) per word. These tokens form a small closed vocabulary, `TargetVocab`, whose ids come
  after the SentencePiece pieces: one joint vocabulary (so the embeddings stay tied, §3.4), in which the target side
  never uses a subword piece and encoding words can never produce a target token. PAD 0, UNK 1, BOS 2, EOS 3 are
  shared by both sides, as everywhere in the project.

Prepared data (RUN/data) is cached like translation's (parallel.py): keyed by the options and the SHA-256 of every
input file; a run being resumed refuses inputs whose contents changed, naming the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import ParseDataConfig
from ..decoding.constraints import TreeConstraint
from ..outputs import atomic_write_text
from .cache import reuse_or_build
from .corpus import ParallelCorpus, TokenArrays
from .kinds import OTHER
from .text import DataError, data_root, file_digest, resolve_path
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from .trees import OPEN_PREFIX, ROOT, SPECIALS, Tree, build_vocab, linearize, normalize, read_trees, to_string, words

TARGET_VOCAB = "target_vocab.json"


# ------------------------------------------------------------------------------------------------ target vocabulary


@dataclass(frozen=True)
class TargetVocab:
    """The closed target vocabulary placed after the SentencePiece pieces in the joint vocabulary.

    `tokens` is `trees.build_vocab`'s list (SPECIALS at 0-3, then ")", "(LABEL"s, leaves); the specials keep their
    ids 0-3 and tokens[i], i >= 4, gets id `offset + i - 4`, where `offset` is the number of pieces. The model's
    vocabulary size is therefore offset + len(tokens) - 4."""

    tokens: tuple[str, ...]
    offset: int
    keep_tags: bool
    ids: dict[str, int] = field(init=False, repr=False, compare=False)  # token -> id
    strings: dict[int, str] = field(init=False, repr=False, compare=False)  # id -> token

    def __post_init__(self) -> None:
        if tuple(self.tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a target vocabulary starts with {SPECIALS}")
        ids = {tok: (i if i < len(SPECIALS) else self.offset + i - len(SPECIALS)) for i, tok in enumerate(self.tokens)}
        object.__setattr__(self, "ids", ids)  # frozen: derived once here
        object.__setattr__(self, "strings", {i: tok for tok, i in ids.items()})

    @property
    def size(self) -> int:
        """The model's vocabulary size: pieces + target tokens (specials counted once)."""
        return self.offset + len(self.tokens) - len(SPECIALS)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Target token strings -> ids; a token not seen in training (a label only the valid file has) is UNK."""
        return [self.ids.get(tok, UNK_ID) for tok in tokens]

    def decode(self, ids: Sequence[int]) -> list[str]:
        return [self.strings.get(int(i), SPECIALS[UNK_ID]) for i in ids]

    def constraint(self, max_open_run: int | None = None) -> TreeConstraint:
        """The tree constraint over the whole joint vocabulary: pieces are never allowed on the target side.
        `max_open_run`: most opening brackets in a row (None: no bound; decode.max_open_run)."""
        own = TreeConstraint.from_vocab(
            self.tokens,
            eos=SPECIALS[EOS_ID],
            specials=SPECIALS,
            root=OPEN_PREFIX + ROOT if OPEN_PREFIX + ROOT in self.tokens else None,
        )
        n = len(SPECIALS)
        pieces = torch.full((self.offset - n,), OTHER, dtype=torch.long)
        return TreeConstraint(torch.cat([own.kinds[:n], pieces, own.kinds[n:]]), max_open_run=max_open_run)

    def save(self, path: Path) -> None:
        atomic_write_text(
            path,
            json.dumps({"tokens": list(self.tokens), "offset": self.offset, "keep_tags": self.keep_tags}, indent=1)
            + "\n",
        )

    @classmethod
    def load(cls, path: Path) -> TargetVocab:
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(tuple(raw["tokens"]), int(raw["offset"]), bool(raw["keep_tags"]))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise DataError(f"{path}: not a target vocabulary ({err})") from None


# ------------------------------------------------------------------------------------------------------------- data


@dataclass
class ParseCorpus(ParallelCorpus):
    """Source pieces and target ids, plus per sentence the source position of each word's first piece and then the
    position of the source EOS (n + 1 values for n words): what the word pointer points at."""

    starts: TokenArrays = field(default_factory=lambda: TokenArrays.from_lists([]))


def encode_words(tokenizer: Tokenizer, sentences: Sequence[Sequence[str]]) -> tuple[list[list[int]], list[list[int]]]:
    """Each word cut into pieces on its own (a word SentencePiece would drop, e.g. a lone control character,
    becomes UNK), so that every word has its own pieces whatever the tokenizer's normalisation does to the text.
    Returns the piece ids per sentence (without EOS) and the word starts (see ParseCorpus)."""
    flat = [w for sentence in sentences for w in sentence]
    pieces = iter(tokenizer.encode(flat) if flat else [])
    return join_words([[next(pieces) or [UNK_ID] for _ in sentence] for sentence in sentences])


def join_words(
    sentences: Sequence[Sequence[list[int]]], prefixes: Sequence[list[int]] | None = None
) -> tuple[list[list[int]], list[list[int]]]:
    """Sentences given as each word's pieces -> the piece ids per sentence and the word starts (see ParseCorpus).
    `prefixes`: ids put before each sentence's first word (a data.corpora treebank's tag), counted in the starts."""
    ids: list[list[int]] = []
    starts: list[list[int]] = []
    for i, sentence in enumerate(sentences):
        row: list[int] = list(prefixes[i]) if prefixes is not None else []
        at: list[int] = []
        for word in sentence:
            at.append(len(row))
            row.extend(word)
        ids.append(row)
        starts.append([*at, len(row)])
    return ids, starts


@dataclass
class ParseData:
    """A prepared data folder: the word tokenizer, the target vocabulary, encoded splits, and for validation the
    valid trees as read (the gold side of EVALB) with their words."""

    root: Path
    tokenizer: Tokenizer
    vocab: TargetVocab
    splits: dict[str, ParseCorpus]
    summary: dict
    valid_words: list[list[str]] = field(default_factory=list)
    valid_gold: list[Tree] = field(default_factory=list)


def _find_tree_file(name: str) -> Path:
    path = resolve_path(name)
    if not path.is_file():
        root = data_root()
        raise DataError(
            f"{name}: no such tree file" + ("" if root is None else f" (also looked under TRANSDUCE_DATA={root})")
        )
    return path


def _input_files(config: ParseDataConfig) -> dict[str, list[Path]]:
    if not config.train:
        raise DataError("no training trees: set data.train (a tree file, e.g. gum_const/train.trees.gz)")
    files = {"train": [_find_tree_file(p) for p in (*config.train, *(c.file for c in config.corpora))]}
    if config.valid:
        files["valid"] = [_find_tree_file(config.valid)]
    return files


def _cache_key(config: ParseDataConfig, digests: dict[str, str]) -> str:
    """The options and the inputs' contents (the cache's layout is the manifest's, outputs.FORMAT)."""
    h = hashlib.sha256()
    h.update(json.dumps({"options": dataclasses.asdict(config), "inputs": digests}, sort_keys=True).encode())
    return h.hexdigest()[:16]


def prepare_trees(
    config: ParseDataConfig, out_dir: str | Path, *, log: Callable[[str], None] = print, frozen: bool = False
) -> ParseData:
    """Read and normalize the trees, train SentencePiece on the training words, build the target vocabulary, encode
    both sides, cache it all in `out_dir` (reused while the inputs' contents and the options are unchanged).

    `frozen` (a run being resumed): a cache that no longer matches is refused, naming the file that changed; the
    run's model was trained on the old vocabulary and ids."""
    out_dir = Path(out_dir)
    files = _input_files(config)
    digests = {str(p): file_digest(p) for paths in files.values() for p in paths}
    key = _cache_key(config, digests)
    summary = reuse_or_build(
        out_dir, key, digests, lambda tmp: _prepare_into(config, files, tmp), frozen=frozen, log=log
    )
    if summary is not None:
        log(format_summary(summary))
    return load_parse_data(out_dir)


def _prepare_into(config: ParseDataConfig, files: dict[str, list[Path]], out: Path) -> dict:
    per_file = {split: [read_trees(path) for path in paths] for split, paths in files.items()}
    raw = {split: [t for trees in found for t in trees] for split, found in per_file.items()}
    # each training tree's corpus: 0 for data.train's files, k + 1 for data.corpora's k-th
    sizes = [sum(len(trees) for trees in per_file["train"][: len(config.train)])]
    sizes += [len(trees) for trees in per_file["train"][len(config.train) :]]
    corpus_of = np.repeat(np.arange(len(sizes)), sizes)
    normalized = {split: [normalize(t) for t in trees] for split, trees in raw.items()}
    sentences = {split: [" ".join(words(t)) for t in trees] for split, trees in normalized.items()}
    tokenizer = Tokenizer.train(
        sentences["train"],
        out / "tokenizer.model",
        vocab_size=config.vocab_size,
        model_type=config.model_type,
        tags=config.tags,
    )
    tag_ids = [0] + [tokenizer.tag_id(c.tag) if c.tag else 0 for c in config.corpora]
    vocab = TargetVocab(
        tuple(build_vocab(normalized["train"], keep_tags=config.keep_tags)), tokenizer.vocab_size, config.keep_tags
    )
    vocab.save(out / TARGET_VOCAB)
    summary: dict[str, Any] = {
        "pieces": tokenizer.vocab_size,
        "target_tokens": len(vocab.tokens) - len(SPECIALS),
        "vocab_size": vocab.size,
        "keep_tags": config.keep_tags,
        "special_ids": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
        "options": dataclasses.asdict(config),
        "splits": {},
    }
    for split, trees in raw.items():
        src, starts = encode_words(tokenizer, [words(t) for t in normalized[split]])
        if split == "train":  # a tagged corpus's sources begin with its tag (the word starts count it)
            for i in np.flatnonzero(np.asarray(tag_ids)[corpus_of]).tolist():
                src[i] = [tag_ids[corpus_of[i]], *src[i]]
                starts[i] = [at + 1 for at in starts[i]]
        tgt = [vocab.encode(linearize(t, keep_tags=config.keep_tags)) for t in normalized[split]]
        keep = [i for i, (s, t) in enumerate(zip(src, tgt)) if len(s) <= config.max_len and len(t) <= config.max_len]
        corpus = ParseCorpus(
            TokenArrays.from_lists([src[i] for i in keep]),
            TokenArrays.from_lists([tgt[i] for i in keep]),
            TokenArrays.from_lists([starts[i] for i in keep]),
        )
        corpus.src.save(out / f"{split}.src")
        corpus.tgt.save(out / f"{split}.tgt")
        corpus.starts.save(out / f"{split}.starts")
        if split == "valid":  # the gold side of EVALB: the trees as read (scored like any gold file), and the words
            _write_lines(out / "valid.gold.trees", [to_string(trees[i]) for i in keep])
            _write_lines(out / "valid.words.txt", [sentences[split][i] for i in keep])
        summary["splits"][split] = _split_summary(files[split], trees, corpus, len(trees) - len(keep))
        if split == "train":
            summary["splits"]["train"]["corpora"] = _corpora_summary(config, files["train"], corpus_of[keep])
    if not len(TokenArrays.load(out / "train.src")):
        raise DataError(
            f"{files['train'][0]}: no usable training trees (all longer than data.max_len {config.max_len})"
        )
    return summary


def _corpora_summary(config: ParseDataConfig, train_files: list[Path], kept_corpus_of: np.ndarray) -> list[dict]:
    """Each training corpus's kept trees, one after the other (data.train's, then data.corpora's): its files, first
    tree, count, weight and tag. `kept_corpus_of`: the corpus of each kept training tree, in order."""
    kept = np.bincount(kept_corpus_of, minlength=1 + len(config.corpora)).tolist()
    firsts = np.cumsum([0, *kept[:-1]]).tolist()
    given = [(list(map(str, train_files[: len(config.train)])), 1.0, "")]
    given += [([str(path)], c.weight, c.tag) for path, c in zip(train_files[len(config.train) :], config.corpora)]
    return [
        {"files": paths, "first": first, "sentences": n, "weight": weight, "tag": tag}
        for (paths, weight, tag), first, n in zip(given, firsts, kept)
    ]


def _write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _split_summary(paths: list[Path], trees: list[Tree], corpus: ParallelCorpus, too_long: int) -> dict:
    def lengths(arr: TokenArrays) -> dict:
        if not len(arr):
            return {}
        p = np.percentile(arr.lengths, [50, 90, 99])
        return {"p50": int(p[0]), "p90": int(p[1]), "p99": int(p[2]), "max": int(arr.lengths.max())}

    n_tgt = int(corpus.tgt.offsets[-1])
    return {
        "files": [str(p) for p in paths],
        "trees": len(trees),
        "kept": len(corpus),
        "dropped": {"too_long": too_long},
        "src_tokens": int(corpus.src.offsets[-1]),
        "tgt_tokens": n_tgt,
        "src_unk_rate": round(float((corpus.src.ids == UNK_ID).sum()) / max(1, int(corpus.src.offsets[-1])), 6),
        "tgt_unk_rate": round(float((corpus.tgt.ids == UNK_ID).sum()) / max(1, n_tgt), 6),
        "src_length": lengths(corpus.src),
        "tgt_length": lengths(corpus.tgt),
    }


def load_parse_data(root: str | Path) -> ParseData:
    """A folder written by `prepare_trees`."""
    root = Path(root)
    try:
        summary = json.loads((root / "summary.json").read_text(encoding="utf-8"))
        splits = {
            name: ParseCorpus(*(TokenArrays.load(root / f"{name}.{part}") for part in ("src", "tgt", "starts")))
            for name in summary["splits"]
        }
        data = ParseData(
            root, Tokenizer(root / "tokenizer.model"), TargetVocab.load(root / TARGET_VOCAB), splits, summary
        )
        if "valid" in splits:
            data.valid_words = [
                line.split() for line in (root / "valid.words.txt").read_text(encoding="utf-8").splitlines()
            ]
            data.valid_gold = read_trees(root / "valid.gold.trees") if len(splits["valid"]) else []
    except (OSError, KeyError, ValueError) as err:
        raise DataError(f"{root}: not a prepared parsing data folder ({err})") from None
    return data


def format_summary(summary: dict) -> str:
    leaves = "POS tags" if summary["keep_tags"] else "XX preterminals"
    head = (
        f"data: {summary['pieces']} SentencePiece pieces for the words + {summary['target_tokens']} target "
        f"tokens ({leaves}) = vocabulary {summary['vocab_size']}"
    )
    lines = [head]

    def length(d: dict) -> str:
        return "/".join(str(v) for v in d.values())

    for split, info in summary["splits"].items():
        lines.append(
            f"  {split:<6} {info['kept']:>7,} of {info['trees']:,} trees  tokens {info['src_tokens']:,} / "
            f"{info['tgt_tokens']:,}  unk {info['src_unk_rate']:.4%} / {info['tgt_unk_rate']:.4%}  length "
            f"p50/p90/p99/max {length(info['src_length'])} | {length(info['tgt_length'])}  dropped (longer "
            f"than data.max_len): {info['dropped']['too_long']}"
        )
    return "\n".join(lines)
