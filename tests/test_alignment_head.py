"""An alignment head (model.alignment_head, after Zenkel et al. 2019): an attention of its own gives the word links,
trained by guided alignment on detached inputs; train.alignment_only fine-tunes it alone onto a trained run, whose
translations stay byte for byte the same; CTranslate2, which cannot run it, refuses its links in words."""

from pathlib import Path

import pytest
import torch
from conftest import run_cli, run_torchrun, tiny_recipe
from safetensors.torch import load_file
from test_full_context_alignment import small_model
from test_guided_alignment import alignment_loss, guided, write_linked

from transduce.config import ConfigError, ParserModelConfig, TrainConfig, load_config
from transduce.decoding.translator import Translator
from transduce.model.alignment import alignment_weights
from transduce.tasks import train
from transduce.training.checkpoint import checkpoint_dirs
from transduce.training.guided import guided_alignment_loss

HEAD = "alignment_head."


@pytest.fixture(scope="module")
def linked(tmp_path_factory) -> Path:
    return write_linked(tmp_path_factory.mktemp("linked"))


@pytest.fixture(scope="module")
def runs(linked, tmp_path_factory) -> dict[str, Path]:
    """A tiny unguided run (200 updates) and a fine-tune of it that trains an alignment head alone (200 updates)."""
    tmp = tmp_path_factory.mktemp("head")
    recipe = tiny_recipe(tmp / "r.toml", linked, steps=200, save_every=200)
    base, head = tmp / "base", tmp / "head"
    train(load_config(recipe, guided(linked, "train.lr_scale=0.3")), base, quiet=True)
    settings = ["model.alignment_head=true", "train.alignment_only=true", "train.guided_alignment=1.0"]
    train(load_config(recipe, guided(linked, *settings, f"train.init_from={base}", "train.lr_scale=0.3")), head,
          quiet=True)  # fmt: skip
    return {"base": base, "head": head}


def test_the_head_is_made_last_and_its_loss_reaches_no_translation_weight():
    plain, model = small_model(), small_model(alignment_head=True)
    own = plain.state_dict()
    assert all(torch.equal(own[k], v) for k, v in model.state_dict().items() if not k.startswith(HEAD))
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt_in = torch.tensor([[2, 10, 11, 12], [2, 13, 14, 0]])
    weights = alignment_weights(model, tgt_in, model.encode(src), src)  # (B, T, S)
    assert weights.shape == (2, 4, 4) and torch.allclose(weights.sum(-1), torch.ones(2, 4))
    assert torch.all(weights[1, :, 3] == 0)  # padding gets no weight
    guided_alignment_loss(weights, torch.tensor([0, 5, 17]), torch.tensor([1.0, 1.0, 1.0])).backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None and g.abs().sum() > 0 for k, g in grads.items() if k.startswith(HEAD))
    assert all(g is None for k, g in grads.items() if not k.startswith(HEAD))
    changed = tgt_in.clone()
    changed[0, 2] = 20  # the token position 1 predicts: the head's query sees it
    moved = alignment_weights(model, changed, model.encode(src), src)
    assert not torch.allclose(moved[0, 1], weights[0, 1].detach()) and torch.allclose(moved[1], weights[1].detach())


def test_an_alignment_only_fine_tune_keeps_every_translation_weight_and_learns_the_links(runs):
    base, tuned = (load_file(str(checkpoint_dirs(runs[r])[-1] / "model.safetensors")) for r in ("base", "head"))
    assert {k for k in tuned if k.startswith(HEAD)} and base.keys() == {k for k in tuned if not k.startswith(HEAD)}
    assert all(torch.equal(base[k], tuned[k]) for k in base)
    assert "alignment_head: new to this run" in (runs["head"] / "train.log").read_text()
    attention, head = alignment_loss(runs["base"]), alignment_loss(runs["head"])
    assert head < attention - 0.5, (attention, head)  # the toy's true links, read from the head


def test_the_heads_links_leave_the_translation_unchanged_and_stay_in_range(runs, linked):
    lines = (linked / "valid.en").read_text().splitlines()[:8]
    before = Translator.from_run(runs["base"]).decode_lines(lines, beam=3)
    translator = Translator.from_run(runs["head"])
    aligned = translator.decode_lines(lines, beam=3, alignment=True)
    assert [h[0].text for h in before.hypotheses] == [h[0].text for h in aligned.hypotheses]
    found = [(line, best) for line, (best,) in zip(lines, aligned.hypotheses) if best.text]
    assert len(found) >= 4  # the tiny model ends some lines at once: those have no words to link
    for line, best in found:
        n, m = len(line.split()), len(best.text.split())
        assert best.alignment and all(0 <= i < n and 0 <= j < m for i, j in best.alignment)
    targets = [h[0].text for h in aligned.hypotheses]
    assert translator.pair_alignments(lines, targets) == [h[0].alignment for h in aligned.hypotheses]


