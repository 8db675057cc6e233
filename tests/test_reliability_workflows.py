"""Issue 76, the workflows' surface under bad input: corpus weights that draw nothing or too much, tags that text could
spell, and the run starts that a refusal must leave as they were. Each case failed (a hang, a traceback, a silently
wrong model) before its fix."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from test_data import write_corpus
from test_reliability import assert_one_line_error, env, transduce

from transduce.config import ConfigError, CorpusConfig, DataConfig, load_config
from transduce.data import prepare
from transduce.data.batching import corpus_draw, draw_sizes
from transduce.data.tokenizer import Tokenizer

assert env  # the fixture, imported for the tests below


def with_corpora(recipe: Path, corpus: Path, *tables: str) -> Path:
    """The env's recipe with its training file as data.corpora's first corpus and `tables` after it."""
    text = recipe.read_text().replace(f'train = "{corpus}/train"\n', "")
    first = f'\n[[data.corpora]]\nprefix = "{corpus}/train"\n'
    out = recipe.with_name("corpora.toml")
    out.write_text(text + first + "".join(f"\n[[data.corpora]]\n{t}\n" for t in tables))
    return out


# Severe 1: weights ------------------------------------------------------------------------------------------------
def test_the_draw_is_counted_as_it_is_made():
    bounds = np.asarray([0, 300, 420, 421])
    for weights in ([1.0, 2.0, 0.5], [0.001, 3.3, 7.0], [0.5, 0.0, 1.0]):
        draw = corpus_draw(bounds, weights, seed=1, epoch=0)
        assert draw is not None
        counts = np.bincount(np.searchsorted(bounds[1:], draw, side="right"), minlength=3).tolist()
        assert counts == draw_sizes(bounds, weights)
    assert draw_sizes(bounds, [1e300, 1.0, 1.0])[0] > 10**300  # counted, never drawn (no OverflowError)


def test_a_weight_that_draws_no_pair_is_refused_at_the_start_naming_the_corpus(env, capsys):
    """A weight of 1e-9 (above 0, so accepted) drew no pair: the loop asked for the next epoch forever."""
    write_corpus(env.tmp, "extra", 120, seed=7)
    recipe = with_corpora(env.recipe, env.corpus, f'prefix = "{env.tmp}/extra"\nweight = 1e-9')
    result = transduce(capsys, "train", recipe, "--out", env.tmp / "r")
    assert_one_line_error(result, f"data.corpora ({env.tmp}/extra.en): weight 1e-09 draws none of its 120 pairs")
    assert not (env.tmp / "r").exists()


@pytest.mark.parametrize("weight", ["1e300", "1e6"])
def test_a_weight_too_large_to_draw_is_refused_in_one_line(env, capsys, monkeypatch, weight):
    """1e300 was an OverflowError traceback; 1e6 on 300 pairs grew to 3.9 GB before "out of memory"."""
    import transduce.tasks.translation as translation

    monkeypatch.setattr(translation, "available_memory", lambda: 6 << 30)  # the 6 GB cap
    write_corpus(env.tmp, "extra", 300, seed=7)
    recipe = with_corpora(env.recipe, env.corpus, f'prefix = "{env.tmp}/extra"\nweight = {weight}')
    result = transduce(capsys, "train", recipe, "--out", env.tmp / "r")
    assert_one_line_error(result, f"data.corpora ({env.tmp}/extra.en): weight {float(weight):g} draws", "lower the")
    assert not (env.tmp / "r").exists()


def test_an_infinite_weight_is_refused_as_not_finite():
    with pytest.raises(ConfigError, match="the weight must be a finite number above 0, got inf"):
        CorpusConfig(prefix="x", weight=float("inf"))


# Severe 2: tags ---------------------------------------------------------------------------------------------------
def test_a_tag_has_a_form_that_plain_text_does_not_take():
    for good in ("<2de>", "<bt>", ">>fra<<", "__de__", "<en_US>"):
        assert CorpusConfig(prefix="x", tag=good).tag == good
    for bad in ("man", "de", "<>", "<2 de>", "<<2de>", "2de>", "_de_", "<é>", "<" + "a" * 40 + ">"):
        with pytest.raises(ConfigError, match="a tag is <NAME>, >>NAME<< or __NAME__"):
            CorpusConfig(prefix="x", tag=bad)


def test_text_that_spells_a_tag_is_encoded_as_text(tmp_path):
    """With the tag `man` (then accepted), 97 of 300 sources of another corpus carried the tag's id; `<b>` or `<2fr>`
    in a source became the tag token."""
    write_corpus(tmp_path, "train", 300, seed=0)
    lines = (tmp_path / "train.en").read_text().splitlines()
    spelt = [
        f"<2fr> {line}" if i % 3 == 0 else f"{line} x<bt>y" if i % 3 == 1 else line for i, line in enumerate(lines)
    ]
    (tmp_path / "spelt.en").write_text("".join(f"{line}\n" for line in spelt))
    (tmp_path / "spelt.xx").write_text((tmp_path / "train.xx").read_text())
    corpora = (CorpusConfig(prefix=str(tmp_path / "spelt")), CorpusConfig(prefix=str(tmp_path / "train"), tag="<2fr>"))
    corpora += (CorpusConfig(prefix=str(tmp_path / "train"), tag="<bt>"),)
    data = prepare(DataConfig(corpora=corpora, src="en", tgt="xx", vocab_size=80), tmp_path / "p", log=lambda _: None)
    tok, train = data.tokenizer, data.splits["train"]
    tags = {tok.tag_id("<2fr>"), tok.tag_id("<bt>")}
    assert not any(tags.intersection(train.src[i].tolist()) for i in range(300))  # the spelt corpus: text only
    assert all(train.src[300 + i][0] == tok.tag_id("<2fr>") for i in range(300))
    assert all(train.src[600 + i][0] == tok.tag_id("<bt>") for i in range(300))
    assert tok.decode([[tok.tag_id("<2fr>"), *tok.encode(["a b"])[0]]]) == ["a b"]  # a tag decodes as nothing


def test_a_vocabulary_made_before_tags_were_control_symbols_never_reads_text_as_a_tag(tmp_path):
    """Tags were SentencePiece user symbols, matched inside any text: such a vocabulary still loads and its tag is
    still put in by id, but text that spells it is unknown instead of the tag."""
    import sentencepiece as spm

    write_corpus(tmp_path, "train", 200, seed=0)
    text = (tmp_path / "train.en").read_text().splitlines()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_prefix=str(tmp_path / "old"), vocab_size=40, user_defined_symbols=["<bt>"],
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, minloglevel=2,
    )  # fmt: skip
    (tmp_path / "old.json").write_text(json.dumps({"tags": ["<bt>"]}))
    tok = Tokenizer(tmp_path / "old.model")
    tag = tok.tag_id("<bt>")
    assert tok.sp.encode("a <bt> b").count(tag) == 1  # SentencePiece alone reads the text as the tag
    assert tag not in tok.encode(["a <bt> b"])[0] and 1 in tok.encode(["a <bt> b"])[0]


def test_tag_must_name_a_tag_of_the_run(env, capsys):
    """`--tag ▁A` (any piece) was taken, even on a model trained without tags."""
    for flag in ("▁a", "<unk>", "</s>", "<2fr>"):
        result = transduce(capsys, "translate", env.run, "--input", env.tmp / "text.en", "--tag", flag)
        assert_one_line_error(result, f"the tag {flag!r} is not a tag of the vocabulary", "learned with no tags")


def test_a_valid_tag_no_training_corpus_has_is_refused():
    with pytest.raises(ConfigError, match=r"data.valid_tag '<2de>' is the tag of no training corpus .*none has"):
        load_config(None, ["data.valid=v", "data.valid_tag=<2de>", 'data.corpora=[{prefix = "y"}]'])
    with pytest.raises(ConfigError, match=r"data.valid_tag '<2de>' is the tag of no training corpus .*theirs: <bt>"):
        load_config(None, ["data.valid=v", "data.valid_tag=<2de>", 'data.corpora=[{prefix = "y", tag = "<bt>"}]'])
    both = ["data.valid=v", "data.valid_tag=<2de>", 'data.corpora=[{prefix = "y", tag = "<2de>"}]']
    assert load_config(None, both).data.valid_tag == "<2de>"


# Refused starts and fine-tuning -----------------------------------------------------------------------------------
def finetune(env, capsys, out: Path, *extra):
    recipe = tiny_recipe_at(env)
    return transduce(capsys, "train", recipe, "--out", out, "--init-from", env.run, *extra)


def tiny_recipe_at(env) -> Path:
    """The env's recipe without its model section (a fine-tune keeps the run's model)."""
    text = env.recipe.read_text()
    model = text[text.index("[model]") : text.index("[data]")]
    out = env.tmp / "finetune.toml"
    out.write_text(text.replace(model, ""))
    return out


def test_a_fine_tune_refused_after_its_data_is_prepared_leaves_no_folder(env, capsys):
    """A tag missing from RUN's vocabulary was refused after data preparation, leaving config, data, tokenizer, log
    and lock in the new --out."""
    out = env.tmp / "ft"
    result = finetune(env, capsys, out, "--set", f'data.corpora=[{{prefix = "{env.corpus}/train", tag = "<bt>"}}]',
                      "--set", 'data.train=""')  # fmt: skip
    assert_one_line_error(result, "the tag '<bt>' is not a tag of the vocabulary")
    assert not out.exists()
    mine = env.tmp / "mine"  # the user's empty folder: kept, empty again
    mine.mkdir()
    result = finetune(env, capsys, mine, "--set", "model.attention_window=3")
    assert_one_line_error(result, "a fine-tune keeps the model of the run it starts from")
    assert mine.is_dir() and not list(mine.iterdir())


def test_a_runs_tokenizer_replaced_by_another_is_refused(env, capsys):
    """Another valid SentencePiece model of the same size was used without notice (every id another piece)."""
    import sentencepiece as spm

    text = (env.corpus / "train.xx").read_text().splitlines()
    size = Tokenizer(env.run / "tokenizer.model").vocab_size
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text), model_prefix=str(env.tmp / "other"), vocab_size=size, pad_id=0, unk_id=1,
        bos_id=2, eos_id=3, minloglevel=2, hard_vocab_limit=False,
    )  # fmt: skip
    (env.run / "tokenizer.model").write_bytes((env.tmp / "other.model").read_bytes())
    for argv in (["translate", env.run, "--input", env.tmp / "text.en"], ["export", "ctranslate2", env.run, "--out",
                 env.tmp / "ct2"]):  # fmt: skip
        assert_one_line_error(transduce(capsys, *argv), "tokenizer.model: not the vocabulary this run was trained with")
    assert_one_line_error(finetune(env, capsys, env.tmp / "ft"), "not the vocabulary this run was trained with")
    assert not (env.tmp / "ft").exists()


def test_a_resumed_fine_tune_keeps_the_run_it_started_from(env, capsys):
    out = env.tmp / "ft"
    assert finetune(env, capsys, out, "--set", "train.max_steps=2").code == 0
    started = json.loads((out / "config.json").read_text())["train"]["init_from"]
    other = env.tmp / "other-run"
    shutil.copytree(env.run, other)
    result = transduce(capsys, "train", tiny_recipe_at(env), "--out", out, "--init-from", other,
                       "--set", "train.max_steps=4")  # fmt: skip
    assert_one_line_error(result, f"was started from {started}", "resume it without --init-from")
    result = transduce(capsys, "train", tiny_recipe_at(env), "--out", out, "--set", "train.max_steps=4")
    assert result.code == 0, result.err
    assert json.loads((out / "config.json").read_text())["train"]["init_from"] == started


def test_init_from_a_run_still_training_or_a_hugging_face_folder_is_refused(env, capsys):
    from transduce.outputs import exclusive

    with exclusive(env.run):  # a training holds the run's lock
        assert_one_line_error(finetune(env, capsys, env.tmp / "ft"), "the run is still training (pid ")
    [step] = [p for p in sorted((env.run / "checkpoints").iterdir())][-1:]
    with exclusive(env.run):  # one of its checkpoints does not change: taken
        result = transduce(capsys, "train", tiny_recipe_at(env), "--out", env.tmp / "ft2", "--init-from", step,
                           "--set", "train.max_steps=1")  # fmt: skip
        assert result.code == 0, result.err
    hf = env.tmp / "opus-mt-en-de"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "marian", "d_model": 32}))
    (hf / "model.safetensors").write_bytes(b"")
    for given in (hf, hf / "model.safetensors"):
        result = finetune_from(env, capsys, given)
        assert_one_line_error(result, f"train.init_from {hf}: a Hugging Face model folder",
                              f"transduce import huggingface {hf} --out RUN")  # fmt: skip


def finetune_from(env, capsys, given: Path):
    return transduce(capsys, "train", tiny_recipe_at(env), "--out", env.tmp / "ft3", "--init-from", given)


# Messages and memory ----------------------------------------------------------------------------------------------
def test_a_vocabulary_size_sentencepiece_cannot_give_is_one_line_and_leaves_nothing(env, capsys):
    for size, says in (("5", "data.vocab_size 5 is too small"), ("5000", "data.vocab_size 5000 is too large")):
        result = transduce(capsys, "prepare", "--train", env.corpus / "train", "--src", "en", "--tgt", "xx",
                           "--vocab-size", size, "--out", env.tmp / "p")  # fmt: skip
        assert_one_line_error(result, says)
        assert "INTERNAL" not in result.err and not (env.tmp / "p").exists()
        assert not [p.name for p in env.tmp.glob(".partial-*")]


def test_the_head_is_counted_and_named_by_the_memory_estimate():
    from transduce.config import HeadConfig, ModelConfig
    from transduce.model.classifier import TransformerClassifier

    model = ModelConfig(vocab_size=100, d_model=32, d_ff=64, n_heads=4, n_layers=1)
    for head, named in ((HeadConfig(hidden=10**11, n_classes=2), "head.hidden = 100,000,000,000"),
                        (HeadConfig(n_classes=10**12), "head.n_classes = 1,000,000,000,000")):  # fmt: skip
        with pytest.raises(ConfigError, match=f"{named}: the model needs at least"):
            TransformerClassifier(model, head, max_len=32)
    with pytest.raises(ConfigError, match="model.attention_window must be between 0 and 2,147,483,647"):
        load_config(None, ["model.attention_window=1000000000000000000000"])


def test_the_memory_available_is_within_the_address_space_limit():
    """The estimate compared with the machine's RAM, not with `ulimit -v`."""
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY)); "
        "from transduce.config.memory import available_memory, machine_memory; "
        "print(available_memory(), machine_memory())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    available, physical = map(int, out)
    assert 0 < available < 6 << 30 and available < physical


