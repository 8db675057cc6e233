"""English constituency parsing as sequence transduction: the paper's §6.3, after Vinyals et al. (2015), "Grammar as
a Foreign Language". The same encoder-decoder Transformer reads a sentence and writes its linearized tree.

- Source: the sentence's words (treebank form: brackets inside words escaped as -LRB-/-RRB-) joined by spaces and
  cut into SentencePiece pieces, then EOS.
- Target: `trees.linearize(trees.normalize(tree))`: "(LABEL" tokens, ")" and one leaf token (the POS tag, or "XX"
  with `data.keep_tags = false`) per word. These tokens form a small closed vocabulary, `TargetVocab`, whose ids come
  after the SentencePiece pieces: one joint vocabulary (so the embeddings stay tied, §3.4), in which the target side
  never uses a subword piece and encoding words can never produce a target token. PAD 0, UNK 1, BOS 2, EOS 3 are
  shared by both sides, as everywhere in the project.
- Decoding: batched beam search restricted by `decoding.constraints.TreeConstraint`, so every output is one
  well-formed tree whose leaves are exactly the input words (no repair step, no excluded sentence).
- The word pointer (`model.word_pointer`, not in the paper): with leaves that are tags only, the decoder has to
  count the leaves it wrote to know which word comes next, and a small model trained on GUM's 3.7k trees does not
  learn to (it writes trees of the right shape with tags of the wrong words). With the pointer, each decoder input
  also gets (a projection of) the encoder state of the first piece of the next word to cover (after the last word:
  the source EOS). Training reads that word off the target (leaves written so far); decoding off the tree
  constraint's counter. Words are cut into pieces one by one, so each word's first piece is known whatever the
  tokenizer's normalisation does to the text (ParseCorpus.starts).
- The span pointer (`model.span_pointer`, with the word pointer): each decoder input also gets the encoder state of
  the first word of the innermost open constituent, so the decoder sees both ends of the span a ")" would close
  without having to match brackets by attention. Training reads it off the target (a stack of open brackets,
  `span_words`); decoding off the tree constraint's stack of open starts.
- The tree position (`model.tree_position`, with the word pointer): each decoder input also gets an embedding of the
  depth (open constituents) and a projection of the embedding of the innermost open constituent's "(LABEL", so the
  decoder knows where it stands in the tree without counting brackets by attention. Training reads both off the
  target (`tree_states`); decoding off the tree constraint's depth and stack of open labels.
- Validation: loss, and F1 scored like EVALB (tasks/evalb.py: COLLINS.prm plus DELETE_LABEL ROOT, strict, gold tags
  put back, the usual published setting) on the first `train.valid_max_sentences` trees of the valid file.

Prepared data (RUN/data) is cached like translation's: keyed by the options and the SHA-256 of every input file;
a run being resumed refuses inputs whose contents changed, naming the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, overload

import numpy as np
import torch
from tqdm import tqdm

from ..config import (
    ConfigError,
    ModelConfig,
    ParseDataConfig,
    ParseDecodeConfig,
    ParsingRunConfig,
    config_from_dict,
    read_config,
    read_config_dict,
    save_config,
)
from ..data import (
    DataError,
    ParallelCorpus,
    TokenArrays,
    file_digest,
    resolve_path,
    reuse_or_build,
)
from ..data.parallel import Batch
from ..data.text import data_root
from ..data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from ..decoding.constraints import CLOSE, LEAF, OPEN, OTHER, ROOT_OPEN, TreeConstraint
from ..decoding.ensemble import Ensemble
from ..decoding.search import beam_search, greedy_search
from ..decoding.translator import AttentionMaps, pick_device
from ..model import Transformer
from ..outputs import atomic_write_text
from ..training.checkpoint import find_weights, load_weights
from . import evalb
from .base import has_trained, same_run
from .translation import SequenceTask
from .trees import (
    OPEN_PREFIX,
    ROOT,
    SPECIALS,
    Tree,
    build_vocab,
    delinearize,
    escape_word,
    linearize,
    normalize,
    parse_tree,
    read_trees,
    to_string,
    words,
)

CACHE_VERSION = 2  # 2: words encoded one by one, their start positions kept (the word pointer)
TARGET_VOCAB = "target_vocab.json"
SUBSTITUTION_STREAM = 0x5B2  # numpy's generator for train.subtree_substitution: (seed, epoch, this)
WORD_STREAM = 0x5B3  # ... and for train.word_substitution


# ----------------------------------------------------------------------------------------------------------- config


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
    `prefixes`: ids put before each sentence's first word (data.mark_extra's marker), counted in the starts."""
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
    files = {"train": [_find_tree_file(p) for p in (*config.train, *config.extra_train)]}
    if config.valid:
        files["valid"] = [_find_tree_file(config.valid)]
    return files


