"""Tree-constrained decoding (decoding/constraints.py): every output of a constrained search is a tree over the input
words, whatever the decoder prefers, and every tree that fits the length limit can be produced."""

import itertools

import pytest
import torch
from test_search import FakeCache  # the same stand-in cache as the search tests

from transduce.config import ModelConfig
from transduce.data.tokenizer import EOS_ID, PAD_ID
from transduce.data.trees import (
    SPECIALS,
    Tree,
    TreeError,
    build_vocab,
    delinearize,
    parse_tree,
)
from transduce.data.trees import (
    words as leaves_of,
)
from transduce.decoding.constraints import TreeConstraint, min_output_length
from transduce.decoding.search import beam_search, greedy_search

TREES = [
    parse_tree("(ROOT (S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .)))"),
    parse_tree("(ROOT (NP (NP (NN a)) (PP (IN of) (NP (NNS b)))))"),
]
VOCAB = build_vocab(TREES)
ID = {token: i for i, token in enumerate(VOCAB)}


def constraint(root: str | None = "(ROOT") -> TreeConstraint:
    return TreeConstraint.from_vocab(VOCAB, eos="</s>", specials=SPECIALS, root=root)


class RandomDecoder:
    """The decoding interface with random logits that depend on each row's history (so beams differ), and that
    favour EOS and ')' (an unconstrained search would stop or close at once)."""

    def __init__(self, seed: int, max_len: int = 512):
        self.seed = seed
        self.config = ModelConfig(vocab_size=len(VOCAB), max_len=max_len)

    def pad_mask(self, src):
        return src.eq(PAD_ID)

    def encode(self, src):
        return src

    def start_decoding(self, memory, pad_mask):
        return FakeCache(torch.zeros(memory.size(0), 0, dtype=torch.long, device=memory.device))

    def decode_step(self, tokens, cache):
        cache.history = torch.cat([cache.history, tokens.view(-1, 1)], dim=1)
        rows = []
        for hist in cache.history.tolist():
            g = torch.Generator().manual_seed(hash((self.seed, *hist)) % (2**31))
            rows.append(torch.randn(len(VOCAB), generator=g) * 3)
        logits = torch.stack(rows)  # (N, V)
        logits[:, EOS_ID] += 4.0
        logits[:, ID[")"]] += 2.0
        return logits.to(tokens.device)


