"""Fine-tuning from a run (train.init_from, `train --init-from`) and encoding with an existing vocabulary
(data.tokenizer, `prepare --tokenizer`): issue 62 item 1."""

import hashlib
import json
from pathlib import Path

import pytest
import torch
from conftest import run_cli, tiny_recipe
from safetensors.torch import load_file
from test_data import write_corpus

from transduce.cli import main
from transduce.config import ConfigError, load_config
from transduce.data import load_prepared
from transduce.data.tokenizer import Tokenizer
from transduce.tasks import train
from transduce.tasks.translation import TranslationTask
from transduce.training.checkpoint import average_run, checkpoint_dirs
from transduce.training.distributed import Ranks
from transduce.training.loop import Session, open_run
from transduce.training.runlog import RunLog


@pytest.fixture
def base_run(tmp_path, toy_corpus):
    """RUN: the tiny model trained 10 steps on the toy corpus (best.safetensors and a checkpoint), and its recipe."""
    write_corpus(toy_corpus, "other", 200, seed=5)  # NEW's data in some tests: other sentences, same language
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=10, save_every=10, valid_every=10)
    train(load_config(recipe), tmp_path / "run", quiet=True)
    return tmp_path / "run", recipe, toy_corpus


def files_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
            if p.is_file()}  # fmt: skip


def start(config, out: Path) -> Session:
    """NEW's session as the loop starts it (data, model, optimizer, restored or initial weights), before step 1."""
    ranks = Ranks()
    with open_run(out, ranks, "translation"):
        task = TranslationTask.prepare(config, out, main=True, log=lambda _: None, barrier=lambda: None)
        return Session.start(task, task.config.train, out, ranks, torch.device("cpu"), RunLog(out, True, quiet=True))


def test_fine_tune_starts_from_the_runs_weights_and_pieces_with_a_fresh_optimizer(base_run, tmp_path):
    run, recipe, corpus = base_run
    before = files_digest(run)
    overrides = [f"train.init_from={json.dumps(str(run))}", f"data.train={json.dumps(str(corpus / 'other'))}"]
    session = start(load_config(recipe, [*overrides, "model.dropout=0.3"]), tmp_path / "new")
    weights = load_file(str(run / "best.safetensors"))  # no averaged weights: the best ones
    own = session.model.state_dict()
    assert weights and all(torch.equal(own[name], tensor) for name, tensor in weights.items())
    assert session.state.step == 0 and session.state.best is None and session.state.bad_validations == 0
    assert not session.optimizer.state  # Adam's moments (and its step count) start at zero: no state yet
    assert session.model.config.dropout == 0.3  # a non-shape setting may change
    record = json.loads((tmp_path / "new" / "init-from.json").read_text())
    assert record == {
        "run": str(run),
        "weights": str(run / "best.safetensors"),
        "sha256": hashlib.sha256((run / "best.safetensors").read_bytes()).hexdigest(),
    }
    # the new corpus in RUN's piece ids: RUN's tokenizer, no vocabulary learned
    assert (tmp_path / "new" / "tokenizer.model").read_bytes() == (run / "tokenizer.model").read_bytes()
    lines = (corpus / "other.en").read_text().splitlines()
    expected = Tokenizer(run / "tokenizer.model").encode(lines[:20])
    got = session.task.data.splits["train"].src
    assert [got[i].tolist() for i in range(20)] == expected
    assert files_digest(run) == before  # RUN is only read


def test_fine_tune_on_the_runs_own_data_reads_it_in_place_and_prefers_averaged_weights(base_run, tmp_path):
    run, recipe, _ = base_run
    average_run(run, 1)
    before = files_digest(run)
    session = start(load_config(recipe, [f"train.init_from={json.dumps(str(run))}"]), tmp_path / "new")
    assert session.task.data.root == run / "data"  # nothing encoded again
    assert not (tmp_path / "new" / "data").exists()
    weights = load_file(str(run / "averaged.safetensors"))
    assert all(torch.equal(session.model.state_dict()[k], v) for k, v in weights.items())
    named = checkpoint_dirs(run)[-1] / "model.safetensors"  # a weights file inside the run, named
    session = start(load_config(recipe, [f"train.init_from={json.dumps(str(named))}"]), tmp_path / "named")
    assert json.loads((tmp_path / "named" / "init-from.json").read_text())["weights"] == str(named)
    assert files_digest(run) == before


def test_a_recipe_asking_for_another_shape_is_refused_naming_the_setting(base_run, tmp_path):
    run, recipe, _ = base_run
    init = f"train.init_from={json.dumps(str(run))}"
    with pytest.raises(ConfigError, match=r"model\.d_ff 128 \(the run has 64\)"):
        train(load_config(recipe, [init, "model.d_ff=128"]), tmp_path / "new", quiet=True)
    with pytest.raises(ConfigError, match=r"model\.vocab_size 99"):
        train(load_config(recipe, [init, "model.vocab_size=99"]), tmp_path / "new", quiet=True)
    assert not (tmp_path / "new").exists()  # refused before anything was written