def test_ctranslate2_refuses_the_heads_links_in_words(runs, linked):
    pytest.importorskip("ctranslate2")
    proc = run_cli("score-pairs", str(runs["head"]), "--src", str(linked / "valid.en"), "--tgt",
                   str(linked / "valid.xx"), "--alignment", "--engine", "ctranslate2", check=False)  # fmt: skip
    assert proc.returncode != 0 and "alignment_head" in proc.stderr and "Traceback" not in proc.stderr
    from transduce.export.ct2_translator import CTranslate2Translator

    engine = CTranslate2Translator.from_run(runs["head"])
    assert engine.translate(["red dog"], beam=2)  # the translation itself runs


def test_settings_that_cannot_train_a_head_alone_are_refused(tmp_path, linked, runs):
    with pytest.raises(ConfigError, match="train.guided_alignment"):
        TrainConfig(alignment_only=True)
    with pytest.raises(ConfigError, match="translation runs"):
        ParserModelConfig(alignment_head=True)
    recipe = tiny_recipe(tmp_path / "r.toml", linked, steps=2)
    alone = ["train.alignment_only=true", "train.guided_alignment=1"]
    for settings, message in (
        ([*alone, f"train.init_from={runs['base']}"], "alignment_head"),
        ([*alone, "model.alignment_head=true"], "--init-from"),
        (["model.alignment_head=true"], "learns from guided alignment only"),
    ):
        with pytest.raises(ConfigError, match=message):
            train(load_config(recipe, guided(linked, *settings)), tmp_path / "out", quiet=True)


def test_ddp_with_a_guided_head_equals_one_process_with_accumulation(tmp_path, linked):
    """Trained beside the translation from the start: every batch runs the head, so each rank has its gradient."""
    recipe = tiny_recipe(tmp_path / "r.toml", linked, steps=4, save_every=4, dropout=0.0)
    head = guided(linked, "model.alignment_head=true", "train.guided_alignment=0.5")
    settings = [x for s in head for x in ("--set", s)]
    run_cli("train", str(recipe), "--out", str(tmp_path / "single"), "--set", "train.accumulate=2", *settings)
    run_torchrun("train", str(recipe), "--out", str(tmp_path / "ddp"), *settings, port=29547)
    a, b = (load_file(str(checkpoint_dirs(tmp_path / r)[-1] / "model.safetensors")) for r in ("single", "ddp"))
    assert {k for k in a if k.startswith(HEAD)} and all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_a_head_trained_beside_the_translation_changes_no_translation_weight(tmp_path, linked):
    """From scratch, dropout on: the head is made on a fork of the generator, so the dropout masks are the same."""
    recipe = tiny_recipe(tmp_path / "r.toml", linked, steps=6, save_every=6, dropout=0.1)
    train(load_config(recipe, guided(linked)), tmp_path / "plain", quiet=True)
    train(load_config(recipe, guided(linked, "model.alignment_head=true", "train.guided_alignment=0.5")),
          tmp_path / "head", quiet=True)  # fmt: skip
    plain, head = (load_file(str(checkpoint_dirs(tmp_path / r)[-1] / "model.safetensors")) for r in ("plain", "head"))
    assert plain.keys() == {k for k in head if not k.startswith(HEAD)}
    assert all(torch.equal(plain[k], head[k]) for k in plain)


def test_validation_keeps_the_newest_head_and_a_changed_setting_is_refused_on_resume(tmp_path, linked, runs):
    recipe = tiny_recipe(tmp_path / "r.toml", linked, steps=20, save_every=5, valid_every=5)
    alone = ["model.alignment_head=true", "train.alignment_only=true", "train.guided_alignment=1.0"]
    out = tmp_path / "alone"
    train(load_config(recipe, guided(linked, *alone, f"train.init_from={runs['base']}", "train.patience=1")), out,
          quiet=True)  # fmt: skip
    assert "finished at step 20 (max_steps)" in (out / "train.log").read_text()  # patience never ends it
    best, last = (
        load_file(str(out / "best.safetensors")),
        load_file(str(checkpoint_dirs(out)[-1] / "model.safetensors")),
    )
    assert all(torch.equal(best[k], last[k]) for k in last)  # the newest head, not the first validation's
    settings = [x for s in guided(linked, "train.guided_alignment=1.0") for x in ("--set", s)]  # alignment_only off
    proc = run_cli("train", str(recipe), "--out", str(out), "--set", "train.max_steps=25", *settings, check=False)
    assert proc.returncode != 0 and "train.alignment_only" in proc.stderr and "Traceback" not in proc.stderr


def test_a_fine_tune_adds_a_head_only_with_guidance_and_keeps_one_fixed_without(tmp_path, linked, runs):
    recipe = tiny_recipe(tmp_path / "r.toml", linked, steps=5, save_every=5)
    with pytest.raises(ConfigError, match="new to this run"):
        train(load_config(recipe, guided(linked, "model.alignment_head=true", f"train.init_from={runs['base']}")),
              tmp_path / "unguided", quiet=True)  # fmt: skip
    out = tmp_path / "onward"  # the head run trained on without guidance: its translation moves, its head does not
    train(load_config(recipe, guided(linked, f"train.init_from={runs['head']}")), out, quiet=True)
    before = load_file(str(checkpoint_dirs(runs["head"])[-1] / "model.safetensors"))
    after = load_file(str(checkpoint_dirs(out)[-1] / "model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in after if k.startswith(HEAD))
    assert any(not torch.equal(before[k], after[k]) for k in after if not k.startswith(HEAD))
