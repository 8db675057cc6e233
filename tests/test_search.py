import math
from dataclasses import dataclass

import pytest
import torch
from conftest import run_cli

from transduce import ModelConfig, Transformer
from transduce.data.tokenizer import EOS_ID
from transduce.decoding.search import beam_search, greedy_search, length_penalty

A, B = 4, 5
V = 6
# Next-token probabilities after each prefix (hand-set). Greedy: A A (p = .6 * .55 = .33).
# Beam without length penalty: B (p = .4 * .9 = .36). With a strong GNMT penalty the longer "A A" wins again.
TABLE = {(): {A: 0.6, B: 0.4}, (A,): {A: 0.55, EOS_ID: 0.45}, (B,): {EOS_ID: 0.9, A: 0.1}, (A, A): {EOS_ID: 1.0}}


@dataclass
class FakeCache:
    history: torch.Tensor  # (N, t)

    def expand(self, beams):
        self.history = self.history.repeat_interleave(beams, dim=0)

    def reorder(self, index):
        self.history = self.history.index_select(0, index)

    def select(self, index):
        self.history = self.history.index_select(0, index)


class FakeModel:
    """Implements the decoding interface with probabilities looked up from TABLE (or `table`)."""

    table = TABLE

    config = ModelConfig(vocab_size=V, max_len=64)

    def pad_mask(self, src):
        return src.eq(0)

    def encode(self, src):
        return src

    def start_decoding(self, memory, pad_mask):
        return FakeCache(torch.zeros(memory.size(0), 0, dtype=torch.long))

    def decode_step(self, tokens, cache):
        cache.history = torch.cat([cache.history, tokens.view(-1, 1)], dim=1)
        logits = torch.full((tokens.size(0), self.config.vocab_size), -1e9)
        for row, hist in enumerate(cache.history.tolist()):
            for token, p in self.table.get(tuple(hist[1:]), {EOS_ID: 1.0}).items():
                logits[row, token] = math.log(p)
        return logits


SRC = torch.tensor([[7, 7, EOS_ID]])


def test_greedy_and_beam_differ_on_hand_set_probabilities():
    (greedy,) = greedy_search(FakeModel(), SRC, max_len_b=5)
    assert greedy[0].tokens == [A, A] and greedy[0].log_prob == pytest.approx(math.log(0.33))
    (beam,) = beam_search(FakeModel(), SRC, beam=2, length_penalty_kind="none", max_len_b=5, nbest=2)
    assert [h.tokens for h in beam] == [[B], [A, A]]
    assert beam[0].score == pytest.approx(math.log(0.36)) and beam[1].score == pytest.approx(math.log(0.33))


def test_greedy_and_beam_scores_mean_the_same_thing():
    """Both report log P(Y | X) / lp(Y), |Y| counting EOS: greedy equals a beam of 1 with the same penalty."""
    for kind, alpha in (("gnmt", 0.6), ("length", 1.0), ("none", 0.6)):
        (greedy,) = greedy_search(FakeModel(), SRC, max_len_b=5, alpha=alpha, length_penalty_kind=kind)
        (beam,) = beam_search(FakeModel(), SRC, beam=1, alpha=alpha, length_penalty_kind=kind, max_len_b=5)
        assert greedy[0].tokens == beam[0].tokens == [A, A]
        assert greedy[0].score == pytest.approx(beam[0].score)
        assert greedy[0].score == pytest.approx(math.log(0.33) / length_penalty(3.0, kind=kind, alpha=alpha))


def test_length_penalty_changes_the_winner():
    (beam,) = beam_search(FakeModel(), SRC, beam=2, length_penalty_kind="gnmt", alpha=1.0, max_len_b=5)
    assert beam[0].tokens == [A, A]
    assert beam[0].score == pytest.approx(math.log(0.33) / ((5 + 3) / 6))
    assert beam[0].log_prob == pytest.approx(math.log(0.33))


