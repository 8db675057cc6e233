"""Export to Hugging Face: transformers loads the folder with no code of ours (MarianMTModel, Pegasus for pre-LN,
MarianTokenizer) and computes what our model computes: the same token ids, logits, greedy and beam outputs."""

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import make_run

from transduce.config import ClassifierRunConfig, HeadConfig, ModelConfig, save_config
from transduce.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from transduce.decoding.translator import Translator
from transduce.export import ExportError
from transduce.export.huggingface import KIND, export_huggingface, is_export
from transduce.outputs import OutputError, write_manifest

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install 'transduce[hf]')")

pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # MarianTokenizer's
transformers.logging.set_verbosity_error()


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    """The trained toy run exported, loaded by transformers alone; our translator; the test sentences."""
    run, corpus = trained_run
    out = export_huggingface(run, tmp_path_factory.mktemp("hf") / "export")
    return {
        "run": run,
        "out": out,
        "sources": (corpus / "test.en").read_text(encoding="utf-8").splitlines(),
        "ours": Translator.from_run(run, device="cpu"),
        "model": transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval(),
        "tokenizer": transformers.AutoTokenizer.from_pretrained(out),
    }


def max_output(ours: Translator, n_source: int) -> int:
    """Our maximum output (EOS included) for a source of n_source pieces (search._max_lengths)."""
    d = ours.decode
    return min(max(int(d.max_len_a * n_source + d.max_len_b), 1), ours.model.config.max_len - 1)


def by_source_length(ours: Translator, sources: list[str]) -> dict[int, list[int]]:
    """Sentence positions grouped by source length: `generate` takes one maximum length per call."""
    groups: dict[int, list[int]] = {}
    for i, ids in enumerate(ours.tokenizer.encode(sources)):
        groups.setdefault(len(ids), []).append(i)
    return groups


def generated_tokens(sequence: list[int]) -> list[int]:
    """A generated sequence without the decoder's start (BOS), from EOS on."""
    assert sequence[0] == BOS_ID
    body = sequence[1:]
    return body[: body.index(EOS_ID)] if EOS_ID in body else body


def their_greedy(model, tokenizer, ours: Translator, sources: list[str]) -> list[list[int]]:
    """Greedy `generate`, one call per source length with our maximum output for it (`max_length` counts the
    decoder's start token)."""
    out: list[list[int]] = [[] for _ in sources]
    for n, positions in by_source_length(ours, sources).items():
        batch = tokenizer([sources[i] for i in positions], return_tensors="pt", padding=True)
        with torch.no_grad():
            generated = model.generate(**batch, num_beams=1, do_sample=False, max_length=1 + max_output(ours, n))
        for i, sequence in zip(positions, generated.tolist()):
            out[i] = generated_tokens(sequence)
    return out


def teacher_forced(ours: Translator, model, tokenizer, sources: list[str], targets: list[list[int]]):
    """Both models' logits (B, T, V) on one padded batch, and the mask of the real (not padded) target positions."""
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    longest = max(len(t) for t in targets) + 1
    decoder_in = torch.full((len(targets), longest), PAD_ID)
    for row, target in enumerate(targets):
        decoder_in[row, : len(target) + 1] = torch.tensor([BOS_ID, *target])
    src = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(ids) for ids in ours.encode_sources(sources)], batch_first=True, padding_value=PAD_ID
    )
    assert torch.equal(src, batch["input_ids"])
    with torch.no_grad():
        mine = ours.model(src, decoder_in)
        theirs = model(**batch, decoder_input_ids=decoder_in).logits
    real = torch.zeros(decoder_in.shape, dtype=torch.bool)
    for row, target in enumerate(targets):
        real[row, : len(target) + 1] = True
    return mine, theirs, real


def assert_same_logits(ours: Translator, model, tokenizer, sources: list[str]) -> None:
    """Teacher-forced on our greedy outputs, in one padded batch: equal logits at every real position."""
    targets = [h[0].tokens for h in ours.translate_nbest(sources, beam=1)]
    mine, theirs, real = teacher_forced(ours, model, tokenizer, sources, targets)
    assert len({len(t) for t in targets}) > 1 and len(set(tokenizer(sources)["input_ids"][0])) > 1  # padded
    assert torch.allclose(theirs[real], mine[real], atol=1e-4, rtol=0)


