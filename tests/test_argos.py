"""Argos Translate packages (export/argos.py): the zip's layout and metadata, the runs and destinations refused, and
a stock argos-translate-lt that installs the package and translates as our CTranslate2 engine does with its settings."""

import datetime
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import sentencepiece as spm

from transduce.config import (
    ClassifierRunConfig,
    Config,
    ConfigError,
    CorpusConfig,
    DataConfig,
    HeadConfig,
    ModelConfig,
    ParsingRunConfig,
    save_config,
)
from transduce.data.marian import MarianVocab
from transduce.data.tokenizer import SpecialIds, Tokenizer
from transduce.export import CTranslate2Translator, ExportError, is_export
from transduce.export.argos import (
    ARGOS_BEAM,
    ARGOS_LENGTH_PENALTY,
    MARK,
    Package,
    check_exportable,
    export_argos,
    is_package,
    metadata,
    package_metadata,
    plan,
)
from transduce.outputs import OutputError
from transduce.runs import record_tokenizer

pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed (pip install 'transduce[export]')")


@pytest.fixture(scope="module")
def package(trained_run, tmp_path_factory):
    """The trained toy run (en -> xx) as a float32 package."""
    run, corpus = trained_run
    [out] = export_argos(run, tmp_path_factory.mktemp("argos") / "toy.argosmodel")
    return run, corpus, out


def test_the_zip_is_one_folder_of_metadata_model_vocabulary_and_card(package, tmp_path):
    run, _, out = package
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
        assert archive.comment == MARK and is_package(out)
        archive.extractall(tmp_path)
    assert {name.split("/")[0] for name in names} == {"toy"}
    folder = tmp_path / "toy"
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "metadata.json", "model", "sentencepiece.model"]
    assert (folder / "sentencepiece.model").read_bytes() == (run / "tokenizer.model").read_bytes()
    assert {"model.bin", "config.json", "shared_vocabulary.json"} <= {p.name for p in (folder / "model").iterdir()}
    assert is_export(folder / "model")  # our CTranslate2 export, manifest and all
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta == package_metadata(out)
    assert {k: meta[k] for k in ("from_code", "from_name", "to_code", "to_name", "type", "argos_version")} == {
        "from_code": "en",
        "from_name": "English",
        "to_code": "xx",
        "to_name": "xx",  # not in the table of names: its own code
        "type": "translate",
        "argos_version": "1.0",
    }
    year, month, day = map(int, meta["package_version"].split("."))
    assert abs(datetime.date(year, month, day) - datetime.datetime.now(datetime.timezone.utc).date()).days <= 1
    card = (folder / "README.md").read_text()
    assert card.startswith("# English → xx (en → xx)") and "install_from_path" in card and "## Recipe" in card
    assert "This model has 64 positions" in card  # fewer than Argos's 256 output tokens: the card says so


def test_metadata_names_the_pair_and_dates_the_version():
    meta = metadata(Package(Path("de_pb.argosmodel"), "", "de", "pb"), today=datetime.date(2026, 3, 4))
    assert meta["package_version"] == "2026.3.4"
    assert (meta["from_name"], meta["to_name"]) == ("German", "Portuguese (Brazil)")


def test_int8_and_an_earlier_package_replaced_leaving_nothing_beside_it(package, tmp_path):
    run, _, _ = package
    [out] = export_argos(run, tmp_path / "pair.argosmodel")
    first = out.read_bytes()
    assert export_argos(run, out, quantization="int8") == [out]
    assert out.read_bytes() != first and [p.name for p in tmp_path.iterdir()] == ["pair.argosmodel"]
    with zipfile.ZipFile(out) as archive:
        manifest = json.loads(archive.read("pair/model/transduce-manifest.json"))
    assert manifest["quantization"] == "int8"
    with pytest.raises(ExportError, match="quantization 'int4'"):
        export_argos(run, out, quantization="int4")


