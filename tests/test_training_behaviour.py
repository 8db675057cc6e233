"""Training behaviours that had no test: patience and the best weights, the wall-clock limit, checkpoint order and
leftovers on resume, the constant learning-rate schedule, and the tokenizer's lowercase and split-digits options.
Each test asserts something a broken implementation would fail."""

import json
import re
from pathlib import Path

import pytest
import torch
from conftest import tiny_recipe
from safetensors.torch import load_file

from transduce.config import ConfigError, load_config
from transduce.data.tokenizer import Tokenizer
from transduce.tasks import train
from transduce.training.checkpoint import checkpoint_dirs
from transduce.training.optim import learning_rate


def records(run: Path, kind: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def step_of(checkpoint: Path) -> int:
    return int(checkpoint.name.split("-")[1])


# Patience and the best weights ---------------------------------------------------------------------------------------
def test_patience_stops_early_and_best_weights_are_those_of_the_best_validation(tmp_path, toy_corpus):
    # A constant learning rate far too hot for this post-LN model: validation loss falls for a few steps, then
    # stops improving, so two validations in a row without improvement come long before max_steps.
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=300, save_every=1000, valid_every=3)
    config = load_config(
        recipe,
        [
            "train.patience=2",
            "train.valid_bleu=false",
            "train.lr_schedule=constant",
            "train.peak_lr=0.02",
            "train.warmup_steps=5",
        ],
    )
    run = tmp_path / "run"
    result = train(config, run, quiet=True)

    assert result["stopped"] == "early_stop"
    assert result["step"] < 300
    assert f"finished at step {result['step']} (early_stop)" in (run / "train.log").read_text()
    valid = records(run, "valid")
    losses = [r["valid_loss"] for r in valid]
    assert [r["step"] for r in valid] == list(range(3, result["step"] + 1, 3))
    best = min(range(len(losses)), key=losses.__getitem__)
    # stopped at the second validation in a row without improvement, and not before
    assert best == len(losses) - 3
    assert all(loss >= losses[best] for loss in losses[best + 1 :])
    assert result["best"] == pytest.approx(losses[best])

    meta = json.loads((run / "best.json").read_text())
    assert meta["step"] == valid[best]["step"]
    assert meta["valid_loss"] == pytest.approx(losses[best])
    best_weights = load_file(str(run / "best.safetensors"))

    # the weights in best.safetensors give the best validation loss again, and they are not the final weights
    (final,) = checkpoint_dirs(run)
    assert step_of(final) == result["step"]
    final_weights = load_file(str(final / "model.safetensors"))
    assert best_weights.keys() == final_weights.keys()
    assert any(not torch.equal(best_weights[k], final_weights[k]) for k in best_weights)
    assert _valid_loss(config, run, run / "best.safetensors") == pytest.approx(losses[best], rel=1e-5)
    assert _valid_loss(config, run, final / "model.safetensors") == pytest.approx(losses[-1], rel=1e-5)


def test_a_changed_early_stop_metric_on_resume_tracks_the_best_anew(tmp_path, toy_corpus):
    """Issue 65, 2b: a run tracked by BLEU and resumed with train.early_stop_metric = "loss" compared losses with the
    stored best BLEU (and stopped while the loss improved, keeping the old best weights). Now the best and the
    patience count start anew under the new metric, and best.safetensors follows the loss."""
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=6, save_every=6, valid_every=3)
    run = tmp_path / "run"
    train(load_config(recipe, ["train.early_stop_metric=bleu"]), run, quiet=True)
    assert "valid_bleu" in json.loads((run / "best.json").read_text())
    switched = ["train.early_stop_metric=loss", "train.patience=2", "train.max_steps=18"]
    result = train(load_config(recipe, switched), run, quiet=True)
    assert result["step"] == 18 and result["stopped"] == "max_steps"  # the loss still falls: no early stop
    assert "the best weights and the patience count start anew" in (run / "train.log").read_text()
    losses = [r["valid_loss"] for r in records(run, "valid") if r["step"] > 6]
    meta = json.loads((run / "best.json").read_text())
    assert meta["step"] > 6 and meta["valid_loss"] == pytest.approx(min(losses))
    assert result["best"] == pytest.approx(min(losses))


def _valid_loss(config, run: Path, weights: Path) -> float:
    """Validation loss of `weights`, computed the way training computes it."""
    from transduce.tasks import task_class
    from transduce.training.checkpoint import load_weights

    task = task_class("translation").prepare(config, run, main=True, log=lambda _: None, barrier=lambda: None)
    model = task.build_model()
    load_weights(model, weights)
    return task.validate(model.eval(), torch.device("cpu"))["valid_loss"]