# The folder ------------------------------------------------------------------------------------------------------
def test_the_folder_is_what_transformers_loads_with_our_ids_and_a_model_card(exported):
    out = exported["out"]
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "source.spm", "target.spm"} <= names
    assert {"vocab.json", "tokenizer_config.json", "README.md", "transduce-manifest.json"} <= names
    assert type(exported["model"]).__name__ == "MarianMTModel" and is_export(out) and not is_export(exported["run"])
    assert type(exported["tokenizer"]).__name__ == "MarianTokenizer"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left
    ours = exported["ours"]
    vocab = json.loads((out / "vocab.json").read_text(encoding="utf-8"))
    assert vocab == {ours.tokenizer.sp.id_to_piece(i): i for i in range(ours.tokenizer.vocab_size)}
    config = exported["model"].config
    assert (config.pad_token_id, config.eos_token_id, config.decoder_start_token_id) == (PAD_ID, EOS_ID, BOS_ID)
    assert config.scale_embedding and config.activation_function == "relu" and config.share_encoder_decoder_embeddings
    generation = exported["model"].generation_config
    assert generation.num_beams == ours.decode.beam and generation.suppress_tokens == [PAD_ID, BOS_ID]
    assert generation.early_stopping == "never" and generation.max_length == ours.model.config.max_len
    card = (out / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\nlanguage:\n- en\n- xx\n") and "pipeline_tag: translation" in card
    assert "## Recipe" in card and '"lr_scale": 0.1' in card and "## Data" in card and "| train | 600 |" in card
    valid = [json.loads(line) for line in (exported["run"] / "metrics.jsonl").read_text().splitlines()]
    bleu = [r["valid_bleu"] for r in valid if r["kind"] == "valid"]
    assert f"| 250 | {valid[-1]['valid_loss']:.4g} |" in card and f"{bleu[-1]:.4g}" in card
    assert "Exported weights: `best.safetensors`" in card and "Best validation (best.json): step 250" in card


def test_token_ids_equal_ours(exported):
    ours, tokenizer = exported["ours"], exported["tokenizer"]
    sentences = exported["sources"] + ["", "  two  spaces  ", "ünïcödé ☃ the cat", "a\tb", "the </s> <s> <pad> <unk>"]
    assert tokenizer(sentences)["input_ids"] == ours.encode_sources(sentences)
    long = " ".join(exported["sources"])  # past the model's positions: cut as we cut it
    assert len(ours.tokenizer.encode([long])[0]) > ours.model.config.max_len
    assert tokenizer([long], truncation=True)["input_ids"] == ours.encode_sources([long])


def test_teacher_forced_logits_equal_ours_on_a_padded_batch(exported):
    assert_same_logits(exported["ours"], exported["model"], exported["tokenizer"], exported["sources"])


def test_greedy_generate_gives_our_greedy_tokens_and_strings(exported):
    ours, model, tokenizer, sources = (exported[k] for k in ("ours", "model", "tokenizer", "sources"))
    expected = ours.translate_nbest(sources, beam=1)
    got = their_greedy(model, tokenizer, ours, sources)
    assert got == [h[0].tokens for h in expected]
    texts = tokenizer.batch_decode([[BOS_ID, *ids, EOS_ID] for ids in got], skip_special_tokens=True)
    assert texts == [h[0].text for h in expected]
    # one padded batch, every sentence allowed the model's positions (ours: max_len_b past them)
    capped = Translator(ours.model, ours.tokenizer, decode=dataclasses.replace(ours.decode, max_len_b=10_000))
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch, num_beams=1)  # generation_config.json: max_length = the positions
    capped_hyps = capped.translate_nbest(sources, beam=1)
    assert [generated_tokens(s) for s in generated.tolist()] == [h[0].tokens for h in capped_hyps]
    assert tokenizer.batch_decode(generated, skip_special_tokens=True) == [h[0].text for h in capped_hyps]


