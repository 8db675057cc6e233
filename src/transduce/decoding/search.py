"""Greedy and beam search (the paper's §6.1), vectorised over batch x beam, on `model.encode` + `model.decode_step`.

Axis legend: B sentences still being decoded, k beam size, N = B * k decoder rows, V vocabulary, t steps so far.

Length penalties (`length_penalty`), score(Y) = log P(Y | X) / lp(Y):
    "gnmt"   lp(Y) = ((5 + |Y|) / 6) ** alpha    (Wu et al. 2016; the paper's, alpha = 0.6)
    "length" lp(Y) = |Y| ** alpha                 (fairseq's and CTranslate2's form)
    "none"   lp(Y) = 1
|Y| counts the output tokens including EOS. The maximum output length is max_len_a * |x| + max_len_b (|x| without
EOS). A sentence stops when its n-best finished hypotheses cannot be beaten by any unfinished one (log-probabilities
only fall and every penalty above grows with length, so the best alive raw score divided by lp(max length) bounds
them), or when it reaches its maximum length; the search stops when every sentence has stopped. The only host
sync per step is that stopping check. The special ids are the model's (model.config.bos_id: the first input;
eos_id; pad_id): a Marian model starts from its pad row and ends with id 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .lexical import ConstraintError, LexicalConstraint, LexState


def length_penalty(length: Tensor | float, *, kind: str, alpha: float) -> Tensor | float:
    if kind == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if kind == "length":
        return length**alpha
    if kind == "none":
        return torch.ones_like(length) if torch.is_tensor(length) else 1.0
    raise ValueError(f"unknown length penalty {kind!r} (gnmt, length, none)")


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # log P(Y | X) / lp(Y), greedy and beam alike (what the beam search ranks by)
    log_prob: float  # log P(Y | X)


def _max_lengths(src: Tensor, *, a: float, b: int, model) -> Tensor:
    src_len = model.pad_mask(src).logical_not().sum(1) - 1  # (B,) without EOS
    model_max = model.config.max_len
    return (a * src_len.float() + b).long().clamp(min=1, max=model_max - 1)  # output tokens incl. EOS


@torch.inference_mode()
def greedy_search(
    model,
    src: Tensor,
    *,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    alpha: float = 0.6,
    length_penalty_kind: str = "gnmt",
    constraint=None,
) -> list[list[Hypothesis]]:
    """Argmax at every step until EOS (or the maximum length). Returns one hypothesis per sentence.
    `constraint` (optional, decoding/constraints.py) limits the tokens each row may emit.

    Its score means what a beam hypothesis's score means: log P(Y | X) / lp(Y), |Y| counting EOS (the penalty
    does not change which tokens greedy picks, only the reported score)."""
    pick = lambda lprobs, t, sentence: lprobs.argmax(dim=-1)
    return _one_per_row(
        model,
        src,
        pick,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        alpha=alpha,
        length_penalty_kind=length_penalty_kind,
        constraint=constraint,
    )


@dataclass(frozen=True, kw_only=True)
class Sampling:
    """Random sampling's settings (decode.sampling_*): draw the next token from softmax(logits / temperature)
    restricted to the `topk` most probable tokens (0: all) and then to the smallest set of them whose probability
    reaches `topp` (nucleus sampling, Holtzman et al. 2020), as fairseq's --sampling-topk/-topp and CTranslate2's
    sampling_topk/_topp/_temperature. topk 1 is greedy search."""

    topk: int = 0
    topp: float = 1.0
    temperature: float = 1.0
    seed: int = 0


def sentence_uniforms(seed: int, sentences: list[int], steps: int) -> Tensor:
    """(B, steps) uniforms in (0, 1], row i drawn by its own generator seeded by (seed, sentences[i]) (the sentence's
    index in the input): a sentence's draws depend on nothing else in its batch, so batching never changes a
    sample. Always `steps` draws (the model's positions), so a longer batch does not change a row's first ones."""
    rows = []
    for index in sentences:
        state = np.random.SeedSequence([seed, index]).generate_state(2, np.uint32)
        generator = torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))
        rows.append(1.0 - torch.rand(steps, generator=generator, dtype=torch.float64))  # (0, 1]: never the first
    return torch.stack(rows)  # (B, steps)


def sample_choice(lprobs: Tensor, uniforms: Tensor, sampling: Sampling) -> Tensor:
    """(B,) tokens drawn from lprobs (B, V) (log-probabilities, -inf where a token is not allowed) by inverse
    transform sampling with one uniform (B,) per row in (0, 1]: the first token whose cumulative probability
    reaches u times the total, over softmax(lprobs / T) restricted to the top-k, then the top-p nucleus."""
    scaled = lprobs / sampling.temperature  # softmax(lprobs / T) = softmax(logits / T) over the allowed tokens
    if sampling.temperature < 1.0:  # only a T below 1 can overflow: 1e-45 (allowed) sends every log-probability
        # below 0 to -inf, leaving a row nothing to draw; such a row is scaled from its best token's instead (the same
        # distribution; T -> 0: the argmax)
        best = lprobs.max(dim=1, keepdim=True).values
        lost = scaled.max(dim=1, keepdim=True).values.isneginf() & best.isfinite()
        if bool(lost.any()):
            scaled = torch.where(lost, (lprobs - best) / sampling.temperature, scaled)
    if sampling.topk > 0 or sampling.topp < 1.0:
        k = scaled.size(1) if sampling.topk == 0 else min(sampling.topk, scaled.size(1))
        values, ids = scaled.topk(k, dim=1)  # (B, k), most probable first
    else:
        values, ids = scaled, None
    probs = torch.softmax(values, dim=-1).double()  # (B, k)
    if sampling.topp < 1.0:
        before = probs.cumsum(dim=-1) - probs  # mass of the more probable tokens
        probs = probs.masked_fill(before.ge(sampling.topp), 0.0)  # keep until the mass reaches p (always the first)
    cum = probs.cumsum(dim=-1)  # (B, k)
    choice = cum.lt(uniforms.unsqueeze(1) * cum[:, -1:]).sum(dim=1).clamp(max=cum.size(1) - 1)  # (B,)
    return choice if ids is None else ids.gather(1, choice.unsqueeze(1)).squeeze(1)


@torch.inference_mode()
def sample_search(
    model,
    src: Tensor,
    *,
    sampling: Sampling,
    sentences: list[int],
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    alpha: float = 0.6,
    length_penalty_kind: str = "gnmt",
) -> list[list[Hypothesis]]:
    """Greedy search with a random draw in place of the argmax (see `Sampling`, `sample_choice`): one hypothesis per
    sentence; `sentences` are the batch's indices in the input, which with `sampling.seed` seed each row's draws
    (`sentence_uniforms`). Scores are the model's, log P(Y | X) / lp(Y), whatever the temperature."""
    uniforms = sentence_uniforms(sampling.seed, sentences, model.config.max_len).to(src.device)  # (B, max_len)
    pick = lambda lprobs, t, sentence: sample_choice(lprobs, uniforms[sentence, t], sampling)
    return _one_per_row(
        model,
        src,
        pick,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        alpha=alpha,
        length_penalty_kind=length_penalty_kind,
    )


def _one_per_row(
    model,
    src: Tensor,
    pick,
    *,
    max_len_a: float,
    max_len_b: int,
    alpha: float,
    length_penalty_kind: str,
    constraint=None,
) -> list[list[Hypothesis]]:
    """One hypothesis per sentence, one decoder row each: `pick(lprobs (B, V), t, sentences (B,))` chooses every
    row's next token from its log-probabilities (PAD, BOS and disallowed tokens at -inf) until EOS or the maximum
    length. A row that ends leaves the batch at once (its cache rows too), so the steps after it cost nothing for
    it; each step reads one flag from the device (did a row end?), a step where rows end also their tokens."""
    batch, ids = src.size(0), model.config
    memory = model.encode(src)
    cache = model.start_decoding(memory, model.pad_mask(src))
    max_len = _max_lengths(src, a=max_len_a, b=max_len_b, model=model)
    sentence = torch.arange(batch, device=src.device)  # (B,) each decoder row's sentence
    tokens = torch.full((batch, 1), ids.bos_id, dtype=torch.long, device=src.device)
    log_prob = torch.zeros(batch, device=src.device)
    cstate = constraint.start(max_len) if constraint is not None else None
    ended: list[tuple[list[int], float] | None] = [None] * batch  # per sentence: (tokens after BOS, log P)
    for t in range(int(max_len.max())):
        lprobs = torch.log_softmax(model.decode_step(tokens[:, -1], cache).float(), dim=-1)  # (B, V)
        lprobs[:, ids.pad_id] = lprobs[:, ids.bos_id] = float("-inf")
        lprobs = _force_eos(lprobs, max_len.eq(t + 1), ids.eos_id)  # the last allowed position must be EOS
        if constraint is not None:
            lprobs = lprobs.masked_fill(~constraint.allowed(cstate), float("-inf"))
        nxt = pick(lprobs, t, sentence)  # (B,)
        log_prob += lprobs.gather(1, nxt.unsqueeze(1)).squeeze(1)
        if constraint is not None:
            cstate = constraint.advance(cstate, nxt)
        tokens = torch.cat([tokens, nxt.unsqueeze(1)], dim=1)  # (B, t+2)
        is_eos = nxt.eq(ids.eos_id)
        if bool(is_eos.any()):
            for i, row, lp in zip(sentence[is_eos].tolist(), tokens[is_eos, 1:].tolist(), log_prob[is_eos].tolist()):
                ended[i] = (row, lp)
            keep = (~is_eos).nonzero().view(-1)
            if keep.numel() == 0:
                break
            sentence, tokens, log_prob, max_len = sentence[keep], tokens[keep], log_prob[keep], max_len[keep]
            cache.select(keep)
            if constraint is not None:
                cstate = constraint.select(cstate, keep)
    else:  # rows that reached the step limit without EOS (a constraint that forbade it)
        for i, row, lp in zip(sentence.tolist(), tokens[:, 1:].tolist(), log_prob.tolist()):
            ended[i] = (row, lp)
    results, eos = [], ids.eos_id
    for found in ended:
        assert found is not None, "every sentence ends by EOS or at the step limit"
        row, lp = found
        out = row[: row.index(eos)] if eos in row else row
        n = len(out) + 1 if eos in row else len(out)  # output tokens including EOS, as in beam_search
        results.append(
            [Hypothesis(out, lp / float(length_penalty(float(n), kind=length_penalty_kind, alpha=alpha)), lp)]
        )
    return results


@torch.inference_mode()
def beam_search(
    model,
    src: Tensor,
    *,
    beam: int = 4,
    alpha: float = 0.6,
    length_penalty_kind: str = "gnmt",
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    nbest: int = 1,
    constraint=None,
    patience: float = 0.0,
    lexical: LexicalConstraint | None = None,
) -> list[list[Hypothesis]]:
    """Batched beam search: per sentence, its `nbest` best finished hypotheses, best first. `constraint` (optional,
    decoding/constraints.py) limits the tokens each row may emit; its state follows the cache. `lexical` (optional,
    decoding/lexical.py): phrases that must or must not appear and prefixes, with Dynamic Beam Allocation choosing
    the beams. `patience` > 0 also ends a sentence once beam x patience hypotheses have finished
    (DecodeConfig.patience)."""
    device, batch, k, ids = src.device, src.size(0), beam, model.config
    cache = model.start_decoding(model.encode(src), model.pad_mask(src))
    max_len = _max_lengths(src, a=max_len_a, b=max_len_b, model=model)  # (B,)
    lp = lambda n: length_penalty(n, kind=length_penalty_kind, alpha=alpha)
    rows = _Rows(cache, lexical if lexical is not None else constraint, max_len)
    rows.expand(k)  # (B*k) rows, k per sentence
    sent = torch.arange(batch, device=device)  # original index of each sentence still decoding
    tokens = torch.full((batch * k, 1), ids.bos_id, dtype=torch.long, device=device)  # (N, t+1)
    scores = torch.zeros(batch, k, device=device)  # (B, k) raw log-probabilities of alive beams
    scores[:, 1:] = float("-inf")  # at t = 0 all beams are the same: keep one
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    kept = _Finished.empty(batch, k, device, pad=ids.pad_id, eos=ids.eos_id)
    among_k = torch.arange(2 * k, device=device).lt(k)  # (2k,) the k best of the 2k candidates

    for t in range(int(max_len.max())):
        lprobs = torch.log_softmax(model.decode_step(tokens[:, -1], cache).float(), dim=-1)  # (N, V)
        forced = max_len[sent].eq(t + 1).repeat_interleave(k)  # the last allowed position must be EOS
        top_score, token, origin = _step_candidates(lprobs, forced, scores, rows, ids, lexical)  # (B, 2k) each
        # A hypothesis ends only when its EOS ranks among the k best candidates (fairseq's and CTranslate2's rule);
        # EOS candidates ranked k+1..2k are dropped, not finished.
        is_eos = token.eq(ids.eos_id) & top_score.gt(float("-inf")) & among_k
        new_norm = torch.where(is_eos, top_score / lp(torch.tensor(float(t + 1), device=device)), float("-inf"))
        hist = tokens[origin.view(-1)].view(sent.numel(), 2 * k, t + 1)[:, :, 1:]  # (B, 2k, t) without BOS
        kept.merge(new_norm, top_score, torch.cat([hist, token.unsqueeze(2)], dim=2))
        scores, tokens = _advance(top_score, token, origin, tokens, rows, ids.eos_id, lexical is not None)

        done = _stops(kept, scores, max_len[sent], t, nbest=nbest, patience=patience, lp=lp)
        if bool(done.any()):  # the step's one host sync
            for i in done.nonzero().view(-1).tolist():
                finished[int(sent[i])] = kept.collect(i, nbest)
            keep_sent = (~done).nonzero().view(-1)
            if keep_sent.numel() == 0:
                break
            keep_rows = (keep_sent.unsqueeze(1) * k + torch.arange(k, device=device)).view(-1)
            sent, scores, tokens = sent[keep_sent], scores[keep_sent], tokens[keep_rows]
            kept.select(keep_sent)
            rows.select(keep_rows)
    if lexical is not None and not all(finished):
        row = next(i for i, hyps in enumerate(finished) if not hyps)
        raise ConstraintError(row, "no translation within the output limit meets all the constraints")
    return finished


def _advance(
    top_score: Tensor, token: Tensor, origin: Tensor, tokens: Tensor, rows: _Rows, eos: int, banked: bool
) -> tuple[Tensor, Tensor]:
    """The alive beams after a step: the k best candidates (B, 2k) that did not end in EOS (under lexical
    constraints, `banked`, the first k in the banks' order): their scores (B, k) and token histories (N, t+2), the
    rows' cache and constraint states reordered to them."""
    k = top_score.size(1) // 2
    not_eos = top_score.masked_fill(token.eq(eos), float("-inf"))
    scores, pick = _first_alive(not_eos, k) if banked else not_eos.topk(k, dim=1)  # (B, k)
    alive_rows = origin.gather(1, pick).view(-1)  # (N,)
    tokens = torch.cat([tokens[alive_rows], token.gather(1, pick).view(-1, 1)], dim=1)  # (N, t+2)
    rows.reorder(alive_rows, tokens[:, -1])
    return scores, tokens


def _step_candidates(
    lprobs: Tensor, forced: Tensor, scores: Tensor, rows: _Rows, ids, lexical: LexicalConstraint | None
) -> tuple[Tensor, Tensor, Tensor]:
    """A step's 2k candidates per sentence (B, 2k each: score, token, origin row) from its log-probabilities
    `lprobs` (N, V): PAD and BOS never, EOS alone where `forced` (N,), the rows' constraints applied; under lexical
    constraints in the order Dynamic Beam Allocation's banks take them."""
    lprobs[:, ids.pad_id] = lprobs[:, ids.bos_id] = float("-inf")
    lprobs = rows.mask(_force_eos(lprobs, forced, ids.eos_id))
    if lexical is None:
        return _candidates(scores, lprobs, scores.size(1))
    return lexical.candidates(cast(LexState, rows.state), scores, lprobs, _candidates)


def _first_alive(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """(B, k) scores and positions of the first k candidates not at -inf, in the given order (then -inf ones)."""
    position = torch.arange(scores.size(1), device=scores.device).expand_as(scores)
    rank = torch.where(scores.gt(float("-inf")), position, position + scores.size(1))
    pick = rank.topk(k, dim=1, largest=False).indices  # ascending: the given order
    return scores.gather(1, pick), pick


def _stops(kept: _Finished, scores: Tensor, max_len: Tensor, t: int, *, nbest: int, patience: float, lp) -> Tensor:
    """(B,) the sentences that end after step t: no alive beam can beat their n-best finished ones (log-probabilities
    only fall and every penalty grows with length, so lp(max length) bounds them), they reached their maximum
    length, or, with `patience`, beam x patience hypotheses have finished."""
    best_alive = scores.max(dim=1).values  # (B,)
    done = kept.score[:, nbest - 1].ge(best_alive / lp(max_len.float()))
    done |= max_len.le(t + 1) | best_alive.eq(float("-inf"))
    if patience > 0:
        done |= kept.count.ge(scores.size(1) * patience)
    return done


def _candidates(scores: Tensor, lprobs: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """The 2k best extensions of each sentence's k beams: (raw scores, tokens, decoder rows they extend), (B, 2k).
    2k of them so that k remain when up to k end in EOS."""
    b, width = scores.size(0), min(2 * k, lprobs.size(1))
    # A beam gives at most 2k of the sentence's 2k best: each row's 2k best first (N, 2k), then the best among the
    # k x 2k, without adding the beam's score to all V of its extensions.
    row_best, row_token = lprobs.topk(width, dim=1)  # (N, 2k)
    cand = (scores.view(-1, 1) + row_best).view(b, k * width)  # (B, k*2k)
    top_score, top_index = cand.topk(2 * k, dim=1)  # (B, 2k)
    origin = top_index // width  # (B, 2k) the beam each candidate extends
    rows = origin + torch.arange(b, device=scores.device).unsqueeze(1) * k  # (B, 2k) rows in the N axis
    return top_score, row_token.view(b, k * width).gather(1, top_index), rows


class _Rows:
    """The decoder rows' state besides their tokens: the model's cache and the constraint's state (when decoding
    is constrained), reordered and selected together."""

    def __init__(self, cache, constraint, max_len: Tensor) -> None:
        self.cache, self.constraint = cache, constraint
        self.sentences, self.device = max_len.numel(), max_len.device
        self.state = constraint.start(max_len) if constraint is not None else None

    def mask(self, lprobs: Tensor) -> Tensor:
        if self.constraint is None:
            return lprobs
        if isinstance(self.constraint, LexicalConstraint):
            return self.constraint.mask(cast(LexState, self.state), lprobs)
        return lprobs.masked_fill(~self.constraint.allowed(self.state), float("-inf"))

    def expand(self, k: int) -> None:
        """Each sentence's row becomes k beam rows (the cache shares the encoder's keys and values among them)."""
        if self.constraint is not None:
            rows = torch.arange(self.sentences, device=self.device).repeat_interleave(k)
            self.state = self.constraint.select(self.state, rows)
        self.cache.expand(k)

    def reorder(self, index: Tensor, new_tokens: Tensor) -> None:
        """Row i now continues row index[i] with new_tokens[i]."""
        self.cache.reorder(index)
        if self.constraint is not None:
            self.state = self.constraint.advance(self.constraint.reorder(self.state, index), new_tokens)

    def select(self, index: Tensor) -> None:
        self.cache.select(index)
        if self.constraint is not None:
            self.state = self.constraint.select(self.state, index)


@dataclass
class _Finished:
    """The k best finished hypotheses of every sentence still decoding, kept on the device (no host sync)."""

    score: Tensor  # (B, k) log P / lp
    raw: Tensor  # (B, k) log P
    tokens: Tensor  # (B, k, t) without BOS, EOS last
    count: Tensor  # (B,) hypotheses finished so far, kept or not (decode.patience counts them)
    pad: int  # the model's PAD and EOS ids
    eos: int

    @classmethod
    def empty(cls, batch: int, k: int, device: torch.device, *, pad: int, eos: int) -> _Finished:
        none = torch.full((batch, k), float("-inf"), device=device)
        tokens = torch.full((batch, k, 1), pad, dtype=torch.long, device=device)
        return cls(none, none.clone(), tokens, torch.zeros(batch, device=device), pad, eos)

    def merge(self, norm: Tensor, raw: Tensor, tokens: Tensor) -> None:
        """Keep the k best by normalised score of the kept ones and this step's (B, 2k) candidates (-inf: not
        finished)."""
        k = self.score.size(1)
        self.count = self.count + norm.gt(float("-inf")).sum(dim=1)
        old = F.pad(self.tokens, (0, tokens.size(2) - self.tokens.size(2)), value=self.pad)  # (B, k, t+1)
        all_tokens = torch.cat([old, tokens], dim=1)  # (B, 3k, t+1)
        self.score, keep = torch.cat([self.score, norm], dim=1).topk(k, dim=1)  # (B, k)
        self.raw = torch.cat([self.raw, raw], dim=1).gather(1, keep)
        self.tokens = all_tokens.gather(1, keep.unsqueeze(2).expand(-1, -1, all_tokens.size(2)))

    def select(self, index: Tensor) -> None:
        self.score, self.raw, self.tokens = self.score[index], self.raw[index], self.tokens[index]
        self.count = self.count[index]

    def collect(self, i: int, nbest: int) -> list[Hypothesis]:
        return _collect(self.tokens[i], self.score[i], self.raw[i], nbest, self.eos)


def _force_eos(lprobs: Tensor, forced: Tensor, eos: int) -> Tensor:
    """Rows where `forced` (N,) is True may only produce EOS (id `eos`, log-probability 0). No host sync on a GPU;
    on a CPU,
    where reading a flag costs nothing, the (N, V) pass is skipped at the steps that force no row."""
    if lprobs.device.type == "cpu" and not bool(forced.any()):
        return lprobs
    eos_only = torch.full_like(lprobs[:1], float("-inf"))
    eos_only[0, eos] = 0.0
    return torch.where(forced.unsqueeze(1), eos_only, lprobs)


def _collect(tokens: Tensor, norm: Tensor, raw: Tensor, nbest: int, eos: int) -> list[Hypothesis]:
    out: list[Hypothesis] = []
    for row, s, r in zip(tokens.tolist(), norm.tolist(), raw.tolist()):
        if s == float("-inf") or len(out) == nbest:
            continue
        out.append(Hypothesis(row[: row.index(eos)] if eos in row else row, s, r))
    return out
