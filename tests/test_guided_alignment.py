"""Guided alignment (Garg et al. 2019; issue 73 part 4): `transduce align` writes word links, data.corpora's `align`
file is checked and kept with the prepared pairs, train.guided_alignment trains the alignment attention towards
the links (and resumes and runs under DDP exactly)."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli, run_torchrun, tiny_recipe
from safetensors.torch import load_file
from test_data import write_corpus

from transduce.config import Config, ConfigError, CorpusConfig, DataConfig, load_config, read_config
from transduce.data import load_prepared, prepare
from transduce.data.aligner import grow_diag_final_and
from transduce.data.alignments import WORD_START, pair_targets, word_starts
from transduce.data.batching import make_batches
from transduce.model.alignment import alignment_weights
from transduce.tasks import task_class, train
from transduce.tasks.translation import TranslationTask
from transduce.training.checkpoint import checkpoint_dirs, load_weights
from transduce.training.guided import guided_alignment_loss


def true_links(source: str) -> str:
    """The toy corpus's links: its target is its source's words reversed (test_data.write_corpus)."""
    n = len(source.split())
    return " ".join(f"{i}-{n - 1 - i}" for i in range(n))


def write_links(root: Path, name: str, lines: list[str]) -> Path:
    path = root / f"{name}.align"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def write_linked(root: Path) -> Path:
    """The toy corpus (600 training pairs) in `root` with its true links in train.align."""
    root.mkdir(exist_ok=True)
    write_corpus(root, "train", 600, seed=0)
    write_corpus(root, "valid", 40, seed=1)
    write_links(root, "train", [true_links(line) for line in (root / "train.en").read_text().splitlines()])
    return root


@pytest.fixture
def linked(tmp_path) -> Path:
    return write_linked(tmp_path / "corpus")


def guided(corpus: Path, *more: str) -> list[str]:
    """Overrides of the tiny recipe: its training pairs as one corpus of data.corpora, with their links."""
    corpora = f'data.corpora=[{{prefix = "{corpus}/train", align = "{corpus}/train.align"}}]'
    return ['data.train=""', corpora, "model.alignment_heads=1", "model.alignment_layer=-1", *more]


# `transduce align` and its symmetrization ---------------------------------------------------------------------------
def test_grow_diag_final_and_grows_from_the_intersection_then_adds_unlinked_words():
    forward = {(0, 0), (1, 1), (2, 1), (5, 5), (3, 4)}
    reverse = {(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)}
    # from the intersection (0,0) (1,1), the union's neighbours that join an unlinked word: (2,1) beside (1,1), then
    # (2,2), (3,3) on the diagonal, (3,4) beside (3,3), (4,4) beside (3,4); final-and: (5,5), both words unlinked
    assert grow_diag_final_and(forward, reverse) == [(0, 0), (1, 1), (2, 1), (2, 2), (3, 3), (3, 4), (4, 4), (5, 5)]
    # final-and adds a direction's link only when both its words are unlinked ("final" alone would add (0,3))
    assert grow_diag_final_and({(0, 0), (0, 3)}, {(0, 0)}) == [(0, 0)]
    assert grow_diag_final_and({(0, 0), (0, 3)}, {(0, 0), (1, 3)}) == [(0, 0), (1, 3)]
    assert grow_diag_final_and(set(), set()) == []


def test_align_writes_a_line_of_in_range_links_per_pair_and_never_replaces_a_file(tmp_path):
    pytest.importorskip("eflomal")
    write_corpus(tmp_path, "c", 200, seed=5, gz=True)  # gzipped sides
    src, tgt, out = tmp_path / "c.en.gz", tmp_path / "c.xx.gz", tmp_path / "links" / "c.align"
    proc = run_cli("align", "--src", str(src), "--tgt", str(tgt), "--out", str(out))
    assert "grow-diag-final-and" in proc.stderr + proc.stdout
    import gzip

    sources = gzip.decompress(src.read_bytes()).decode().splitlines()
    targets = gzip.decompress(tgt.read_bytes()).decode().splitlines()
    lines = out.read_text().splitlines()
    assert len(lines) == 200
    right = total = 0
    for line, s, t in zip(lines, sources, targets):
        links = [tuple(map(int, token.split("-"))) for token in line.split()]
        assert all(i < len(s.split()) and j < len(t.split()) for i, j in links)
        right += len(set(links) & {(i, len(s.split()) - 1 - i) for i in range(len(s.split()))})
        total += len(links)
    assert total and right / total > 0.5  # eflomal finds most of the toy corpus's links (reversed words)
    before = out.read_bytes()
    refused = run_cli("align", "--src", str(src), "--tgt", str(tgt), "--out", str(out), check=False)
    assert refused.returncode == 1 and "already exists" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert out.read_bytes() == before and sorted(p.name for p in out.parent.iterdir()) == ["c.align"]


# The links at prepare --------------------------------------------------------------------------------------------
def test_pieces_map_to_words_by_the_word_start_mark_and_a_tag_is_no_word():
    # ids: 0 <tag>, 1 "▁a", 2 "b", 3 "▁c", 4 "▁x", 5 "y"
    starts = np.array([False, True, False, True, True, False])
    src, tgt = np.array([0, 1, 2, 3]), np.array([4, 5, 4])  # words: [tag] a b | c ; x y | x
    t, s, p = pair_targets(np.array([0, 1, 1, 0, 1, 1]), src, tgt, starts)  # links 0-1, 1-0, 1-1
    got = {(int(a), int(b)): round(float(c), 6) for a, b, c in zip(t, s, p)}
    # target word 0 (pieces 0, 1) <- source word 1 (piece 3); target word 1 (piece 2) <- words 0 and 1 (pieces 1-3)
    assert got == {(0, 3): 1.0, (1, 3): 1.0, (2, 1): 0.333333, (2, 2): 0.333333, (2, 3): 0.333333}
    # links past the pieces' words (a draw that joined words): no targets for the pair
    assert len(pair_targets(np.array([2, 0]), src, tgt, starts)[0]) == 0


def test_prepare_keeps_the_links_given_on_the_kept_pairs_pieces_with_the_tag(tmp_path):
    write_corpus(tmp_path, "a", 300, seed=0)
    write_corpus(tmp_path, "b", 100, seed=4)
    sources = (tmp_path / "a.en").read_text().splitlines()
    given = [true_links(line) if k % 3 else "" for k, line in enumerate(sources)]  # every third pair: no links
    write_links(tmp_path, "a", given)
    corpora = (
        CorpusConfig(prefix=str(tmp_path / "b")),  # no align file: no links
        CorpusConfig(prefix=str(tmp_path / "a"), align=str(tmp_path / "a.align"), tag="<t>"),
    )
    data = prepare(DataConfig(corpora=corpora, src="en", tgt="xx", vocab_size=60, max_len=16), tmp_path / "p")
    tokenizer, train_split, links = data.tokenizer, data.splits["train"], data.links["train"]
    lines = np.load(tmp_path / "p" / "train.lines.npy")
    kept = data.summary["splits"]["train"]["corpora"][1]
    assert kept["sentences"] < 300 and kept["dropped"]["too_long"]  # max_len 16 drops some: their links go too
    assert len(links) == len(train_split) and all(len(links[i]) == 0 for i in range(kept["first"]))
    assert data.summary["splits"]["train"]["links"] == {"linked": sum(1 for k in lines[kept["first"] :] if k % 3),
                                                        "unlinked": 0}  # fmt: skip
    starts = word_starts(tokenizer)
    for i in range(kept["first"], len(train_split)):
        line = int(lines[i])
        assert links[i].tolist() == [int(x) for link in given[line].split() for x in link.split("-")]
        src, tgt = train_split.src[i], train_split.tgt[i]
        assert tokenizer.id_to_piece(int(src[0])) == "<t>"
        t, s, _ = pair_targets(links[i], src, tgt, starts)
        # the expected pieces, word by word: each word's pieces alone (SentencePiece never joins across a space)
        src_words, tgt_words = sources[line].split(), [w.upper() for w in reversed(sources[line].split())]
        src_at = np.cumsum([1] + [len(tokenizer.pieces(w)) for w in src_words])  # the tag first
        tgt_at = np.cumsum([0] + [len(tokenizer.pieces(w)) for w in tgt_words])
        expected = {
            (tp, sp)
            for i_word, j_word in (map(int, link.split("-")) for link in given[line].split())
            for tp in range(tgt_at[j_word], tgt_at[j_word + 1])
            for sp in range(src_at[i_word], src_at[i_word + 1])
        }
        assert set(zip(t.tolist(), s.tolist())) == expected
        assert all(tokenizer.id_to_piece(int(tgt[tp])).startswith(WORD_START) for tp in tgt_at[:-1])


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda lines: lines[:-1], r"a\.align:300: the file has 299 lines of links but its corpus .*a\.en has 300"),
        (lambda lines: [*lines, ""], r"a\.align:301: the file has 301 lines of links but its corpus .*a\.en has 300"),
        (lambda lines: lines[:7] + ["0-0 0-99"] + lines[8:], r"a\.align:8: link 0-99: target word 99 is past the"),
        (lambda lines: lines[:41] + ["0-0 0:1"] + lines[42:], r"a\.align:42: '0:1' is not a link \(expected i-j"),
        (lambda lines: lines[:2] + ["-1-0"] + lines[3:], r"a\.align:3: '-1-0' is not a link"),
    ],
)
def test_a_bad_align_file_is_one_line_naming_file_and_line(tmp_path, change, message):
    import re

    write_corpus(tmp_path, "a", 300, seed=0)
    lines = [true_links(line) for line in (tmp_path / "a.en").read_text().splitlines()]
    lines[7] = lines[41] = "0-0"
    write_links(tmp_path, "a", change(lines))
    corpus = f"{tmp_path}/a,align={tmp_path}/a.align"
    out = tmp_path / "p"
    proc = run_cli("prepare", "--corpus", corpus, "--src", "en", "--tgt", "xx", "--vocab-size", "60",
                   "--out", str(out), check=False)  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and re.search(message, proc.stderr), proc.stderr
    assert not out.exists() and not list(tmp_path.glob(".partial-*"))


def test_the_align_files_contents_are_in_the_cache_key(tmp_path):
    write_corpus(tmp_path, "a", 200, seed=0)
    sources = (tmp_path / "a.en").read_text().splitlines()
    align = write_links(tmp_path, "a", [true_links(line) for line in sources])
    plain = DataConfig(corpora=(CorpusConfig(prefix=str(tmp_path / "a")),), src="en", tgt="xx", vocab_size=60)
    with_links = dataclasses.replace(plain, corpora=(CorpusConfig(prefix=str(tmp_path / "a"), align=str(align)),))
    unlinked, first = prepare(plain, tmp_path / "p0"), prepare(with_links, tmp_path / "p1")
    assert not unlinked.links and len(first.links["train"]) == 200
    assert unlinked.summary["cache_key"] != first.summary["cache_key"]
    assert first.summary["splits"]["train"]["corpora"][0]["align"] == str(align)
    write_links(tmp_path, "a", ["0-0"] * len(sources))  # other links in the same file: prepared again
    again = prepare(with_links, tmp_path / "p1", log=lambda _: None)
    assert again.summary["cache_key"] != first.summary["cache_key"] and again.links["train"][5].tolist() == [0, 0]


def test_a_pair_whose_pieces_hold_other_words_than_its_line_keeps_no_links(tmp_path):
    """SentencePiece's NFKC turns U+00A8 into a space and a combining mark: "red\u00a8house" is one word to
    str.split (the links' words) and two to the pieces. That pair trains without links; the others keep theirs."""
    write_corpus(tmp_path, "a", 200, seed=0)
    sources = (tmp_path / "a.en").read_text().splitlines()
    sources[3] = "red\u00a8house runs"
    (tmp_path / "a.en").write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    write_links(tmp_path, "a", [true_links(line) for line in sources])
    corpora = (CorpusConfig(prefix=str(tmp_path / "a"), align=str(tmp_path / "a.align")),)
    data = prepare(DataConfig(corpora=corpora, src="en", tgt="xx", vocab_size=60), tmp_path / "p")
    assert data.summary["splits"]["train"]["links"] == {"linked": 199, "unlinked": 1}
    assert len(data.links["train"][3]) == 0 and len(data.links["train"][4]) > 0


# Training ---------------------------------------------------------------------------------------------------------
def alignment_loss(run: Path) -> float:
    """The alignment loss per target position with links of the run's last checkpoint on its training pairs, the
    weights read as the model reads its links (model/alignment.py: causally, or with model.full_context_alignment
    the whole target in view; with model.alignment_head, its head)."""
    config = read_config(run / "config.json", Config)
    task = TranslationTask(config.replace(train=dataclasses.replace(config.train, guided_alignment=1.0)),
                           load_prepared(config.data.prepared or run / "data"))  # fmt: skip
    model = task.build_model().eval()
    load_weights(model, checkpoint_dirs(run)[-1] / "model.safetensors")
    total = positions = 0.0
    pairs = task.corpus
    with torch.no_grad():
        for ix in make_batches(pairs.src_lengths, pairs.tgt_lengths, max_tokens=4000, seed=0, epoch=0):
            batch = task.collate(ix)
            assert not isinstance(batch, list) and batch.align_index is not None and batch.align_prob is not None
            weights = alignment_weights(model, batch.tgt_in, model.encode(batch.src), batch.src)
            total += float(guided_alignment_loss(weights, batch.align_index, batch.align_prob))
            positions += batch.n_aligned
    return total / positions


def test_the_guided_term_lowers_the_alignment_loss(tmp_path, linked):
    recipe = tiny_recipe(tmp_path / "r.toml", linked, steps=60, save_every=60)
    losses = {}
    for weight in (0.0, 1.0):
        run = tmp_path / f"run{weight}"
        extra = [f"train.guided_alignment={weight}", "train.lr_scale=0.3", "train.log_every=10"]
        train(load_config(recipe, guided(linked, *extra)), run, quiet=True)
        losses[weight] = alignment_loss(run)
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        logged = [r["align_loss"] for r in records if "align_loss" in r]
        assert len(logged) == (6 if weight else 0)  # logged each log line, under guidance only
        assert ("align loss" in (run / "train.log").read_text()) == bool(weight)
    assert losses[1.0] < losses[0.0] - 0.5, losses


def test_guided_alignment_resumes_exactly(tmp_path, linked):
    recipe = tiny_recipe(tmp_path / "r.toml", linked, steps=30, save_every=10)
    settings = guided(linked, "train.guided_alignment=0.5")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(load_config(recipe, settings), straight, quiet=True)
    train(load_config(recipe, [*settings, "train.max_steps=15"]), resumed, quiet=True)
    train(load_config(recipe, settings), resumed, quiet=True)
    a, b = (load_file(str(checkpoint_dirs(run)[-1] / "model.safetensors")) for run in (straight, resumed))
    assert all(torch.equal(a[k], b[k]) for k in a)
    logs = [[json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()] for run in (straight, resumed)]
    trained = [{r["step"]: r["align_loss"] for r in log if r["kind"] == "train"} for log in logs]
    assert trained[0] == trained[1] and len(trained[0]) == 6  # every log line's alignment loss, as in one run


def test_ddp_with_guided_alignment_equals_one_process_with_accumulation(tmp_path, linked):
    recipe = tiny_recipe(tmp_path / "r.toml", linked, steps=4, save_every=4, dropout=0.0)
    settings = [x for s in guided(linked, "train.guided_alignment=0.5") for x in ("--set", s)]
    run_cli("train", str(recipe), "--out", str(tmp_path / "single"), "--set", "train.accumulate=2", *settings)
    run_torchrun("train", str(recipe), "--out", str(tmp_path / "ddp"), *settings, port=29537)
    a, b = (load_file(str(checkpoint_dirs(tmp_path / r)[-1] / "model.safetensors")) for r in ("single", "ddp"))
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    plain = tmp_path / "plain"
    run_cli("train", str(recipe), "--out", str(plain), "--set", "train.accumulate=2", *settings[:-2])
    c = load_file(str(checkpoint_dirs(plain)[-1] / "model.safetensors"))
    assert any(not torch.allclose(a[k], c[k], atol=1e-5) for k in a)  # the term did change the update


def test_subword_sampling_maps_the_links_to_each_draw(tmp_path, linked):
    """Words are the same in every draw: the links reach its pieces (each target row a distribution)."""
    recipe = tiny_recipe(tmp_path / "r.toml", linked)
    config = load_config(recipe, guided(linked, "train.guided_alignment=0.05", "train.subword_sampling=0.3"))
    task = TranslationTask.prepare(config, tmp_path / "run", main=True, log=lambda _: None, barrier=lambda: None)
    task.batches(max_tokens=300, seed=1, epoch=0)
    parts = task.collate(np.arange(0, 40))
    assert isinstance(parts, list)
    for batch in parts:
        assert batch.align_index is not None and batch.align_prob is not None
        B, T, S = batch.src.shape[0], batch.tgt_in.shape[1], batch.src.shape[1]
        dense = torch.zeros(B * T * S).index_add_(0, batch.align_index, batch.align_prob).view(B, T, S)
        rows = dense.sum(-1)  # (B, T): 1 at the target positions with links, 0 elsewhere
        assert torch.allclose(rows[rows > 0], torch.ones(())) and int((rows > 0).sum()) == batch.n_aligned
        special = (batch.src == 0) | (batch.src == 3)  # (B, S) padding and EOS: no word
        assert not dense.transpose(1, 2)[special].any() and not dense[batch.tgt_out == 3].any()


def test_settings_that_cannot_guide_are_refused_before_training(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus)
    one_layer = "model.alignment_layer=-1"  # the tiny model's only decoder layer
    with pytest.raises(ConfigError, match="train.guided_alignment must be at least 0"):
        load_config(recipe, [one_layer, "train.guided_alignment=-1"])
    with pytest.raises(ConfigError, match="does not run with train.compile"):
        load_config(recipe, [one_layer, "train.guided_alignment=0.05", "train.compile=true"])
    proc = run_cli("train", str(recipe), "--out", str(tmp_path / "run"), "--set", "train.guided_alignment=0.05",
                   "--set", one_layer, check=False)  # fmt: skip
    assert proc.returncode == 1 and "no training corpus has word links" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
    from transduce.training.loop import check_task_settings

    parsing = load_config(recipe, [one_layer, "train.guided_alignment=0.05"]).train
    with pytest.raises(ConfigError, match="applies to translation runs, not to parsing"):
        check_task_settings(task_class("parsing"), parsing)
