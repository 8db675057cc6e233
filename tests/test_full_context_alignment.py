"""Alignment with full target context (Garg et al. 2019; model.full_context_alignment): the alignment weights come
from a decoder pass without the future mask, in training (guided alignment) and when links are read; a fine-tune may
switch it on; CTranslate2, which cannot give those weights, refuses in words."""

import dataclasses
from pathlib import Path

import pytest
import torch
from conftest import run_cli, run_torchrun, tiny_recipe
from safetensors.torch import load_file
from test_guided_alignment import alignment_loss, guided, write_linked

from transduce.config import Config, ConfigError, ModelConfig, load_config, read_config
from transduce.model import Transformer
from transduce.model.alignment import alignment_weights
from transduce.tasks import train
from transduce.tasks.finetune import adopt_model
from transduce.training.checkpoint import checkpoint_dirs

FULL = "model.full_context_alignment=true"


@pytest.fixture(scope="module")
def linked(tmp_path_factory) -> Path:
    """test_guided_alignment's toy corpus with its true links, once for the module."""
    return write_linked(tmp_path_factory.mktemp("linked"))


@pytest.fixture(scope="module")
def full_runs(linked, tmp_path_factory) -> dict[float, Path]:
    """Two tiny full-context runs of 200 updates on the linked corpus: unguided (0.0) and guided (1.0)."""
    tmp = tmp_path_factory.mktemp("full")
    recipe = tiny_recipe(tmp / "r.toml", linked, steps=200, save_every=200)
    runs = {}
    for weight in (0.0, 1.0):
        runs[weight] = tmp / f"run{weight}"
        settings = guided(linked, FULL, f"train.guided_alignment={weight}", "train.lr_scale=0.3")
        train(load_config(recipe, settings), runs[weight], quiet=True)
    return runs


def small_model(**settings) -> Transformer:
    torch.manual_seed(0)
    config = ModelConfig(n_layers=2, d_model=32, d_ff=64, n_heads=4, vocab_size=50, dropout=0.0, max_len=64)
    return Transformer(dataclasses.replace(config, **settings)).eval()


