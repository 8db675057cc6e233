"""Lexical constraints in the beam search (decoding/lexical.py): Dynamic Beam Allocation, negative phrases,
prefixes; the search level, on hand-set and random models."""

import itertools
import math

import pytest
import torch
from conftest import run_cli
from test_search import FakeModel, _random_model, _sources

from transduce.data.tokenizer import EOS_ID
from transduce.decoding.ensemble import Ensemble
from transduce.decoding.lexical import ConstraintError, LexicalConstraint, LexState, Steering, _stripes
from transduce.decoding.search import beam_search

A, B, C, D = 4, 5, 6, 7  # FakeModel's vocabulary is 6: a wider one here
V = 8


class Table(FakeModel):
    """A hand-set model over 8 tokens: unconstrained, "A" then EOS is best; with C required, the best output
    holding C is "B C" (p = .3 * .8 = .24, against "A C" = .6 * .05 and "C" = .1 * .2)."""

    table = {
        (): {A: 0.6, B: 0.3, C: 0.1},
        (A,): {EOS_ID: 0.9, C: 0.05, D: 0.05},
        (B,): {C: 0.8, EOS_ID: 0.2},
        (C,): {EOS_ID: 0.2, D: 0.8},
        (B, C): {EOS_ID: 1.0},
        (C, D): {EOS_ID: 1.0},
        (A, C): {EOS_ID: 1.0},
        (A, D): {EOS_ID: 1.0},
    }
    config = FakeModel.config.__class__(vocab_size=V, max_len=64)


SRC = torch.tensor([[9, 9, EOS_ID]])


def _lexical(*steering, eos=EOS_ID):
    return LexicalConstraint(list(steering), eos=eos, device=torch.device("cpu"))


def _best_by_brute_force(model, accept, max_tokens=4):
    """The most probable output (EOS at the end) of at most max_tokens tokens that `accept`s, by enumeration."""
    best, best_lp = None, -math.inf
    for n in range(max_tokens + 1):
        for seq in itertools.product([A, B, C, D], repeat=n):
            lp, ok = 0.0, True
            for t in range(n + 1):
                p = model.table.get(seq[:t], {EOS_ID: 1.0}).get(seq[t] if t < n else EOS_ID, 0.0)
                if p == 0.0:
                    ok = False
                    break
                lp += math.log(p)
            if ok and accept(seq) and lp > best_lp:
                best, best_lp = list(seq), lp
    return best, best_lp


def test_the_constrained_optimum_of_a_hand_set_model():
    (plain,) = beam_search(Table(), SRC, beam=4, length_penalty_kind="none", max_len_b=5)
    assert plain[0].tokens == [A]
    (found,) = beam_search(
        Table(), SRC, beam=4, length_penalty_kind="none", max_len_b=5, lexical=_lexical(Steering(include=((C,),)))
    )
    best, best_lp = _best_by_brute_force(Table(), lambda seq: C in seq)
    assert found[0].tokens == best == [B, C]
    assert found[0].log_prob == pytest.approx(best_lp)


def test_a_negative_phrase_gives_the_best_output_without_it():
    lexical = _lexical(Steering(exclude=((A,),)))
    (found,) = beam_search(Table(), SRC, beam=4, length_penalty_kind="none", max_len_b=5, lexical=lexical)
    best, best_lp = _best_by_brute_force(Table(), lambda seq: A not in seq)
    assert found[0].tokens == best and found[0].log_prob == pytest.approx(best_lp)


def test_a_two_token_negative_phrase_masks_only_its_completion():
    """After the prefix C the model wants D (0.8); with "C D" banned it must end after C instead (EOS, 0.2)."""
    for beam in (1, 4):
        (free,) = beam_search(
            Table(), SRC, beam=beam, length_penalty_kind="none", max_len_b=5, lexical=_lexical(Steering(prefix=(C,)))
        )
        assert free[0].tokens == [C, D]
        banned = _lexical(Steering(prefix=(C,), exclude=((C, D),)))
        (found,) = beam_search(Table(), SRC, beam=beam, length_penalty_kind="none", max_len_b=5, lexical=banned)
        assert found[0].tokens == [C]