def test_length_penalty_forms():
    assert length_penalty(7.0, kind="gnmt", alpha=0.6) == pytest.approx((12 / 6) ** 0.6)
    assert length_penalty(7.0, kind="length", alpha=0.6) == pytest.approx(7**0.6)
    assert length_penalty(7.0, kind="none", alpha=0.6) == 1.0


def test_maximum_length_is_respected():
    (beam,) = beam_search(FakeModel(), SRC, beam=2, length_penalty_kind="none", max_len_a=0.0, max_len_b=1)
    assert beam[0].tokens == []  # only EOS fits
    (greedy,) = greedy_search(FakeModel(), SRC, max_len_a=0.0, max_len_b=2)
    assert len(greedy[0].tokens) <= 1


def _random_model(seed=0):
    torch.manual_seed(seed)
    return Transformer(
        ModelConfig(vocab_size=30, n_layers=2, d_model=32, d_ff=64, n_heads=4, dropout=0.0, max_len=64)
    ).eval()


def _sources(n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        length = 3 + (i * 3) % 8
        rows.append(torch.randint(4, 30, (length,), generator=g).tolist() + [EOS_ID])
    width = max(map(len, rows))
    return torch.tensor([r + [0] * (width - len(r)) for r in rows]), rows


def test_beam_size_one_equals_greedy():
    model = _random_model()
    src, _ = _sources()
    greedy = greedy_search(model, src, max_len_b=12)
    beam = beam_search(model, src, beam=1, length_penalty_kind="none", max_len_b=12)
    assert [g[0].tokens for g in greedy] == [b[0].tokens for b in beam]


@pytest.mark.parametrize("beam", [1, 4])
def test_batched_decoding_equals_one_sentence_at_a_time(beam):
    model = _random_model(2)
    src, rows = _sources()
    batched = beam_search(model, src, beam=beam, max_len_b=12) if beam > 1 else greedy_search(model, src, max_len_b=12)
    for i, row in enumerate(rows):
        alone_src = torch.tensor([row])
        alone = (
            beam_search(model, alone_src, beam=beam, max_len_b=12)
            if beam > 1
            else greedy_search(model, alone_src, max_len_b=12)
        )
        assert alone[0][0].tokens == batched[i][0].tokens
        assert alone[0][0].score == pytest.approx(batched[i][0].score, abs=1e-4)


def test_cached_greedy_equals_uncached_greedy():
    """Greedy search with the key/value cache equals re-running the full decoder on the whole prefix each step."""
    model = _random_model(3)
    src, rows = _sources(4)
    cached = greedy_search(model, src, max_len_b=10)
    with torch.no_grad():
        memory, pad = model.encode(src), model.pad_mask(src)
        for i, hyp in enumerate(cached):
            max_len = len(rows[i]) - 1 + 10  # output tokens including EOS
            prefix = [2]  # BOS
            while len(prefix) - 1 < max_len:
                logits = model.decode(torch.tensor([prefix]), memory[i : i + 1], pad[i : i + 1])[0, -1].clone()
                logits[0] = logits[2] = float("-inf")  # PAD and BOS are never produced
                prefix.append(EOS_ID if len(prefix) == max_len else int(logits.argmax()))
                if prefix[-1] == EOS_ID:
                    break
            produced = prefix[1:-1] if prefix[-1] == EOS_ID else prefix[1:]
            assert produced == hyp[0].tokens


def test_greedy_drops_ended_rows_from_the_batch():
    """A sentence that ends leaves the batch: later steps decode only the rows still going (their cache rows
    selected with them), and every sentence still gets its own tokens and score."""

    class Counting(FakeModel):
        table = {(): {A: 1.0}, (A,): {B: 1.0}, (A, B): {A: 1.0}}  # after BOS: A B A, then EOS (the default)

        def __init__(self):
            self.rows = []

        def decode_step(self, tokens, cache):
            self.rows.append(tokens.size(0))
            return super().decode_step(tokens, cache)

    model = Counting()
    src = torch.tensor([[7, EOS_ID, 0, 0], [7, 7, EOS_ID, 0], [7, 7, 7, EOS_ID]])  # limits 1 + b = 2, 3 and 4 tokens
    hyps = greedy_search(model, src, max_len_a=1.0, max_len_b=1)
    assert [h[0].tokens for h in hyps] == [[A], [A, B], [A, B, A]]  # each forced to EOS at its own limit
    assert model.rows == [3, 3, 2, 1]  # without the drop: [3, 3, 3, 3]
    assert [h[0].log_prob for h in hyps] == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)


