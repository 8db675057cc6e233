"""Paper-scale data (issue 48): the streaming prepare (chunks, worker processes, resumable), memory-mapped caches,
vectorised batching, and training from a prepared folder (data.prepared). Tiny corpora, cut into many chunks."""

import contextlib
import gzip
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli, run_torchrun
from test_data import write_corpus

from transduce.cli import main
from transduce.config import DataConfig
from transduce.data import DataError, prepare
from transduce.data import parallel as parallel_module
from transduce.data.batching import make_batches
from transduce.data.tokenizer import Tokenizer


def reference_batches(src_lengths, tgt_lengths, *, max_tokens, seed, epoch, shuffle=True):
    """make_batches as it was before it was vectorised: a Python loop over the sorted pairs (the specification)."""
    n = len(src_lengths)
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(n) if shuffle else np.arange(n)
    src, tgt = np.asarray(src_lengths[order], dtype=np.int64), np.asarray(tgt_lengths[order], dtype=np.int64)
    order = order[np.lexsort((np.where(tgt % 2 == 0, src, -src), tgt))]
    batches, start, max_s, max_t = [], 0, 0, 0
    s_sorted, t_sorted = src_lengths[order], tgt_lengths[order]
    for i in range(n):
        s, t = max(max_s, int(s_sorted[i])), max(max_t, int(t_sorted[i]))
        count = i - start + 1
        if count > 1 and (count * s > max_tokens or count * t > max_tokens):
            batches.append(order[start:i])
            start, s, t = i, int(s_sorted[i]), int(t_sorted[i])
        max_s, max_t = s, t
    if n:
        batches.append(order[start:n])
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


@pytest.mark.parametrize("max_tokens", [1, 7, 64, 700, 5000])
def test_vectorised_batches_equal_the_loop_over_pairs(max_tokens):
    rng = np.random.default_rng(max_tokens)
    for trial in range(6):
        n = int(rng.integers(0, 2500))
        src = rng.integers(1, int(rng.integers(2, 300)), n).astype(np.int32)
        tgt = rng.integers(1, int(rng.integers(2, 300)), n).astype(np.int32)
        for shuffle in (True, False):
            mine = make_batches(src, tgt, max_tokens=max_tokens, seed=trial, epoch=3, shuffle=shuffle)
            theirs = reference_batches(src, tgt, max_tokens=max_tokens, seed=trial, epoch=3, shuffle=shuffle)
            assert len(mine) == len(theirs)
            assert all(np.array_equal(a, b) for a, b in zip(mine, theirs))


def folder_bytes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".transduce.lock"
    }


@pytest.fixture
def chunked(monkeypatch):
    """Chunks of 64 pairs, so that a corpus of a few hundred lines goes through many chunks (and the workers)."""
    monkeypatch.setattr(parallel_module, "CHUNK_LINES", 64)


def test_streaming_prepare_gives_the_tokenizers_ids_in_any_number_of_workers(tmp_path, chunked):
    train = write_corpus(tmp_path, "train", 700, gz=True)
    valid = write_corpus(tmp_path, "valid", 90, seed=1)
    lines = Path(valid + ".en").read_text().splitlines()
    lines[70] = ""  # an empty pair in the second chunk of valid: dropped
    Path(valid + ".en").write_text("\n".join(lines) + "\n")
    cfg = DataConfig(train=train, valid=valid, src="en", tgt="xx", vocab_size=60, max_len=12)
    one = prepare(DataConfig(**{**cfg.__dict__, "workers": 1}), tmp_path / "one", log=lambda _: None)
    two = prepare(DataConfig(**{**cfg.__dict__, "workers": 2}), tmp_path / "two", log=lambda _: None)
    # workers never change the cache (the tokenizer file records the folder it was trained in: compare its pieces)
    a, b = folder_bytes(tmp_path / "one"), folder_bytes(tmp_path / "two")
    assert a.pop("tokenizer.model") and b.pop("tokenizer.model") and a == b
    assert one.tokenizer.signature() == two.tokenizer.signature()

    # the ids are the tokenizer's own for the kept lines, in order; uint16 ids, memory-mapped
    tokenizer = Tokenizer(tmp_path / "one" / "tokenizer.model")
    src_lines = read_gz_lines(train + ".en.gz")
    kept = np.load(tmp_path / "one" / "train.lines.npy")
    expected = [ids for ids in tokenizer.encode([src_lines[i] for i in kept])]
    assert all(len(ids) <= 12 for ids in expected) and 0 < len(kept) < 700  # the length filter dropped some
    too_long = [i for i, ids in enumerate(tokenizer.encode(src_lines)) if len(ids) > 12]
    assert set(too_long).isdisjoint(kept.tolist())
    corpus = one.splits["train"]
    assert corpus.src.ids.dtype == np.uint16 and isinstance(corpus.src.ids, np.memmap)
    assert [corpus.src[i].tolist() for i in range(len(corpus))] == expected
    dropped = one.summary["splits"]["valid"]["dropped"]
    assert dropped["empty"] == 1 and len(one.splits["valid"]) == 89 - dropped["too_long"]
    valid_kept = np.load(tmp_path / "one" / "valid.lines.npy")
    assert 70 not in valid_kept and one.texts("valid")[0] == [lines[i] for i in valid_kept]
    assert one.texts("train")[0] == [src_lines[i] for i in kept]  # read back from the input file
    assert not list(tmp_path.glob(".partial-*"))  # the work folder goes once the cache is complete
    assert len(two.splits["train"]) == len(corpus)


