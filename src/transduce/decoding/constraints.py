"""Decoding that can only produce trees: a token mask for greedy and beam search over a linearized-tree vocabulary.

A parser that decodes a linearized tree (§6.3; Vinyals et al. 2015) can emit token sequences that are not trees:
unbalanced brackets, the wrong number of words, an empty constituent. Vinyals et al. repaired such outputs after
decoding; here the search is simply never offered them. The target vocabulary has four kinds of tokens (the scheme
of data/trees.py): "(LABEL" opens a constituent, ")" closes the innermost one, any other token is a leaf (a POS tag,
or "XX") that stands for the next input word, and EOS ends the output.

Per decoder row the constraint tracks, as tensors: tokens emitted, open-bracket depth, words used, whether the
innermost open constituent has a child yet, whether the root is closed, and whether EOS was emitted. A token is
allowed when it keeps the output a prefix of one tree over exactly the row's n words:
- "(LABEL": a word is still unused (so the new constituent can get one); at depth 0 only before the root opens. With
  a root token (e.g. "(ROOT"), only it opens the root and it is never used below the root.
- leaf: inside the root, while words remain.
- ")": the innermost constituent has a child; the root closes only once all n words are used.
- EOS: only after the root is closed (or at once for an empty sentence, n = 0: an empty output).
- optionally (`max_open_run`), "(LABEL" only while fewer than that many brackets were opened in a row since the
  last leaf or ")": a model can otherwise open the same label a hundred times before its next word (seen: greedy,
  "(NP" 138 times where no training tree opens more than 7 in a row). A leaf is allowed wherever an open was, so
  the bound never leaves a row without a token.
- and the token leaves room, within the row's maximum output length (EOS included), for the shortest completion:
  one leaf per unused word, one ")" per open constituent, then EOS. From any allowed state some token stays allowed,
  so a search with a large enough budget (`min_output_length`) always ends with a tree.

The constraint also knows, per row, which word comes next (`used`): bound with the source positions of the words
(`for_sentences(n_words, word_starts)`), `pointer(state)` gives the source position of the next word to cover, which
a model with the word pointer (model.word_pointer, model/pointer.py) adds to its decoder input.

Axis legend: B sentences, N decoder rows (B * beam), V vocabulary, W most words in the batch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, fields, replace

import torch
from torch import Tensor

# token kinds, one per vocabulary entry (ROOT_OPEN: the open bracket reserved for the root); see data/kinds.py
from ..data.kinds import CLOSE, EOS, LEAF, OPEN, OTHER, ROOT_OPEN


@dataclass(frozen=True)
class TreeState:
    """The constraint's state for N decoder rows; every field is (N,) but word_starts."""

    n_words: Tensor  # words of the row's sentence
    max_len: Tensor  # most output tokens, EOS included
    length: Tensor  # tokens emitted so far
    depth: Tensor  # open constituents
    used: Tensor  # leaves emitted (words consumed)
    has_child: Tensor  # the innermost open constituent has a child (bool)
    closed: Tensor  # the root is closed: only EOS may follow (bool)
    ended: Tensor  # EOS was emitted (bool)
    word_starts: Tensor  # (N, W + 1) source position of each word, then of EOS ((N, W + 1, 2): first and last piece)
    # or (N, 1) zeros when not bound
    open_run: Tensor  # brackets opened in a row since the last leaf or ")"


def min_output_length(n_words: int) -> int:
    """Shortest output for an n-word sentence, EOS included: "(ROOT", n leaves, ")", EOS (1 for n = 0)."""
    return n_words + 3 if n_words > 0 else 1


