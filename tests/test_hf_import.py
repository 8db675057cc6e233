"""`transduce import huggingface`: a MarianMT folder becomes a run that computes what transformers computes (issue 63
item 2). The Marian model is built here, offline: two tiny SentencePiece models (one per side) over one vocab.json,
a random MarianMTModel with swish, scaled embeddings and a random final_logits_bias, saved with save_pretrained."""

import dataclasses
import json
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
from conftest import run_cli
from safetensors.torch import load_file, save_file
from test_data import write_corpus

from transduce.cli import main
from transduce.config import Config, read_config
from transduce.decoding.translator import Translator
from transduce.export.hf_import import HFImportError, import_huggingface
from transduce.hf.layout import to_marian
from transduce.model import Transformer
from transduce.outputs import OutputError
from transduce.training.checkpoint import load_weights

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install 'transduce[hf]')")

LANGUAGE_TOKENS = [">>xx<<", ">>yy<<"]
MAX_OUTPUT = 12  # tokens, EOS included, for both searches


def train_spm(lines: list[str], prefix: Path) -> Path:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(prefix),
        vocab_size=30,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def marian_vocabulary(source: Path, target: Path) -> dict[str, int]:
    """Marian's layout: </s> 0, <unk> 1, the language tokens, both models' pieces, <pad> last."""
    pieces: set[str] = set()
    for path in (source, target):
        sp = spm.SentencePieceProcessor(model_file=str(path))
        pieces |= {
            sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)
        }
    ordered = ["</s>", "<unk>", *LANGUAGE_TOKENS, *sorted(pieces), "<pad>"]
    return {piece: i for i, piece in enumerate(ordered)}