def read_gz_lines(path: str) -> list[str]:
    import gzip

    return gzip.decompress(Path(path).read_bytes()).decode().splitlines()


def test_killed_prepare_continues_from_its_chunks_and_ends_byte_identical(tmp_path, chunked, monkeypatch):
    train = write_corpus(tmp_path, "train", 600)
    valid = write_corpus(tmp_path, "valid", 100, seed=1)
    cfg = DataConfig(train=train, valid=valid, src="en", tgt="xx", vocab_size=60, workers=1)
    prepare(cfg, tmp_path / "cut", log=lambda _: None)  # unbroken, into the same folder (the tokenizer records it)
    (tmp_path / "cut").rename(tmp_path / "whole")

    real, calls = parallel_module.encode_chunk, []

    def killed_at_the_sixth(job):
        calls.append(job.index)
        if len(calls) == 6:
            raise KeyboardInterrupt  # as a kill would: nothing after this point runs
        return real(job)

    monkeypatch.setattr(parallel_module, "encode_chunk", killed_at_the_sixth)
    messages: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        prepare(cfg, tmp_path / "cut", log=messages.append)
    assert not (tmp_path / "cut").exists()
    [work] = tmp_path.glob(".partial-cut-*")
    assert len(list((work / "chunks").iterdir())) == 5 and "kept in" in messages[-1]

    monkeypatch.setattr(parallel_module, "encode_chunk", real)
    messages.clear()
    prepare(cfg, tmp_path / "cut", log=messages.append)
    assert any("continuing" in m for m in messages) and any("5 chunk(s)" in m for m in messages)
    whole, cut = folder_bytes(tmp_path / "whole"), folder_bytes(tmp_path / "cut")
    assert whole.keys() == cut.keys()
    # the same bytes, tokenizer included; summary.json differs only in nothing (same inputs, same options)
    assert whole == cut
    assert not list(tmp_path.glob(".partial-*"))


def test_a_bad_line_deep_in_the_corpus_is_named_and_nothing_is_left(tmp_path, chunked, capsys):
    train = write_corpus(tmp_path, "train", 500)
    raw = Path(train + ".xx").read_bytes().split(b"\n")
    raw[437] = b"\xff\xfe broken"
    Path(train + ".xx").write_bytes(b"\n".join(raw))
    out = tmp_path / "out"
    args = ["prepare", "--train", train, "--src", "en", "--tgt", "xx", "--vocab-size", "60", "--out", str(out)]
    assert main([*args, "--workers", "2"]) == 1
    err = capsys.readouterr().err
    assert f"{train}.xx:438: invalid UTF-8" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob(".partial-*")) and not list(tmp_path.glob(".tmp-*"))


