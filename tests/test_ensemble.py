"""Ensemble decoding (decoding/ensemble.py; `translate` / `evaluate --ensemble`)."""

import json
import math
import shutil

import pytest
import torch
from conftest import run_cli

from transduce.config import ConfigError
from transduce.decoding.ensemble import Ensemble
from transduce.decoding.translator import Translator
from transduce.training.checkpoint import checkpoint_dirs


@pytest.fixture(scope="module")
def runs(trained_run):
    """The trained toy run and an earlier checkpoint of it: two different models of one tokenizer."""
    run, corpus = trained_run
    early = checkpoint_dirs(run)[0] / "model.safetensors"
    return run, early, (corpus / "test.en").read_text().splitlines()


def test_an_ensemble_of_a_model_with_itself_is_that_model(runs):
    run, _, sources = runs
    single = Translator.from_run(run, device="cpu")
    double = Translator.from_runs([run, run], device="cpu")
    assert isinstance(double.model, Ensemble) and len(double.model.members) == 2
    for beam in (1, 4):
        a = single.translate_nbest(sources, beam=beam, nbest=1)
        b = double.translate_nbest(sources, beam=beam, nbest=1)
        assert [h[0].text for h in a] == [h[0].text for h in b]
        assert all(math.isclose(x[0].score, y[0].score, abs_tol=1e-4) for x, y in zip(a, b))


def test_each_step_is_the_log_of_the_members_mean_probability(runs):
    run, early, sources = runs
    one, two = Translator.from_run(run, device="cpu"), Translator.from_run(early, device="cpu")
    ensemble = Ensemble([one.model, two.model]).eval()
    src = one._padded(one.encode_sources(sources[:5]))
    tokens = torch.full((5,), 1, dtype=torch.long)  # BOS
    with torch.no_grad():
        cache = ensemble.start_decoding(ensemble.encode(src), ensemble.pad_mask(src))
        got = ensemble.decode_step(tokens, cache)
        p = [
            m.decode_step(tokens, m.start_decoding(m.encode(src), m.pad_mask(src))).softmax(-1)
            for m in (one.model, two.model)
        ]
    assert torch.allclose(got, ((p[0] + p[1]) / 2).log(), atol=1e-5)
    assert not torch.allclose(p[0], p[1], atol=1e-3)  # the members really differ
    ensembled = Translator.from_runs([run, early], device="cpu").translate(sources, beam=4)
    assert len(ensembled) == len(sources) and all(isinstance(t, str) for t in ensembled)


def test_the_commands_take_ensemble_and_refuse_another_tokenizer(runs, tmp_path):
    run, early, sources = runs
    (tmp_path / "in.txt").write_text("\n".join(sources[:4]) + "\n")
    out = run_cli("translate", str(run), "--ensemble", str(early), "--input", str(tmp_path / "in.txt"), "--quiet")
    expected = Translator.from_runs([run, early], device="cpu").translate(sources[:4])
    assert out.stdout.splitlines() == expected
    other = tmp_path / "other"
    shutil.copytree(run, other, ignore=shutil.ignore_patterns("checkpoints", "*.lock"))
    settings = json.loads((other / "tokenizer.json").read_text())
    (other / "tokenizer.json").write_text(json.dumps({**settings, "lowercase": True}))  # prepared otherwise
    bad = run_cli("translate", str(run), "--ensemble", str(other), "--input", str(tmp_path / "in.txt"), check=False)
    assert bad.returncode != 0 and "tokenizer differs" in bad.stderr and "Traceback" not in bad.stderr
    with pytest.raises(ConfigError, match="one model, not an ensemble"):
        Translator.from_runs([run, early], device="cpu").attention(sources[0])