def test_beam_returns_nbest_sorted(trained_run):
    from transduce.decoding.translator import Translator

    run, corpus = trained_run
    translator = Translator.from_run(run)
    sentences = (corpus / "test.en").read_text().splitlines()[:5]
    nbest = translator.translate_nbest(sentences, beam=4, nbest=3)
    for hyps in nbest:
        assert len(hyps) == 3
        assert hyps[0].score >= hyps[1].score >= hyps[2].score


def test_translator_keeps_input_order_and_empty_lines(trained_run):
    from transduce.decoding.translator import Translator

    run, corpus = trained_run
    translator = Translator.from_run(run)
    sentences = (corpus / "test.en").read_text().splitlines()[:12]
    sentences.insert(4, "")
    batched = translator.translate(sentences, beam=3, batch_tokens=40)
    alone = [translator.translate([s], beam=3)[0] for s in sentences]
    assert batched == alone and batched[4] == ""
    # the model learned the toy task somewhat: most outputs are non-empty and upper-case
    assert sum(bool(t) and t == t.upper() for t in batched) >= 8


def test_cut_sources_keeps_room_for_eos_within_the_positions():
    from transduce.decoding.front import cut_sources

    sources, cut = cut_sources([[5] * 4, [6] * 3, [7] * 2], max_len=5)  # ids + EOS <= 4
    assert sources == [[5] * 3, [6] * 3, [7] * 2] and cut == [0]


def test_a_call_returns_which_inputs_it_cut_and_keeps_no_state(trained_run):
    """The note of sentences cut into parts is the call's result (Decoded), not an attribute the last call left on
    the translator."""
    from transduce.decoding.translator import Translator

    run, _ = trained_run
    translator = Translator.from_run(run)
    decoded = translator.decode_lines(["", " ".join(["dog"] * 200), "the dog"], beam=2, nbest=2)
    assert decoded.cut == [1] and decoded.n_cut == 1 and decoded.hypotheses[0] == []
    assert len(decoded.hypotheses[1]) == 2  # a cut line's n-best: its parts' k-th hypotheses joined
    alone = translator.translate_nbest("the dog", beam=2, nbest=2)  # batched apart: scores equal to rounding
    assert [h.tokens for h in decoded.hypotheses[2]] == [h.tokens for h in alone] and len(alone) == 2
    assert translator.decode_lines(["the dog"]).cut == []
    assert not hasattr(translator, "cut")