def test_a_full_disk_is_one_line_and_the_previous_cache_is_untouched(tmp_path, chunked, capsys, monkeypatch):
    train = write_corpus(tmp_path, "train", 300)
    out = tmp_path / "out"
    args = ["prepare", "--train", train, "--src", "en", "--tgt", "xx", "--workers", "1", "--out", str(out)]
    assert main([*args, "--vocab-size", "60"]) == 0
    before = folder_bytes(out)
    real = parallel_module.encode_chunk

    def disk_full(job):
        if job.index == 2:
            raise OSError(28, "No space left on device", str(Path(job.folder) / "train-000002"))
        return real(job)

    monkeypatch.setattr(parallel_module, "encode_chunk", disk_full)
    capsys.readouterr()
    assert main([*args, "--vocab-size", "50"]) == 1
    err = capsys.readouterr().err
    assert "No space left on device (the disk is full)" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if "error" in line]) == 1
    assert folder_bytes(out) == before  # the cache that was there is untouched
    monkeypatch.setattr(parallel_module, "encode_chunk", real)
    assert main([*args, "--vocab-size", "50"]) == 0  # space again: it continues and finishes
    assert json.loads((out / "summary.json").read_text())["vocab_size"] == 50


@pytest.mark.parametrize("where", ["encoding", "joining"])
def test_a_full_disk_names_the_file_being_written(tmp_path, chunked, capsys, monkeypatch, where):
    """A write that fails for space raises errno 28 without a file name (f.write names nothing): the one line
    still says which file (issue 65 item 9: `No space left on device (the disk is full)`, nowhere)."""
    train = write_corpus(tmp_path, "train", 300)

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")  # what a write of a full disk raises: no file name

    if where == "encoding":  # every chunk's arrays
        monkeypatch.setattr(np, "save", no_space)
    else:  # every joined array's header, written first
        monkeypatch.setattr(np.lib.format, "write_array_header_1_0", no_space)
    args = ["prepare", "--train", train, "--src", "en", "--tgt", "xx", "--vocab-size", "60", "--workers", "1"]
    assert main([*args, "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    named = r"chunks/train-0+: " if where == "encoding" else r"/out/train\.lines\.npy: "  # the output, not its temp
    assert re.search(named + r"No space left on device \(the disk is full\)$", err), err


def test_the_vocabulary_learns_from_a_seeded_sample_of_a_large_corpus(tmp_path):
    train = write_corpus(tmp_path, "train", 400)
    messages: list[str] = []
    cfg = DataConfig(train=train, src="en", tgt="xx", vocab_size=60, vocab_sample=300)
    a = prepare(cfg, tmp_path / "a", log=messages.append)
    b = prepare(cfg, tmp_path / "b", log=lambda _: None)
    assert any("300 of 800 training sentences" in m for m in messages)
    assert a.tokenizer.signature() == b.tokenizer.signature()  # seeded: the same sample every time
    full = prepare(DataConfig(**{**cfg.__dict__, "vocab_sample": 800}), tmp_path / "c", log=messages.append)
    assert len(full.splits["train"]) == len(a.splits["train"]) == 400


def test_training_from_a_prepared_folder_shares_it_and_never_writes_it(tmp_path):
    train = write_corpus(tmp_path, "train", 300)
    valid = write_corpus(tmp_path, "valid", 20, seed=1)
    data = tmp_path / "data"
    run_cli("prepare", "--train", train, "--valid", valid, "--src", "en", "--tgt", "xx", "--vocab-size", "70",
            "--out", str(data))  # fmt: skip
    before = folder_bytes(data)
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        "[model]\nn_layers = 1\nd_model = 32\nd_ff = 64\nn_heads = 2\n"
        '[data]\ntrain = "nowhere/train"\nsrc = "en"\ntgt = "de"\nvocab_size = 37000\n'
        '[train]\nprecision = "fp32"\nmax_steps = 6\nmax_tokens = 200\nsave_every = 3\nvalid_every = 3\n'
        "valid_max_sentences = 4\n"
        'warmup_steps = 2\nlog_every = 1\ndevice = "cpu"\n'
    )
    for seed in (1, 2):
        run = tmp_path / f"run{seed}"
        out = run_cli("train", str(recipe), "--out", str(run), "--set", f"data.prepared={data}",
                      "--set", f"train.seed={seed}")  # fmt: skip
        assert "replaced by the settings of" in out.stderr
        saved = json.loads((run / "config.json").read_text())
        assert saved["data"]["train"] == train and saved["data"]["vocab_size"] == 70
        assert saved["data"]["prepared"] == str(data) and saved["model"]["vocab_size"] == 70
        assert not (run / "data").exists() and (run / "checkpoints").is_dir()
    assert folder_bytes(data) == before  # two runs read it; neither wrote it
    out = run_cli("translate", str(tmp_path / "run1"), "--input", valid + ".en", "--quiet")
    assert len(out.stdout.splitlines()) == 20

    # resuming checks that the folder still holds the data the run started on
    run_cli("prepare", "--train", valid, "--valid", valid, "--src", "en", "--tgt", "xx", "--vocab-size", "70",
            "--out", str(data), check=False)  # fmt: skip
    refused = run_cli("train", "--out", str(tmp_path / "run1"), "--set", "train.max_steps=9", check=False)
    assert refused.returncode == 1 and "data.train" in refused.stderr  # the folder's settings changed

    assert run_cli("train", str(recipe), "--out", str(tmp_path / "x"), "--set", f"data.prepared={tmp_path}",
                   check=False).stderr.count("not a data folder made by `transduce prepare`") == 1  # fmt: skip


def test_resume_follows_a_moved_folder_and_refuses_one_prepared_again_from_changed_files(tmp_path):
    train = write_corpus(tmp_path, "train", 200)
    data = tmp_path / "data"
    prep = ["prepare", "--train", train, "--src", "en", "--tgt", "xx", "--vocab-size", "60", "--out", str(data)]
    run_cli(*prep)
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        "[model]\nn_layers = 1\nd_model = 32\nd_ff = 64\nn_heads = 2\n"
        '[train]\nprecision = "fp32"\nmax_steps = 4\nmax_tokens = 200\nsave_every = 2\nvalid_every = 100\n'
        "warmup_steps = 2\n"
        'device = "cpu"\n'
    )
    run = tmp_path / "run"
    run_cli("train", str(recipe), "--out", str(run), "--set", f"data.prepared={data}")
    moved = tmp_path / "moved"  # the folder may move: its cache key, not its path, is what a resume checks
    data.rename(moved)
    run_cli("train", "--out", str(run), "--set", "train.max_steps=6", "--set", f"data.prepared={moved}")
    assert json.loads((run / "config.json").read_text())["data"]["prepared"] == str(moved)
    moved.rename(data)
    lines = Path(train + ".en").read_text().splitlines()
    Path(train + ".en").write_text("\n".join(reversed(lines)) + "\n")  # same options, other contents
    run_cli(*prep)
    refused = run_cli("train", "--out", str(run), "--set", "train.max_steps=8", "--set", f"data.prepared={data}",
                      check=False)  # fmt: skip
    assert refused.returncode == 1 and "not the data this run started" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert os.path.isdir(run / "checkpoints")