# train.max_minutes ---------------------------------------------------------------------------------------------------
def test_max_minutes_stops_saves_and_validates_where_it_stopped(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=10_000, save_every=1000, valid_every=1000)
    config = load_config(recipe, ["train.max_minutes=0.002", "train.valid_bleu=false"])  # 0.12 s
    run = tmp_path / "run"
    result = train(config, run, quiet=True)

    assert result["stopped"] == "max_minutes"
    stopped = result["step"]
    assert 1 <= stopped < 1000  # long before the first periodic save or validation
    assert [step_of(d) for d in checkpoint_dirs(run)] == [stopped]
    trainer = json.loads((checkpoint_dirs(run)[-1] / "trainer.json").read_text())
    assert trainer["step"] == stopped and trainer["elapsed"] >= 0.12
    assert [r["step"] for r in records(run, "valid")] == [stopped]
    assert json.loads((run / "best.json").read_text())["step"] == stopped
    log = (run / "train.log").read_text()
    assert f"step {stopped}: saved" in log and "(time limit)" in log
    assert f"finished at step {stopped} (max_minutes)" in log


# train.lr_clock -----------------------------------------------------------------------------------------------------
def test_lr_clock_decays_to_zero_when_the_minutes_run_out(tmp_path, toy_corpus, monkeypatch):
    # A clock that says one second per update: warm-up ends at update 5 (5 s), the budget is 30 s, max_steps far away.
    from transduce.training.loop import Session

    monkeypatch.setattr(Session, "elapsed", lambda self: float(self.state.step))
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=10_000, save_every=1000, valid_every=1000)
    overrides = ["train.lr_schedule=linear", "train.peak_lr=0.001", "train.warmup_steps=5", "train.lr_clock=true"]
    config = load_config(recipe, [*overrides, "train.max_minutes=0.5", "train.log_every=1", "train.valid_bleu=false"])
    run = tmp_path / "run"
    result = train(config, run, quiet=True)

    assert result["stopped"] == "max_minutes" and result["step"] == 30
    lr = {r["step"]: r["lr"] for r in records(run, "train")}
    assert lr[3] == pytest.approx(0.001 * 3 / 5)  # the warm-up is counted in updates
    # update s is set by the clock after update s - 1: (30 - (s - 1)) / 25 of the peak
    assert lr[6] == pytest.approx(0.001, rel=1e-3)
    assert lr[18] == pytest.approx(0.001 * 13 / 25)
    assert lr[30] == pytest.approx(0.001 / 25)
    # the step-based line alone would still be near the peak: the clock set the rate
    assert learning_rate(30, config.train, d_model=32) > 0.0009
    trainer = json.loads((checkpoint_dirs(run)[-1] / "trainer.json").read_text())
    assert trainer["decay_start"] == 5.0  # saved, so that a resumed run goes on down the same line


def test_lr_clock_needs_the_linear_schedule_and_a_budget():
    with pytest.raises(ConfigError, match="train.lr_clock needs"):
        load_config(None, ["train.lr_clock=true", "train.lr_schedule=linear"])
    with pytest.raises(ConfigError, match="train.lr_clock needs"):
        load_config(None, ["train.lr_clock=true", "train.max_minutes=60"])


# Checkpoint order and leftovers on resume ----------------------------------------------------------------------------
def test_resume_takes_the_newest_checkpoint_and_old_ones_go_oldest_first(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=12, save_every=2)
    run = tmp_path / "run"
    train(load_config(recipe, ["train.keep_last=3"]), run, quiet=True)
    root = run / "checkpoints"
    assert [d.name for d in checkpoint_dirs(run)] == ["step-00000008", "step-00000010", "step-00000012"]
    saved = [int(m) for m in re.findall(r"^step (\d+): saved", (run / "train.log").read_text(), re.M)]
    assert saved == [2, 4, 6, 8, 10, 12]

    # A save killed half-way leaves a temporary folder (marked ours by its manifest), here one that claims a later
    # step (and holds junk): resume must ignore it, and the next save must clean it up.
    from transduce.outputs import WRITING, write_manifest

    leftover = root / ".tmp-step-00000014-0a1b2c3d"
    leftover.mkdir()
    write_manifest(leftover, WRITING, of="checkpoint")
    (leftover / "model.safetensors").write_bytes(b"not safetensors")
    (leftover / "trainer.json").write_text('{"step": 14}')
    result = train(load_config(recipe, ["train.keep_last=3", "train.max_steps=16"]), run, quiet=True)
    assert result["step"] == 16
    log = (run / "train.log").read_text()
    assert re.search(r"resumed from \S*step-00000012 at step 12\b", log)
    assert not leftover.exists()
    assert sorted(p.name for p in root.iterdir()) == ["step-00000012", "step-00000014", "step-00000016"]
    trainer = json.loads((root / "step-00000016" / "trainer.json").read_text())
    assert trainer["step"] == 16


def test_checkpoints_are_ordered_by_step_number_not_by_name(tmp_path):
    """Names are zero-padded to 8 digits; a run past step 99,999,999 gets a 9-digit name, which must still come
    last (a plain sort by name puts step-100000000 before step-99999999)."""
    root = tmp_path / "checkpoints"
    for step in (8, 10, 99_999_999, 100_000_000):
        folder = root / f"step-{step:08d}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"")
    (root / ".tmp-step-100000002-abc").mkdir()  # incomplete: never listed
    assert [step_of(d) for d in checkpoint_dirs(tmp_path)] == [8, 10, 99_999_999, 100_000_000]