@dataclass(frozen=True)
class TreeConstraint:
    """The tree constraint for one target vocabulary, bound by `for_sentences` to the word counts of a batch.

    The search calls `start(max_len)` once, then per step `allowed(state)` to mask the log-probabilities and
    `advance(state, tokens)` with the chosen tokens, and `reorder` / `select` wherever it reorders its key/value
    cache (beam origins, dropped sentences). Every method returns a new state; nothing syncs with the host except
    the budget check in `start`."""

    kinds: Tensor  # (V,) token kind of every vocabulary id
    n_words: Tensor | None = None  # (B,) set by for_sentences
    word_starts: Tensor | None = None  # (B, W + 1) or (B, W + 1, 2), set by for_sentences for a word-pointer model
    max_open_run: int | None = None  # most "(LABEL" in a row; None: no bound
    has_root: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "has_root", bool(self.kinds.eq(ROOT_OPEN).any()))  # once, not per step
        if self.max_open_run is not None and self.max_open_run < 2:
            raise ValueError(f"max_open_run must be >= 2 (the root and one constituent), got {self.max_open_run}")

    @classmethod
    def from_vocab(
        cls, vocab: Sequence[str], *, eos: str, specials: Collection[str], root: str | None = None
    ) -> TreeConstraint:
        """Token kinds from the vocabulary strings: `eos` ends, other `specials` are never allowed, "(X" opens, ")"
        closes, anything else is a leaf. `root`, when given (e.g. "(ROOT"), is the only token that opens the root."""
        if eos not in vocab:
            raise ValueError(f"EOS token {eos!r} is not in the vocabulary")
        if root is not None and root not in vocab:
            raise ValueError(f"root token {root!r} is not in the vocabulary")

        def kind(token: str) -> int:
            if token == eos:
                return EOS
            if token in specials:
                return OTHER
            if token == root:
                return ROOT_OPEN
            if token == ")":
                return CLOSE
            return OPEN if token.startswith("(") else LEAF

        return cls(torch.tensor([kind(t) for t in vocab], dtype=torch.long))

    def for_sentences(
        self,
        n_words: Tensor | Sequence[int],
        word_starts: Tensor | Sequence[Sequence[int]] | None = None,
    ) -> TreeConstraint:
        """This constraint for a batch whose sentences have `n_words` (B,) words each. `word_starts` (for a model
        with the word pointer): per sentence, the source position of each word's first piece and then the position
        of the source EOS (n + 1 values), as a (B, W + 1) tensor or lists (padded here by repeating the last); or
        (first piece, last piece) pairs, (B, W + 1, 2), for a model with model.word_pointer_last."""
        n = torch.as_tensor(n_words, dtype=torch.long)
        if word_starts is not None and not torch.is_tensor(word_starts):
            rows = [list(r) for r in word_starts]
            width = max(map(len, rows), default=1)
            word_starts = torch.tensor([r + [r[-1]] * (width - len(r)) for r in rows], dtype=torch.long)
        if word_starts is not None:
            word_starts = torch.as_tensor(word_starts, dtype=torch.long)
            if word_starts.dim() < 2 or tuple(word_starts.shape[2:]) not in ((), (2,)):
                raise ValueError(f"word_starts must be (B, W + 1) or (B, W + 1, 2), got {tuple(word_starts.shape)}")
            if word_starts.size(0) != n.numel() or bool((word_starts.size(1) < n + 1).any()):
                raise ValueError("word_starts needs n_words + 1 positions per sentence")
        return replace(self, n_words=n, word_starts=word_starts)

    def start(self, max_len: Tensor) -> TreeState:
        """The state before the first token, one row per sentence. `max_len` (B,): most output tokens, EOS included
        (the search's own limit). Raises ValueError when a sentence cannot fit a tree in its limit."""
        if self.n_words is None:
            raise ValueError("call for_sentences(n_words) before searching")
        device = max_len.device
        n = self.n_words.to(device)
        if n.shape != max_len.shape:
            raise ValueError(f"{n.numel()} word counts for a batch of {max_len.numel()} sentences")
        short = (max_len < torch.where(n > 0, n + 3, torch.ones_like(n))).nonzero().view(-1)
        if short.numel():
            i = int(short[0])
            raise ValueError(
                f"sentence {i}: {int(n[i])} words need at least {min_output_length(int(n[i]))} output "
                f"tokens, the limit is {int(max_len[i])} (raise max_len_b)"
            )
        zeros = torch.zeros_like(n)
        false = torch.zeros_like(n, dtype=torch.bool)
        if self.kinds.device != device:
            object.__setattr__(self, "kinds", self.kinds.to(device))  # once per search, not per step
        starts = zeros.view(-1, 1) if self.word_starts is None else self.word_starts.to(device)
        return TreeState(n, max_len.long(), zeros, zeros, zeros, false, false, false, starts, zeros)

    def pointer(self, state: TreeState) -> Tensor | None:
        """(N,) the source position of the next word each row has to cover (the source EOS once every word is
        used), (N, 2) when bound with (first, last) pairs; None when bound without word positions."""
        if self.word_starts is None:
            return None
        starts = state.word_starts  # (N, W + 1) or (N, W + 1, 2)
        used = state.used.clamp(max=starts.size(1) - 1)  # rows of a -inf beam may run past the words
        pair = starts.shape[2:]  # () or (2,)
        index = used.view(-1, 1, *(1 for _ in pair)).expand(-1, 1, *pair)
        return starts.gather(1, index).squeeze(1)  # (N,) or (N, 2)

    def allowed(self, state: TreeState) -> Tensor:
        """(N, V) bool: the tokens each row may emit next."""
        remaining = state.n_words - state.used  # (N,) words still to cover
        budget = state.max_len - state.length - 1  # (N,) tokens left after the next one
        active = ~state.closed & ~state.ended & state.n_words.gt(0)
        inside = active & state.depth.gt(0)
        words_left = remaining.gt(0)
        can_root = active & state.depth.eq(0) & words_left & (remaining + 2).le(budget)
        can_open = inside & words_left & (remaining + state.depth + 2).le(budget)
        if self.max_open_run is not None:
            can_open = can_open & state.open_run.lt(self.max_open_run)
        can_leaf = inside & words_left & (remaining + state.depth).le(budget)
        can_close = inside & state.has_child & (state.depth.gt(1) | ~words_left) & (remaining + state.depth).le(budget)
        can_eos = state.closed | state.ended | state.n_words.eq(0)
        root_column = can_root if self.has_root else torch.zeros_like(can_root)
        open_column = can_open if self.has_root else can_open | can_root
        by_kind = torch.stack(
            [torch.zeros_like(can_eos), can_eos, open_column, can_close, can_leaf, root_column], dim=1
        )  # (N, 6) in kind order
        return by_kind[:, self.kinds]  # (N, V)

    def advance(self, state: TreeState, tokens: Tensor) -> TreeState:
        """The state after each row emitted `tokens` (N,)."""
        kind = self.kinds[tokens]  # (N,)
        opens = kind.eq(OPEN) | kind.eq(ROOT_OPEN)
        closes = kind.eq(CLOSE)
        leaf = kind.eq(LEAF)
        depth = state.depth + opens.long() - closes.long()
        return replace(
            state,
            length=state.length + 1,
            depth=depth,
            used=state.used + leaf.long(),
            has_child=torch.where(opens, torch.zeros_like(leaf), state.has_child | leaf | closes),
            closed=state.closed | (closes & depth.eq(0)),
            ended=state.ended | kind.eq(EOS),
            open_run=torch.where(opens, state.open_run + 1, torch.zeros_like(state.open_run)),
        )

    def reorder(self, state: TreeState, index: Tensor) -> TreeState:
        """Rows `index` (M,) of the state, in that order (beam origins; mirrors the cache's reorder). A subclass of
        TreeState keeps its class and its own (N, ...) fields (benchmarks/research/parse_oracle_tags.py adds one)."""
        return type(state)(**{f.name: getattr(state, f.name).index_select(0, index) for f in fields(state)})

    def select(self, state: TreeState, index: Tensor) -> TreeState:
        """Rows `index` of the state (sentences kept, beam expansion; mirrors the cache's select)."""
        return self.reorder(state, index)