def test_subword_sampling_reads_the_training_text_by_offsets_and_refuses_a_changed_file(tmp_path):
    """No copy of the training text in the cache: sampling reads a batch's lines from the input files (a gzipped one
    is decompressed once into the run's own folder), and refuses an input that changed since `prepare`."""
    from conftest import tiny_recipe

    from transduce.config import load_config
    from transduce.data.training_text import TrainingText
    from transduce.tasks import task_class

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_corpus(corpus, "train", 300, gz=True)
    write_corpus(corpus, "valid", 20, seed=1)
    recipe = tiny_recipe(tmp_path / "r.toml", corpus, steps=4, save_every=2)
    config = load_config(recipe, ["train.subword_sampling=0.2"])
    run = tmp_path / "run"
    task = task_class("translation").prepare(config, run, main=True, log=lambda _: None, barrier=lambda: None)
    assert not list((run / "data").glob("train.*.txt"))
    copy = run / "subwords" / "text-src"
    assert (copy / "text").read_text() == gzip.decompress((corpus / "train.en.gz").read_bytes()).decode()
    src, tgt = task._text.pairs(np.array([7, 3, 299]))
    lines = read_gz_lines(str(corpus / "train.xx.gz"))
    assert tgt == [lines[7], lines[3], lines[299]]

    plain = tmp_path / "plain"
    plain.mkdir()
    write_corpus(plain, "train", 50)
    data = prepare(DataConfig(train=str(plain / "train"), src="en", tgt="xx", vocab_size=60), tmp_path / "d",
                   log=lambda _: None)  # fmt: skip
    text = TrainingText(data.root, data.summary)
    assert text.pairs(np.array([49]))[0] == [(plain / "train.en").read_text().splitlines()[49]]
    with open(plain / "train.en", "a") as f:
        f.write("one more line\n")
    with pytest.raises(DataError, match=r"train\.en: changed \(its size differs\) since .* was prepared"):
        TrainingText(data.root, data.summary)