def test_translate_cli_streams_line_for_line(trained_run, tmp_path):
    run, corpus = trained_run
    lines = (corpus / "test.en").read_text().splitlines()[:6]
    lines[2] = ""
    lines.append(" ".join(["dog"] * 200))  # longer than max_len: cut into parts, with a note
    text = "\n".join(lines) + "\n"
    proc = run_cli("translate", str(run), "--beam", "2", input=text)
    out = proc.stdout.split("\n")
    assert len(out) == len(lines) + 1 and out[-1] == "" and out[2] == ""
    assert "1 sentence(s) on 1 line(s)" in proc.stderr and "truncat" not in proc.stderr
    nbest = run_cli("translate", str(run), "--beam", "3", "--nbest", "2", "--quiet", input="the dog\n")
    rows = [ln.split("\t") for ln in nbest.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0", "0"] and float(rows[0][1]) >= float(rows[1][1])


def test_evaluate_and_score_print_signatures(trained_run, tmp_path):
    run, corpus = trained_run
    hyp = tmp_path / "hyp.txt"
    proc = run_cli(
        "evaluate",
        str(run),
        "--src",
        str(corpus / "test.en"),
        "--ref",
        str(corpus / "test.xx"),
        "--output",
        str(hyp),
        "--quiet",
    )
    assert "BLEU = " in proc.stdout and "nrefs:1|case:mixed|eff:no|tok:13a" in proc.stdout
    assert "chrF = " in proc.stdout and "sentences/s" in proc.stdout
    assert len(hyp.read_text().splitlines()) == 30
    scored = run_cli("score", "--hyp", str(hyp), "--ref", str(corpus / "test.xx"))
    bleu = lambda out: float(out.split("BLEU = ")[1].split()[0])
    assert bleu(scored.stdout) == bleu(proc.stdout) and bleu(proc.stdout) > 5.0
    short = tmp_path / "short.txt"
    short.write_text("one line\n")
    bad = run_cli("score", "--hyp", str(short), "--ref", str(corpus / "test.xx"), check=False)
    assert bad.returncode == 1 and "1 lines" in bad.stderr


@dataclass
class Hyp:
    text: str
    score: float


def test_mbr_prefers_the_consensus_over_the_most_probable():
    from transduce.decoding.mbr import expected_utilities, mbr_rerank

    hyps = [
        Hyp("a cat sits on a red mat today", -1.0),  # most probable, unlike the rest
        Hyp("a dog sits on the green grass", -1.2),
        Hyp("a dog sits on the green lawn", -1.3),
        Hyp("a big dog sits on the green grass", -1.4),
    ]
    for utility in ("bleu", "chrf"):
        ranked = mbr_rerank(hyps, utility)
        assert ranked[0] is not hyps[0] and ranked[-1] is hyps[0]
        assert sorted(map(id, ranked)) == sorted(map(id, hyps))  # a reordering, nothing lost or made up
    gains = expected_utilities(hyps, "bleu")
    assert gains[1] > gains[2] > gains[0]
    assert mbr_rerank(hyps, "none") == hyps and mbr_rerank(hyps[:1], "bleu") == hyps[:1]
    with pytest.raises(ValueError, match="bleu, chrf"):
        mbr_rerank(hyps, "ter")


def test_translator_mbr_chooses_among_the_beams_hypotheses(trained_run):
    from transduce.config import ConfigError, DecodeConfig
    from transduce.decoding.mbr import mbr_rerank
    from transduce.decoding.translator import Translator

    run, corpus = trained_run
    translator = Translator.from_run(run)
    sentences = (corpus / "test.en").read_text().splitlines()[:8] + [""]
    pool = translator.translate_nbest(sentences, beam=4, nbest=4)
    chosen = translator.translate_nbest(sentences, beam=4, nbest=2, mbr="chrf")
    for hyps, found in zip(chosen[:-1], pool[:-1]):
        assert len(hyps) == 2 and [h.text for h in hyps] == [h.text for h in mbr_rerank(found, "chrf")[:2]]
    assert chosen[-1] == []  # an empty line stays empty
    translator.decode = DecodeConfig(beam=4, mbr="bleu")  # the run's setting is the default
    assert translator.translate(sentences) == [
        h[0].text if h else "" for h in translator.translate_nbest(sentences, nbest=1, mbr="bleu")
    ]
    with pytest.raises(ConfigError, match="decode.mbr"):
        DecodeConfig(mbr="ter")
    proc = run_cli("translate", str(run), "--beam", "4", "--mbr", "chrf", "--quiet", input="\n".join(sentences) + "\n")
    assert proc.stdout.splitlines() == [h[0].text if h else "" for h in chosen]


class LateWinner(FakeModel):
    """Beam 2, no length penalty. Step 1: "A A" (0.42) stays alive, "B" ends (0.36). Step 2: "A A A" (0.378) stays
    alive, "A A" ends (0.042): two hypotheses have finished while an unfinished one still beats them both. Step 3:
    "A A A" ends at 0.378, the best."""

    table = {
        (): {A: 0.6, B: 0.4},
        (A,): {A: 0.7, EOS_ID: 0.3},
        (B,): {EOS_ID: 0.9, B: 0.1},
        (A, A): {A: 0.9, EOS_ID: 0.1},
    }


def test_patience_stops_once_beam_times_patience_hypotheses_have_finished():
    search = dict(beam=2, length_penalty_kind="none", max_len_b=10)
    (exact,) = beam_search(LateWinner(), SRC, **search)
    assert exact[0].tokens == [A, A, A] and exact[0].log_prob == pytest.approx(math.log(0.378))
    (patient,) = beam_search(LateWinner(), SRC, patience=1.0, **search)  # 2 finished after step 2: "B" is kept
    assert patient[0].tokens == [B] and patient[0].log_prob == pytest.approx(math.log(0.36))
    (longer,) = beam_search(LateWinner(), SRC, patience=2.0, **search)  # 4 needed: the search goes on
    assert longer[0].tokens == [A, A, A]


@pytest.mark.parametrize(
    "patience, nbest, error",
    [(-1.0, 1, "between 0 and 100"), (0.25, 2, "fewer than the 2 asked for"), (float("nan"), 1, "a finite number")],
)
def test_a_patience_that_cannot_fill_the_nbest_list_is_refused(patience, nbest, error):
    from transduce.config import ConfigError, DecodeConfig

    with pytest.raises(ConfigError, match=error):
        DecodeConfig(beam=4, nbest=nbest, patience=patience)


class MarianIdsModel(FakeModel):
    """FakeModel's probabilities in a Marian vocabulary's ids: EOS 0, A 2, B 3, PAD 5, decoding started from PAD."""

    config = ModelConfig(vocab_size=V, max_len=64, pad_id=5, bos_id=5, eos_id=0)
    table = {(): {2: 0.6, 3: 0.4}, (2,): {2: 0.55, 0: 0.45}, (3,): {0: 0.9, 2: 0.1}, (2, 2): {0: 1.0}}
    first_inputs: list[int] = []

    def pad_mask(self, src):
        return src.eq(5)

    def decode_step(self, tokens, cache):
        if cache.history.size(1) == 0:
            self.first_inputs.extend(tokens.tolist())
        cache.history = torch.cat([cache.history, tokens.view(-1, 1)], dim=1)
        logits = torch.full((tokens.size(0), self.config.vocab_size), -1e9)
        for row, hist in enumerate(cache.history.tolist()):
            for token, p in self.table.get(tuple(hist[1:]), {0: 1.0}).items():
                logits[row, token] = math.log(p)
        return logits


def test_search_takes_bos_eos_and_pad_from_the_model():
    """A Marian model (model.bos_id = pad_id = 5, eos_id = 0) decodes as ours does with our ids: the same choices,
    started from its pad row, ended by its EOS; the maximum length counts its non-pad source tokens."""
    model, src = MarianIdsModel(), torch.tensor([[2, 2, 0, 5]])
    (greedy,) = greedy_search(model, src, max_len_b=5)
    assert greedy[0].tokens == [2, 2] and greedy[0].log_prob == pytest.approx(math.log(0.33))
    (beam,) = beam_search(model, src, beam=2, length_penalty_kind="none", max_len_b=5, nbest=2)
    assert [h.tokens for h in beam] == [[3], [2, 2]]
    assert set(model.first_inputs) == {5}
    (cut,) = greedy_search(model, src, max_len_a=1.0, max_len_b=0)  # |x| = 2 without EOS and PAD: A then EOS
    assert cut[0].tokens == [2]