def _cache_key(config: ParseDataConfig, digests: dict[str, str]) -> str:
    options = dataclasses.asdict(config)
    if not config.mark_extra:  # left out when off, so that the caches of runs made before the option still match
        del options["mark_extra"]
    h = hashlib.sha256()
    h.update(json.dumps({"version": CACHE_VERSION, "options": options, "inputs": digests}, sort_keys=True).encode())
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
    main_trees = sum(len(trees) for trees in per_file["train"][: len(config.train)])  # the rest: extra_train
    normalized = {split: [normalize(t) for t in trees] for split, trees in raw.items()}
    sentences = {split: [" ".join(words(t)) for t in trees] for split, trees in normalized.items()}
    tokenizer = Tokenizer.train(
        sentences["train"], out / "tokenizer.model", vocab_size=config.vocab_size, model_type=config.model_type
    )
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
        if split == "train" and config.mark_extra:
            src[main_trees:] = [[BOS_ID, *row] for row in src[main_trees:]]
            starts[main_trees:] = [[at + 1 for at in row] for row in starts[main_trees:]]
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
    if not len(TokenArrays.load(out / "train.src")):
        raise DataError(
            f"{files['train'][0]}: no usable training trees (all longer than data.max_len {config.max_len})"
        )
    return summary


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


# ----------------------------------------------------------------------------------------------------- word pointer


def pointer_targets(starts: Sequence[int] | np.ndarray, *, last: bool = False) -> np.ndarray:
    """What the pointer reads for each word and then for EOS: the word starts (ParseCorpus), (n + 1,); with `last`
    (model.word_pointer_last) (first piece, last piece) pairs, (n + 1, 2): a word's last piece is the one before
    the next word's first, and EOS's is EOS."""
    starts = np.asarray(starts, dtype=np.int64)
    if not last:
        return starts
    return np.stack([starts, np.concatenate([starts[1:] - 1, starts[-1:]])], axis=1)


def _innermost_open(target: Sequence[int] | np.ndarray, kinds: np.ndarray) -> list[tuple[int, int, int] | None]:
    """For the decoder inputs BOS + target: (depth, "(LABEL" id, words covered when it was written) of the innermost
    open constituent, None at depth 0, as TreeConstraint tracks them while decoding. `kinds`: the constraint's token
    kind of every id (an UNK, kind OTHER, moves nothing)."""
    stack: list[tuple[int, int, int]] = []
    used = 0
    out: list[tuple[int, int, int] | None] = [None]
    target = np.asarray(target, dtype=np.int64)
    for token, kind in zip(target.tolist(), kinds[target].tolist()):
        if kind in (OPEN, ROOT_OPEN):
            stack.append((len(stack) + 1, token, used))
        elif kind == CLOSE and stack:
            stack.pop()
        elif kind == LEAF:
            used += 1
        out.append(stack[-1] if stack else None)
    return out


def span_words(target: Sequence[int] | np.ndarray, kinds: np.ndarray, n_words: int) -> np.ndarray:
    """For the decoder inputs BOS + target: the word at which the innermost open constituent starts (the words
    covered when its "(LABEL" was written), n_words (the source EOS) at depth 0 (model.span_pointer). (len(target) +
    1,)."""
    opens = _innermost_open(target, kinds)
    return np.asarray([n_words if o is None else min(o[2], n_words) for o in opens], dtype=np.int64)