@pytest.mark.parametrize("penalty, alpha", [("length", 0.6), ("none", 0.0)])
def test_beam4_with_the_length_penalty_equals_ours(exported, penalty, alpha):
    """The same search: 2 x beam candidates a step, a hypothesis finishes only when its EOS is among the `beam` best,
    log P / |Y|^alpha with EOS in |Y|, PAD and BOS removed after the log-softmax, and `early_stopping="never"`
    stops where ours does (no unfinished hypothesis can win). The n-best lists and their scores agree; where the
    best translations would differ (a near tie broken by rounding), ours has the higher model score."""
    ours, model, tokenizer, sources = (exported[k] for k in ("ours", "model", "tokenizer", "sources"))
    options = {"beam": 4, "alpha": alpha, "length_penalty": penalty, "nbest": 4}
    expected = ours.translate_nbest(sources, **options)
    same = compared = 0
    for n, positions in by_source_length(ours, sources).items():
        batch = tokenizer([sources[i] for i in positions], return_tensors="pt", padding=True)
        with torch.no_grad():
            result = model.generate(
                **batch,
                num_beams=4,
                num_return_sequences=4,
                length_penalty=alpha,
                max_length=1 + max_output(ours, n),
                output_scores=True,
                return_dict_in_generate=True,
            )
        sequences, scores = result.sequences.view(len(positions), 4, -1), result.sequences_scores.view(-1, 4)
        for row, i in enumerate(positions):
            mine = {tuple(h.tokens): h.score for h in expected[i]}
            theirs = [(generated_tokens(s), float(x)) for s, x in zip(sequences[row].tolist(), scores[row].tolist())]
            for tokens, score in theirs:
                if tuple(tokens) in mine:
                    assert score == pytest.approx(mine[tuple(tokens)], abs=1e-4)
                    compared += 1
            if theirs[0][0] == expected[i][0].tokens:
                same += 1
            else:
                assert expected[i][0].score >= theirs[0][1] - 1e-4, sources[i]
    print(f"beam 4, {penalty} penalty: {same}/{len(sources)} identical, {compared} n-best scores compared")
    assert compared >= 3 * len(sources) and same == len(sources)


def test_save_pretrained_and_reload_still_equal(exported, tmp_path):
    """What a user does next (fine-tune, push to the Hub) starts from save_pretrained: the reloaded folder computes
    the same logits, token for token."""
    model, tokenizer, ours, sources = (exported[k] for k in ("model", "tokenizer", "ours", "sources"))
    model.save_pretrained(tmp_path / "again")
    tokenizer.save_pretrained(tmp_path / "again")
    model2 = transformers.MarianMTModel.from_pretrained(tmp_path / "again").eval()
    tokenizer2 = transformers.AutoTokenizer.from_pretrained(tmp_path / "again")
    assert tokenizer2(sources)["input_ids"] == tokenizer(sources)["input_ids"]
    batch = tokenizer(sources[:8], return_tensors="pt", padding=True)
    decoder_in = torch.full((8, 5), BOS_ID)
    with torch.no_grad():
        before = model(**batch, decoder_input_ids=decoder_in).logits
        after = model2(**batch, decoder_input_ids=decoder_in).logits
    assert torch.equal(before, after)
    assert model2.generation_config.suppress_tokens == [PAD_ID, BOS_ID]
    assert_same_logits(ours, model2, tokenizer2, sources)


# Variants --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "settings, cls",
    [
        ({"norm_first": True, "n_layers": 2}, "PegasusForConditionalGeneration"),
        ({"norm_first": True, "n_encoder_layers": 2, "n_decoder_layers": 1}, "PegasusForConditionalGeneration"),
        ({"tie_embeddings": False, "n_layers": 2}, "MarianMTModel"),
    ],
    ids=["preLN-2layers", "preLN-2enc-1dec", "postLN-untied"],
)
def test_pre_ln_as_pegasus_and_untied_embeddings_compute_as_ours(exported, tmp_path, settings, cls):
    """Random models decode to their maximum length: many steps to agree on."""
    run = make_run(tmp_path / "run", exported["run"] / "tokenizer.model", perturb=True, **settings)
    out = export_huggingface(run, tmp_path / "export")
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert type(model).__name__ == cls and type(tokenizer).__name__ == "MarianTokenizer"
    if not settings.get("tie_embeddings", True):
        assert not model.config.share_encoder_decoder_embeddings and not model.config.tie_word_embeddings
        embeddings = [model.model.encoder.embed_tokens.weight, model.model.decoder.embed_tokens.weight]
        assert not torch.equal(embeddings[0], embeddings[1]) and not torch.equal(embeddings[1], model.lm_head.weight)
    ours, sources = Translator.from_run(run, device="cpu"), exported["sources"][:10]
    assert_same_logits(ours, model, tokenizer, sources)
    # one padded batch, every sentence decoded to the model's positions (ours: max_len_b past them)
    capped = Translator(ours.model, ours.tokenizer, decode=dataclasses.replace(ours.decode, max_len_b=10_000))
    expected = [h[0].tokens for h in capped.translate_nbest(sources, beam=1)]
    with torch.no_grad():
        generated = model.generate(**tokenizer(sources, return_tensors="pt", padding=True), num_beams=1)
    assert [generated_tokens(s) for s in generated.tolist()] == expected
    assert sum(len(t) for t in expected) > 20 * len(sources)


