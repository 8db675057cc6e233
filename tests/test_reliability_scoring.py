"""Bad input to `score-pairs` (and `Translator.score`) and to `import huggingface`: one line on stderr naming the
file, the line, the key or the tensor, or an exception of ours in the Python API. score-pairs streams its pairs
(read, scored and written a block at a time) and says which pairs were longer than the model's positions.

The Marian folders here are built without transformers (hf/layout.py's `to_marian` of a small random network, the
trained run's SentencePiece model as both sides' vocabulary): the import reads exactly this layout."""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_reliability import assert_one_line_error, transduce

from transduce.cli import decoding as decoding_cli
from transduce.config import ConfigError
from transduce.decoding.translator import PairScore, Translator
from transduce.export.hf_import import HFImportError, import_huggingface, model_config
from transduce.hf.layout import to_marian
from transduce.model import Transformer


@pytest.fixture(scope="module")
def scorer(trained_run):
    run, corpus = trained_run
    return Translator.from_run(run, device="cpu"), run, corpus


def long_line(words: int = 120) -> str:
    """A sentence far longer than the tiny model's 64 positions."""
    return " ".join(["the dog sees a cat"] * (words // 5))


# score-pairs: streaming -------------------------------------------------------------------------------------------
def test_score_pairs_reads_scores_and_writes_a_block_at_a_time(scorer, capsys, monkeypatch):
    t, run, corpus = scorer
    src, tgt = corpus / "test.en", corpus / "test.xx"
    n = len(src.read_text().splitlines())
    whole = transduce(capsys, "score-pairs", run, "--src", src, "--tgt", tgt, "--tokens")
    assert whole.code == 0 and len(whole.out.splitlines()) == n
    written_before: list[int] = []  # per score call, the lines already written
    real_score = Translator.score

    def score(self, sources, targets, **kw):
        written_before.append(sys.stdout.getvalue().count("\n"))  # capsys's stream
        assert len(sources) <= 4
        return real_score(self, sources, targets, **kw)

    def whole_file(*a, **k):
        raise AssertionError("score-pairs read a whole file at once")

    monkeypatch.setattr(decoding_cli, "SCORE_BLOCK", 4)
    monkeypatch.setattr(Translator, "score", score)
    monkeypatch.setattr("transduce.data.read_lines", whole_file)
    streamed = transduce(capsys, "score-pairs", run, "--src", src, "--tgt", tgt, "--tokens")
    assert streamed.code == 0, streamed.err
    assert streamed.out == whole.out  # the same lines, in the same order
    assert written_before == list(range(0, n, 4))  # each block's scores written before the next block is scored


def test_score_pairs_refuses_a_bad_late_line_before_writing_any_score(scorer, capsys, monkeypatch, tmp_path):
    _, run, corpus = scorer
    lines = (corpus / "test.en").read_bytes().splitlines(keepends=True)
    bad = tmp_path / "bad.en"
    bad.write_bytes(b"".join(lines[:9]) + b"caf\xe9\n" + b"".join(lines[10:]))
    monkeypatch.setattr(decoding_cli, "SCORE_BLOCK", 3)
    result = transduce(capsys, "score-pairs", run, "--src", bad, "--tgt", corpus / "test.xx")
    assert_one_line_error(result, f"{bad}:10", "invalid UTF-8")
    assert result.out == ""
    short = tmp_path / "short.xx"
    short.write_bytes(b"".join(lines[:-1]))
    result = transduce(capsys, "score-pairs", run, "--src", corpus / "test.en", "--tgt", short)
    assert_one_line_error(result, f"has {len(lines)} lines but {short} has {len(lines) - 1}")
    assert result.out == ""


def test_score_pairs_reads_a_side_from_stdin_as_it_comes(scorer, capsys, monkeypatch):
    _, run, corpus = scorer
    src, tgt = corpus / "test.en", corpus / "test.xx"
    from_files = transduce(capsys, "score-pairs", run, "--src", src, "--tgt", tgt)
    monkeypatch.setattr(decoding_cli, "SCORE_BLOCK", 4)
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(src.read_bytes())))
    assert transduce(capsys, "score-pairs", run, "--src", "-", "--tgt", tgt).out == from_files.out
    lines = src.read_bytes().splitlines(keepends=True)
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(b"".join(lines[:-2]))))
    result = transduce(capsys, "score-pairs", run, "--src", "-", "--tgt", tgt)
    assert_one_line_error(result, f"<stdin> has {len(lines) - 2} lines but {tgt} has more")
    result = transduce(capsys, "score-pairs", run, "--src", "-", "--tgt", "-")
    assert_one_line_error(result, "cannot both be read from standard input")