def test_a_prefix_is_forced_and_the_search_goes_on_from_it():
    lexical = _lexical(Steering(prefix=(C,)))
    (found,) = beam_search(Table(), SRC, beam=4, length_penalty_kind="none", max_len_b=5, lexical=lexical)
    best, best_lp = _best_by_brute_force(Table(), lambda seq: seq[:1] == (C,))
    assert found[0].tokens == best == [C, D]
    assert found[0].log_prob == pytest.approx(best_lp)  # the prefix's own probability counts


def test_banks_take_slots_round_robin_most_constraint_tokens_first():
    score = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0, float("-inf")]])
    bank = torch.tensor([[0, 0, 1, 0, 2, 1, 2]])
    order = _stripes(score, bank, top=3)[0].tolist()
    # rank 0 of banks 2, 1, 0, then rank 1 of banks 1, 0, then bank 0's third; the -inf candidate last
    assert order == [4, 2, 0, 5, 1, 3, 6]


def test_candidates_hold_each_beams_next_constraint_token_and_fill_the_banks():
    """Two beams, one phrase (C, D): the beam that has emitted C gets the candidate "D" (bank 2, the top), both get
    "C" (bank 1: after C, C again is one token into the phrase); slots go round-robin over banks 2, 1, 0."""
    lexical = _lexical(Steering(include=((C, D),)))
    state = LexState(
        sent=torch.tensor([0, 0]),
        progress=torch.tensor([[1], [0]]),  # beam 0 ends in C, beam 1 in something else
        met=torch.tensor([[False], [False]]),
        steps=1,
    )
    lprobs = torch.log(torch.tensor([[0.01, 0.01, 0.01, 0.01, 0.9, 0.03, 0.02, 0.01]] * 2))
    scores = torch.tensor([[-1.0, -1.5]])
    from transduce.decoding.search import _candidates

    top_score, token, origin = lexical.candidates(state, scores, lprobs, _candidates)
    pairs = list(zip(origin[0].tolist(), token[0].tolist()))
    assert pairs[0] == (0, D)  # the top bank: the phrase completed
    assert pairs[1] == (0, C)  # bank 1's best
    assert pairs[2] == (0, A)  # bank 0's best
    assert pairs[3] == (1, C)  # bank 1's second, before bank 0's second
    assert len(set(pairs)) == len(pairs)  # no candidate twice


def test_progress_falls_back_to_the_longest_border():
    """Knuth-Morris-Pratt: "A A B" is found in "A A A B" (a restart from scratch would miss it)."""
    lexical = _lexical(Steering(include=((A, A, B),)))
    state = lexical.start(torch.tensor([20]))
    for token in (A, A, A, B):
        state = lexical.advance(state, torch.tensor([token]))
    assert bool(state.met[0, 0])


def _contains(seq, phrase):
    return any(seq[i : i + len(phrase)] == list(phrase) for i in range(len(seq) - len(phrase) + 1))