def test_decoding_batches_shrink_to_the_memory_available(env, monkeypatch):
    """`--beam 64 --batch-tokens 1000000` (both allowed) grew past 5 GB into a traceback."""
    import transduce.decoding.translator as translator_module
    from transduce.config.memory import decoding_batch_tokens
    from transduce.decoding.translator import Translator

    model = SimpleNamespace(d_model=512, decoder_layers=6)
    assert decoding_batch_tokens(model, beam=64, members=1, batch_tokens=10**6, available=6 << 30) == 1024
    assert decoding_batch_tokens(model, beam=4, members=1, batch_tokens=4096, available=6 << 30) == 4096
    assert decoding_batch_tokens(model, beam=4, members=1, batch_tokens=4096, available=0) == 4096
    lines = (env.corpus / "test.en").read_text().splitlines()[:16]
    translator = Translator.from_run(env.run)
    sizes: list[int] = []
    batches = translator._batches
    monkeypatch.setattr(
        translator, "_batches", lambda sources, budget: sizes.append(budget) or batches(sources, budget)
    )
    wide = translator.translate(lines, beam=64, batch_tokens=10**6)
    monkeypatch.setattr(translator_module, "device_memory", lambda device: (16 << 20, "this machine"))
    narrow = translator.translate(lines, beam=64, batch_tokens=10**6)
    assert sizes[-1] < 100 < sizes[0] and narrow == wide
