"""Lexical constraints in the batched beam search: phrases that must appear, phrases that must not, and a prefix the
output starts with (`translate --constraints/--glossary/--prefix`; terminology/ reads them as text, front.py turns
them into token ids per sentence: `Steering`).

Positive phrases: Dynamic Beam Allocation (Post & Vilar 2018, N18-1119), vectorised over sentences x beams as Hu
et al. (2019, N19-1090) did. At every step each sentence's candidates are
- the 2k best extensions of its k beams (the unconstrained search's candidates),
- each beam's best token, and each beam extended by the next token of every positive phrase it has not met,
and each candidate is put in the bank of the number of constraint tokens it has met (tokens of the phrases met, plus
the progress into the phrase it is inside). The k beam slots go round-robin over the banks, most constraint tokens
first: the best candidate of the top bank, the best of the next bank, ..., then the second best of each, and so on
(Hu et al.'s "stripes": a bank with too few candidates gives its turn to the next). The best hypothesis that meets
more of the constraints always keeps a slot, so after at most as many steps as the phrases have tokens one meets
them all; EOS is allowed only to a hypothesis that has met every positive phrase.

Phrases are unordered and may overlap. A hypothesis's progress into each phrase is the longest prefix of the phrase
that ends its output (Knuth-Morris-Pratt: a token that breaks a phrase falls back to the longest border, so "a a b"
is found in "a a a b"); a phrase met stays met. Negative phrases use the same progress: the token that would
complete one is masked (a single-token phrase is masked everywhere). A prefix forces the first tokens; its tokens
count for the phrases too.

Refused before the search (`ConstraintError`, naming the sentence's row in its batch; front.py names the line): a
positive phrase that holds a negative one or a prefix that does, phrases and prefix together longer than the output
limit. A sentence that ends without any hypothesis meeting its phrases (possible when negative phrases forbid every
way to join positive ones) is refused the same way.

Axis legend: B sentences, N decoder rows (B * beam), P most phrases of a sentence in the batch (positive and
negative), L longest phrase, C candidates per sentence, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from ..config import ConfigError


@dataclass(frozen=True)
class Steering:
    """One sentence's constraints as target token ids: phrases that must appear, phrases that must not, a prefix."""

    include: tuple[tuple[int, ...], ...] = ()
    exclude: tuple[tuple[int, ...], ...] = ()
    prefix: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude or self.prefix)


class ConstraintError(ConfigError):
    """A sentence's constraints cannot be met; `row` is the sentence's row in its batch."""

    def __init__(self, row: int, reason: str) -> None:
        super().__init__(reason)
        self.row, self.reason = row, reason


def _borders(phrase: Sequence[int]) -> list[int]:
    """KMP failure function: borders[i] = length of the longest proper prefix of phrase[: i + 1] that ends it."""
    borders, j = [0] * len(phrase), 0
    for i in range(1, len(phrase)):
        while j and phrase[i] != phrase[j]:
            j = borders[j - 1]
        if phrase[i] == phrase[j]:
            j += 1
        borders[i] = j
    return borders


def _step(phrase: Sequence[int], borders: list[int], j: int, token: int) -> int:
    """The progress into `phrase` after `token`, from progress j (0..len): the longest prefix that ends the output."""
    while True:
        if j < len(phrase) and phrase[j] == token:
            return j + 1
        if j == 0:
            return 0
        j = borders[j - 1]


def _completes(phrase: Sequence[int], tokens: Sequence[int]) -> bool:
    """Whether `phrase` occurs in `tokens`."""
    borders, j = _borders(phrase), 0
    for token in tokens:
        j = _step(phrase, borders, j, token)
        if j == len(phrase):
            return True
    return False


@dataclass(frozen=True)
class LexState:
    """The constraints' state of N decoder rows."""

    sent: Tensor  # (N,) the row's sentence: its row in the constraint's tensors
    progress: Tensor  # (N, P) longest prefix of each phrase that ends the row's output
    met: Tensor  # (N, P) positive phrases met (bool)
    steps: int  # tokens emitted (the same for every row: all advance together)