def test_a_destination_that_is_not_our_package_is_never_touched(package, tmp_path):
    run, _, _ = package
    theirs = tmp_path / "theirs.argosmodel"
    theirs.write_text("keep me")
    with pytest.raises(OutputError, match="not made by transduce export argos"):
        export_argos(run, theirs)
    other_zip = tmp_path / "other.argosmodel"
    with zipfile.ZipFile(other_zip, "w") as archive:
        archive.writestr("x/metadata.json", "{}")
    with pytest.raises(OutputError, match="not made by transduce"):
        export_argos(run, other_zip)
    (tmp_path / "folder.argosmodel").mkdir()
    with pytest.raises(OutputError, match="not a file"):
        export_argos(run, tmp_path / "folder.argosmodel")
    with pytest.raises(ExportError, match=r"NAME\.argosmodel"):
        export_argos(run, tmp_path / "package.zip")
    assert theirs.read_text() == "keep me" and not (tmp_path / "package.zip").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.argosmodel", "other.argosmodel", "theirs.argosmodel"]


@pytest.mark.parametrize(
    "config",
    [
        ClassifierRunConfig(model=ModelConfig(vocab_size=100, d_model=16, n_heads=2), head=HeadConfig(n_classes=2)),
        ParsingRunConfig(),
    ],
    ids=["classification", "parsing"],
)
def test_a_run_of_another_task_is_refused(config, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    save_config(config, run / "config.json")
    (run / "best.safetensors").write_bytes(b"")
    with pytest.raises(ExportError, match="the run is a (classification|parsing) run; Argos Translate packages hold"):
        export_argos(run, tmp_path / "x.argosmodel")
    assert not (tmp_path / "x.argosmodel").exists()


def rare_pieces(run: Path, n: int) -> list[str]:
    """The vocabulary's last `n` plain pieces (the rarest merges)."""
    tokenizer = Tokenizer(run / "tokenizer.model")
    plain = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size) if tokenizer.id_to_piece(i)[0] == "▁"]
    return plain[-n:]


def retagged(run: Path, copy: Path, tags: dict[str, str]) -> Path:
    """A copy of `run` whose pieces `tags` names are tags instead (control symbols, in its settings file), as a run
    trained with tagged corpora has them: each tag keeps its piece's id and embedding."""
    from sentencepiece import sentencepiece_model_pb2  # protobuf: onnxruntime's, in the argos extra

    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("step-*", "*.lock"))
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString((copy / "tokenizer.model").read_bytes())
    for piece in proto.pieces:
        if piece.piece in tags:
            piece.piece, piece.type = tags[piece.piece], piece.CONTROL
    (copy / "tokenizer.model").write_bytes(proto.SerializeToString())
    meta = json.loads((copy / "tokenizer.json").read_text())
    (copy / "tokenizer.json").write_text(json.dumps({**meta, "tags": list(tags.values())}))
    record_tokenizer(copy)  # as training records the vocabulary it trained with
    return copy


def test_a_multilingual_run_gives_one_package_per_tag_and_a_back_translated_one_none(package):
    run, _, _ = package
    tokenizer = Tokenizer(run / "tokenizer.model")
    out = Path("multi.argosmodel")
    tagged = (CorpusConfig(prefix="a", tag="<2de>"), CorpusConfig(prefix="b", tgt="fr", tag="<2fr>"))
    config = Config(data=DataConfig(src="en", tgt="de", corpora=tagged))
    assert plan(config, tokenizer, out) == [
        Package(Path("multi-2de.argosmodel"), "<2de>", "en", "de"),
        Package(Path("multi-2fr.argosmodel"), "<2fr>", "en", "fr"),
    ]
    back_translated = Config(data=DataConfig(train="genuine", corpora=(CorpusConfig(prefix="bt", tag="<bt>"),)))
    assert plan(back_translated, tokenizer, out) == [Package(out, "", "en", "de")]  # untagged input: the model's own
    piece = tokenizer.pieces("near")[0]  # a plain token is no tag (`translate --tag` refuses it too)
    with pytest.raises(ConfigError, match=f"the tag '{piece}' is not a tag of the vocabulary"):
        plan(back_translated, tokenizer, out, tag=piece)
    with pytest.raises(ConfigError, match="the tag '<2xx>' is not a tag of the vocabulary"):
        plan(config, tokenizer, out, tag="<2xx>")
    clash = (CorpusConfig(prefix="a", tag="<de>"), CorpusConfig(prefix="b", tag=">>de<<"))
    with pytest.raises(ExportError, match="do not name one file each: give --tag"):
        plan(Config(data=DataConfig(corpora=clash)), tokenizer, out)


