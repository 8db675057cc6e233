import gzip
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from transduce.cli import main
from transduce.config import DataConfig
from transduce.data import DataError, collate, prepare, read_lines
from transduce.data.batching import make_batches, padding_efficiency, update_groups
from transduce.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizerError

WORDS = "the a small big red blue dog cat house tree runs sees walks near under over".split()


def write_corpus(root: Path, name: str, n: int, *, seed: int = 0, gz: bool = False) -> str:
    """A toy parallel corpus: target = source words reversed and uppercased (written by the test)."""
    rng = np.random.default_rng(seed)
    src, tgt = [], []
    for _ in range(n):
        words = list(rng.choice(WORDS, size=int(rng.integers(2, 9))))
        src.append(" ".join(words))
        tgt.append(" ".join(w.upper() for w in reversed(words)))
    for lang, lines in (("en", src), ("xx", tgt)):
        data = "".join(line + "\n" for line in lines).encode()
        path = root / (f"{name}.{lang}" + (".gz" if gz else ""))
        path.write_bytes(gzip.compress(data) if gz else data)
    return str(root / name)


def config(train, valid=None, **kw) -> DataConfig:
    return DataConfig(train=train, valid=valid or "", src="en", tgt="xx", vocab_size=60, **kw)


def test_prepare_encodes_every_split_and_reuses_its_cache(tmp_path):
    train = write_corpus(tmp_path, "train", 400, gz=True)
    valid = write_corpus(tmp_path, "valid", 30, seed=1)
    test = write_corpus(tmp_path, "test", 20, seed=2)
    cfg = DataConfig(train=train, valid=valid, test=(test,), src="en", tgt="xx", vocab_size=60)
    out = tmp_path / "prepared"
    data = prepare(cfg, out, log=lambda _: None)
    assert set(data.splits) == {"train", "valid", "test"}
    assert len(data.splits["train"]) == 400 and len(data.splits["test"]) == 20
    assert data.tokenizer.vocab_size == 60
    summary = json.loads((out / "summary.json").read_text())
    info = summary["splits"]["train"]
    assert info["sentences"] == 400 and info["src_tokens"] > 400 and info["src_unk_rate"] == 0
    assert 0 < info["padding_efficiency"] <= 1 and info["src_length"]["max"] >= info["src_length"]["p50"]
    assert not list(out.glob("*.pkl")) and not list(tmp_path.glob(".tmp-*"))
    # the decoded ids give back the text
    assert data.tokenizer.decode([data.splits["valid"].src[0].tolist()])[0] == data.texts("valid")[0][0]

    messages = []
    mtime = (out / "train.src.ids.npy").stat().st_mtime_ns
    again = prepare(cfg, out, log=messages.append)
    assert "reusing" in messages[0] and (out / "train.src.ids.npy").stat().st_mtime_ns == mtime
    assert np.array_equal(again.splits["train"].src.ids, data.splits["train"].src.ids)
    changed = prepare(DataConfig(**{**cfg.__dict__, "vocab_size": 50}), out, log=messages.append)
    assert changed.tokenizer.vocab_size == 50