def tree_states(target: Sequence[int] | np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """For the decoder inputs BOS + target: the open constituents (depth) and the id of the innermost one's
    "(LABEL" (0, PAD, at depth 0) (model.tree_position). (len(target) + 1, 2)."""
    opens = _innermost_open(target, kinds)
    return np.asarray([(0, 0) if o is None else o[:2] for o in opens], dtype=np.int64).reshape(-1, 2)


def word_positions(
    starts: np.ndarray,
    target: np.ndarray,
    leaves: np.ndarray,
    *,
    last: bool = False,
    kinds: np.ndarray | None = None,
    span: bool = False,
    tree: bool = False,
) -> np.ndarray:
    """For the decoder inputs BOS + target: the source position of the next word to cover at each of them, given
    the sentence's word starts (ParseCorpus) and which ids are leaves (the words used so far are the leaves
    already written). (len(target) + 1,), or (len(target) + 1, 2) with `last` (see pointer_targets). With `span`
    (model.span_pointer), one more column: the first piece of the innermost open constituent's first word
    (span_words); with `tree` (model.tree_position), two more last: the depth and the innermost open "(LABEL" id
    (tree_states). Both need the token `kinds`. The columns are ModelConfig.pointer_reads."""
    used = np.concatenate([[0], np.cumsum(leaves[target])])
    positions = pointer_targets(starts, last=last)[np.minimum(used, len(starts) - 1)]
    if not span and not tree:
        return positions
    if kinds is None:
        raise ValueError("the span and tree reads need the token kinds")
    columns = [positions.reshape(len(positions), -1)]
    if span:
        columns.append(np.asarray(starts, dtype=np.int64)[span_words(target, kinds, len(starts) - 1)][:, None])
    if tree:
        columns.append(tree_states(target, kinds))
    return np.concatenate(columns, axis=1)


# ------------------------------------------------------------------------------------------ subtree substitution


def tree_phrases(target: Sequence[int] | np.ndarray, kinds: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Every constituent of one linearized tree but its root, in the order they close: (first token, end token,
    first word, end word), so that target[first token:end token] runs from its "(LABEL" to its ")" and it covers
    words [first word, end word). `kinds`: the tree constraint's token kind of every id. Preterminals are leaves,
    not constituents."""
    found: list[tuple[int, int, int, int]] = []
    stack: list[tuple[int, int]] = []
    used = 0
    for at, kind in enumerate(kinds[np.asarray(target, dtype=np.int64)].tolist()):
        if kind in (OPEN, ROOT_OPEN):
            stack.append((at, used))
        elif kind == CLOSE and stack:
            start, first = stack.pop()
            if start > 0:  # the root is never replaced
                found.append((start, at + 1, first, used))
        elif kind == LEAF:
            used += 1
    return found


def substitute_subtrees(
    sentences: Sequence[Sequence[list[int]]],
    targets: Sequence[np.ndarray],
    phrases: Sequence[Sequence[tuple[int, int, int, int]]],
    *,
    rate: float,
    rng: np.random.Generator,
    max_len: int,
    budgets: Sequence[int] | None = None,
    groups: Sequence[int] | None = None,
) -> tuple[list[list[list[int]]], list[np.ndarray]]:
    """Same-label subtree substitution (Shi et al. 2021, "SUB2"): each tree, with probability `rate`, has one of its
    constituents (`tree_phrases`, chosen uniformly) replaced by a constituent of the same label drawn uniformly from
    all the trees' (its own included), words and subtree together. `sentences`: each tree's words as their source
    pieces; `targets`: the linearized trees. A result with more than `max_len` target tokens, or more source pieces
    than its tree's budget (`budgets`, default `max_len`), keeps the tree as it was. `groups`: each tree's treebank
    (data.mark_extra); donors then come from the tree's own group only. Returns new lists (the inputs are not
    changed)."""
    pool: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for i, found in enumerate(phrases):
        for k, (start, _, _, _) in enumerate(found):
            pool.setdefault((int(targets[i][start]), groups[i] if groups else 0), []).append((i, k))
    out_sentences = [list(sentence) for sentence in sentences]
    out_targets = list(targets)
    for i in np.flatnonzero(rng.random(len(targets)) < rate).tolist():
        if not phrases[i]:
            continue
        start, end, first, last = phrases[i][int(rng.integers(len(phrases[i])))]
        donors = pool[(int(targets[i][start]), groups[i] if groups else 0)]
        d, k = donors[int(rng.integers(len(donors)))]
        d_start, d_end, d_first, d_last = phrases[d][k]
        target = np.concatenate([targets[i][:start], targets[d][d_start:d_end], targets[i][end:]])
        sentence = [*sentences[i][:first], *sentences[d][d_first:d_last], *sentences[i][last:]]
        budget = budgets[i] if budgets is not None else max_len
        if len(target) <= max_len and sum(len(pieces) for pieces in sentence) <= budget:
            out_sentences[i], out_targets[i] = sentence, target
    return out_sentences, out_targets


def substitute_words(
    sentences: Sequence[Sequence[list[int]]],
    tags: Sequence[np.ndarray],
    *,
    rate: float,
    rng: np.random.Generator,
    budgets: Sequence[int],
    groups: Sequence[int] | None = None,
) -> list[list[list[int]]]:
    """Same-tag word substitution (the preterminal case of Shi et al. 2021's substitution): each word, with
    probability `rate`, is replaced by a word of the same POS tag drawn from all the training words (as often as
    they occur), so the tree stays as it was. `sentences`: each tree's words as their source pieces; `tags`: each
    word's tag id, one array per sentence. A sentence whose pieces would exceed its budget (`budgets`) keeps its
    words. `groups`: each sentence's treebank (data.mark_extra); donors then come from the word's own group only.
    Returns new lists (the inputs are not changed)."""
    where = [(i, k) for i, sentence_tags in enumerate(tags) for k in range(len(sentence_tags))]
    if not where:
        return [list(sentence) for sentence in sentences]
    flat = np.concatenate([np.asarray(t, dtype=np.int64) for t in tags])
    if groups is not None:  # one key per (tag, group)
        flat = flat * (max(groups) + 1) + np.repeat(np.asarray(groups, dtype=np.int64), [len(t) for t in tags])
    order = np.argsort(flat, kind="stable")  # the words grouped by tag, so that a donor is one index into a group
    first = np.searchsorted(flat[order], flat, side="left")
    size = np.searchsorted(flat[order], flat, side="right") - first
    chosen = np.flatnonzero(rng.random(len(flat)) < rate)
    donors = order[first[chosen] + (rng.random(len(chosen)) * size[chosen]).astype(np.int64)]
    out = [list(sentence) for sentence in sentences]
    for at, donor in zip(chosen.tolist(), donors.tolist()):
        i, k = where[at]
        d, j = where[donor]
        out[i][k] = sentences[d][j]
    for i, sentence in enumerate(out):
        if sum(len(pieces) for pieces in sentence) > budgets[i]:
            out[i] = list(sentences[i])
    return out


# ------------------------------------------------------------------------------------------------------------- task


class ParsingTask(SequenceTask):
    """Tree data on the translation task's sequence-to-sequence machinery (batches, model, loss), validation loss
    and F1, and a Parser."""

    name: ClassVar[str] = "parsing"
    config_class: ClassVar[type] = ParsingRunConfig
    sampled_parts: ClassVar[tuple[str, ...]] = ("src", "starts")  # subword sampling redraws the source words' pieces
    substitutes_subtrees: ClassVar[bool] = True  # train.subtree_substitution applies (and redraws "tgt" too)
    substitutes_words: ClassVar[bool] = True  # train.word_substitution applies (it redraws "src" and "starts")
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
        self.span, self.tree = config.model.span_pointer, config.model.tree_position
        self.kinds = kinds if self.span or self.tree else None  # span_words and tree_states read every token's kind
        self._words: list[list[str | None]] | None = None  # the training words, read back for subword sampling
        self._phrases: list[list[tuple[int, int, int, int]]] | None = None  # each training tree's, for substitution
        self._kept: list[list[list[int]]] | None = None  # each training word's prepared pieces
        self._tags: list[np.ndarray] | None = None  # each training word's tag id, for word substitution
        self._prefix: list[list[int]] | None = None  # what each training source holds before its first word

    def redraws(self) -> bool:
        train = self.config.train
        return super().redraws() or train.subtree_substitution > 0 or train.word_substitution > 0

    def draw_parts(self) -> tuple[str, ...]:
        return (*self.sampled_parts, "tgt") if self.config.train.subtree_substitution > 0 else self.sampled_parts

    def draw_options(self) -> dict[str, Any]:
        train = self.config.train
        return {
            **super().draw_options(),
            "substitution": train.subtree_substitution,
            "word_substitution": train.word_substitution,
        }

    def draw_defaults(self) -> dict[str, Any]:
        return {"substitution": 0.0, "word_substitution": 0.0}  # draws made before the options: without them

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
        - train.word_substitution: then each word, with that probability, is replaced by a training word of the same
          tag (`substitute_words`), with the pieces this epoch drew for that word; the tree is unchanged.
        - train.subtree_substitution: then each tree, with that probability, gets one constituent replaced by one of
          the same label (`substitute_subtrees`), its words with the pieces this epoch drew for them.
        The word starts follow the pieces; without substitution the targets are the prepared ones."""
        prepared, train = self.data.splits["train"], self.config.train
        prefixes = self._prefixes()
        budgets = [self.config.data.max_len - len(prefix) for prefix in prefixes]
        groups = [len(prefix) for prefix in prefixes]  # 1: marked (data.mark_extra), else all 0: one group
        sentences = self._sampled_words(seed, epoch, budgets) if train.subword_sampling > 0 else self._prepared_words()
        tgt = prepared.tgt
        if train.word_substitution > 0:
            if self._tags is None:
                kinds = self.data.vocab.constraint().kinds.numpy()
                self._tags = [t[kinds[t] == LEAF] for t in (prepared.tgt[i] for i in range(len(prepared)))]
            rng = np.random.default_rng([seed, epoch, WORD_STREAM])
            rate = train.word_substitution
            sentences = substitute_words(sentences, self._tags, rate=rate, rng=rng, budgets=budgets, groups=groups)
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
        """What each prepared training source holds before its first word: data.mark_extra's marker, or nothing
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
        """The pairs as a Batch, with the word pointer's positions (B, T) when the model has one."""
        batch = super().collate_pairs(corpus, indices, **options)
        if self.leaves is None:
            return batch
        assert isinstance(corpus, ParseCorpus)
        last = self.config.model.word_pointer_last
        rows = [  # a loop over sentences, as in data.collate
            word_positions(
                corpus.starts[i],
                corpus.tgt[i],
                self.leaves,
                last=last,
                kinds=self.kinds,
                span=self.span,
                tree=self.tree,
            )
            for i in indices
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
    def validate(self, model: Transformer, device: torch.device) -> dict[str, float]:
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

    def predictor(self, model: Transformer) -> Parser:
        return Parser(model, self.data.tokenizer, self.data.vocab, decode=self.config.decode)


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


# ----------------------------------------------------------------------------------------------------------- parser


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


# ---------------------------------------------------------------------------------------------------------- command


def parse_command(
    run: str | Path,
    lines: Sequence[str],
    *,
    gold_path: str | Path | None = None,
    beam: int | None = None,
    alpha: float | None = None,
    max_open_run: int | None = None,
    device: str = "auto",
    progress: bool = False,
    ensemble: Sequence[str | Path] = (),
) -> tuple[list[str], str | None]:
    """`transduce parse RUN [--input FILE] [--gold TREES]`: one tree per input line (an empty line gives ""), and
    with a gold tree file (one tree per line, line for line with the input) the scores as text: F1 with gold tags put
    back and with the parser's own tags, exact-match rate, tagging accuracy, then EVALB's summary blocks.
    `max_open_run`: overrides the run's decode.max_open_run (0: no bound). `ensemble`: more runs decoded together
    with `run` (Parser.from_runs)."""
    parser = Parser.from_runs([run, *ensemble], device=device)
    if max_open_run is not None:
        decode = dataclasses.replace(parser.decode, max_open_run=max_open_run)  # checked by ParseDecodeConfig
        parser = Parser(parser.model, parser.tokenizer, parser.vocab, decode=decode)
    gold = None
    if gold_path is not None:
        gold_file = resolve_path(gold_path)
        gold = evalb.read_sentences(gold_file, gold=True)
        if len(gold) != len(lines):
            raise DataError(
                f"{gold_path} has {len(gold)} lines but the input has {len(lines)}; the gold trees "
                "must be line for line with the sentences"
            )
    trees = parser.parse_trees(list(lines), beam=beam, alpha=alpha, progress=progress)
    output = ["" if t is None else to_string(t) for t in trees]
    if gold is None:
        return output, None
    return output, _gold_report(gold, trees, tagged=parser.vocab.keep_tags, source=str(gold_path))


def _gold_report(gold: list, trees: list[Tree | None], *, tagged: bool, source: str) -> str:
    gold_trees = [g[0] if isinstance(g, list) and len(g) == 1 else g for g in gold]
    retagged = [
        evalb.put_gold_tags(t, g) if isinstance(t, Tree) and isinstance(g, Tree) else t
        for t, g in zip(trees, gold_trees)
    ]
    params = evalb.default_params()
    with_gold = evalb.score_corpus(gold, retagged, params, strict=True)
    lines = [
        f"scored against {source}: {len(trees)} sentences (EVALB, COLLINS.prm + DELETE_LABEL ROOT, strict)",
        f"F1 (gold tags put back)   = {with_gold.f1:6.2f}",
    ]
    own = evalb.score_corpus(gold, trees, params, strict=True) if tagged else None
    if own is not None:
        lines.append(f"F1 (predicted tags)       = {own.f1:6.2f}")
    lines.append(f"Exact match               = {with_gold.all.complete_match:6.2f}  (gold tags put back)")
    if own is not None:
        lines.append(f"Tagging accuracy          = {own.all.tagging_accuracy:6.2f}")
    else:
        lines.append("(the model writes XX for every POS tag: no predicted-tag F1 or tagging accuracy)")
    lines += ["", "=== EVALB, gold tags put back ===", evalb.format_report(with_gold)]
    if own is not None:
        lines += ["=== EVALB, predicted tags ===", evalb.format_report(own)]
    return "\n".join(lines)


__all__ = [
    "ParseData",
    "ParseDataConfig",
    "ParseDecodeConfig",
    "Parser",
    "ParsingRunConfig",
    "ParsingTask",
    "TargetVocab",
    "load_parse_data",
    "parse_command",
    "prepare_trees",
    "score_parses",
]