def test_bad_init_from_is_one_line(base_run, tmp_path, capsys):
    from test_classify import recipe as classifier_recipe
    from test_classify import toy_rows, write_tsv

    from transduce.config import ClassifierRunConfig
    from transduce.tasks.classification import train_classifier

    run, recipe, corpus = base_run
    texts = write_tsv(tmp_path / "labelled.tsv", toy_rows(120, 0))
    train_classifier(load_config(classifier_recipe(tmp_path, texts, epochs=1), [], ClassifierRunConfig),
                     tmp_path / "classifier", quiet=True)  # fmt: skip
    cases = {
        str(corpus): "not a run directory",  # a folder that is no run
        str(tmp_path / "classifier"): "holds a classification run; a translation run starts only from a translation",
        str(tmp_path / "nowhere"): "no such run directory or weights file",
        str(run / "config.json"): "not a weights file",
    }
    capsys.readouterr()
    for source, message in cases.items():
        assert main(["train", str(recipe), "--out", str(tmp_path / "new"), "--init-from", source]) == 1
        stderr = capsys.readouterr().err
        assert message in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not (tmp_path / "new").exists()


def test_a_resumed_fine_tune_equals_an_uninterrupted_one_and_needs_nothing_of_run(base_run, tmp_path):
    run, recipe, corpus = base_run
    before = files_digest(run)
    settings = [
        f"train.init_from={json.dumps(str(run))}",
        f"data.train={json.dumps(str(corpus / 'other'))}",
        "train.save_every=5",
        "train.valid_every=5",
    ]
    train(load_config(recipe, [*settings, "train.max_steps=20"]), tmp_path / "straight", quiet=True)
    train(load_config(recipe, [*settings, "train.max_steps=10"]), tmp_path / "resumed", quiet=True)
    assert files_digest(run) == before
    run.rename(tmp_path / "moved")  # a resume reads its own config, tokenizer and checkpoint, not RUN's weights
    train(load_config(recipe, [*settings, "train.max_steps=20"]), tmp_path / "resumed", quiet=True)
    a = load_file(str(checkpoint_dirs(tmp_path / "straight")[-1] / "model.safetensors"))
    b = load_file(str(checkpoint_dirs(tmp_path / "resumed")[-1] / "model.safetensors"))
    assert checkpoint_dirs(tmp_path / "resumed")[-1].name == "step-00000020"
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    losses = [[json.loads(ln).get("loss") for ln in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
              for name in ("straight", "resumed")]  # fmt: skip
    assert losses[0] == losses[1] and sum(x is not None for x in losses[0]) == 4
    assert files_digest(tmp_path / "moved") == before


def test_prepare_with_an_existing_tokenizer_encodes_without_learning_one(base_run, tmp_path):
    run, _, corpus = base_run
    common = ["--train", str(corpus / "other"), "--src", "en", "--tgt", "xx", "--workers", "1"]
    proc = run_cli("prepare", *common, "--tokenizer", str(run), "--vocab-size", "5000", "--out", str(tmp_path / "a"))
    assert "encoding with the vocabulary of" in proc.stdout
    a = load_prepared(tmp_path / "a")
    assert (tmp_path / "a" / "tokenizer.model").read_bytes() == (run / "tokenizer.model").read_bytes()
    assert a.summary["vocab_size"] == Tokenizer(run / "tokenizer.model").vocab_size  # the tokenizer's, not 5000
    # the key holds the tokenizer's contents, not its path: a copy elsewhere reuses the cache, another one does not
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("tokenizer.model", "tokenizer.json"):
        (copy / name).write_bytes((run / name).read_bytes())
    again = run_cli("prepare", *common, "--tokenizer", str(copy / "tokenizer.model"), "--out", str(tmp_path / "a"))
    assert "reusing the cache" in again.stdout
    run_cli("prepare", *common, "--vocab-size", "80", "--out", str(tmp_path / "learned"))
    other = run_cli("prepare", *common, "--tokenizer", str(tmp_path / "learned"), "--out", str(tmp_path / "a"))
    assert "preparing again" in other.stdout
    assert load_prepared(tmp_path / "a").summary["cache_key"] != a.summary["cache_key"]
    proc = run_cli("prepare", *common, "--tokenizer", str(corpus), "--out", str(tmp_path / "b"), check=False)
    assert proc.returncode == 1 and "no tokenizer.model here" in proc.stderr


def test_fine_tune_on_a_prepared_folder_must_share_the_runs_vocabulary(base_run, tmp_path):
    run, recipe, corpus = base_run
    common = ["--train", str(corpus / "other"), "--valid", str(corpus / "valid"), "--src", "en", "--tgt", "xx"]
    run_cli("prepare", *common, "--tokenizer", str(run), "--out", str(tmp_path / "same"))
    run_cli("prepare", *common, "--vocab-size", "80", "--out", str(tmp_path / "learned"))
    init = f"train.init_from={json.dumps(str(run))}"
    session = start(load_config(recipe, [init, f"data.prepared={json.dumps(str(tmp_path / 'same'))}"]),
                    tmp_path / "new")  # fmt: skip
    assert session.task.data.root == tmp_path / "same"
    proc = run_cli("train", str(recipe), "--out", str(tmp_path / "refused"), "--init-from", str(run),
                   "--set", f"data.prepared={json.dumps(str(tmp_path / 'learned'))}", check=False)  # fmt: skip
    assert proc.returncode == 1 and "prepared with another vocabulary" in proc.stderr