def test_each_tags_package_asks_the_engine_to_put_the_tag_first(package, tmp_path):
    run, _, _ = package
    tags = ["<2xx>", "<2yy>"]
    copy = retagged(run, tmp_path / "multi", dict(zip(rare_pieces(run, 2), tags)))
    config = json.loads((copy / "config.json").read_text())
    config["data"] |= {
        "train": "",
        "corpora": [{"prefix": "a", "tag": tags[0]}, {"prefix": "b", "tgt": "yy", "tag": tags[1]}],
    }
    (copy / "config.json").write_text(json.dumps(config))
    outs = export_argos(copy, tmp_path / "multi.argosmodel")
    assert outs == [tmp_path / f"multi-{tag[1:-1]}.argosmodel" for tag in tags]
    for out, tag, target in zip(outs, tags, ("xx", "yy")):
        with zipfile.ZipFile(out) as archive:
            engine = json.loads(archive.read(f"{out.stem}/model/config.json"))
            card = archive.read(f"{out.stem}/README.md").decode()
        assert (
            engine["add_source_bos"] is True and engine["bos_token"] == tag and engine["decoder_start_token"] == "<s>"
        )
        assert package_metadata(out)["to_code"] == target and f"starts with the tag `{tag}`" in card
    assert not (tmp_path / "multi.argosmodel").exists()


def test_a_vocabulary_argos_cannot_apply_is_refused(package, tmp_path):
    run, corpus, _ = package
    (tmp_path / "tokenizer.model").write_bytes((run / "tokenizer.model").read_bytes())
    (tmp_path / "tokenizer.json").write_text(json.dumps({"lowercase": True, "normalize": "nfkc"}))
    with pytest.raises(ExportError, match="data.lowercase = true.*; the tokenizer setting normalize"):
        check_exportable(Config(), Tokenizer(tmp_path / "tokenizer.model"))
    ours = Tokenizer(run / "tokenizer.model")
    pieces = [ours.id_to_piece(i) for i in range(ours.vocab_size)]
    prefix = tmp_path / "target"
    spm.SentencePieceTrainer.train(
        input=str(corpus / "train.xx"), model_prefix=str(prefix), vocab_size=30, hard_vocab_limit=False, minloglevel=2
    )
    for name, target in (("two", prefix.with_suffix(".model").read_bytes()), ("one", ours.path.read_bytes())):
        path = tmp_path / name / "tokenizer.model"
        path.parent.mkdir()
        vocab = MarianVocab.write(
            path, source=ours.path.read_bytes(), target=target, pieces=pieces, special=SpecialIds()
        )
        if name == "two":  # a Marian import's source.spm and target.spm
            with pytest.raises(ExportError, match="two SentencePiece models .* one sentencepiece.model"):
                check_exportable(Config(), vocab)
        else:
            check_exportable(Config(), vocab)  # one model on both sides: Argos applies it