def test_the_vocabulary_sample_is_the_chosen_lines_of_both_files(tmp_path, monkeypatch):
    """sample_lines over several blocks: exactly `size` distinct lines of the two files (none blank here), from both
    sides in proportion, the same for the same seed."""
    from transduce.data import stream

    monkeypatch.setattr(stream, "CHUNK_LINES", 7)
    paths = [tmp_path / "a.en", tmp_path / "a.xx"]
    paths[0].write_text("".join(f"source {i}\n" for i in range(230)))
    paths[1].write_text("".join(f"target {i}\n" for i in range(230)))
    sample = list(stream.sample_lines(paths, [230, 230], 200, seed=5, errors="strict"))
    assert len(sample) == len(set(sample)) == 200
    assert set(sample) <= {f"{side} {i}" for side in ("source", "target") for i in range(230)}
    assert 70 < sum(line.startswith("target") for line in sample) < 130
    assert sample == list(stream.sample_lines(paths, [230, 230], 200, seed=5, errors="strict"))
    assert len(list(stream.sample_lines(paths, [230, 230], 460, seed=5, errors="strict"))) == 460  # all of them


def test_ddp_ranks_read_one_prepared_folder_and_equal_one_process(tmp_path):
    """Two torchrun ranks (gloo) on one data.prepared folder, memory-mapped by both: disjoint batches, the same
    update as one process with accumulation 2; the folder is not written."""

    import torch
    from conftest import tiny_recipe
    from safetensors.torch import load_file

    from transduce.training.checkpoint import checkpoint_dirs

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_corpus(corpus, "train", 400)
    write_corpus(corpus, "valid", 20, seed=1)
    data = tmp_path / "data"
    run_cli("prepare", "--train", str(corpus / "train"), "--valid", str(corpus / "valid"), "--src", "en", "--tgt",
            "xx", "--vocab-size", "60", "--out", str(data))  # fmt: skip
    before = folder_bytes(data)
    recipe = tiny_recipe(tmp_path / "r.toml", corpus, steps=4, save_every=4, dropout=0.0)
    shared = ["--set", f"data.prepared={data}"]
    run_cli("train", str(recipe), "--out", str(tmp_path / "single"), *shared, "--set", "train.accumulate=2")
    run_torchrun("train", str(recipe), "--out", str(tmp_path / "ddp"), *shared, port=29519)
    a, b = (load_file(str(checkpoint_dirs(tmp_path / r)[-1] / "model.safetensors")) for r in ("single", "ddp"))
    assert all(torch.allclose(a[name], b[name], atol=1e-5) for name in a)
    assert folder_bytes(data) == before and not (tmp_path / "ddp" / "data").exists()


def test_preparing_again_keeps_what_the_user_put_in_the_folder(tmp_path, capsys):
    train = write_corpus(tmp_path, "train", 100)
    out = tmp_path / "out"
    args = ["prepare", "--train", train, "--src", "en", "--tgt", "xx", "--workers", "1", "--out", str(out)]
    assert main([*args, "--vocab-size", "60"]) == 0
    (out / "MY_NOTES.txt").write_text("keep me\n")
    assert main([*args, "--vocab-size", "50"]) == 0  # other options: the cache is made again
    assert json.loads((out / "summary.json").read_text())["vocab_size"] == 50
    assert (out / "MY_NOTES.txt").read_text() == "keep me\n"
    (out / "summary.txt").write_text("mine too\n")
    assert main([*args, "--vocab-size", "55"]) == 0
    assert (out / "summary.txt").read_text() == "mine too\n" and (out / "MY_NOTES.txt").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "train.en", "train.xx"]


def test_a_prepare_killed_while_joining_leaves_nothing_after_the_next(tmp_path):
    """A kill while the chunks are joined leaves the temporary cache (.tmp-NAME-*, marked ours by its manifest)
    beside the output: the next prepare into that folder removes it (under the output's lock, never its own)."""
    from transduce.outputs import WRITING, write_manifest

    train = write_corpus(tmp_path, "train", 80)
    left = tmp_path / ".tmp-out-0123abcd"
    left.mkdir()
    write_manifest(left, WRITING, of="data")
    (left / "train.src.ids.npy").write_bytes(b"half")
    prepare(DataConfig(train=train, src="en", tgt="xx", vocab_size=60, workers=1), tmp_path / "out", log=lambda _: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "train.en", "train.xx"]