def test_score_pairs_refuses_batch_tokens_out_of_range(scorer, capsys):
    _, run, corpus = scorer
    result = transduce(capsys, "score-pairs", run, "--src", corpus / "test.en", "--tgt", corpus / "test.xx",
                       "--batch-tokens", "0")  # fmt: skip
    assert_one_line_error(result, "--batch-tokens must be between 1 and")


# score-pairs: pairs longer than the model's positions --------------------------------------------------------------
def test_pairs_longer_than_the_positions_are_scored_and_named_in_one_note(scorer, capsys, monkeypatch, tmp_path):
    t, run, corpus = scorer
    sources = (corpus / "test.en").read_text().splitlines()[:6]
    targets = (corpus / "test.xx").read_text().splitlines()[:6]
    sources[1], targets[3], sources[4] = long_line(), long_line().upper(), long_line(200)
    (tmp_path / "s.en").write_text("".join(s + "\n" for s in sources))
    (tmp_path / "s.xx").write_text("".join(s + "\n" for s in targets))
    monkeypatch.setattr(decoding_cli, "SCORE_BLOCK", 2)  # the cut lines are counted across blocks
    result = transduce(capsys, "score-pairs", run, "--src", tmp_path / "s.en", "--tgt", tmp_path / "s.xx")
    assert result.code == 0 and len(result.out.splitlines()) == 6
    notes = [line for line in result.err.splitlines() if line.strip()]
    assert len(notes) == 1 and notes[0].startswith("note: 3 pair(s) longer than the model's positions")
    assert "(line(s) 2, 4, 5)" in notes[0]
    monkeypatch.setattr(decoding_cli, "SHOWN_LINES", 1)
    result = transduce(capsys, "score-pairs", run, "--src", tmp_path / "s.en", "--tgt", tmp_path / "s.xx")
    assert "(line(s) 2 and 2 more)" in result.err
    scores = t.score(sources, targets)
    assert [p.cut for p in scores] == [False, True, False, True, True, False]
    assert scores[3].tokens == t.model.config.max_len - 1  # what fits, EOS included: the TOKENS column says so


# Translator.score: the input checks of translate -------------------------------------------------------------------
def test_one_string_on_each_side_is_one_pair(scorer):
    t, _, _ = scorer
    one = t.score("the dog sees a cat", "CAT A SEES DOG THE", tokens=True)
    assert isinstance(one, PairScore)
    assert one == t.score(["the dog sees a cat"], ["CAT A SEES DOG THE"], tokens=True)[0]


@pytest.mark.parametrize(
    ("sources", "targets", "kw", "error", "match"),
    [
        ([None], ["A"], {}, TypeError, r"^source 0 is NoneType None, not a string$"),
        (["a", "b"], ["A", 7], {}, TypeError, r"^target 1 is int 7, not a string$"),
        ("a dog", ["A DOG"], {}, TypeError, r"^the sources: expected a list of strings, got str$"),
        ([b"a"], ["A"], {}, TypeError, r"^source 0 is bytes b'a', not a string$"),
        (["a \ud800 dog"], ["A"], {}, ValueError, r"^source 0 holds a lone surrogate \(U\+D800 at character 2\)"),
        (["a"], ["A"], {"batch_tokens": 0}, ConfigError, r"^batch_tokens must be between 1 and 1,000,000, got 0$"),
        (["a"], ["A"], {"batch_tokens": 2.5}, ConfigError, r"^batch_tokens must be an integer, got 2.5$"),
        (["a", "b"], ["A"], {}, ValueError, r"^2 sources but 1 targets$"),
    ],
)
def test_score_checks_its_input_as_translate_does(scorer, sources, targets, kw, error, match):
    t, _, _ = scorer
    with pytest.raises(error, match=match):
        t.score(sources, targets, **kw)


