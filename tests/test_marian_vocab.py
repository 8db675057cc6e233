"""The Marian vocabulary (data/marian.py), without transformers: one id list over two SentencePiece models, its own
special ids, `>>xx<<` tokens kept whole, and a run's two tokenizer files that every copy and check treats as ours."""

import json

import pytest
import sentencepiece as spm

from transduce.data.marian import MarianVocab, load_tokenizer
from transduce.data.tokenizer import SpecialIds, Tokenizer, TokenizerError

SOURCE = ["the cat sat on the mat", "a dog ran in the park", "the bird sang on a tree"] * 20
TARGET = ["LE CHAT", "UN CHIEN COURT", "L OISEAU CHANTE DANS UN ARBRE"] * 20


def train(lines, prefix):
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(prefix),
        vocab_size=24,
        model_type="unigram",
        num_threads=1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model").read_bytes()


@pytest.fixture
def vocab(tmp_path):
    source, target = train(SOURCE, tmp_path / "src"), train(TARGET, tmp_path / "tgt")
    pieces = set()
    for data in (source, target):
        sp = spm.SentencePieceProcessor(model_proto=data)
        pieces |= {
            sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)
        }
    ordered = ["</s>", "<unk>", ">>fr<<", *sorted(pieces), "<pad>"]
    special = SpecialIds(pad=len(ordered) - 1, unk=1, bos=len(ordered) - 1, eos=0)
    run = tmp_path / "run"
    run.mkdir()
    return MarianVocab.write(run / "tokenizer.model", source=source, target=target, pieces=ordered, special=special)


def test_each_side_has_its_model_and_both_share_the_ids(vocab):
    source_sp = spm.SentencePieceProcessor(model_proto=vocab.sp.serialized_model_proto())
    target_sp = spm.SentencePieceProcessor(model_proto=vocab.target.serialized_model_proto())
    [src] = vocab.encode(["the cat sat"])
    assert [vocab.vocab[i] for i in src] == source_sp.encode("the cat sat", out_type=str)
    [tgt] = vocab.encode_target(["LE CHAT"])
    assert [vocab.vocab[i] for i in tgt] == target_sp.encode("LE CHAT", out_type=str)
    assert vocab.decode([tgt + [vocab.special.eos, vocab.special.pad]]) == ["LE CHAT"]
    assert vocab.special == SpecialIds(pad=vocab.vocab_size - 1, unk=1, bos=vocab.vocab_size - 1, eos=0)


def test_a_language_token_stays_one_token_and_unknown_pieces_are_unk(vocab):
    [ids] = vocab.encode([">>fr<< the cat"])
    assert ids[0] == vocab.ids[">>fr<<"] and ids[1:] == vocab.encode(["the cat"])[0]
    assert vocab.pieces(">>fr<< the")[0] == ">>fr<<"
    [unknown] = vocab.encode(["zzz"])  # source.spm's pieces for letters it never saw: <unk>
    assert vocab.special.unk in unknown


def test_sampling_segments_each_side_with_its_own_model(vocab):
    sampled = vocab.encode_sampled(["LE CHAT"] * 30, alpha=0.5, seed=1, target=True)
    assert vocab.decode(sampled) == ["LE CHAT"] * 30
    assert len({tuple(ids) for ids in sampled}) > 1  # drawn, not the one best segmentation
    source = vocab.encode_sampled(["the cat"] * 5, alpha=0.5, seed=1)
    assert all(vocab.special.unk not in ids for ids in source)


def test_the_run_files_open_as_a_marian_vocabulary_and_copy_whole(vocab, tmp_path):
    assert isinstance(load_tokenizer(vocab.path), MarianVocab)
    vocab.copy_to(tmp_path / "new" / "tokenizer.model")
    copied = load_tokenizer(tmp_path / "new" / "tokenizer.model")
    assert copied.signature() == vocab.signature()
    assert copied.encode_target(["UN ARBRE"]) == vocab.encode_target(["UN ARBRE"])
    files = copied.marian_files()
    assert json.loads(files["vocab.json"]) == {p: i for i, p in enumerate(vocab.vocab)}
    assert files["target.spm"] == vocab.target.serialized_model_proto()
    ours = Tokenizer.train(SOURCE + TARGET, tmp_path / "ours" / "tokenizer.model", vocab_size=40)
    assert type(load_tokenizer(ours.path)) is Tokenizer and ours.special == SpecialIds()


def test_a_damaged_settings_file_is_one_error_naming_it(vocab):
    meta = json.loads(vocab.path.with_suffix(".json").read_text())
    vocab.path.with_suffix(".json").write_text(json.dumps({**meta, "special_ids": {"pad": 10_000}}))
    with pytest.raises(TokenizerError, match=r"tokenizer.json: .*outside the vocabulary"):
        load_tokenizer(vocab.path)