def test_the_command_writes_the_package_and_refuses_in_one_line(package, tmp_path, capsys):
    from transduce.cli import main

    run, _, _ = package
    assert main(["export", "argos", str(run), "--out", str(tmp_path / "cli.argosmodel")]) == 0
    assert "Argos Translate package en → xx" in capsys.readouterr().out and is_package(tmp_path / "cli.argosmodel")
    assert main(["export", "argos", str(run), "--out", str(tmp_path / "t.argosmodel"), "--tag", "<none>"]) == 1
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "t.argosmodel").exists()
    (tmp_path / "mine.argosmodel").write_text("mine")
    assert main(["export", "argos", str(run), "--out", str(tmp_path / "mine.argosmodel")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not made by transduce export argos" in err[0]
    assert (tmp_path / "mine.argosmodel").read_text() == "mine"


# A stock Argos Translate ----------------------------------------------------------------------------------------------
# Run in a fresh interpreter: argostranslate.settings reads its folders from the environment when first imported (and
# creates them). MiniSBD, its sentence splitter, would download a model on first use: one sentence per line instead.
ARGOS_SCRIPT = textwrap.dedent(
    """
    import sys
    import argostranslate.package as package
    import argostranslate.translate as translate

    class OneSentencePerLine:  # stands in for argostranslate.sbd.MiniSBDSentencizer
        def __init__(self, pkg):
            self.pkg = pkg

        def split_sentences(self, text):
            return [text] if text.strip() else []

    translate.MiniSBDSentencizer = OneSentencePerLine
    package.install_from_path(sys.argv[1])
    print(translate.translate(sys.stdin.read(), sys.argv[2], sys.argv[3]))
    """
)


def argos_translate(out: Path, lines: list[str], root: Path, pair: tuple[str, str]) -> list[str]:
    folders = {name: root / name for name in ("data", "config", "cache", "packages", "home")}
    env = {
        **os.environ,
        "HOME": str(folders["home"]),
        "XDG_DATA_HOME": str(folders["data"]),
        "XDG_CONFIG_HOME": str(folders["config"]),
        "XDG_CACHE_HOME": str(folders["cache"]),
        "ARGOS_PACKAGES_DIR": str(folders["packages"]),
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", ARGOS_SCRIPT, str(out), *pair],
        input="\n".join(lines),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [p.name for p in folders["packages"].iterdir()] == [out.stem]  # installed where Argos was told
    return proc.stdout.rstrip("\n").split("\n")


@pytest.mark.skipif(
    importlib.util.find_spec("argostranslate") is None,
    reason="argos-translate-lt is not installed (pip install 'transduce[argos]')",
)
@pytest.mark.parametrize("tagged", [False, True], ids=["untagged", "tagged"])
def test_argos_translate_installs_the_package_and_translates_as_our_engine(package, tmp_path, tagged):
    run, corpus, out = package
    tag = "<2xx>" if tagged else ""
    if tagged:  # the piece "▁near" becomes a tag: its embedding is the tag's, and "near" is spelt in other pieces
        run = retagged(run, tmp_path / "tagged", {"▁near": tag})
        [out] = export_argos(run, tmp_path / "tagged.argosmodel", tag=tag)
    ours = CTranslate2Translator.from_run(run, threads=1)
    lines = [*(corpus / "test.en").read_text().splitlines(), *(corpus / "valid.en").read_text().splitlines()]
    theirs = argos_translate(out, lines, tmp_path, ("en", "xx"))
    settings = {"beam": ARGOS_BEAM, "alpha": ARGOS_LENGTH_PENALTY, "length_penalty": "length", "tag": tag}
    mine = ours.translate(lines, **settings)
    if tagged:  # the tag matters: Argos could not give these without it
        assert sum(a != b for a, b in zip(mine, ours.translate(lines, **{**settings, "tag": ""}))) >= len(lines) // 4
    differ = [i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    assert len(theirs) == len(lines) and len(differ) <= len(lines) // 20, differ
    # Each difference: ours ends at once (EOS first, an empty line); Argos decodes at least one token
    # (CTranslate2's min_decoding_length 1), which gives our best translation that is not empty.
    for i in differ:
        nbest = ours.translate_nbest([lines[i]], nbest=ARGOS_BEAM, **settings)[0]
        assert mine[i] == "" and theirs[i] == next(h.text for h in nbest if h.text), (lines[i], mine[i], theirs[i])


def test_the_commands_weight_types_are_the_exports():
    from transduce.cli.deploy import QUANTIZATIONS as listed
    from transduce.export.ctranslate2 import QUANTIZATIONS

    assert tuple(listed) == QUANTIZATIONS