class LexicalConstraint:
    """The sentences of one batch: their phrases and prefixes as padded tensors, the automaton that follows a row's
    progress into each phrase, the token mask and the banked candidates (module docstring). Follows the protocol of
    decoding/constraints.py's TreeConstraint (start, advance, reorder, select), with `mask` in place of `allowed`
    and `candidates` in place of the search's own."""

    def __init__(self, given: Sequence[Steering | None], *, eos: int, device: torch.device) -> None:
        steering: list[Steering] = [s or Steering() for s in given]
        for row, s in enumerate(steering):
            _check(row, s)
        phrases: list[list[tuple[int, ...]]] = [list(s.include) + list(s.exclude) for s in steering]
        b = len(steering)
        p = max(1, max(len(x) for x in phrases))
        width = max([1] + [len(x) for row in phrases for x in row])
        tokens = torch.full((b, p, width), -1, dtype=torch.long)
        lengths = torch.zeros(b, p, dtype=torch.long)
        positive = torch.zeros(b, p, dtype=torch.bool)
        table = torch.zeros(b, p, width + 1, width, dtype=torch.long)  # progress after the phrase's m-th token
        for i, (s, listed) in enumerate(zip(steering, phrases)):
            for j, phrase in enumerate(listed):
                tokens[i, j, : len(phrase)] = torch.tensor(phrase)
                lengths[i, j], positive[i, j] = len(phrase), j < len(s.include)
                borders = _borders(phrase)
                for state in range(len(phrase) + 1):
                    for m, token in enumerate(phrase):
                        table[i, j, state, m] = _step(phrase, borders, state, token)
        longest_prefix = max(len(s.prefix) for s in steering)
        prefix = torch.full((b, max(1, longest_prefix)), -1, dtype=torch.long)
        for i, s in enumerate(steering):
            prefix[i, : len(s.prefix)] = torch.tensor(s.prefix, dtype=torch.long)
        self.eos, self.width, self.phrase_slots = eos, width, p
        self.longest_prefix = longest_prefix
        self.tokens, self.lengths, self.positive = tokens.to(device), lengths.to(device), positive.to(device)
        self.negative = lengths.gt(0).logical_and(positive.logical_not()).to(device)
        self.table = table.view(-1).to(device)
        self.prefix = prefix.to(device)
        self.prefix_len = torch.tensor([len(s.prefix) for s in steering], dtype=torch.long, device=device)
        self.needed = [sum(len(x) for x in s.include) + len(s.prefix) for s in steering]  # a lower bound on the output
        self.has_negative = bool(self.negative.any())
        self.banks = max(sum(len(x) for x in s.include) for s in steering) + 1  # banks 0..most constraint tokens

    # ----------------------------------------------------------------------------------------- the row protocol
    def start(self, max_len: Tensor) -> LexState:
        """One row per sentence; a sentence whose phrases and prefix (with EOS) exceed its output limit is refused."""
        for row, (need, limit) in enumerate(zip(self.needed, max_len.tolist())):
            if need + 1 > limit:
                raise ConstraintError(
                    row, f"the constraints and prefix need {need} tokens and EOS, more than the output limit {limit}"
                )
        b = len(self.needed)
        device = self.tokens.device
        progress = torch.zeros(b, self.phrase_slots, dtype=torch.long, device=device)
        return LexState(torch.arange(b, device=device), progress, torch.zeros_like(progress, dtype=torch.bool), 0)

    def advance(self, state: LexState, tokens: Tensor) -> LexState:
        progress, met = self._after(state.sent, state.progress, state.met, tokens)
        return LexState(state.sent, progress, met, state.steps + 1)

    def reorder(self, state: LexState, index: Tensor) -> LexState:
        return replace(state, sent=state.sent[index], progress=state.progress[index], met=state.met[index])

    select = reorder

    # ----------------------------------------------------------------------------------------- the search's hooks
    def mask(self, state: LexState, lprobs: Tensor) -> Tensor:
        """(N, V) log-probabilities with what a row may not emit at -inf: EOS while a positive phrase is unmet, the
        token that would complete a negative phrase, anything but the prefix's next token while it lasts."""
        unmet = self._unmet(state).any(dim=1)  # (N,)
        lprobs[:, self.eos] = lprobs[:, self.eos].masked_fill(unmet, float("-inf"))
        if self.has_negative:
            lengths = self.lengths[state.sent]  # (N, P)
            last = self.tokens[state.sent].gather(2, (lengths - 1).clamp(min=0).unsqueeze(2)).squeeze(2)  # (N, P)
            completes = self.negative[state.sent] & state.progress.eq(lengths - 1)
            penalty = torch.zeros_like(last, dtype=lprobs.dtype).masked_fill(completes, float("-inf"))
            lprobs = lprobs.scatter_add(1, last.clamp(min=0), penalty)  # adds 0 or -inf: never a NaN
        if state.steps < self.longest_prefix:
            forcing = state.steps < self.prefix_len[state.sent]  # (N,)
            wanted = self.prefix[state.sent, state.steps].clamp(min=0).unsqueeze(1)  # (N, 1)
            only = torch.full_like(lprobs, float("-inf")).scatter(1, wanted, lprobs.gather(1, wanted))
            lprobs = torch.where(forcing.unsqueeze(1), only, lprobs)
        return lprobs

    def candidates(self, state: LexState, scores: Tensor, lprobs: Tensor, regular) -> tuple[Tensor, Tensor, Tensor]:
        """Each sentence's 2k candidates in the order the banks take them (raw scores, tokens, decoder rows they
        extend), (B, 2k): `regular` (scores, lprobs, k) gives the unconstrained search's 2k best, to which each
        beam's best token and its next token of every unmet positive phrase are added (duplicates dropped)."""
        b, k = scores.shape
        n, v = lprobs.shape
        top_score, token, origin = regular(scores, lprobs, k)  # (B, 2k)
        best_lp, best_token = lprobs.max(dim=1)  # (N,)
        unmet = self._unmet(state)  # (N, P)
        tokens = self.tokens[state.sent]  # (N, P, L)
        following = tokens.gather(2, state.progress.clamp(max=self.width - 1).unsqueeze(2)).squeeze(2)  # (N, P)
        following = torch.where(unmet, following, best_token.unsqueeze(1))
        following_lp = lprobs.gather(1, following).masked_fill(~unmet, float("-inf"))
        extra_lp = torch.cat([best_lp.unsqueeze(1), following_lp], dim=1) + scores.view(n, 1)  # (N, 1 + P)
        extra_token = torch.cat([best_token.unsqueeze(1), following], dim=1)
        extra_origin = torch.arange(n, device=lprobs.device).unsqueeze(1).expand_as(extra_token)
        score = torch.cat([top_score, extra_lp.reshape(b, -1)], dim=1)  # (B, C)
        token = torch.cat([token, extra_token.reshape(b, -1)], dim=1)
        origin = torch.cat([origin, extra_origin.reshape(b, -1)], dim=1)
        score = score.masked_fill(_repeated(origin * v + token), float("-inf"))
        flat = origin.view(-1)
        progress, met = self._after(state.sent[flat], state.progress[flat], state.met[flat], token.view(-1))
        bank = self._bank(state.sent[flat], progress, met).view(b, -1)  # (B, C)
        order = _stripes(score, bank, self.banks)[:, : 2 * k]  # (B, 2k)
        return score.gather(1, order), token.gather(1, order), origin.gather(1, order)

    # ----------------------------------------------------------------------------------------- the automaton
    def _after(self, sent: Tensor, progress: Tensor, met: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """Progress into every phrase and the phrases met after each row emits `tokens` (N,)."""
        phrase = self.tokens[sent]  # (N, P, L)
        equal = phrase.eq(tokens.view(-1, 1, 1))  # (N, P, L)
        hit = equal.any(dim=2)  # (N, P): the token is in the phrase
        m = equal.int().argmax(dim=2)  # (N, P): where it first is
        slot = sent.unsqueeze(1) * self.phrase_slots + torch.arange(self.phrase_slots, device=sent.device)  # (N, P)
        index = (slot * (self.width + 1) + progress.clamp(max=self.width)) * self.width + m
        after = torch.where(hit, self.table[index], 0)
        met = met | (after.eq(self.lengths[sent]) & self.positive[sent])
        return after, met

    def _unmet(self, state: LexState) -> Tensor:
        return self.positive[state.sent] & ~state.met  # (N, P)

    def _bank(self, sent: Tensor, progress: Tensor, met: Tensor) -> Tensor:
        """(N,) constraint tokens met: all tokens of the positive phrases met, plus the furthest progress into an
        unmet one."""
        positive = self.positive[sent]
        done = (self.lengths[sent] * (met & positive)).sum(dim=1)
        inside = (progress * (positive & ~met)).max(dim=1).values
        return done + inside


def _repeated(key: Tensor) -> Tensor:
    """(B, C) True where a row's key occurs earlier in the row (the same token from the same beam twice)."""
    sorted_key, order = key.sort(dim=1, stable=True)
    again = torch.zeros_like(key, dtype=torch.bool)
    again[:, 1:] = sorted_key[:, 1:].eq(sorted_key[:, :-1])
    return torch.zeros_like(again).scatter(1, order, again)


def _stripes(score: Tensor, bank: Tensor, top: int) -> Tensor:
    """(B, C) candidate positions in the order the banks (0 .. top - 1) take them: rank r of every bank (most
    constraint tokens first) before rank r + 1 of any; within a bank by score; candidates at -inf last."""
    by_score = score.argsort(dim=1, descending=True, stable=True)
    order = by_score.gather(1, bank.gather(1, by_score).argsort(dim=1, descending=True, stable=True))
    bank_sorted, alive = bank.gather(1, order), score.gather(1, order).gt(float("-inf"))
    position = torch.arange(order.size(1), device=order.device).expand_as(order)
    first = torch.ones_like(alive)
    first[:, 1:] = bank_sorted[:, 1:].ne(bank_sorted[:, :-1])
    rank = position - torch.where(first, position, 0).cummax(dim=1).values  # place within its bank
    key = rank * top + (top - 1 - bank_sorted)
    key = torch.where(alive, key, key.size(1) * top + position)  # -inf candidates after all others, in order
    return order.gather(1, key.argsort(dim=1, stable=True))


def _check(row: int, s: Steering) -> None:
    """Refuse what no output can satisfy: a positive phrase or the prefix holding a negative phrase."""
    for phrase in s.include + s.exclude:
        if not phrase:
            raise ConstraintError(row, "an empty phrase")
    for negative in s.exclude:
        for positive in s.include:
            if _completes(negative, positive):
                raise ConstraintError(row, "a phrase that must appear holds one that must not")
        if _completes(negative, s.prefix):
            raise ConstraintError(row, "the prefix holds a phrase that must not appear")