def batch_of(lengths: list[int]) -> torch.Tensor:
    """Source rows of distinct word ids (>= 4), EOS, then padding."""
    src = torch.full((len(lengths), max(lengths) + 1), PAD_ID, dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.arange(4, 4 + n)
        src[i, n] = EOS_ID
    return src


def check_tree(token_ids: list[int], n: int) -> Tree:
    words = [f"w{i}" for i in range(n)]
    tree = delinearize([VOCAB[t] for t in token_ids], words)  # raises TreeError if not one tree over the words
    assert tree.label == "ROOT"
    assert all(node.label != "ROOT" for node in tree.subtrees() if node is not tree)
    return tree


def is_tree(token_ids: list[int], n: int) -> bool:
    try:
        check_tree(token_ids, n)
    except (TreeError, AssertionError):
        return False
    return True


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("max_len_b", [3, 4, 40])
def test_every_beam_output_is_a_tree_over_the_input_words(seed, max_len_b):
    lengths = [1, 5, 3, 8, 2]
    src = batch_of(lengths)
    bound = constraint().for_sentences(lengths)
    results = beam_search(
        RandomDecoder(seed), src, beam=4, nbest=3, alpha=0.3, max_len_a=1.0, max_len_b=max_len_b, constraint=bound
    )
    for n, hyps in zip(lengths, results):
        assert len(hyps) == 3
        for hyp in hyps:
            check_tree(hyp.tokens, n)
            assert len(hyp.tokens) + 1 <= n + max_len_b
            assert hyp.score > float("-inf")
    # The same decoder without the constraint produces no trees: the check above is not vacuous.
    free = beam_search(RandomDecoder(seed), src, beam=4, max_len_a=1.0, max_len_b=max_len_b)
    assert not any(is_tree(hyps[0].tokens, n) for n, hyps in zip(lengths, free))


@pytest.mark.parametrize("seed", [0, 1])
def test_every_greedy_output_is_a_tree(seed):
    lengths = [4, 1, 7]
    results = greedy_search(
        RandomDecoder(seed),
        batch_of(lengths),
        max_len_a=1.0,
        max_len_b=10,
        constraint=constraint().for_sentences(lengths),
    )
    for n, (hyp,) in zip(lengths, results):
        check_tree(hyp.tokens, n)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_constrained_beam_on_cuda():
    lengths = [3, 6]
    results = beam_search(
        RandomDecoder(0), batch_of(lengths).cuda(), beam=4, max_len_b=20, constraint=constraint().for_sentences(lengths)
    )
    for n, (hyp,) in zip(lengths, results):
        check_tree(hyp.tokens, n)


def test_without_a_root_token_any_label_may_be_the_root():
    lengths = [3, 2]
    roots = {}
    for root in (None, "(ROOT"):
        roots[root] = set()
        for seed in range(4):
            results = beam_search(
                RandomDecoder(seed),
                batch_of(lengths),
                beam=3,
                max_len_b=20,
                constraint=constraint(root=root).for_sentences(lengths),
            )
            for n, (hyp,) in zip(lengths, results):
                sentence = [f"w{i}" for i in range(n)]
                tree = delinearize([VOCAB[t] for t in hyp.tokens], sentence)  # raises unless one tree over them
                assert leaves_of(tree) == sentence
                roots[root].add(tree.label)
    assert roots["(ROOT"] == {"ROOT"}
    assert roots[None] - {"ROOT"}, "without a root token, some search must pick another label for the root"


def test_allowed_tokens_step_by_step():
    c = constraint().for_sentences([2])
    state = c.start(torch.tensor([10]))

    def allowed() -> set[str]:
        return {VOCAB[i] for i in c.allowed(state)[0].nonzero().view(-1).tolist()}

    opens = {t for t in VOCAB if t.startswith("(") and t != "(ROOT"}
    leaves = {t for t in VOCAB[len(SPECIALS) + 1 :] if not t.startswith("(")}
    assert allowed() == {"(ROOT"}
    # 2 words: the root opens first; nothing closes empty; the root closes only when both words are used.
    for token, expected in [
        ("(ROOT", opens | leaves),
        ("(NP", opens | leaves),
        ("NN", opens | leaves | {")"}),
        (")", opens | leaves),
        ("DT", {")"}),
        (")", {"</s>"}),
        ("</s>", {"</s>"}),
    ]:
        state = c.advance(state, torch.tensor([ID[token]]))
        assert allowed() == expected, token


def test_budget_forces_completion_in_time():
    # 2 words: "(ROOT" 2 leaves ")" EOS takes 5 tokens; each inner bracket costs 2 more.
    c = constraint().for_sentences([2, 2])
    state = c.advance(c.start(torch.tensor([6, 7])), torch.tensor([ID["(ROOT"]] * 2))
    mask = c.allowed(state)
    assert not mask[0, ID["(NP"]] and mask[0, ID["NN"]]  # limit 6: no room for a bracket
    assert mask[1, ID["(NP"]]  # limit 7: room for one
    state = c.advance(state, torch.tensor([ID["NN"], ID["(NP"]]))
    mask = c.allowed(state)
    assert not mask[1, ID["(NP"]] and mask[1, ID["NN"]] and not mask[1, ID[")"]]


def test_empty_sentence_and_too_small_limits():
    c = constraint().for_sentences([0, 3])
    state = c.start(torch.tensor([1, 6]))
    assert c.allowed(state)[0].nonzero().view(-1).tolist() == [EOS_ID]
    assert min_output_length(0) == 1 and min_output_length(3) == 6
    with pytest.raises(ValueError, match="sentence 1: 3 words need at least 6 output tokens, the limit is 5"):
        c.start(torch.tensor([1, 5]))
    with pytest.raises(ValueError, match="for_sentences"):
        constraint().start(torch.tensor([5]))
    with pytest.raises(ValueError, match="not in the vocabulary"):
        TreeConstraint.from_vocab(VOCAB, eos="</s>", specials=SPECIALS, root="(TOP")


def test_reorder_and_select_follow_rows():
    c = constraint().for_sentences([2, 3])
    state = c.advance(c.start(torch.tensor([9, 9])), torch.tensor([ID["(ROOT"], ID["(ROOT"]]))
    state = c.advance(state, torch.tensor([ID["NN"], ID["(NP"]]))
    swapped = c.reorder(state, torch.tensor([1, 0, 0]))
    assert swapped.n_words.tolist() == [3, 2, 2] and swapped.depth.tolist() == [2, 1, 1]
    assert torch.equal(c.allowed(swapped)[1:], c.allowed(state)[:1].expand(2, -1))


def test_pointer_pairs_follow_words_and_rows():
    """Bound with (first piece, last piece) pairs (model.word_pointer_last), rows of different word counts padded
    by repeating their last pair: the pointer gives each row the pair of its next word, then its EOS pair, and
    follows reorder and select; malformed positions are refused."""
    pairs = [[[0, 1], [2, 2], [3, 3]], [[0, 0], [1, 3], [4, 5], [6, 6]]]  # 2 words + EOS, 3 words + EOS
    c = constraint().for_sentences([2, 3], pairs)
    assert c.word_starts is not None and c.word_starts.shape == (2, 4, 2)
    assert c.word_starts[0, 3].tolist() == [3, 3]  # the padding repeats the EOS pair
    state = c.start(torch.tensor([12, 12]))
    pointer = lambda s: c.pointer(s).tolist()
    assert pointer(state) == [[0, 1], [0, 0]]
    state = c.advance(state, torch.tensor([ID["(ROOT"], ID["(ROOT"]]))
    assert pointer(state) == [[0, 1], [0, 0]]  # brackets cover no word
    state = c.advance(state, torch.tensor([ID["NN"], ID["NN"]]))
    assert pointer(state) == [[2, 2], [1, 3]]
    state = c.advance(state, torch.tensor([ID["DT"], ID["(NP"]]))
    assert pointer(state) == [[3, 3], [1, 3]]  # row 0 has covered both words: its EOS pair
    assert pointer(c.reorder(state, torch.tensor([1, 1, 0]))) == [[1, 3], [1, 3], [3, 3]]
    assert pointer(c.select(state, torch.tensor([1]))) == [[1, 3]]
    with pytest.raises(ValueError, match="W \\+ 1, 2"):
        constraint().for_sentences([1], [[[0, 0, 0], [1, 1, 1]]])
    with pytest.raises(ValueError, match="n_words \\+ 1"):
        constraint().for_sentences([2], [[[0, 0], [1, 1]]])


def test_accepted_sequences_are_exactly_the_trees_within_the_limit():
    """For 2 words and at most 10 output tokens, a breadth-first walk of the constraint finds exactly the token
    sequences that delinearize to a ROOT-rooted tree (enumerated from all sequences over a 4-token vocabulary)."""
    vocab = [*SPECIALS, ")", "(ROOT", "(NP", "NN"]
    c = TreeConstraint.from_vocab(vocab, eos="</s>", specials=SPECIALS, root="(ROOT").for_sentences([2])
    max_len = 10
    accepted, frontier = set(), [()]
    state = c.start(torch.tensor([max_len]))
    while frontier:
        mask = c.allowed(state)  # (rows, V)
        nxt, rows, toks = [], [], []
        for r, prefix in enumerate(frontier):
            for t in mask[r].nonzero().view(-1).tolist():
                if t == EOS_ID:
                    accepted.add(prefix)
                else:
                    nxt.append(prefix + (vocab[t],))
                    rows.append(r)
                    toks.append(t)
        if not nxt:
            break
        state = c.advance(c.reorder(state, torch.tensor(rows)), torch.tensor(toks))
        frontier = nxt
    expected = set()
    for length in range(1, max_len):
        for rest in itertools.product([")", "(NP", "NN"], repeat=length - 1):
            seq = ("(ROOT", *rest)
            try:
                delinearize(seq, ["a", "b"])
            except TreeError:
                continue
            expected.add(seq)
    assert accepted == expected and len(expected) == 10  # 1 flat tree, 3 with one NP, 6 with two


class OpeningDecoder(RandomDecoder):
    """Prefers "(NP" above all: unbounded, it opens NP after NP until the length budget forces the words out."""

    def decode_step(self, tokens, cache):
        logits = super().decode_step(tokens, cache)
        logits[:, ID["(NP"]] += 20.0
        return logits


def longest_open_run(token_ids: list[int]) -> int:
    best = run = 0
    for t in token_ids:
        run = run + 1 if VOCAB[t].startswith("(") else 0
        best = max(best, run)
    return best


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_max_open_run_bounds_brackets_opened_in_a_row(search):
    lengths = [3, 6, 1]
    src = batch_of(lengths)

    def run(bound: TreeConstraint):
        if search == "greedy":
            return greedy_search(OpeningDecoder(0), src, max_len_a=1.0, max_len_b=40, constraint=bound)
        return beam_search(OpeningDecoder(0), src, beam=4, nbest=2, max_len_a=1.0, max_len_b=40, constraint=bound)

    free = run(constraint().for_sentences(lengths))
    assert max(longest_open_run(h.tokens) for hyps in free for h in hyps) > 10  # the failure the bound is for
    bounded = run(TreeConstraint(constraint().kinds, max_open_run=3).for_sentences(lengths))
    for n, hyps in zip(lengths, bounded):
        for h in hyps:
            check_tree(h.tokens, n)
            assert longest_open_run(h.tokens) <= 3
    with pytest.raises(ValueError, match="max_open_run must be >= 2"):
        TreeConstraint(constraint().kinds, max_open_run=1)
