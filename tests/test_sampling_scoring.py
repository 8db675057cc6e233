"""Issue 62 items 3 and 4: sampling in the search and the model's scores of given pairs."""

import math

import pytest
import torch
from conftest import run_cli

from transduce.config import ConfigError
from transduce.data.tokenizer import EOS_ID
from transduce.decoding.search import Sampling, sample_choice
from transduce.decoding.translator import Translator


@pytest.fixture(scope="module")
def translator(trained_run):
    run, corpus = trained_run
    t = Translator.from_run(run, device="cpu")
    sources = (corpus / "test.en").read_text().splitlines()[:12]
    return t, sources


def test_scores_do_not_depend_on_batching(translator):
    t, sources = translator
    targets = t.translate(sources, beam=2)
    together = t.score(sources, targets, batch_tokens=100_000, tokens=True)
    for i, (s, y) in enumerate(zip(sources, targets)):
        alone = t.score([s], [y], tokens=True)[0]
        assert alone.tokens == together[i].tokens == len(t.tokenizer.encode([y])[0]) + 1  # EOS counted
        assert alone.total == pytest.approx(together[i].total, abs=1e-5)
        assert alone.per_token == pytest.approx(together[i].per_token, abs=1e-5)
        assert together[i].mean == pytest.approx(together[i].total / together[i].tokens)


def test_score_of_greedy_output_is_the_search_log_prob(translator):
    from transduce.decoding.search import greedy_search

    t, sources = translator
    ids = t.encode_sources(sources)
    hyps = greedy_search(t.model, t._padded(ids), max_len_b=t.decode.max_len_b, length_penalty_kind="none")
    compared = 0
    for s, (h,) in zip(sources, hyps):
        if len(h.tokens) + 1 >= len(t.tokenizer.encode([s])[0]) + t.decode.max_len_b:
            continue  # a forced EOS at the maximum length has no probability of its own
        scored = t._teacher_forced([t.encode_sources([s])[0]], [h.tokens + [EOS_ID]])[0]
        assert sum(scored) == pytest.approx(h.log_prob, abs=1e-4)
        compared += 1
    assert compared >= len(sources) // 2  # most outputs end by their own EOS: the check is not vacuous


def test_topk_one_is_greedy_and_sampling_is_reproducible_whatever_the_batching(translator):
    t, sources = translator
    greedy = t.translate(sources, beam=1)
    assert t.translate(sources, beam=1, sampling_topk=1, temperature=3.0) == greedy
    kw = dict(sampling_topk=0, temperature=1.5, seed=7)
    together = t.translate(sources, batch_tokens=100_000, **kw)
    assert together == t.translate(sources, batch_tokens=100_000, **kw)
    # one at a time, each at its index in the input (empty lines before it keep the index)
    alone = [t.decode_lines([""] * i + [s], **kw).hypotheses[i][0].text for i, s in enumerate(sources)]
    assert together == alone
    assert t.translate(sources, sampling_topk=0, temperature=1.5, seed=8) != together


@pytest.mark.parametrize(("topk", "topp", "temperature"), [(0, 1.0, 1.0), (3, 1.0, 0.7), (0, 0.8, 1.3)])
def test_sampled_frequencies_follow_the_restricted_softmax(topk, topp, temperature):
    logits = torch.tensor([2.0, 1.5, 1.0, 0.3, -0.5, -1.0])
    probs = torch.softmax(logits / temperature, dim=0).double()
    order = probs.argsort(descending=True)
    keep = torch.zeros_like(probs, dtype=torch.bool)
    mass = 0.0
    for rank, i in enumerate(order.tolist()):
        if (topk and rank >= topk) or mass >= topp:
            break
        keep[i], mass = True, mass + float(probs[i])
    expected = torch.where(keep, probs, 0.0)
    expected /= expected.sum()
    n = 20_000
    lprobs = torch.log_softmax(logits, dim=0).expand(n, -1)
    u = 1.0 - torch.rand(n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    drawn = sample_choice(lprobs, u, Sampling(topk=topk, topp=topp, temperature=temperature))
    counts = torch.bincount(drawn, minlength=6).double()
    assert counts[~keep].sum() == 0
    want = expected[keep] * n
    statistic = float(((counts[keep] - want) ** 2 / want).sum())
    # the chi-square distribution's 0.999 quantiles for 1..5 degrees of freedom (a seeded draw: never flaky)
    assert statistic < [10.83, 13.82, 16.27, 18.47, 20.52][int(keep.sum()) - 2]


def test_bad_sampling_values_are_refused(translator):
    t, sources = translator
    for bad in (
        dict(sampling_topk=0, sampling_topp=0.0),
        dict(sampling_topk=0, sampling_topp=1.5),
        dict(sampling_topk=0, temperature=0.0),
        dict(sampling_topk=-1),
    ):
        with pytest.raises(ConfigError):
            t.translate(sources[:1], **bad)


def test_score_pairs_command(trained_run, tmp_path):
    run, corpus = trained_run
    src, tgt = corpus / "test.en", corpus / "test.xx"
    out = run_cli("score-pairs", str(run), "--src", str(src), "--tgt", str(tgt), "--tokens").stdout.splitlines()
    assert len(out) == len(src.read_text().splitlines())
    total, n, mean, per = out[0].split("\t")
    assert math.isclose(float(total), sum(map(float, per.split())), abs_tol=1e-3) and len(per.split()) == int(n)
    short = tmp_path / "short"
    short.write_text("one\ntwo\n")
    bad = run_cli("score-pairs", str(run), "--src", str(src), "--tgt", str(short), check=False)
    assert bad.returncode != 0 and "2" in bad.stderr and str(len(out)) in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_ctranslate2_scores_and_samples(trained_run, tmp_path):
    pytest.importorskip("ctranslate2")
    from transduce.export import CTranslate2Translator, export_ctranslate2

    run, corpus = trained_run
    sources = (corpus / "test.en").read_text().splitlines()[:10]
    targets = (corpus / "test.xx").read_text().splitlines()[:10]
    ours = Translator.from_run(run, device="cpu").score(sources, targets)
    engine = CTranslate2Translator(export_ctranslate2(run, tmp_path / "ct2"))
    theirs = engine.score(sources, targets)
    assert [p.tokens for p in theirs] == [p.tokens for p in ours]
    assert [p.total for p in theirs] == pytest.approx([p.total for p in ours], abs=1e-3)
    sampled = engine.translate(sources, sampling_topk=5, temperature=1.2, seed=3)
    assert len(sampled) == len(sources) and all(isinstance(s, str) for s in sampled)
