"""Several training corpora with weights and tags (data.corpora, data.valid_tag, `translate --tag`): issue 62 item 2."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli, tiny_recipe
from test_data import write_corpus

from transduce.config import ConfigError, CorpusConfig, DataConfig, load_config
from transduce.data import DataError, prepare
from transduce.data.batching import corpus_draw, epoch_batches
from transduce.data.tokenizer import Tokenizer
from transduce.data.training_text import corpus_bounds, corpus_weights
from transduce.decoding.translator import Translator
from transduce.model import Transformer
from transduce.tasks.translation import TranslationTask

TWO_CORPORA = """
[[data.corpora]]
prefix = "{root}/train"

[[data.corpora]]
prefix = "{root}/bt"
weight = {weight}
tag = "{tag}"
"""


def two_corpora(root: Path, *, weight: float = 2.0, tag: str = "<bt>", **kw) -> DataConfig:
    corpora = (CorpusConfig(prefix=str(root / "train")), CorpusConfig(prefix=str(root / "bt"), weight=weight, tag=tag))
    return DataConfig(corpora=corpora, src="en", tgt="xx", vocab_size=60, **kw)


@pytest.fixture
def corpora(tmp_path):
    write_corpus(tmp_path, "train", 300, seed=0)
    write_corpus(tmp_path, "bt", 120, seed=4)
    write_corpus(tmp_path, "valid", 20, seed=1)
    return tmp_path


def test_a_recipe_lists_corpora_as_tables_and_bad_ones_are_refused_naming_the_key(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(TWO_CORPORA.format(root=tmp_path, weight=0.5, tag="<2de>"))
    data = load_config(recipe).data
    assert [(c.prefix, c.weight, c.tag) for c in data.corpora] == [
        (f"{tmp_path}/train", 1.0, ""),
        (f"{tmp_path}/bt", 0.5, "<2de>"),
    ]
    assert data.tags == ("<2de>",)
    for weight in (0, -1, "nan", "inf"):
        recipe.write_text(TWO_CORPORA.format(root=tmp_path, weight=weight, tag="<bt>"))
        with pytest.raises(ConfigError, match="weight must be a finite number above 0"):
            load_config(recipe)
    recipe.write_text(TWO_CORPORA.format(root=tmp_path, weight=1, tag="a tag"))
    with pytest.raises(ConfigError, match="a tag is <NAME>, >>NAME<< or __NAME__"):
        load_config(recipe)
    with pytest.raises(ConfigError, match="prefix is required"):
        load_config(None, ["data.corpora=[{weight = 2}]"])
    with pytest.raises(ConfigError, match="unknown key data.corpora.weigth"):
        load_config(None, ['data.corpora=[{prefix = "y", weigth = 2}]'])
    with pytest.raises(ConfigError, match="data.valid_tag tags the validation sources"):
        load_config(None, ['data.corpora=[{prefix = "y", tag = "<a>"}]', "data.valid_tag=<a>"])


def test_prepare_puts_each_corpus_after_the_one_before_with_its_tag_one_token_first(corpora):
    data = prepare(two_corpora(corpora, valid=str(corpora / "valid"), valid_tag="<bt>"), corpora / "p", log=print)
    tokenizer = data.tokenizer
    assert tokenizer.tags == ("<bt>",)
    tag = tokenizer.tag_id("<bt>")
    assert tag not in tokenizer.encode(["<bt> a", "x<bt>y"])[0] + tokenizer.encode(["x<bt>y"])[0]  # text is text
    info = data.summary["splits"]["train"]
    first, second = info["corpora"]
    assert (first["first"], first["sentences"], first["tag"]) == (0, 300, "")
    assert (second["first"], second["sentences"], second["weight"], second["tag"]) == (300, 120, 2.0, "<bt>")
    assert info["sentences"] == 420
    train = data.splits["train"]
    untagged = tokenizer.encode(Path(corpora / "bt.en").read_text().splitlines())
    for i in range(120):  # the second corpus's sources: the tag, then the sentence's pieces (EOS: at collation)
        assert train.src[300 + i].tolist() == [tag, *untagged[i]]
    assert all(train.src[i][0] != tag for i in range(300))
    assert all(data.splits["valid"].src[i][0] == tag for i in range(20))  # data.valid_tag
    assert corpus_bounds(data.summary).tolist() == [0, 300, 420] and corpus_weights(data.summary) == [1.0, 2.0]
    # the training text, read back for subword sampling, follows the corpora too
    sources, targets = data.texts("train")
    assert sources[300:] == Path(corpora / "bt.en").read_text().splitlines()
    assert len(targets) == 420


def test_a_weight_or_a_tag_changes_the_cache_key(corpora):
    keys = set()
    for weight, tag in ((2.0, "<bt>"), (3.0, "<bt>"), (2.0, "<b2>")):
        data = prepare(two_corpora(corpora, weight=weight, tag=tag), corpora / f"p{weight}{tag}", log=lambda _: None)
        keys.add(data.summary["cache_key"])
    assert len(keys) == 3


def test_one_corpus_as_data_corpora_has_the_ids_of_data_train(corpora):
    a = prepare(DataConfig(train=str(corpora / "train"), src="en", tgt="xx", vocab_size=60), corpora / "a")
    b = prepare(
        DataConfig(corpora=(CorpusConfig(prefix=str(corpora / "train")),), src="en", tgt="xx", vocab_size=60),
        corpora / "b",
    )
    for side in ("src", "tgt"):
        assert np.array_equal(getattr(a.splits["train"], side).ids, getattr(b.splits["train"], side).ids)
    # data.train with data.corpora: data.train's pairs first (weight 1, no tag), as if it were the first corpus
    both = two_corpora(corpora)
    c = prepare(both, corpora / "c", log=lambda _: None)
    d = prepare(dataclasses.replace(both, train=str(corpora / "train"), corpora=both.corpora[1:]), corpora / "d")
    assert corpus_bounds(d.summary).tolist() == corpus_bounds(c.summary).tolist() == [0, 300, 420]
    assert np.array_equal(c.splits["train"].src.ids, d.splits["train"].src.ids)


def test_a_tag_absent_from_a_given_vocabulary_is_refused(corpora):
    prepare(DataConfig(train=str(corpora / "train"), src="en", tgt="xx", vocab_size=60), corpora / "plain")
    config = two_corpora(corpora, tokenizer=str(corpora / "plain"))
    named = r"data.corpora: the tag '<bt>' is not a tag of the vocabulary /.*/plain/tokenizer.model \(it was learned"
    with pytest.raises(DataError, match=named):
        prepare(config, corpora / "p", log=lambda _: None)


def test_each_epoch_draws_the_corpora_in_their_weights_proportion():
    bounds = np.array([0, 1000, 1200])
    for weights, expect in (([1.0, 3.0], (1000, 600)), ([0.25, 1.0], (250, 200)), ([1.5, 0.5], (1500, 100))):
        draw = corpus_draw(bounds, weights, seed=1, epoch=0)
        counts = (int((draw < 1000).sum()), int((draw >= 1000).sum()))
        assert counts == expect
        again = corpus_draw(bounds, weights, seed=1, epoch=0)
        assert np.array_equal(draw, again)  # a pure function of (seed, epoch): resumes and ranks agree
    half = [set(corpus_draw(bounds, [0.5, 1.0], seed=1, epoch=e).tolist()) & set(range(1000)) for e in (0, 1)]
    assert len(half[0]) == len(half[1]) == 500 and half[0] != half[1]  # a downsampled corpus: another half each epoch
    assert corpus_draw(bounds, [1.0, 1.0], seed=1, epoch=0) is None  # weights 1: the epoch as it always was
    lengths = np.ones(1200, dtype=np.int64) * 4
    batches = epoch_batches(lengths, lengths, corpus_draw(bounds, [1.0, 3.0], seed=1, epoch=0), max_tokens=64, seed=1,
                            epoch=0)  # fmt: skip
    pairs = np.concatenate(batches)
    assert len(pairs) == 1600 and np.bincount(pairs[pairs >= 1000] - 1000).tolist() == [3] * 200


def test_a_training_run_draws_its_epochs_by_weight_and_translate_takes_the_tag(corpora, tmp_path):
    recipe = tiny_recipe(tmp_path / "r.toml", corpora, steps=4, save_every=4)
    text = recipe.read_text().replace(f'train = "{corpora}/train"\n', "")
    recipe.write_text(text + TWO_CORPORA.format(root=corpora, weight=3, tag="<bt>"))
    run = tmp_path / "run"
    run_cli("train", str(recipe), "--out", str(run))
    config = json.loads((run / "config.json").read_text())
    assert config["data"]["corpora"][1] == {
        "prefix": f"{corpora}/bt",
        "src": "",
        "tgt": "",
        "weight": 3.0,
        "tag": "<bt>",
        "align": "",
        "join": 1,
    }
    from transduce.data.prepared import load_prepared

    data = load_prepared(run / "data")
    task = TranslationTask(load_config(recipe), data)
    pairs = np.concatenate(task.batches(max_tokens=300, seed=3, epoch=0))
    assert len(pairs) == 300 + 3 * 120 and (pairs >= 300).sum() == 360
    # translate --tag: the tag's id first; a tag the vocabulary lacks is one line, exit 1
    translator = Translator.from_run(run, device="cpu")
    assert translator.encode_sources(["a b"], "<bt>")[0][0] == data.tokenizer.tag_id("<bt>")
    assert translator.encode_sources(["a b"])[0][0] != data.tokenizer.tag_id("<bt>")
    (tmp_path / "in.txt").write_text("a b\n")
    out = run_cli("translate", str(run), "--input", str(tmp_path / "in.txt"), "--tag", "<bt>")
    assert out.stdout.count("\n") == 1
    bad = run_cli("translate", str(run), "--input", str(tmp_path / "in.txt"), "--tag", "<2fr>", check=False)
    assert bad.returncode == 1 and "the tag '<2fr>' is not a tag of the vocabulary" in bad.stderr
    assert "Traceback" not in bad.stderr and bad.stderr.count("\n") == 1
    # the CTranslate2 engine takes the tag as the torch engine does: the same ids in, the same translations out
    from transduce.export import CTranslate2Translator, export_ctranslate2

    engine = CTranslate2Translator(export_ctranslate2(run, tmp_path / "ct2"), exact=True)
    lines = (corpora / "valid.en").read_text().splitlines()[:6]
    assert engine.encode_sources(lines, "<bt>") == [ids[:-1] for ids in translator.encode_sources(lines, "<bt>")]
    assert engine.translate(lines, beam=1, tag="<bt>") == translator.translate(lines, beam=1, tag="<bt>")


def test_subword_sampling_keeps_each_corpus_tag_first(corpora):
    data = prepare(two_corpora(corpora), corpora / "p", log=lambda _: None)
    config = load_config(None, ["train.subword_sampling=0.1", "model.n_layers=1", "model.d_model=32", "model.d_ff=64",
                                "model.n_heads=4"])  # fmt: skip
    task = TranslationTask(config, data)
    tag = data.tokenizer.tag_id("<bt>")
    pairs = task.sampled_pairs(np.array([0, 5, 300, 419]), 1, 0)
    firsts = [int(pairs.src[i][0]) for i in range(4)]
    assert firsts[2] == firsts[3] == tag and tag not in firsts[:2]


def test_the_tag_reaches_the_model_as_its_first_source_token(corpora):
    data = prepare(two_corpora(corpora), corpora / "p", log=lambda _: None)
    torch.manual_seed(0)
    config = load_config(None, ["model.n_layers=1", "model.d_model=32", "model.d_ff=64", "model.n_heads=4"])
    model = Transformer(config.model.__class__(**{**config.model.__dict__, "vocab_size": data.tokenizer.vocab_size}))
    translator = Translator(model.eval(), Tokenizer(data.tokenizer.path))
    plain = translator.score(["a b c"], ["C B A"])[0].total
    tagged = translator.score(["a b c"], ["C B A"], tag="<bt>")[0].total
    assert plain != tagged  # another source: another score


def test_prepare_takes_corpora_on_the_command_line(corpora):
    out = corpora / "cli"
    run_cli("prepare", "--corpus", str(corpora / "train"), "--corpus", f"{corpora / 'bt'},weight=0.5,tag=<bt>",
            "--valid", str(corpora / "valid"), "--valid-tag", "<bt>", "--src", "en", "--tgt", "xx",
            "--vocab-size", "60", "--out", str(out))  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert [(c["weight"], c["tag"]) for c in summary["splits"]["train"]["corpora"]] == [(1.0, ""), (0.5, "<bt>")]
    for bad, says in (("weight=0", "the weight must be a finite number above 0"), ("weight=x", "must be a number"),
                      ("size=3", "expected PREFIX[,weight=W][,tag=T]")):  # fmt: skip
        proc = run_cli("prepare", "--corpus", f"{corpora / 'bt'},{bad}", "--src", "en", "--tgt", "xx",
                       "--out", str(corpora / "bad"), check=False)  # fmt: skip
        assert proc.returncode == 1 and says in proc.stderr and "Traceback" not in proc.stderr
    assert not (corpora / "bad").exists()


# One-file corpora: TSV, JSON Lines, Parquet (issue 63 item 3) ------------------------------------------------------
def one_file_corpora(root: Path) -> dict[str, Path]:
    """The toy corpus `train` (train.en, train.xx) written again in every one-file layout."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    src, tgt = (Path(root / f"train.{lang}").read_text().splitlines() for lang in ("en", "xx"))
    names = ("train.tsv", "train.tsv.gz", "train.jsonl", "flat.jsonl", "train.parquet", "cols.parquet")
    files = dict(zip(("tsv", "tsv.gz", "jsonl", "flat.jsonl", "parquet", "cols.parquet"), (root / n for n in names)))
    tsv = "".join(f"{a}\t{b}\n" for a, b in zip(src, tgt))
    files["tsv"].write_text(tsv)
    files["tsv.gz"].write_bytes(gzip.compress(tsv.encode()))
    files["jsonl"].write_text("".join(json.dumps({"translation": {"en": a, "xx": b}}) + "\n" for a, b in zip(src, tgt)))
    files["flat.jsonl"].write_text("".join(json.dumps({"xx": b, "en": a, "id": i}) + "\n" for i, (a, b) in
                                           enumerate(zip(src, tgt))))  # fmt: skip
    table = pa.table({"translation": [{"en": a, "xx": b} for a, b in zip(src, tgt)]})
    pq.write_table(table, files["parquet"], row_group_size=70)  # several row groups
    pq.write_table(pa.table({"en": src, "xx": tgt}), files["cols.parquet"], row_group_size=70)
    return files


