"""The public Python API: `from transduce import Translator, Classifier, train, load_config`, as the README shows."""

from __future__ import annotations

import json

import pytest
from conftest import tiny_recipe
from test_classify import toy_rows, write_tsv

import transduce
from transduce import Classifier, Translator, load_config, train


def test_train_translate_and_nbest_through_the_public_api(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=30, save_every=30)
    result = train(str(recipe), tmp_path / "run", overrides=["decode.beam=3"], quiet=True)
    assert result["step"] == 30 and result["stopped"] == "max_steps"
    assert json.loads((tmp_path / "run" / "config.json").read_text())["task"] == "translation"
    translator = Translator.from_run(tmp_path / "run")
    sentences = ["dog cat", "", "the red house"]
    texts = translator.translate(sentences)
    assert isinstance(texts, list) and len(texts) == 3 and texts[1] == ""
    nbest = translator.translate_nbest(sentences, nbest=3)  # the run's beam is 3
    assert [len(h) for h in nbest] == [3, 0, 3]
    for hyps in (nbest[0], nbest[2]):
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    assert [h[0].text for h in nbest if h] == [texts[0], texts[2]]
    with pytest.raises(TypeError, match="overrides apply to a recipe"):
        train(load_config(recipe), tmp_path / "run2", overrides=["train.max_steps=1"])


def test_a_classification_recipe_trains_through_the_same_entry(tmp_path):
    data = write_tsv(tmp_path / "train.tsv", toy_rows(200, 0))
    recipe = tmp_path / "cls.toml"
    recipe.write_text(
        f'task = "classification"\n[data]\ntrain = "{data}"\nvocab_size = 60\nmax_len = 32\n'
        "[model]\nn_layers = 1\nd_model = 32\nd_ff = 64\nn_heads = 4\nmax_len = 32\n"
        '[train]\nprecision = "fp32"\nmax_steps = 3\nmax_tokens = 512\nnum_threads = 1\n'
    )
    config = load_config(recipe)
    assert type(config).__name__ == "ClassifierRunConfig"
    assert train(config, tmp_path / "run", quiet=True)["step"] == 3
    classifier = Classifier.from_run(tmp_path / "run")
    labels = classifier.predict(["a good film", "a bad film"])
    assert len(labels) == 2 and set(labels) <= {"pos", "neg", "mixed"}
    assert classifier.predict_proba(["a good film"]).sum().item() == pytest.approx(1.0, abs=1e-5)