def _random_steering(rows, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(len(rows)):
        n = 1 + i % 2
        include = tuple(tuple(torch.randint(4, 30, (1 + (i + j) % 3,), generator=g).tolist()) for j in range(n))
        out.append(Steering(include=include, exclude=((int(torch.randint(4, 30, (1,), generator=g)),),)))
    return out


@pytest.mark.parametrize("beam", [1, 4, 8])
def test_every_constraint_is_met_on_a_random_model(beam):
    model = _random_model()
    src, rows = _sources(n=6)
    steering = _random_steering(rows, seed=beam)
    steering = [
        Steering(include=s.include, exclude=tuple(x for x in s.exclude if not any(x[0] in p for p in s.include)))
        for s in steering
    ]
    found = beam_search(model, src, beam=beam, max_len_b=12, nbest=min(beam, 2), lexical=_lexical(*steering))
    for s, hyps in zip(steering, found):
        assert hyps
        for h in hyps:
            assert all(_contains(h.tokens, p) for p in s.include)
            assert not any(_contains(h.tokens, p) for p in s.exclude)


def test_a_sentence_comes_out_the_same_alone_or_in_a_batch_with_others_constrained():
    model = _random_model()
    src, rows = _sources(n=6)
    steering = [None, *_random_steering(rows, seed=5)[1:]]  # the first sentence unconstrained
    steering[3] = Steering(exclude=((9,),))
    batched = beam_search(model, src, beam=4, max_len_b=12, lexical=_lexical(*steering))
    for i, row in enumerate(rows):
        (alone,) = beam_search(model, torch.tensor([row]), beam=4, max_len_b=12, lexical=_lexical(steering[i]))
        assert alone[0].tokens == batched[i][0].tokens
        assert alone[0].score == pytest.approx(batched[i][0].score, abs=1e-5)


def test_no_constraints_is_the_unconstrained_search():
    model = _random_model()
    src, rows = _sources(n=6)
    plain = beam_search(model, src, beam=4, max_len_b=12, nbest=2)
    steered = beam_search(model, src, beam=4, max_len_b=12, nbest=2, lexical=_lexical(*[None] * len(rows)))
    assert [[h.tokens for h in s] for s in plain] == [[h.tokens for h in s] for s in steered]


def test_an_ensemble_meets_its_constraints():
    ensemble = Ensemble([_random_model(0), _random_model(1)]).eval()
    src, rows = _sources(n=4)
    steering = [Steering(include=((11, 12), (20,))) for _ in rows]
    for hyps in beam_search(ensemble, src, beam=4, max_len_b=12, lexical=_lexical(*steering)):
        assert _contains(hyps[0].tokens, (11, 12)) and _contains(hyps[0].tokens, (20,))


def test_what_no_output_can_satisfy_is_refused_naming_the_row():
    with pytest.raises(ConstraintError, match="holds one that must not") as err:
        _lexical(Steering(), Steering(include=((A, B, C),), exclude=((B, C),)))
    assert err.value.row == 1
    with pytest.raises(ConstraintError, match="prefix holds"):
        _lexical(Steering(prefix=(A, B), exclude=((B,),)))
    long = _lexical(Steering(include=(tuple(range(4, 8)) * 3,)))
    with pytest.raises(ConstraintError, match="more than the output limit 5") as err:
        beam_search(Table(), SRC, beam=2, max_len_a=0.0, max_len_b=5, lexical=long)
    assert err.value.row == 0


# ------------------------------------------------------------------------------------ translate, on a trained run
def _plain(run, lines):
    from transduce.decoding.translator import Translator

    return Translator.from_run(run).translate(lines, beam=4)


def _one_line_error(proc, *says):
    assert "--quiet" in proc.args
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for text in says:
        assert text in proc.stderr, proc.stderr


LINES = ["red a red dog near cat a", "tree near sees over", "under the house", "big runs red"]


def test_translate_constraints_glossary_and_prefix_files(trained_run, tmp_path):
    run, _ = trained_run
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    plain = _plain(run, LINES)
    cons = tmp_path / "cons.txt"
    cons.write_text("TREE\tHOUSE\n\nBIG\t##\tRED\n\n")  # line 1 two phrases, line 3 one in and one out
    out = run_cli("translate", str(run), "--input", str(src), "--beam", "4", "--constraints", str(cons)).stdout
    got = out.splitlines()
    assert "TREE" in got[0] and "HOUSE" in got[0]
    assert got[1] == plain[1] and got[3] == plain[3]  # lines without constraints: the plain search's output
    assert "BIG" in got[2] and "RED" not in got[2]
    terms = tmp_path / "terms.tsv"
    terms.write_text("house\tTREE\ndog\tdog\n")  # "house" must come out as TREE; "dog" kept untranslated
    out = run_cli("translate", str(run), "--input", str(src), "--beam", "4", "--glossary", str(terms)).stdout
    got = out.splitlines()
    assert "dog" in got[0].split() and "TREE" in got[2].split()
    assert got[1] == plain[1] and got[3] == plain[3]  # no term: byte-identical to the unconstrained search
    prefix = tmp_path / "prefix.txt"
    prefix.write_text("HOUSE HOUSE\n\n\nTREE\n")
    got = run_cli("translate", str(run), "--input", str(src), "--beam", "4", "--prefix", str(prefix)).stdout
    got = got.splitlines()
    assert got[0].startswith("HOUSE HOUSE") and got[3].startswith("TREE") and got[1] == plain[1]


def test_terminology_mistakes_get_one_line_naming_the_place(trained_run, tmp_path):
    run, _ = trained_run
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    cons = tmp_path / "cons.txt"
    cons.write_text("TREE\n")
    bad = run_cli("translate", str(run), "--input", str(src), "--constraints", str(cons), "--quiet", check=False)
    _one_line_error(bad, "1 lines", "4", str(cons))
    terms = tmp_path / "terms.tsv"
    terms.write_text("house\tTREE\nhouse only\n")
    bad = run_cli("translate", str(run), "--input", str(src), "--glossary", str(terms), "--quiet", check=False)
    _one_line_error(bad, f"{terms}:2")
    pairs = ["TREE HOUSE", "RED BIG", "CAT DOG", "NEAR OVER", "SEES RUNS", "UNDER THE", "HOUSE TREE", "BIG RED"]
    cons.write_text("\n" + "\t".join(pairs) + "\n\n\n")  # 16 tokens: past 4 source tokens + max_len_b 10
    bad = run_cli("translate", str(run), "--input", str(src), "--constraints", str(cons), "--quiet", check=False)
    _one_line_error(bad, "line 2", "output limit")
    para = tmp_path / "para.txt"
    para.write_text("red dog. big tree.\n")
    cons.write_text("TREE\n")
    bad = run_cli(
        "translate",
        str(run),
        "--input",
        str(para),
        "--split",
        "sentences",
        "--constraints",
        str(cons),
        "--quiet",
        check=False,
    )
    _one_line_error(bad, "line 1", "glossary")
    terms.write_text("house\tTREE\n")
    bad = run_cli(
        "translate",
        str(run),
        "--input",
        str(src),
        "--engine",
        "ctranslate2",
        "--glossary",
        str(terms),
        "--quiet",
        check=False,
    )
    _one_line_error(bad, "CTranslate2")


def test_a_glossary_applies_to_each_sentence_of_a_paragraph_and_to_documents(trained_run):
    from transduce.decoding.translator import Translator
    from transduce.terminology import Glossary

    translator = Translator.from_run(trained_run[0])
    glossary = Glossary([("dog", "TREE"), ("house", "RED")])
    (para,) = translator.translate(["red dog. under the house."], split="sentences", glossary=glossary, beam=4)
    first, second = translator.translate(["red dog.", "under the house."], glossary=glossary, beam=4)
    assert "TREE" in first.split() and "RED" in second.split() and para == f"{first} {second}"
    html = translator.translate_document("<p>red <b>dog</b> near cat</p>", "html", glossary=glossary, beam=4)
    assert "TREE" in html and html.startswith("<p>") and html.endswith("</p>")


def test_ctranslate2_takes_a_prefix_and_refuses_constraints(trained_run, tmp_path):
    pytest.importorskip("ctranslate2")
    from transduce.export.ct2_translator import CTranslate2Translator
    from transduce.terminology import Constraints

    engine = CTranslate2Translator.from_run(trained_run[0])
    out = engine.translate(LINES, beam=2, length_penalty="length", prefixes=["HOUSE HOUSE", None, None, "TREE"])
    plain = engine.translate(LINES, beam=2, length_penalty="length")
    assert out[0].startswith("HOUSE HOUSE") and out[3].startswith("TREE") and out[1] == plain[1]
    with pytest.raises(Exception, match="CTranslate2 has no lexical constraints"):
        engine.translate(LINES, constraints=[Constraints(include=("TREE",))] + [None] * 3)


def test_random_constraints_are_all_met_by_a_trained_model(trained_run):
    import random

    from transduce.decoding.translator import Translator
    from transduce.terminology import Constraints

    run, corpus = trained_run
    lines = (corpus / "test.en").read_text().splitlines()
    words = sorted({w for line in (corpus / "train.xx").read_text().splitlines()[:200] for w in line.split()})
    rng = random.Random(74)
    wanted = []
    for _ in lines:
        include = tuple(rng.sample(words, rng.choice((1, 2))))
        exclude = tuple(w for w in rng.sample(words, 2) if w not in include)[:1]
        wanted.append(Constraints(include=include, exclude=exclude))
    translator = Translator.from_run(run)
    for beam in (2, 4):
        for constraints, out in zip(wanted, translator.translate(lines, beam=beam, constraints=wanted)):
            assert all(w in out for w in constraints.include), (constraints, out)
            assert not any(w in out.split() for w in constraints.exclude), (constraints, out)