def test_tsv_jsonl_and_parquet_corpora_give_the_ids_of_line_aligned_files(corpora, monkeypatch):
    import transduce.data.parallel as parallel

    monkeypatch.setattr(parallel, "CHUNK_LINES", 100)  # several chunks and blocks of rows
    plain = prepare(DataConfig(train=str(corpora / "train"), src="en", tgt="xx", vocab_size=60), corpora / "plain")
    for name, path in one_file_corpora(corpora).items():
        data = prepare(DataConfig(train=str(path), src="en", tgt="xx", vocab_size=60), corpora / f"p-{name}")
        assert data.tokenizer.signature() == plain.tokenizer.signature(), name  # the same vocabulary learned
        for side in ("src", "tgt"):
            ours, theirs = getattr(data.splits["train"], side), getattr(plain.splits["train"], side)
            assert np.array_equal(ours.ids, theirs.ids) and np.array_equal(ours.offsets, theirs.offsets), name
        assert data.texts("train") == plain.texts("train"), name
        if "parquet" not in name:  # subword sampling reads a line-based file's rows again by offset
            from transduce.data.training_text import TrainingText

            text = TrainingText(data.root, data.summary, corpora / f"scratch-{name}")
            assert text.pairs(np.array([0, 7, 299])) == TrainingText(plain.root, plain.summary).pairs(
                np.array([0, 7, 299])
            )
    from transduce.data.training_text import TrainingText

    with pytest.raises(DataError, match="a Parquet corpus has no lines"):
        TrainingText(data.root, data.summary)