def test_a_prepare_killed_between_its_renames_gets_its_old_cache_back_and_spares_others(tmp_path):
    """Killed between moving the old cache aside (.old-NAME-*) and the new one in: the next prepare puts the old
    cache back in place, the user's file in it included, and leaves what is not its own (a user's folder of that
    pattern, the temporary folder of `--out out-2`) untouched (issue 65 item 2d: all were deleted unread)."""
    from transduce.outputs import WRITING, write_manifest

    train = write_corpus(tmp_path, "train", 80)
    cfg = DataConfig(train=train, src="en", tgt="xx", vocab_size=60, workers=1)
    prepare(cfg, tmp_path / "out", log=lambda _: None)
    (tmp_path / "out" / "NOTES.txt").write_text("the user's notes\n")
    aside = tmp_path / ".old-out-89abcdef"  # as outputs._replace_folder leaves it when killed after its first rename
    aside.mkdir()
    (tmp_path / "out").rename(aside / "out")
    other = tmp_path / ".tmp-out-2-01234567"  # `prepare --out out-2` at work
    other.mkdir()
    write_manifest(other, WRITING, of="data")
    users = tmp_path / ".old-out-mine"
    users.mkdir()
    (users / "keep.txt").write_text("mine\n")
    messages: list[str] = []
    prepare(cfg, tmp_path / "out", log=messages.append)
    assert "reusing" in messages[0]  # the old cache, back in place, is the one these inputs make
    assert (tmp_path / "out" / "NOTES.txt").read_text() == "the user's notes\n"
    assert not aside.exists() and other.is_dir() and (users / "keep.txt").is_file()


def test_a_second_prepare_into_the_same_out_is_refused_and_spares_the_first_ones_folders(tmp_path, capsys):
    """While one prepare works on --out (its lock held, its temporary folder live), a second one into the same
    --out, with other options, is refused in one line and deletes nothing of the first one's (issue 65 item 6)."""
    from transduce.outputs import WRITING, exclusive_output, write_manifest

    train = write_corpus(tmp_path, "train", 80)
    out = tmp_path / "out"
    with exclusive_output(out, "preparing data"):  # as the first prepare holds it
        live = tmp_path / ".tmp-out-01234567"
        live.mkdir()
        write_manifest(live, WRITING, of="data")
        args = ["prepare", "--train", train, "--src", "en", "--tgt", "xx", "--vocab-size", "60", "--out", str(out)]
        assert main(args) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "another process (pid" in err and "preparing data" in err
        assert live.is_dir() and not out.exists()
    assert main(args) == 0  # free again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "train.en", "train.xx"]  # and the lock file gone


def test_a_cache_beside_which_nothing_can_be_written_is_still_reused(tmp_path, monkeypatch):
    """The lock file goes beside --out; on a read-only file system (a shared cache) it cannot be made, and no one
    can write there either: the cache is reused as before the lock existed."""
    import errno

    from transduce import outputs

    train = write_corpus(tmp_path, "train", 60)
    cfg = DataConfig(train=train, src="en", tgt="xx", vocab_size=60, workers=1)
    prepare(cfg, tmp_path / "out", log=lambda _: None)
    real = outputs.open_own

    def read_only(path, flags):
        if str(path).endswith(f".out{outputs.LOCK}"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, flags)

    monkeypatch.setattr(outputs, "open_own", read_only)
    messages: list[str] = []
    prepare(cfg, tmp_path / "out", log=messages.append)
    assert "reusing" in messages[0]