def test_a_prepared_folder_with_ids_beyond_its_vocabulary_is_refused_on_load(tmp_path, capsys):
    """Ids at or past the vocabulary (a damaged folder, another tokenizer's ids) gave an IndexError in the
    embedding at the first batch holding one: refused in one line on load, naming the file (issue 65)."""
    from transduce.data.prepared import open_prepared

    out = tmp_path / "prepared"
    prepare(config(write_corpus(tmp_path, "train", 60)), out, log=lambda _: None)
    path = out / "train.tgt.ids.npy"
    ids = np.load(path)
    ids[len(ids) // 2] = 60  # the vocabulary has 60 pieces: ids 0 to 59
    np.save(path, ids)
    with pytest.raises(DataError, match=r"train\.tgt\.ids\.npy: token id 60 is outside the vocabulary of 60"):
        open_prepared(out)


def test_mismatched_line_counts_are_refused(tmp_path):
    train = write_corpus(tmp_path, "train", 50)
    with open(f"{train}.xx", "a") as f:
        f.write("one more line\n")
    with pytest.raises(DataError, match=r"train\.en has 50 lines but .*train\.xx has 51"):
        prepare(config(train), tmp_path / "out", log=lambda _: None)
    assert not (tmp_path / "out").exists()


def test_empty_lines_are_dropped_and_counted(tmp_path):
    train = write_corpus(tmp_path, "train", 200)
    src = Path(f"{train}.en").read_text().splitlines()
    tgt = Path(f"{train}.xx").read_text().splitlines()
    src[3], tgt[10], src[20], tgt[20] = "", "  ", "", ""
    Path(f"{train}.en").write_text("\n".join(src) + "\n")
    Path(f"{train}.xx").write_text("\n".join(tgt) + "\n")
    data = prepare(config(train), tmp_path / "out", log=lambda _: None)
    assert data.summary["splits"]["train"]["dropped"]["empty"] == 3
    kept_src, kept_tgt = data.texts("train")
    assert len(kept_src) == 197
    # alignment is kept: every target is still its source reversed and uppercased
    for s, t in zip(kept_src, kept_tgt):
        assert t == " ".join(w.upper() for w in reversed(s.split()))


def test_invalid_utf8_names_the_line_or_is_replaced(tmp_path):
    train = write_corpus(tmp_path, "train", 100)
    lines = Path(f"{train}.en").read_bytes().split(b"\n")
    lines[41] = lines[41] + b" \xff\xfe"
    Path(f"{train}.en").write_bytes(b"\n".join(lines))
    with pytest.raises(DataError, match=r"train\.en:42: invalid UTF-8"):
        prepare(config(train), tmp_path / "out", log=lambda _: None)
    data = prepare(config(train, errors="replace"), tmp_path / "out", log=lambda _: None)
    assert "\ufffd" in data.texts("train")[0][41]


def test_long_and_unbalanced_pairs_leave_training_but_not_test_sets(tmp_path):
    train = write_corpus(tmp_path, "train", 200)
    src = Path(f"{train}.en").read_text().splitlines()
    tgt = Path(f"{train}.xx").read_text().splitlines()
    src[0] = tgt[0] = " ".join(["dog"] * 300)  # too long
    src[1], tgt[1] = "dog", " ".join(["CAT HOUSE TREE"] * 5)  # ratio far beyond 9
    for path, lines in ((f"{train}.en", src), (f"{train}.xx", tgt)):
        Path(path).write_text("\n".join(lines) + "\n")
        Path(path.replace("train", "test")).write_text("\n".join(lines) + "\n")
    cfg = DataConfig(train=train, test=(str(tmp_path / "test"),), src="en", tgt="xx", vocab_size=60, max_len=100)
    data = prepare(cfg, tmp_path / "out", log=lambda _: None)
    dropped = data.summary["splits"]["train"]["dropped"]
    assert dropped["too_long"] == 1 and dropped["ratio"] == 1 and len(data.splits["train"]) == 198
    assert len(data.splits["test"]) == 200  # test sets are translated whole


@pytest.mark.parametrize("case", ["missing", "empty", "badgzip"])
def test_unreadable_inputs_give_one_line_errors_and_no_output(tmp_path, capsys, case):
    train = write_corpus(tmp_path, "train", 20)
    if case == "missing":
        os.remove(f"{train}.xx")
    elif case == "empty":
        Path(f"{train}.xx").write_text("")
    else:
        os.remove(f"{train}.xx")
        Path(f"{train}.xx.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    code = main(
        [
            "prepare",
            "--train",
            train,
            "--src",
            "en",
            "--tgt",
            "xx",
            "--vocab-size",
            "60",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert len(err.strip().splitlines()) == 1 and "train.xx" in err and "Traceback" not in err
    assert {"missing": "no such file", "empty": "empty", "badgzip": "gzip"}[case] in err
    assert not (tmp_path / "out").exists()


def test_vocabulary_too_large_for_the_corpus_is_refused(tmp_path):
    train = write_corpus(tmp_path, "train", 30)
    with pytest.raises(
        TokenizerError, match=r"data.vocab_size 5000 is too large for this training text: it gives at most \d+ pieces"
    ):
        prepare(DataConfig(train=train, src="en", tgt="xx", vocab_size=5000), tmp_path / "out", log=lambda _: None)


def test_read_lines_keeps_unicode_line_separators_inside_a_line(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("a\u2028b\nc\r\n", encoding="utf-8")
    assert read_lines(path) == ["a\u2028b", "c"]


def test_collate_adds_bos_eos_and_pads():
    from transduce.data import ParallelCorpus, TokenArrays

    corpus = ParallelCorpus(TokenArrays.from_lists([[5, 6, 7], [8]]), TokenArrays.from_lists([[9], [10, 11]]))
    b = collate(corpus, np.array([0, 1]))
    assert b.src.tolist() == [[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]]
    assert b.tgt_in.tolist() == [[BOS_ID, 9, PAD_ID], [BOS_ID, 10, 11]]
    assert b.tgt_out.tolist() == [[9, EOS_ID, PAD_ID], [10, 11, EOS_ID]]
    assert b.n_tokens == 5


def _lengths(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 60, n)
    return src, np.clip(src + rng.integers(-5, 6, n), 1, None)


def test_batches_respect_max_tokens_and_cover_every_pair_once():
    src, tgt = _lengths()
    batches = make_batches(src, tgt, max_tokens=500, seed=3, epoch=0)
    for b in batches:
        assert len(b) * src[b].max() <= 500 and len(b) * tgt[b].max() <= 500
    assert sorted(np.concatenate(batches).tolist()) == list(range(1000))
    again = make_batches(src, tgt, max_tokens=500, seed=3, epoch=0)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))
    other = make_batches(src, tgt, max_tokens=500, seed=3, epoch=1)
    assert not all(len(a) == len(b) and np.array_equal(a, b) for a, b in zip(batches, other))


def test_a_pair_longer_than_the_budget_gets_its_own_batch():
    src, tgt = np.array([3, 900, 4]), np.array([3, 5, 4])
    batches = make_batches(src, tgt, max_tokens=100, seed=0, epoch=0)
    assert sorted(len(b) for b in batches) == [1, 2] and [1] in [b.tolist() for b in batches]


@pytest.mark.parametrize("world,accumulate", [(2, 1), (3, 2), (4, 1)])
def test_sharding_gives_each_pair_to_exactly_one_rank(world, accumulate):
    src, tgt = _lengths(997)
    batches = make_batches(src, tgt, max_tokens=400, seed=1, epoch=0)
    seen = []
    groups_per_rank = [update_groups(batches, world_size=world, rank=r, accumulate=accumulate) for r in range(world)]
    assert len({len(g) for g in groups_per_rank}) == 1  # same number of updates on every rank
    for groups in groups_per_rank:
        assert len({len(g) for g in groups[:-1]}) <= 1
        for group in groups:
            seen.extend(i for b in group if b is not None for i in b.tolist())
    assert sorted(seen) == list(range(997))
    # the same batches per update as one process accumulating world * accumulate
    single = update_groups(batches, world_size=1, rank=0, accumulate=world * accumulate)
    for u, group in enumerate(single):
        union = sorted(i for r in range(world) for b in groups_per_rank[r][u] if b is not None for i in b.tolist())
        assert union == sorted(i for b in group for i in b.tolist())


@pytest.mark.skipif(not os.environ.get("TRANSDUCE_DATA"), reason="needs TRANSDUCE_DATA (set by the Makefile)")
def test_multi30k_prepares_with_high_padding_efficiency(tmp_path):
    cfg = DataConfig(
        train="multi30k/train",
        valid="multi30k/val",
        test=("multi30k/test_2016_flickr",),
        src="en",
        tgt="de",
        vocab_size=8000,
    )
    data = prepare(cfg, tmp_path / "m30k", log=lambda _: None)
    info = data.summary["splits"]["train"]
    assert (
        info["sentences"]
        == 29000 - info["dropped"].get("ratio", 0) - info["dropped"].get("too_long", 0) - info["dropped"]["empty"]
    )
    assert info["padding_efficiency"] > 0.9
    assert data.summary["splits"]["test_2016_flickr"]["sentences"] == 1000
    assert data.tokenizer.vocab_size == 8000
    batches = make_batches(
        data.splits["train"].src_lengths, data.splits["train"].tgt_lengths, max_tokens=4096, seed=1, epoch=0
    )
    assert padding_efficiency(data.splits["train"], batches) > 0.9
    # The streaming prepare (cache version 2) gives Multi30k the vocabulary and the token ids of the version-1
    # pipeline (whole corpus in memory), whose cache these digests were taken from (commit 3286508).
    ids = hashlib.sha256()
    for split in ("train", "valid", "test_2016_flickr"):
        for arr in (data.splits[split].src, data.splits[split].tgt):
            ids.update(np.asarray(arr.ids, dtype=np.int32).tobytes())
            ids.update(np.asarray(arr.offsets, dtype=np.int64).tobytes())
    assert ids.hexdigest() == "4c8793604bf6f7738b8b437cd78af91250ab832124fed8fd0ec20a7b4dcd34d9"
    pieces = hashlib.sha256(repr(data.tokenizer.signature()[1]).encode()).hexdigest()
    assert pieces == "71113fba3bec359e1796ab3d3cd798698713c79aaffd1e8e0b448ee920eac833"


def test_batches_follow_target_length_then_alternating_source_length():
    # target lengths 4 and 5: sources rise within the even length and fall within the odd one, so the batch that
    # spans both lengths holds sources of similar length (the two longest groups meet)
    src = np.array([2, 9, 5, 9, 2, 5])
    tgt = np.array([4, 4, 4, 5, 5, 5])
    batches = make_batches(src, tgt, max_tokens=10**6, seed=0, epoch=0, shuffle=False)
    assert [b.tolist() for b in batches] == [[0, 2, 1, 3, 5, 4]]
    # with a budget of two pairs the middle batch pairs the two 9-token sources
    batches = make_batches(src, tgt, max_tokens=18, seed=0, epoch=0, shuffle=False)
    assert [b.tolist() for b in batches] == [[0, 2], [1, 3], [5, 4]]