# Refusals --------------------------------------------------------------------------------------------------------
def lowercased(root: Path, tokenizer: Path, **meta) -> Path:
    """A copy of `tokenizer` whose settings (tokenizer.json) say `meta`."""
    root.mkdir()
    copy = root / "tokenizer.model"
    copy.write_bytes(tokenizer.read_bytes())
    settings = json.loads(tokenizer.with_suffix(".json").read_text())
    copy.with_suffix(".json").write_text(json.dumps({**settings, **meta}))
    return copy


REFUSED = {
    "attention_window": ({"attention_window": 2}, None, "model.attention_window = 2"),
    "learned": ({"positional": "learned"}, None, "model.positional = 'learned'"),
    "eps": ({"layer_norm_eps": 1e-6}, None, "model.layer_norm_eps = 1e-06"),
    "pad_id": ({"pad_id": 1}, None, "model.pad_id = 1"),
    "preLN-untied": ({"norm_first": True, "tie_embeddings": False}, None, "model.tie_embeddings = false"),
    "lowercase": ({}, {"lowercase": True}, "data.lowercase = true"),
    "tokenizer-setting": ({}, {"user_tags": ["<x>"]}, "the tokenizer setting user_tags"),
}


@pytest.mark.parametrize("model, meta, reason", REFUSED.values(), ids=REFUSED.keys())
def test_each_setting_no_class_can_represent_is_refused_in_one_line(exported, tmp_path, capsys, model, meta, reason):
    tokenizer = exported["run"] / "tokenizer.model"
    if meta is not None:
        tokenizer = lowercased(tmp_path / "tok", tokenizer, **meta)
    run = make_run(tmp_path / "run", tokenizer, perturb=True, **model)
    with pytest.raises(ExportError, match="cannot export to Hugging Face") as err:
        export_huggingface(run, tmp_path / "export")
    assert reason in str(err.value) and "\n" not in str(err.value)
    from transduce.cli import main

    assert main(["export", "huggingface", str(run), "--out", str(tmp_path / "export")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("transduce export: error: cannot export") and reason in lines[0]
    assert not (tmp_path / "export").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_run_of_another_task_is_refused(exported, tmp_path):
    run = tmp_path / "classifier"
    run.mkdir()
    config = ClassifierRunConfig(model=ModelConfig(vocab_size=100, d_model=16, n_heads=2), head=HeadConfig(n_classes=2))
    save_config(config, run / "config.json")
    (run / "best.safetensors").write_bytes(b"")
    with pytest.raises(ExportError, match="the run is a classification run; only translation runs"):
        export_huggingface(run, tmp_path / "export")
    assert not (tmp_path / "export").exists()


# The output rules of `export ctranslate2` -------------------------------------------------------------------------
def test_a_folder_that_is_not_our_export_is_never_overwritten(exported, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(OutputError, match="not made by transduce"):
        export_huggingface(exported["run"], out)
    other = tmp_path / "ct2"
    other.mkdir()
    write_manifest(other, "ctranslate2-export")
    with pytest.raises(OutputError, match="another kind"):
        export_huggingface(exported["run"], other)
    assert [p.name for p in out.iterdir()] == ["precious.txt"] and (out / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2", "mine"]


def test_an_empty_folder_or_an_earlier_export_is_replaced_keeping_the_users_files(exported, tmp_path):
    (tmp_path / "export").mkdir()
    out = export_huggingface(exported["run"], tmp_path / "export")
    (out / "NOTES.txt").write_text("mine\n")
    (out / "model.safetensors").write_bytes(b"broken")  # ours: replaced
    export_huggingface(exported["run"], out)
    assert (out / "NOTES.txt").read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    assert json.loads((out / "transduce-manifest.json").read_text())["kind"] == KIND
    assert transformers.MarianMTModel.from_pretrained(out) is not None


def test_the_command_and_a_missing_transformers(exported, tmp_path, monkeypatch, capsys):
    from transduce.cli import main

    assert main(["export", "huggingface", str(exported["run"]), "--out", str(tmp_path / "cli")]) == 0
    assert "MarianMTModel" in capsys.readouterr().out and is_export(tmp_path / "cli")
    with pytest.raises(SystemExit):
        main(["export", "huggingface", "--help"])
    assert "AutoTokenizer.from_pretrained(DIR)" in capsys.readouterr().out
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    assert main(["export", "huggingface", str(exported["run"]), "--out", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "pip install 'transduce[hf]'" in err
    assert not (tmp_path / "none").exists()