def marian_folder(root: Path, corpus: Path, **config) -> Path:
    """A MarianMTModel folder as opus-mt's look: save_pretrained's files plus the vocabulary files."""
    folder = root / "marian"
    folder.mkdir()
    sides = [(corpus / f"train.{lang}").read_text().splitlines() for lang in ("en", "xx")]
    source, target = (train_spm(lines, root / f"{name}-spm") for lines, name in zip(sides, ("source", "target")))
    vocab = marian_vocabulary(source, target)
    settings = dict(
        vocab_size=len(vocab),
        d_model=16,
        encoder_layers=2,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        pad_token_id=len(vocab) - 1,
        eos_token_id=0,
        decoder_start_token_id=len(vocab) - 1,
        forced_eos_token_id=0,
        activation_function="swish",
        scale_embedding=True,
        dropout=0.0,
        **config,
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig(**settings))
    with torch.no_grad():  # weights large enough that the greedy choices are far from ties
        for name, p in model.named_parameters():
            p.normal_(0.0, 1.0 if "layer_norm" in name else 0.3)
        model.final_logits_bias.normal_(0.0, 1.0)
    model.save_pretrained(folder)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "source.spm").write_bytes(source.read_bytes())
    (folder / "target.spm").write_bytes(target.read_bytes())
    settings = {
        "source_lang": "en",
        "target_lang": "xx",
        "separate_vocabs": False,
        "tokenizer_class": "MarianTokenizer",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """The Marian folder, transformers' model and tokenizer loaded from it, and its import."""
    root = tmp_path_factory.mktemp("hf")
    corpus = root / "corpus"
    corpus.mkdir()
    write_corpus(corpus, "train", 300, seed=0)
    write_corpus(corpus, "valid", 20, seed=1)
    folder = marian_folder(root, corpus)
    theirs = transformers.MarianMTModel.from_pretrained(folder).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    run = import_huggingface(folder, root / "run")
    sentences = (corpus / "valid.en").read_text().splitlines()[:8]
    sentences[1] = ">>yy<< " + sentences[1]  # a target-language token stays one token
    return {"folder": folder, "theirs": theirs, "tokenizer": tokenizer, "run": run, "sentences": sentences,
            "corpus": corpus, "root": root}  # fmt: skip


def test_the_import_tokenizes_as_transformers_does(marian):
    ours = Translator.from_run(marian["run"], device="cpu")
    expected = marian["tokenizer"](marian["sentences"]).input_ids
    assert ours.encode_sources(marian["sentences"]) == expected
    assert expected[1][0] == marian["tokenizer"].convert_tokens_to_ids(">>yy<<")
    targets = (marian["corpus"] / "valid.xx").read_text().splitlines()[:8]
    theirs = marian["tokenizer"](text_target=targets).input_ids
    assert [ids + [0] for ids in ours.tokenizer.encode_target(targets)] == theirs
    config = read_config(marian["run"] / "config.json", Config)
    assert (config.model.activation, config.model.scale_embeddings, config.model.output_bias) == ("swish", True, True)
    assert (config.model.pad_id, config.model.bos_id, config.model.eos_id) == (len(ours.tokenizer.vocab) - 1,) * 2 + (
        0,
    )


def test_logits_on_a_padded_batch_equal_transformers(marian):
    ours = Translator.from_run(marian["run"], device="cpu")
    batch = marian["tokenizer"](marian["sentences"], padding=True, return_tensors="pt")
    pad = ours.model.config.pad_id
    targets = torch.randint(4, pad, (len(marian["sentences"]), 7), generator=torch.Generator().manual_seed(0))
    decoder_in = torch.cat([torch.full((len(targets), 1), pad), targets], dim=1)
    with torch.no_grad():
        expected = marian["theirs"](**batch, decoder_input_ids=decoder_in).logits
        got = ours.model(batch.input_ids.masked_fill(batch.attention_mask.eq(0), pad), decoder_in)
    assert batch.attention_mask.eq(0).any()  # the batch is padded
    assert float(expected.std()) > 1.0  # not near-uniform: the test can see a difference
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


def test_greedy_output_equals_transformers_generate(marian):
    ours = Translator.from_run(marian["run"], device="cpu")
    ours.decode = dataclasses.replace(ours.decode, max_len_a=0.0, max_len_b=MAX_OUTPUT)
    batch = marian["tokenizer"](marian["sentences"], padding=True, return_tensors="pt")
    pad = ours.model.config.pad_id
    with torch.no_grad():
        generated = marian["theirs"].generate(
            **batch, num_beams=1, do_sample=False, max_new_tokens=MAX_OUTPUT, bad_words_ids=[[pad]]
        )
    expected = [[t for t in row[1:] if t != pad] for row in generated.tolist()]  # without the start, the padding
    expected = [row[: row.index(0)] if 0 in row else row for row in expected]  # and EOS
    hyps = ours.translate_nbest(marian["sentences"], beam=1)
    assert [h[0].tokens for h in hyps] == expected
    assert sum(map(len, expected)) > 3 * len(expected)
    texts = marian["tokenizer"].batch_decode(generated, skip_special_tokens=True)
    assert [h[0].text for h in hyps] == texts


def test_evaluate_scores_the_imported_run(marian, capsys):
    corpus = marian["corpus"]
    assert (
        main(["evaluate", str(marian["run"]), "--src", str(corpus / "valid.en"), "--ref", str(corpus / "valid.xx")])
        == 0
    )
    out = capsys.readouterr().out
    assert "BLEU" in out and "chrF" in out


def test_marian_to_transduce_to_marian_is_bit_identical(marian):
    saved = load_file(str(marian["folder"] / "model.safetensors"))
    config = read_config(marian["run"] / "config.json", Config).model
    model = Transformer(config)
    load_weights(model, marian["run"] / "best.safetensors")
    back = to_marian(model.state_dict(), config)
    assert saved and all(torch.equal(back[name], tensor) for name, tensor in saved.items())
    files = Translator.from_run(marian["run"], device="cpu").tokenizer.marian_files()
    for name in ("source.spm", "target.spm"):
        assert files[name] == (marian["folder"] / name).read_bytes()
    assert json.loads(files["vocab.json"]) == json.loads((marian["folder"] / "vocab.json").read_text())


def test_the_import_is_exported_to_ctranslate2_and_translates_alike(marian, tmp_path):
    pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed")
    from transduce.export import CTranslate2Translator, export_ctranslate2

    out = export_ctranslate2(marian["run"], tmp_path / "ct2")
    ours = Translator.from_run(marian["run"], device="cpu")
    theirs = CTranslate2Translator(out, threads=1, exact=True)
    expected = ours.translate_nbest(marian["sentences"], beam=1, length_penalty="length")
    got = theirs.translate_nbest(marian["sentences"], beam=1)
    assert [h[0].tokens for h in got] == [h[0].tokens for h in expected]


def test_an_imported_model_is_fine_tuned_translated_and_served(marian, tmp_path):
    corpus = marian["corpus"]
    recipe = tmp_path / "finetune.toml"
    recipe.write_text(
        f'[data]\ntrain = "{corpus}/train"\nvalid = "{corpus}/valid"\nsrc = "en"\ntgt = "xx"\n'
        f'[train]\ninit_from = "{marian["run"]}"\ndevice = "cpu"\nprecision = "fp32"\nmax_steps = 3\n'
        "max_tokens = 300\nwarmup_steps = 2\nvalid_every = 3\nvalid_max_sentences = 4\nsave_every = 3\n"
        "num_threads = 1\nlog_every = 1\n[decode]\nbeam = 1\nmax_len_b = 5\n"
    )
    assert main(["train", str(recipe), "--out", str(tmp_path / "new")]) == 0
    before, after = Translator.from_run(marian["run"], device="cpu"), Translator.from_run(tmp_path / "new")
    assert after.tokenizer.signature() == before.tokenizer.signature()  # the Marian vocabulary, carried over
    changed = [n for n, p in after.model.state_dict().items() if not torch.equal(p, before.model.state_dict()[n])]
    assert "output.bias" in changed and len(changed) > 10
    prepared = after.tokenizer.encode(["a b"])[0]
    assert prepared == before.tokenizer.encode(["a b"])[0]
    line = marian["sentences"][0]
    result = run_cli("translate", str(tmp_path / "new"), input=line + "\n")
    assert result.stdout == after.translate(line) + "\n"

    pytest.importorskip("fastapi", reason="the serve extra is not installed")
    from fastapi.testclient import TestClient

    from transduce.serving import create_app, load_predictor

    predictor, metadata = load_predictor(tmp_path / "new", device="cpu")
    assert metadata["languages"] == {"source": "en", "target": "xx"}
    with TestClient(create_app(predictor, metadata=metadata)) as client:
        response = client.post("/v1/translate", json={"text": [line]})
    assert response.status_code == 200, response.text
    assert response.json()["translations"][0]["text"] == after.translate(line)


# Refusals: one line each, naming what is wrong --------------------------------------------------------------------
def refusal(capsys, folder: Path, out: Path) -> str:
    assert main(["import", "huggingface", str(folder), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()
    return err


def copy_folder(marian, tmp_path: Path, *, config: dict | None = None, drop: tuple[str, ...] = ()) -> Path:
    folder = tmp_path / "copy"
    folder.mkdir()
    for path in marian["folder"].iterdir():
        if path.name not in drop:
            (folder / path.name).write_bytes(path.read_bytes())
    if config:
        settings = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**settings, **config}))
    return folder