def test_a_refused_prepare_leaves_no_parent_folders(tmp_path, capsys):
    train = write_corpus(tmp_path, "train", 20)
    Path(f"{train}.xx").write_text("\n" * 20)  # blank on one side: refused once the vocabulary step reads it
    args = ["prepare", "--train", train, "--src", "en", "--tgt", "xx", "--vocab-size", "60"]
    assert main([*args, "--out", str(tmp_path / "new" / "deeper" / "out")]) == 1
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_the_cache_key_does_not_change_with_how_a_path_is_spelt(tmp_path, monkeypatch):
    """`p/tr`, `./p/tr` and `p//tr` are one cache (issue 65: ./p/tr prepared 36M pairs again); an absolute path's
    key is what it was."""
    (tmp_path / "p").mkdir()
    write_corpus(tmp_path / "p", "tr", 60)
    monkeypatch.chdir(tmp_path)
    keys = set()
    for spelling in ("p/tr", "./p/tr", "p//tr", "p/../p/tr"):
        data = prepare(DataConfig(train=spelling, src="en", tgt="xx", vocab_size=60), "out", log=lambda _: None)
        keys.add(data.summary["cache_key"])
    assert len(keys) == 1
    absolute = DataConfig(train=str(tmp_path / "p" / "tr"), src="en", tgt="xx", vocab_size=60)
    assert parallel_module._keyed_paths(absolute) == absolute


@contextlib.contextmanager
def held_prepare(tmp_path: Path, train: str, *, workers: int, out: str = "out"):
    """`transduce prepare` as a real process whose chunk encoder (in the main process for --workers 1, else in each
    worker, which imports it from tmp_path) marks that it started and then waits for good: yields the process once
    `workers` encoders wait, so a kill or a second command lands while it works. Everything it started is killed
    at the end."""
    if not Path("/proc/self/stat").exists():
        pytest.skip("reads the process tree from /proc (Linux)")
    (tmp_path / "slow_chunk.py").write_text(
        "import os, time\n"
        "def encode_chunk(job):\n"
        f"    open({str(tmp_path)!r} + f'/started-{{os.getpid()}}', 'w').close()\n"
        "    time.sleep(600)\n"
    )
    runner = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import slow_chunk\n"
        "from transduce.data import parallel\n"
        "parallel.CHUNK_LINES, parallel.encode_chunk = 32, slow_chunk.encode_chunk\n"
        "from transduce.cli import main\n"
        f"main(['prepare', '--train', {train!r}, '--src', 'en', '--tgt', 'xx', '--vocab-size', '60', "
        f"'--workers', '{workers}', '--out', {str(tmp_path / out)!r}])\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("started-*"))) < workers:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the encoders never started"
            time.sleep(0.1)
        yield proc
    finally:
        for pid in descendants(proc.pid) if proc.poll() is None else []:
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait(timeout=30)
        for marker in tmp_path.glob("started-*"):  # what the test started, should any have outlived the parent
            pid = int(marker.name.split("-")[1])
            if is_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_workers_die_with_a_killed_prepare(tmp_path):
    """`kill -9` of a prepare while its workers encode: the workers and multiprocessing's resource tracker end with
    it instead of living on as orphans (issue 65 item 5). The workers are held inside their first chunk (a slow
    encoder, imported by the spawned workers from the test's folder), so the kill lands while they work."""
    train = write_corpus(tmp_path, "train", 400)
    with held_prepare(tmp_path, train, workers=2) as proc:
        family = descendants(proc.pid)
        assert len(family) >= 3, family  # two workers and the resource tracker
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while (alive := [pid for pid in family if is_alive(pid)]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alive == [], f"outlived their parent: {alive}"


def test_a_second_prepare_process_into_the_same_out_is_refused_while_the_first_works(tmp_path, capsys):
    """Two `prepare` commands into one --out, the second with other options while the first encodes (issue 65
    item 6: the second deleted the first's live temporary folder): refused in one line; the first's folders stay."""
    train = write_corpus(tmp_path, "train", 400)
    with held_prepare(tmp_path, train, workers=1):
        live = sorted(p.name for p in tmp_path.glob(".*-out*"))
        assert any(name.startswith(".tmp-out-") for name in live) and any(".partial-out-" in n for n in live)
        args = ["prepare", "--train", train, "--src", "en", "--tgt", "xx", "--vocab-size", "50", "--workers", "1"]
        assert main([*args, "--out", str(tmp_path / "out")]) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "another process (pid" in err and "preparing data" in err
        assert sorted(p.name for p in tmp_path.glob(".*-out*")) == live


def descendants(pid: int) -> list[int]:
    """The processes under `pid` (from /proc/PID/stat's parent field)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def is_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended and waiting for its reaper, counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