def test_the_ctranslate2_engine_scores_checks_and_cuts_alike(scorer, tmp_path):
    pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed")
    from transduce.export import CTranslate2Translator, export_ctranslate2

    t, run, corpus = scorer
    engine = CTranslate2Translator(export_ctranslate2(run, tmp_path / "ct2"))
    sources, targets = ["a dog", long_line()], ["A DOG", "A CAT"]
    assert [p.cut for p in engine.score(sources, targets)] == [False, True]
    assert [p.tokens for p in engine.score(sources, targets)] == [p.tokens for p in t.score(sources, targets)]
    with pytest.raises(TypeError, match=r"^source 0 is NoneType None, not a string$"):
        engine.score([None], ["A"])
    with pytest.raises(ConfigError, match="batch_tokens must be between"):
        engine.score(["a"], ["A"], batch_tokens=0)


# import huggingface -------------------------------------------------------------------------------------------------
def marian_folder(root: Path, tokenizer_model: Path) -> Path:
    """A small Marian folder as save_pretrained writes one (tied embeddings saved once as model.shared.weight, no
    position tables), the vocabulary one SentencePiece model for both sides."""
    import sentencepiece as spm

    folder = root / "marian"
    folder.mkdir()
    sp = spm.SentencePieceProcessor(model_file=str(tokenizer_model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    vocab = ["</s>", "<unk>", *pieces, "<pad>"]
    settings = dict(
        model_type="marian", vocab_size=len(vocab), d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_position_embeddings=64, pad_token_id=len(vocab) - 1, eos_token_id=0, decoder_start_token_id=len(vocab) - 1,
        activation_function="swish", scale_embedding=True, dropout=0.0,
    )  # fmt: skip
    (folder / "config.json").write_text(json.dumps(settings))
    torch.manual_seed(0)
    model = model_config(folder, settings)
    state = to_marian(Transformer(model).state_dict(), model)
    kept = {k: v.clone() for k, v in state.items() if "embed_" not in k and k != "lm_head.weight"}
    save_file(kept, str(folder / "model.safetensors"))
    (folder / "vocab.json").write_text(json.dumps({piece: i for i, piece in enumerate(vocab)}))
    for name in ("source.spm", "target.spm"):
        (folder / name).write_bytes(tokenizer_model.read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "xx"}))
    (folder / "generation_config.json").write_text(json.dumps({"num_beams": 4, "length_penalty": 1.0}))
    return folder


@pytest.fixture(scope="module")
def marian(trained_run, tmp_path_factory):
    run, _ = trained_run
    folder = marian_folder(tmp_path_factory.mktemp("hf"), run / "tokenizer.model")
    import_huggingface(folder, folder.parent / "run")  # the folder as built imports: refusals below are the change's
    return folder


def changed_copy(marian: Path, tmp_path: Path, name: str, **settings) -> Path:
    folder = tmp_path / "copy"
    folder.mkdir(parents=True)
    for path in marian.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    path = folder / name
    path.write_text(json.dumps({**json.loads(path.read_text()), **settings}))
    return folder


def with_weight(marian: Path, tmp_path: Path, name: str, change) -> Path:
    """A copy of the folder whose weight `name` is `change(weight)`."""
    folder = changed_copy(marian, tmp_path, "config.json")
    state = load_file(str(folder / "model.safetensors"))
    state[name] = change(state[name])
    save_file(state, str(folder / "model.safetensors"))
    return folder


