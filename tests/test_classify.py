import gzip
import json
import os

import numpy as np
import pytest
import torch
from conftest import ROOT, run_cli

from transduce.config import ClassifierRunConfig, ClassifyDataConfig, ConfigError, HeadConfig, ModelConfig, load_config
from transduce.data import DataError
from transduce.data.labelled import read_labelled, truncate
from transduce.model import Encoder
from transduce.model.classifier import TransformerClassifier

GOOD = "great wonderful superb lovely excellent fine".split()
BAD = "awful terrible boring dull poor bad".split()
NEUTRAL = "the a film movie plot actor scene was is and".split()


def toy_rows(n, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        label = ["pos", "neg", "mixed"][int(rng.integers(0, 3))]
        words = list(rng.choice(NEUTRAL, size=int(rng.integers(4, 12))))
        cue = {"pos": GOOD, "neg": BAD, "mixed": GOOD[:2] + BAD[:2]}[label]
        for _ in range(2):
            words.insert(int(rng.integers(0, len(words))), str(rng.choice(cue)) if label != "mixed" else "so-so")
        rows.append((" ".join(words) + " <br /><br />", label))
    return rows


def write_tsv(path, rows):
    path.write_text("".join(f"{t}\t{ln}\n" for t, ln in rows))
    return path


RECIPE = """
[model]
n_layers = 1
d_model = 32
d_ff = 64
n_heads = 4
dropout = 0.0
max_len = 32

[head]
pooling = "{pooling}"

[data]
train = "{train}"
valid_fraction = 0.1
vocab_size = 60
max_len = 32

[train]
precision = "fp32"
lr_schedule = "constant"
peak_lr = 3e-3
warmup_steps = 10
label_smoothing = 0.0
max_epochs = {epochs}
max_tokens = 1024
early_stop_metric = "accuracy"
save_every = 1000
log_every = 10
num_threads = 1
"""


@pytest.fixture
def toy(tmp_path):
    train = write_tsv(tmp_path / "train.tsv", toy_rows(600, 0))
    test = write_tsv(tmp_path / "test.tsv", toy_rows(90, 1))
    return tmp_path, train, test


def recipe(tmp_path, train, pooling="mean", epochs=6):
    path = tmp_path / f"recipe-{pooling}.toml"
    path.write_text(RECIPE.format(train=train, pooling=pooling, epochs=epochs))
    return path


def test_truncation_keeps_the_chosen_part():
    ids = list(range(20))
    assert truncate(ids, 8, "start") == list(range(8))
    assert truncate(ids, 8, "end") == list(range(12, 20))
    assert truncate(ids, 8, "head_tail") == [0, 1] + list(range(14, 20))
    assert truncate(ids[:5], 8, "head_tail") == ids[:5]


def test_classifier_shares_the_encoder_and_pools_without_padding():
    config = ModelConfig(vocab_size=50, n_layers=1, d_model=16, d_ff=32, n_heads=2, dropout=0.0)
    for pooling in ("mean", "cls", "flatten"):
        model = TransformerClassifier(config, HeadConfig(pooling=pooling, n_classes=3), max_len=12).eval()
        assert type(model.encoder) is Encoder
        tokens = torch.randint(4, 50, (2, 7))
        padded = torch.cat([tokens, torch.zeros(2, 3, dtype=torch.long)], dim=1)
        assert model(tokens).shape == (2, 3)
        assert torch.allclose(model(tokens), model(padded), atol=1e-5)  # padding does not change the answer


def test_train_predict_evaluate_end_to_end(toy):
    tmp_path, train, test = toy
    run_cli("classify", "train", str(recipe(tmp_path, train)), "--out", str(tmp_path / "run"))
    records = [json.loads(ln) for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["kind"] == "valid"]
    assert len(valid) == 6 and valid[-1]["valid_accuracy"] >= 0.9  # one validation per epoch
    report = run_cli("classify", "evaluate", str(tmp_path / "run"), "--data", str(test)).stdout
    accuracy = float(report.split("accuracy: ")[1].split()[0])
    assert accuracy >= 0.85 and "confusion matrix" in report and "precision" in report
    assert all(label in report for label in ("pos", "neg", "mixed"))
    texts = "a great superb film\n\nawful boring plot and dull\n"
    out = run_cli("classify", "predict", str(tmp_path / "run"), "--probabilities", input=texts).stdout.split("\n")
    assert out[0].startswith("pos\t") and out[1] == "" and out[2].startswith("neg\t")
    probs = [float(x.split("=")[1]) for x in out[0].split("\t")[1:]]
    assert abs(sum(probs) - 1) < 1e-3

    # resuming through the shared training loop: more epochs continue from the saved step
    steps_before = max(r["step"] for r in records)
    run_cli("classify", "train", str(recipe(tmp_path, train, epochs=7)), "--out", str(tmp_path / "run"))
    records = [json.loads(ln) for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) > steps_before
    assert "resumed from" in (tmp_path / "run" / "train.log").read_text()


@pytest.mark.parametrize("pooling", ["cls", "flatten"])
def test_other_poolings_learn(toy, pooling):
    tmp_path, train, _ = toy
    from transduce.tasks.classification import train_classifier

    config = load_config(recipe(tmp_path, train, pooling, epochs=5), (), ClassifierRunConfig)
    train_classifier(config, tmp_path / pooling, quiet=True)
    valid = [
        json.loads(ln) for ln in (tmp_path / pooling / "metrics.jsonl").read_text().splitlines() if '"valid"' in ln
    ]
    assert valid[-1]["valid_accuracy"] >= 0.8


def test_jsonl_gz_and_bad_rows_name_file_and_line(tmp_path):
    cfg = ClassifyDataConfig()
    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "good film<br />", "label": 1}\n{"text": "bad", "label": 0}\n'))
    texts, labels, lines = read_labelled(path, cfg)
    assert texts == ["good film ", "bad"] and labels == ["1", "0"] and lines == [1, 2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine", "label": 1}\n{"text": "", "label": 0}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: a row with no text"):
        read_labelled(bad, cfg)
    bad.write_text('{"text": "fine", "label": 1}\n{"text": "x"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: no 'label' field"):
        read_labelled(bad, cfg)
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("fine\tpos\nno label column here\n")
    with pytest.raises(DataError, match=r"bad\.tsv:2: no label column"):
        read_labelled(tsv, cfg)


def test_unknown_label_at_evaluation_is_refused(toy):
    tmp_path, train, _ = toy
    run_cli("classify", "train", str(recipe(tmp_path, train, epochs=1)), "--out", str(tmp_path / "run"))
    odd = write_tsv(tmp_path / "odd.tsv", [("great film", "pos"), ("what is this", "sarcastic")])
    proc = run_cli("classify", "evaluate", str(tmp_path / "run"), "--data", str(odd), check=False)
    assert proc.returncode == 1 and "odd.tsv:2" in proc.stderr and "sarcastic" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_imdb_recipe_parses_and_reads_the_real_data():
    config = load_config(ROOT / "recipes" / "imdb.toml", (), ClassifierRunConfig)
    assert (config.model.d_model, config.model.n_layers, config.model.d_ff, config.model.n_heads) == (128, 2, 256, 4)
    assert (config.data.max_len, config.train.peak_lr, config.train.max_epochs) == (256, 1e-3, 5)
    with pytest.raises(ConfigError, match=r"head.pooling must be one of mean, cls, flatten, got 'max'"):
        load_config(None, ["head.pooling=max"], ClassifierRunConfig)
    if not os.environ.get("TRANSDUCE_DATA"):
        pytest.skip("needs TRANSDUCE_DATA (set by the Makefile)")
    texts, labels, _ = read_labelled("imdb/test.jsonl.gz", config.data)
    assert len(texts) == 25000 and set(labels) == {"0", "1"}
    assert not any("<br />" in t for t in texts[:1000])