def weights_of(model: Transformer, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return alignment_weights(model, tgt_in, model.encode(src), src)


def test_the_full_context_pass_sees_later_target_tokens_but_not_padding():
    src = torch.randint(4, 50, (2, 7), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(4, 50, (2, 6), generator=torch.Generator().manual_seed(2))
    tgt[:, 0] = 2  # BOS
    changed = tgt.clone()
    changed[:, -1] = torch.where(tgt[:, -1] == 5, 6, 5)  # only the last input differs
    for full in (False, True):
        model = small_model(alignment_layer=-1, full_context_alignment=full)
        before, after = weights_of(model, src, tgt), weights_of(model, src, changed)
        earlier_moved = not torch.allclose(before[:, :-1], after[:, :-1], atol=1e-6)
        assert earlier_moved == full  # the causal weights of a position never see a later token
        padded = torch.cat([tgt, torch.zeros(2, 3, dtype=torch.long)], dim=1)  # pad_id 0 after each target
        assert torch.allclose(weights_of(model, src, padded)[:, :6], before, atol=1e-6)


def test_a_model_whose_bos_is_its_pad_row_still_sees_its_first_input():
    model = small_model(full_context_alignment=True, pad_id=0, bos_id=0)  # a Marian model starts from its pad row
    src = torch.tensor([[5, 6, 7, 3]])
    first = weights_of(model, src, torch.tensor([[0, 9, 10]]))
    assert torch.isfinite(first).all()
    assert not torch.allclose(first, weights_of(model, src, torch.tensor([[0, 9, 11]])), atol=1e-6)


def test_guidance_with_full_context_lowers_that_passes_alignment_loss(full_runs):
    assert all(read_config(full_runs[w] / "config.json", Config).model.full_context_alignment for w in (0.0, 1.0))
    unguided, trained = (alignment_loss(full_runs[w]) for w in (0.0, 1.0))
    assert trained < unguided - 0.5, (unguided, trained)


def test_full_context_links_leave_the_translation_unchanged_and_stay_in_range(full_runs, linked):
    from transduce.decoding.translator import Translator

    translator = Translator.from_run(full_runs[1.0])
    lines = (linked / "valid.en").read_text().splitlines()[:8]
    plain = translator.decode_lines(lines, beam=3)
    aligned = translator.decode_lines(lines, beam=3, alignment=True)
    assert [h[0].text for h in plain.hypotheses] == [h[0].text for h in aligned.hypotheses]
    for line, (best,) in zip(lines, aligned.hypotheses):
        n, m = len(line.split()), len(best.text.split())
        assert best.alignment and all(0 <= i < n and 0 <= j < m for i, j in best.alignment)
    # the links of given pairs are the same full-context reading
    targets = [h[0].text for h in aligned.hypotheses]
    assert translator.pair_alignments(lines, targets) == [h[0].alignment for h in aligned.hypotheses]


def test_ctranslate2_refuses_full_context_links_in_words(full_runs, linked, tmp_path):
    pytest.importorskip("ctranslate2")
    from transduce.export.ct2_translator import CTranslate2Translator

    engine = CTranslate2Translator.from_run(full_runs[1.0])
    assert not engine.can_align and "full_context_alignment" in engine.align_refusal
    assert engine.translate(["red dog"], beam=2)  # translation itself works
    from transduce.export.ctranslate2 import ExportError

    def no_search(*_args):
        raise AssertionError("searched before refusing")

    engine._decode = no_search  # type: ignore[method-assign]
    with pytest.raises(ExportError, match="full target in view"):
        engine.decode_lines(["red dog"], beam=2, alignment=True)
    src = linked / "valid.en"
    proc = run_cli("score-pairs", str(full_runs[1.0]), "--src", str(src), "--tgt", str(linked / "valid.xx"),
                   "--alignment", "--engine", "ctranslate2", check=False)  # fmt: skip
    assert proc.returncode != 0 and "--engine torch" in proc.stderr and "Traceback" not in proc.stderr


def test_ddp_with_full_context_guidance_equals_one_process_with_accumulation(tmp_path, linked):
    recipe = tiny_recipe(tmp_path / "r.toml", linked, steps=4, save_every=4, dropout=0.0)
    settings = [x for s in guided(linked, FULL, "train.guided_alignment=0.5") for x in ("--set", s)]
    run_cli("train", str(recipe), "--out", str(tmp_path / "single"), "--set", "train.accumulate=2", *settings)
    run_torchrun("train", str(recipe), "--out", str(tmp_path / "ddp"), *settings, port=29541)
    a, b = (load_file(str(checkpoint_dirs(tmp_path / r)[-1] / "model.safetensors")) for r in ("single", "ddp"))
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    causal = tmp_path / "causal"  # the same run reading its weights causally trains another model
    run_cli("train", str(recipe), "--out", str(causal), "--set", "train.accumulate=2",
            *[x for s in guided(linked, "train.guided_alignment=0.5") for x in ("--set", s)])  # fmt: skip
    c = load_file(str(checkpoint_dirs(causal)[-1] / "model.safetensors"))
    assert any(not torch.allclose(a[k], c[k], atol=1e-5) for k in a)


def test_a_fine_tune_may_set_the_alignment_settings_and_nothing_else(tmp_path):
    base = ModelConfig(n_layers=3, d_model=32, d_ff=64, n_heads=4, vocab_size=50, alignment_layer=1, alignment_heads=1)
    adopted = adopt_model(ModelConfig(full_context_alignment=True, dropout=0.2), base, tmp_path)
    assert adopted.full_context_alignment and adopted.dropout == 0.2
    assert (adopted.alignment_layer, adopted.alignment_heads) == (1, 1)  # left at their defaults: the run's
    assert adopt_model(ModelConfig(alignment_heads=2), base, tmp_path).alignment_heads == 2
    with pytest.raises(ConfigError, match="model.d_model 64"):
        adopt_model(ModelConfig(d_model=64), base, tmp_path)
    with pytest.raises(ConfigError, match="alignment_layer"):
        adopt_model(ModelConfig(alignment_layer=5), base, tmp_path)  # past the run's 3 decoder layers