def test_bad_rows_of_a_one_file_corpus_are_named_by_file_and_row(corpora):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cases = {
        "a.tsv": (b"a b\tA B\nc d\tC D\tX\n", r"a.tsv:2: expected 2 tab-separated fields \(source, target\), found 3"),
        "b.jsonl": (b'{"translation": {"en": "a", "xx": "A"}}\n{"en": "b"}\n', r'b.jsonl:2: no "xx" field'),
        "c.jsonl": (b'{"en": "a", "xx": "A"}\nnot json\n', r"c.jsonl:2: not a JSON object"),
        "d.jsonl": (b'{"en": "a", "xx": 3}\n', r"d.jsonl:1: a sentence must be a string, got int"),
        "e.jsonl": (b'{"en": "a\\nb", "xx": "A"}\n', r"e.jsonl:1: a sentence holds a line break"),
        "f.tsv": (b"a\tA\n\xff\tB\n", r"f.tsv:2: invalid UTF-8"),
    }
    for name, (data, says) in cases.items():
        (corpora / name).write_bytes(data)
        with pytest.raises(DataError, match=says):
            prepare(DataConfig(train=str(corpora / name), src="en", tgt="xx", vocab_size=60), corpora / f"p-{name}")
    pq.write_table(pa.table({"en": ["a", None], "xx": ["A", "B"]}), corpora / "g.parquet")
    pq.write_table(pa.table({"en": ["a"], "de": ["A"]}), corpora / "h.parquet")
    (corpora / "i.parquet").write_text("not parquet")
    for name, says in (
        ("g.parquet", "row 2: a missing \\(null\\) sentence"),
        ("h.parquet", 'no "xx" column'),
        ("i.parquet", "not a readable Parquet file"),
        ("none.tsv", "none.tsv: no such file"),
    ):
        with pytest.raises(DataError, match=says):
            prepare(DataConfig(train=str(corpora / name), src="en", tgt="xx", vocab_size=60), corpora / f"p-{name}")