def test_the_package_names_its_api_and_refuses_unknown_names():
    assert {"Translator", "Classifier", "Parser", "train", "load_config"} <= set(transduce.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Translater'"):
        transduce.Translater  # noqa: B018


def test_one_string_is_one_input_for_every_predictor(trained_run):
    """A bare string is one sentence (one result back), never a list of characters; lists work as before."""
    from conftest import untrained_classifier

    run, corpus = trained_run
    sentence = (corpus / "test.en").read_text().splitlines()[0]
    translator = Translator.from_run(run, device="cpu")
    one = translator.translate(sentence, beam=2)
    assert isinstance(one, str) and one == translator.translate([sentence], beam=2)[0]
    nbest = translator.translate_nbest(sentence, beam=2, nbest=2)
    assert len(nbest) == 2 and nbest[0].text == one
    classifier = untrained_classifier(run / "tokenizer.model", ["neg", "pos"])
    label = classifier.predict(sentence)
    assert label in ("neg", "pos") and [label] == classifier.predict([sentence])
    assert tuple(classifier.predict_proba(sentence).shape) == (2,)
    with pytest.raises(TypeError, match=r"^sentence 1 is int 7, not a string$"):  # issue 65: not a raw AttributeError
        classifier.predict([sentence, 7])


def test_one_string_is_one_sentence_for_the_parser(tmp_path):
    from test_parsing import tiny_config, write_treebank

    from transduce import Parser
    from transduce.tasks.parsing import ParsingTask
    from transduce.training.checkpoint import save_weights

    train_trees, dev = write_treebank(tmp_path / "t.trees", 60, seed=0), write_treebank(tmp_path / "d.trees", 5, seed=1)
    run = tmp_path / "run"
    task = ParsingTask.prepare(tiny_config(train_trees, dev), run, main=True, log=lambda _: None, barrier=lambda: None)
    save_weights(task.build_model(), run / "best.safetensors", metadata={"step": 0})
    parser = Parser.from_run(run, device="cpu")
    tree = parser.parse("the dog barks .", beam=1)
    assert isinstance(tree, str) and tree.startswith("(") and tree == parser.parse(["the dog barks ."], beam=1)[0]
    with pytest.raises(TypeError, match=r"parse_trees\(\[sentence\]\)"):
        parser.parse_trees("the dog barks .")
    with pytest.raises(TypeError, match=r"^sentence 0 is NoneType None, not a string$"):
        parser.parse([None])
    with pytest.raises(ValueError, match=r"^beam must be between 1 and 64, got 65$"):
        parser.parse(["the dog barks ."], beam=65)


@pytest.mark.parametrize(
    "sentences, options, error, message",
    [
        (["A dog"], dict(beam=999), ValueError, r"^beam must be between 1 and 64, got 999$"),
        (["A dog"], dict(beam=65), ValueError, r"^beam must be between 1 and 64, got 65$"),
        (["A dog"], dict(beam=2.5), ValueError, r"^beam must be an integer, got 2.5$"),
        (["A dog"], dict(alpha=float("nan")), ValueError, r"^alpha must be a finite number, got nan$"),
        (["A dog"], dict(alpha=float("inf")), ValueError, r"^alpha must be a finite number, got inf$"),
        (["A dog"], dict(batch_tokens=0), ValueError, r"^batch_tokens must be between 1 and 1,000,000, got 0$"),
        (["A dog"], dict(length_penalty="gmnt"), ValueError, r"^length_penalty must be one of gnmt, length, none"),
        ([1, 2], {}, TypeError, r"^sentence 0 is int 1, not a string$"),
        (["A dog", None], {}, TypeError, r"^sentence 1 is NoneType None, not a string$"),
        (b"A dog", {}, TypeError, r"^expected a list of strings, got bytes$"),
        ([b"A dog"], {}, TypeError, r"^sentence 0 is bytes b'A dog', not a string$"),
        (["A \ud800 dog"], {}, ValueError, r"^sentence 0 holds a lone surrogate \(U\+D800 at character 2\)"),
        (5, {}, TypeError, r"^expected a list of strings, got int$"),
    ],
)
def test_the_api_refuses_what_it_cannot_translate_in_a_message_of_its_own(
    trained_run, sentences, options, error, message
):
    """issue 65, item 3: each refused with our message (the bounds of config/bounds.py, the keyword named), not an
    empty translation, torch's TypeError or SentencePiece's."""
    run, _ = trained_run
    translator = Translator.from_run(run, device="cpu")
    with pytest.raises(error, match=message):
        translator.translate(sentences, **options)
    if not isinstance(sentences, (bytes, int)):
        with pytest.raises(error, match=message):
            translator.translate_nbest(sentences, **options)


def test_train_refuses_a_string_of_overrides_and_a_missing_run_dir(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=1, save_every=1)
    with pytest.raises(TypeError, match=r"overrides must be a list of 'section.key=value' strings, got 'a=b'"):
        train(str(recipe), tmp_path / "run", overrides="a=b")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"run_dir must be a folder's path \(a str or a Path\), got None"):
        train(str(recipe), None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"config must be a run config \(load_config\) or a recipe's path or name"):
        train(None, tmp_path / "run")
    with pytest.raises(TypeError, match=r"overrides must be a list"):
        load_config(recipe, "train.max_steps=2")  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()


def test_a_run_config_json_beyond_the_bounds_is_refused_by_from_run(trained_run, tmp_path):
    """A hand-edited run (decode.beam 1000, which would also have raised the server's max_beam) is refused where any
    predictor reads it, before the model is built."""
    import shutil

    from transduce.config import ConfigError

    run, _ = trained_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(".transduce.lock"))
    raw = json.loads((copy / "config.json").read_text())
    raw["decode"]["beam"] = 1000
    (copy / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=r"decode.beam must be between 1 and 64, got 1000"):
        Translator.from_run(copy)
