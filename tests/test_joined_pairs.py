"""data.corpora's join: a corpus's consecutive pairs joined in seeded runs of 2 to N, one training pair each (several
sentences a unit, for paragraphs the sentence splitter cannot cut)."""

import numpy as np
import pytest
from conftest import run_cli
from test_data import write_corpus

from transduce.config import ConfigError, CorpusConfig, DataConfig, load_config
from transduce.data import DataError, parallel, prepare
from transduce.data.stream import joined_pairs
from transduce.data.training_text import corpus_bounds
from transduce.tasks.translation import TranslationTask


def joined_config(root, join: int = 3, **kw) -> DataConfig:
    corpora = (CorpusConfig(prefix=str(root / "train")), CorpusConfig(prefix=str(root / "train"), join=join, **kw))
    return DataConfig(corpora=corpora, src="en", tgt="xx", vocab_size=60)


@pytest.fixture
def corpus(tmp_path):
    write_corpus(tmp_path, "train", 230, seed=3)
    lines = [(tmp_path / f"train.{side}").read_text().splitlines() for side in ("en", "xx")]
    lines[0][17] = ""  # a pair with an empty side: dropped, never part of a run
    for side, text in zip(("en", "xx"), lines):
        (tmp_path / f"train.{side}").write_text("".join(line + "\n" for line in text))
    return tmp_path, lines


def test_runs_of_two_to_n_consecutive_pairs_cover_every_kept_pair_once():
    src = [f"s{i}" for i in range(50)]
    tgt = [f"t{i}" for i in range(50)]
    kept = np.asarray([i for i in range(50) if i != 9])
    out_src, out_tgt, firsts = joined_pairs(src, tgt, kept, 4, np.random.default_rng(0))
    runs = [out_src[i].split() for i in firsts]
    assert [w for run in runs for w in run] == [src[i] for i in kept]  # every kept pair once, in order
    assert all(2 <= len(run) <= 4 for run in runs[:-1]) and 1 <= len(runs[-1]) <= 4
    assert len({len(run) for run in runs}) > 1  # the lengths are drawn, not fixed
    assert [out_tgt[i].split() for i in firsts] == [[t.replace("s", "t") for t in run] for run in runs]
    assert joined_pairs(src, tgt, kept[:0], 3, np.random.default_rng(0))[2].tolist() == []


def test_prepare_joins_the_corpus_in_runs_whose_ids_are_their_pairs(corpus, monkeypatch):
    root, (src, tgt) = corpus
    monkeypatch.setattr(parallel, "CHUNK_LINES", 64)  # several chunks: runs never cross one
    data = prepare(joined_config(root), root / "p", log=lambda _: None)
    plain, joined = data.summary["splits"]["train"]["corpora"]
    assert plain["sentences"] == 229 and plain["dropped"]["empty"] == 1
    assert joined["join"] == 3 and joined["dropped"]["empty"] == 1
    assert 229 / 3 <= joined["sentences"] <= 229 / 2 + 4  # runs of 2 or 3, the last of each chunk maybe shorter
    lines = np.load(root / "p" / "train.lines.npy")[corpus_bounds(data.summary)[1] :]
    train, tok = data.splits["train"], data.tokenizer
    kept = [i for i in range(230) if src[i] and tgt[i]]
    rebuilt = []
    for k, first in enumerate(lines.tolist()):  # each run: the kept pairs from its first line to the next run's
        end = lines[k + 1] if k + 1 < len(lines) else 230
        run = [i for i in kept if first <= i < end]
        assert 1 <= len(run) <= 3 and (first // 64 == (run[-1]) // 64)  # within one chunk
        assert tok.decode([train.src[plain["sentences"] + k].tolist()])[0] == " ".join(src[i] for i in run)
        assert tok.decode([train.tgt[plain["sentences"] + k].tolist()])[0] == " ".join(tgt[i] for i in run)
        rebuilt += run
    assert rebuilt == kept
    again = prepare(joined_config(root), root / "q", log=lambda _: None)  # the same draw every time
    assert np.array_equal(again.splits["train"].src.ids, train.src.ids)


def test_join_is_checked_keyed_and_refused_where_a_pair_is_read_by_its_line(corpus):
    root, _ = corpus
    for bad in (0, 17, 2.5, True, "3"):
        with pytest.raises(ConfigError, match="join must be a whole number from 1 to 16"):
            CorpusConfig(prefix="x", join=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="join and align do not go together"):
        load_config(None, ['data.corpora=[{prefix = "x", join = 2, align = "x.align"}]'])
    assert load_config(None, ['data.corpora=[{prefix = "x", join = 3}]']).data.corpora[0].join == 3
    keys = {
        prepare(config, root / name, log=lambda _: None).summary["cache_key"]
        for name, config in (("a", joined_config(root, 2)), ("b", joined_config(root, 3)))
    }
    assert len(keys) == 2
    one = DataConfig(corpora=(CorpusConfig(prefix=str(root / "train")),), src="en", tgt="xx", vocab_size=60)
    same = DataConfig(corpora=(CorpusConfig(prefix=str(root / "train"), join=1),), src="en", tgt="xx", vocab_size=60)
    assert prepare(one, root / "c").summary["cache_key"] == prepare(same, root / "d").summary["cache_key"]
    data = prepare(joined_config(root), root / "b", log=lambda _: None)
    with pytest.raises(DataError, match="a joined corpus .data.corpora's join. has no line per pair"):
        data.texts("train")
    config = load_config(None, ["train.subword_sampling=0.1", "model.n_layers=1", "model.d_model=32", "model.d_ff=64",
                                "model.n_heads=4"])  # fmt: skip
    task = TranslationTask(config, data)
    with pytest.raises(DataError, match="train without train.subword_sampling, or without join"):
        task.sampled_pairs(np.array([0, 1]), 1, 0)


def test_prepare_on_the_command_line_prints_the_joined_corpus(corpus):
    root, _ = corpus
    result = run_cli("prepare", "--out", str(root / "p"), "--corpus", f"{root}/train", "--corpus",
                     f"{root}/train,weight=0.5,join=2", "--src", "en", "--tgt", "xx", "--vocab-size", "60")  # fmt: skip
    assert "(weight 0.5, joined 2-2 a unit)" in result.stdout + result.stderr
    bad = run_cli("prepare", "--out", str(root / "q"), "--corpus", f"{root}/train,join=two", "--src", "en",
                  "--tgt", "xx", check=False)  # fmt: skip
    assert bad.returncode != 0 and "the join must be a number, got 'two'" in bad.stderr
    assert "Traceback" not in bad.stderr