def refused(capsys, folder: Path, tmp_path: Path, *needles: str) -> None:
    result = transduce(capsys, "import", "huggingface", folder, "--out", tmp_path / "out")
    assert_one_line_error(result, *needles)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("name", "settings", "needles"),
    [
        ("config.json", {"d_model": "16"}, ("config.json: d_model must be an integer, got '16'",)),
        ("config.json", {"d_model": 16.5}, ("config.json: d_model must be an integer, got 16.5",)),
        ("config.json", {"encoder_layers": 1.0}, ("config.json: encoder_layers must be an integer, got 1.0",)),
        ("config.json", {"vocab_size": True}, ("config.json: vocab_size must be an integer, got True",)),
        ("config.json", {"max_position_embeddings": -5}, ("config.json: max_position_embeddings must be at least 2",)),
        ("config.json", {"dropout": "0.1"}, ("config.json: dropout must be a number, got '0.1'",)),
        ("config.json", {"scale_embedding": "false"}, ("config.json: scale_embedding must be true or false",)),
        ("tokenizer_config.json", {"source_lang": 5}, ("tokenizer_config.json: source_lang = 5", "must be a string")),
        ("tokenizer_config.json", {"target_lang": ["xx"]}, ("tokenizer_config.json: target_lang",)),
        ("generation_config.json", {"num_beams": 100}, ("generation_config.json: num_beams must be between 1 and 64",)),
        ("generation_config.json", {"num_beams": "4"}, ("generation_config.json: num_beams must be an integer",)),
        ("generation_config.json", {"length_penalty": "x"}, ("generation_config.json: length_penalty must be a num",)),
        ("generation_config.json", {"length_penalty": math.nan}, ("generation_config.json: length_penalty", "finite")),
    ],
)  # fmt: skip
def test_import_settings_are_checked_naming_the_file_and_the_key(marian, tmp_path, capsys, name, settings, needles):
    refused(capsys, changed_copy(marian, tmp_path, name, **settings), tmp_path, *needles)


LAYER = "model.encoder.layers.0.fc1.weight"


def _nan(w: torch.Tensor) -> torch.Tensor:
    w = w.clone()
    w[0, 0] = math.nan
    return w


def _inf(w: torch.Tensor) -> torch.Tensor:
    w = w.clone()
    w[1, 2] = -math.inf
    return w


def _huge(w: torch.Tensor) -> torch.Tensor:
    w = w.double()
    w[0, 0] = 1e300
    return w


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        (_nan, (f"model.safetensors: {LAYER} holds NaN or infinite values",)),
        (_inf, (f"model.safetensors: {LAYER} holds NaN or infinite values",)),
        (_huge, (f"{LAYER} holds values beyond float32's range",)),
        (lambda w: w.long(), (f"{LAYER} is int64, not a weight transduce reads",)),
        (lambda w: w.bool(), (f"{LAYER} is bool",)),
        (lambda w: w.to(torch.complex64), (f"{LAYER} is complex64",)),
        (lambda w: w[:, :8].clone(), (f"{LAYER} has shape (32, 8), but config.json gives it (32, 16)",)),
        (lambda w: w.reshape(-1).clone(), (f"{LAYER} has shape (512,), but config.json gives it (32, 16)",)),
    ],
)
def test_import_refuses_weights_it_would_change_or_could_not_use_naming_the_tensor(
    marian, tmp_path, capsys, change, needles
):
    refused(capsys, with_weight(marian, tmp_path, LAYER, change), tmp_path, *needles)


def test_import_reads_every_floating_point_type_and_names_bad_weights_in_the_api(marian, tmp_path):
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        folder = with_weight(marian, tmp_path / str(dtype), LAYER, lambda w, d=dtype: w.to(d))
        run = import_huggingface(folder, tmp_path / str(dtype) / "run")
        assert Translator.from_run(run, device="cpu").translate("a dog") is not None
    with pytest.raises(HFImportError, match=f"{LAYER} holds NaN"):
        import_huggingface(with_weight(marian, tmp_path / "nan", LAYER, _nan), tmp_path / "nan" / "run")
    with pytest.raises(HFImportError, match="tokenizer_config.json: source_lang"):
        import_huggingface(
            changed_copy(marian, tmp_path / "lang", "tokenizer_config.json", source_lang=0), tmp_path / "o"
        )