def test_a_folder_that_is_not_a_marian_model_is_refused(marian, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no config.json here (not a Hugging Face model folder)" in refusal(capsys, empty, tmp_path / "out")
    bert = copy_folder(marian, tmp_path, config={"model_type": "bert"})
    assert "model_type 'bert' is not a Marian model" in refusal(capsys, bert, tmp_path / "out")


def test_a_pickled_checkpoint_is_never_loaded(marian, tmp_path, capsys, monkeypatch):
    folder = copy_folder(marian, tmp_path, drop=("model.safetensors",))
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load called"))
    err = refusal(capsys, folder, tmp_path / "out")
    assert "pytorch_model.bin: a pickled checkpoint, which transduce never loads" in err


@pytest.mark.parametrize(
    "config, named",
    [
        ({"activation_function": "tanh"}, "activation_function 'tanh'"),
        ({"decoder_ffn_dim": 64}, "encoder_ffn_dim = 32 but decoder_ffn_dim = 64"),
        ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings = False"),
    ],
)
def test_a_config_transduce_cannot_represent_is_refused_naming_the_setting(marian, tmp_path, capsys, config, named):
    folder = copy_folder(marian, tmp_path, config=config)
    assert named in refusal(capsys, folder, tmp_path / "out")


def test_weights_that_do_not_fit_the_config_and_a_trained_run_as_destination_are_refused(marian, tmp_path):
    folder = copy_folder(marian, tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    state["model.encoder.extra.weight"] = torch.zeros(2)
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(HFImportError, match="has weights this model has no place for: model.encoder.extra.weight"):
        import_huggingface(folder, tmp_path / "out")
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "transduce-manifest.json").write_text(json.dumps({"kind": "run", "format": 1, "task": "translation"}))
    with pytest.raises(OutputError, match="holds a run trained by transduce"):
        import_huggingface(marian["folder"], trained)
    again = import_huggingface(marian["folder"], marian["root"] / "run")  # an earlier import is replaced
    model = Translator.from_run(again, device="cpu").model
    load_weights(model, again / "best.safetensors")


def test_marian_to_transduce_to_marian_through_export_huggingface(marian, tmp_path):
    """The import exported again (`export huggingface`): the weights saved by transformers are the original's bit
    for bit, the vocabulary files byte for byte, and the settings that decide the network the same."""
    from transduce.export.huggingface import export_huggingface

    out = export_huggingface(marian["run"], tmp_path / "back")
    original, back = (load_file(str(folder / "model.safetensors")) for folder in (marian["folder"], out))
    assert sorted(back) == sorted(original)
    assert all(torch.equal(back[name], tensor) for name, tensor in original.items())
    for name in ("source.spm", "target.spm"):
        assert (out / name).read_bytes() == (marian["folder"] / name).read_bytes()
    assert json.loads((out / "vocab.json").read_text()) == json.loads((marian["folder"] / "vocab.json").read_text())
    settings = [json.loads((folder / "config.json").read_text()) for folder in (marian["folder"], out)]
    keys = (
        "activation_function",
        "scale_embedding",
        "pad_token_id",
        "eos_token_id",
        "decoder_start_token_id",
        "d_model",
    )
    assert [settings[0][k] for k in keys] == [settings[1][k] for k in keys]
    reloaded = transformers.MarianMTModel.from_pretrained(out).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    batch = tokenizer(marian["sentences"], padding=True, return_tensors="pt")
    assert batch.input_ids.tolist() == marian["tokenizer"](marian["sentences"], padding=True).input_ids
    greedy = dict(num_beams=1, do_sample=False, max_new_tokens=8, suppress_tokens=[settings[0]["pad_token_id"]])
    with torch.no_grad():  # the export's own generation defaults are the run's [decode]; compare one search
        assert torch.equal(reloaded.generate(**batch, **greedy), marian["theirs"].generate(**batch, **greedy))