# The constant schedule -----------------------------------------------------------------------------------------------
def test_constant_schedule_warms_up_then_holds_peak_lr():
    config = load_config(
        None, ["train.lr_schedule=constant", "train.peak_lr=0.003", "train.warmup_steps=10", "train.max_steps=1000"]
    ).train
    warm = [learning_rate(step, config, d_model=512) for step in range(1, 11)]
    assert warm == pytest.approx([0.003 * s / 10 for s in range(1, 11)])
    assert all(a < b for a, b in zip(warm, warm[1:]))
    for step in (10, 11, 50, 999, 1000, 5000):
        assert learning_rate(step, config, d_model=512) == 0.003  # exactly, and d_model plays no part
        assert learning_rate(step, config, d_model=64) == 0.003


def test_constant_schedule_is_what_training_uses(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=20, save_every=20)
    config = load_config(recipe, ["train.lr_schedule=constant", "train.peak_lr=0.001", "train.warmup_steps=10"])
    train(config, tmp_path / "run", quiet=True)
    lrs = {r["step"]: r["lr"] for r in records(tmp_path / "run", "train")}
    assert lrs[5] == pytest.approx(0.0005)
    assert (lrs[10], lrs[15], lrs[20]) == (0.001, 0.001, 0.001)


# Tokenizer options ---------------------------------------------------------------------------------------------------
MIXED_CASE = [
    "The Dog sees THE cat",
    "the DOG runs",
    "A Red House near the Tree",
    "THE BLUE DOG walks",
    "a small cat under the big tree",
] * 40


def test_lowercase_tokenizer_ignores_case_and_remembers_it(tmp_path):
    tok = Tokenizer.train(MIXED_CASE, tmp_path / "lower.model", vocab_size=40, lowercase=True)
    assert tok.encode(["The DOG"]) == tok.encode(["the dog"])
    assert not any(c.isupper() for i in range(tok.vocab_size) for c in tok.sp.id_to_piece(i))
    assert json.loads((tmp_path / "lower.json").read_text())["lowercase"] is True
    again = Tokenizer(tmp_path / "lower.model")  # a fresh load reads the setting from the .json beside the model
    assert again.lowercase is True
    assert again.encode(["The DOG", "tHe DoG"]) == [tok.encode(["the dog"])[0]] * 2
    assert again.pieces("THE Dog") == tok.pieces("the dog")
    # the same text trained without lowercasing keeps case apart: the checks above are not vacuous
    cased = Tokenizer.train(MIXED_CASE, tmp_path / "cased.model", vocab_size=40)
    assert cased.lowercase is False and json.loads((tmp_path / "cased.json").read_text())["lowercase"] is False
    assert cased.encode(["The DOG"]) != cased.encode(["the dog"])


NUMBERS = [f"{n} apples cost {n * 37 % 1000} dollars in 2024 and 1999" for n in range(100, 400)]


def test_split_digits_never_puts_two_digits_in_one_piece(tmp_path):
    tok = Tokenizer.train(NUMBERS, tmp_path / "digits.model", vocab_size=60, split_digits=True)
    vocab = [tok.sp.id_to_piece(i) for i in range(tok.vocab_size)]
    assert not [p for p in vocab if sum(c.isdigit() for c in p) > 1]
    for text in ("2024", "1999 apples cost 123 dollars", "in 31415926"):
        pieces = tok.pieces(text)
        assert all(sum(c.isdigit() for c in p) <= 1 for p in pieces), pieces
        assert sum(sum(c.isdigit() for c in p) for p in pieces) == sum(c.isdigit() for c in text)
        assert tok.decode(tok.encode([text])) == [text]
    assert json.loads((tmp_path / "digits.json").read_text())["split_digits"] is True
    assert Tokenizer(tmp_path / "digits.model").meta["split_digits"] is True
    # without the option the same training text does merge digits: the check above is not vacuous
    merged = Tokenizer.train(NUMBERS, tmp_path / "merged.model", vocab_size=60)
    assert any(sum(c.isdigit() for c in merged.sp.id_to_piece(i)) > 1 for i in range(merged.vocab_size))


def test_average_last_averages_the_newest_checkpoints_at_the_end(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=8, save_every=2)
    result = train(load_config(recipe, ["train.average_last=3", "train.keep_last=4"]), tmp_path / "run", quiet=True)
    assert result["step"] == 8
    run = tmp_path / "run"
    assert json.loads((run / "averaged.json").read_text())["averaged"] == [
        "step-00000004",
        "step-00000006",
        "step-00000008",
    ]
    weights = [load_file(str(run / "checkpoints" / f"step-0000000{s}" / "model.safetensors")) for s in (4, 6, 8)]
    averaged = load_file(str(run / "averaged.safetensors"))
    for name, tensor in averaged.items():
        assert torch.allclose(tensor, sum(w[name] for w in weights) / 3, atol=1e-6), name
    with pytest.raises(ConfigError, match="average_last must be between 0 and train.keep_last"):
        load_config(recipe, ["train.average_last=11"])
