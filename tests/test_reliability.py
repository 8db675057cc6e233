"""Careless and hostile input, command by command (issue 12): every user mistake or environment problem is one line on
stderr with a non-zero exit and no traceback, and nothing the user already has is ever deleted or overwritten.

Commands run in-process (`transduce.cli.main`) so that the table stays fast; a few run as real processes too.
Training cases may print progress lines before their error: there the error must be the one and last line.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tiny_recipe
from test_classify import toy_rows, write_tsv

from transduce.cli import main
from transduce.training.checkpoint import checkpoint_dirs

SENTINEL = "KEEP-ME.txt"


@dataclass
class Result:
    code: int
    out: str
    err: str


def transduce(capsys, *args) -> Result:
    capsys.readouterr()
    try:
        code = main([str(a) for a in args])
    except SystemExit as exit_:  # argparse
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def assert_one_line_error(result: Result, *needles: str, code: int = 1) -> None:
    assert result.code == code, (result.code, result.err[-2000:])
    assert "Traceback" not in result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and lines[-1] == errors[0], result.err[-2000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])


def put_sentinel(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SENTINEL
    path.write_text(f"the user's own file in {folder.name}\n")
    return path


def assert_kept(*sentinels: Path) -> None:
    for path in sentinels:
        assert path.is_file(), f"{path} was deleted"
        assert path.read_text() == f"the user's own file in {path.parent.name}\n", f"{path} was overwritten"


# Fixtures -------------------------------------------------------------------------------------------------------------
@pytest.fixture
def env(tmp_path, trained_run, monkeypatch):
    """A copy of the trained tiny run (tests may damage it), its corpus, a recipe, a classifier corpus."""
    run, corpus = trained_run
    shutil.copytree(run, tmp_path / "run", ignore=shutil.ignore_patterns(".transduce.lock"))
    recipe = tiny_recipe(tmp_path / "recipe.toml", corpus, steps=4, save_every=2)
    cls_train = write_tsv(tmp_path / "cls.tsv", toy_rows(120, 0))
    cls_recipe = tmp_path / "cls.toml"
    cls_recipe.write_text(
        f'[data]\ntrain = "{cls_train}"\nvocab_size = 60\nmax_len = 32\n'
        "[model]\nn_layers = 1\nd_model = 32\nd_ff = 64\nn_heads = 4\nmax_len = 32\n"
        '[train]\nprecision = "fp32"\nmax_steps = 2\nmax_tokens = 512\nnum_threads = 1\n'
    )
    (tmp_path / "text.en").write_text("the dog sees a cat\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return SimpleNamespace(
        tmp=tmp_path,
        run=tmp_path / "run",
        corpus=corpus,
        recipe=recipe,
        work=work,
        cls_recipe=cls_recipe,
        cls_train=cls_train,
    )


# The table -----------------------------------------------------------------------------------------------------------
@dataclass
class Case:
    argv: list[str]
    needles: tuple[str, ...] = ()
    code: int = 1
    setup: object = None  # setup(env) before the command
    keep: tuple[str, ...] = ()  # files ({tmp}-relative templates) whose contents must not change
    sentinels: tuple[str, ...] = ()  # folders that get a sentinel file before the command
    absent: tuple[str, ...] = ()  # paths the refused command must not leave behind (an empty run folder)
    empty: tuple[str, ...] = ()  # the user's empty folders: made before the command, still there and empty after
    marks: list = field(default_factory=list)


def _write(path: str, data: bytes):
    return lambda e: (
        Path(path.format(**vars(e))).parent.mkdir(parents=True, exist_ok=True),
        Path(path.format(**vars(e))).write_bytes(data),
    )


def _bad_metrics(e):
    with open(e.run / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "step": 3\n')


def _null_label(e):
    (e.tmp / "null.jsonl").write_text('{"text": "a fine film", "label": "pos"}\n{"text": "dull", "label": null}\n')


def _copy_corpus_here(e):
    for name in ("train.en", "train.xx"):
        shutil.copy(e.corpus / name, e.work / name)


def _nan_weights(e):
    """A copy of the run whose averaged weights hold one NaN (what a diverged run could have saved)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from transduce.training.checkpoint import find_weights

    shutil.copytree(e.run, e.tmp / "nan")
    _, weights = find_weights(e.tmp / "nan")
    with safe_open(str(weights), "pt") as f:
        metadata, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    name = sorted(tensors)[0]
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, str(e.tmp / "nan" / "averaged.safetensors"), metadata=metadata)


def _copy_weights_out(e):
    shutil.copy(checkpoint_dirs(e.run)[-1] / "model.safetensors", e.tmp / "w.safetensors")


def _earlier_format(folder: str, copy_of: str | None = None):
    """`folder` (a copy of `copy_of` when given) as an earlier version left it: a manifest without a format."""

    def setup(e):
        path = Path(folder.format(**vars(e)))
        if copy_of:
            shutil.copytree(copy_of.format(**vars(e)), path)
        manifest = json.loads((path / "transduce-manifest.json").read_text())
        del manifest["format"]
        (path / "transduce-manifest.json").write_text(json.dumps(manifest))

    return setup


def _run_setting(section: str, key: str, value):
    """The copied run's config.json with `section.key` set to `value` (as a hand edit would leave it; NaN as Python's
    json writes it)."""

    def setup(e):
        path = e.run / "config.json"
        raw = json.loads(path.read_text())
        raw[section][key] = value
        path.write_text(json.dumps(raw))

    return setup


def _run_of_task(task: str):
    """{tmp}/other: a copy of the run whose config.json names another task (what such a run's config says first)."""

    def setup(e):
        shutil.copytree(e.run, e.tmp / "other")
        config = json.loads((e.run / "config.json").read_text())
        (e.tmp / "other" / "config.json").write_text(json.dumps({**config, "task": task}))

    return setup


def _tokenizer_setting(key: str, value):
    def setup(e):
        path = e.run / "tokenizer.json"
        raw = json.loads(path.read_text())
        raw[key] = value
        path.write_text(json.dumps(raw))

    return setup


def _export_with_beam(beam: int):
    """A CTranslate2 export of the run whose manifest's decode.beam was edited to `beam`."""

    def setup(e):
        from transduce.export.ctranslate2 import export_ctranslate2
        from transduce.outputs import MANIFEST

        export_ctranslate2(e.run, e.tmp / "ct2")
        path = e.tmp / "ct2" / MANIFEST
        manifest = json.loads(path.read_text())
        manifest["decode"]["beam"] = beam
        path.write_text(json.dumps(manifest))

    return setup


def _refused_setting(setting: str, *needles: str) -> Case:
    """`train --set SETTING` refused before anything is prepared or written (the new --out is not even made)."""
    return Case(
        ["train", "{recipe}", "--out", "{tmp}/r", "--set", setting],
        needles or (setting.split("=")[0],),
        absent=("{tmp}/r",),
    )


def _exported(e):
    pytest.importorskip("ctranslate2")
    from transduce.export.ctranslate2 import export_ctranslate2

    export_ctranslate2(e.run, e.tmp / "ct2")


CT2_EXPORT = ("ct2: a CTranslate2 export, not a run directory", "--engine ctranslate2")
PREPARE = ["prepare", "--train", "{corpus}/train", "--src", "en", "--tgt", "xx", "--vocab-size", "60"]
EARLIER_RUN = ("{run}: a run made by another version of transduce (format 0;", "train again into a new --out")
EARLIER_DATA = ("{tmp}/old: prepared data made by another version of transduce", "remove it and prepare again")
ONE = ["--sentence", "the dog sees a cat"]
CASES = {
    # 1. data loss: a destination that exists and is not our own output is refused, whatever is in it
    "prepare into a user's folder": Case(
        [*PREPARE, "--out", "{tmp}/mine"], ("not made by transduce",), sentinels=("{tmp}/mine",)
    ),
    "prepare into the current directory": Case(
        [*PREPARE[:2], "train", *PREPARE[3:], "--out", "."],
        ("not made by transduce",),
        setup=_copy_corpus_here,
        sentinels=("{work}",),
        keep=("{work}/train.en",),
    ),
    "train into a folder holding the user's data/": Case(
        ["train", "{recipe}", "--out", "."], ("not made by transduce",), sentinels=("{work}/data",)
    ),
    "train --out a regular file": Case(
        ["train", "{recipe}", "--out", "{tmp}/text.en"], ("not a folder",), keep=("{tmp}/text.en",)
    ),
    "classify train into a user's folder": Case(
        ["classify", "train", "{cls_recipe}", "--out", "{tmp}/mine"],
        ("not made by transduce",),
        sentinels=("{tmp}/mine",),
    ),
    "demo into a user's folder": Case(
        ["demo", "--out", "{tmp}/mine", "--set", "train.max_steps=2"],
        ("not made by transduce",),
        sentinels=("{tmp}/mine",),
    ),
    "attention into a user's folder": Case(
        ["attention", "{run}", *ONE, "--out", "{tmp}/mine"], ("not made by transduce",), sentinels=("{tmp}/mine",)
    ),
    "evaluate --output over an existing file": Case(
        ["evaluate", "{run}", "--src", "{corpus}/test.en", "--ref", "{corpus}/test.xx", "--output", "{corpus}/test.xx"],
        ("already exists",),
        keep=("{corpus}/test.xx",),
    ),
    "average over a file that is not ours": Case(
        ["average", "{run}", "--last", "2", "--output", "{tmp}/x.safetensors"],
        ("not a weights file written by transduce",),
        setup=_write("{tmp}/x.safetensors", b"user bytes"),
        keep=("{tmp}/x.safetensors",),
    ),
    # 3. unbounded memory
    "attention on a 3,000-character sentence": Case(
        ["attention", "{run}", "--sentence", "dog " * 750, "--out", "{tmp}/pics"], ("limited to 100 pieces",)
    ),
    # 4. average
    "average --last 0": Case(["average", "{run}", "--last", "0"], ("at least 1",)),
    "average --last -3": Case(["average", "{run}", "--last", "-3"], ("at least 1",), keep=("{run}/config.json",)),
    "average --output beside config.json": Case(
        ["average", "{run}", "--output", "{run}/config.safetensors"], ("side file",), keep=("{run}/config.json",)
    ),
    "average over a checkpoint's own weights": Case(
        ["average", "{run}", "--last", "2", "--output", "{run}/checkpoints/step-00000250/model.safetensors"],
        ("holds other weights",),
        keep=("{run}/checkpoints/step-00000250/model.safetensors",),
    ),
    "average --output with a JSON name": Case(
        ["average", "{run}", "--output", "{tmp}/avg.json"], ("ending in .safetensors",)
    ),
    # 5. decoding options
    "translate --nbest 5 --beam 4": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en", "--beam", "4", "--nbest", "5"], ("larger than --beam",)
    ),
    "translate --nbest 5 (beam from the run)": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en", "--nbest", "5"], ("beam size",)
    ),
    "translate --nbest 0": Case(["translate", "{run}", "--input", "{tmp}/text.en", "--nbest", "0"], ("--nbest",)),
    "translate --beam 0": Case(["translate", "{run}", "--input", "{tmp}/text.en", "--beam", "0"], ("--beam",)),
    "translate --beam -1": Case(["translate", "{run}", "--input", "{tmp}/text.en", "--beam", "-1"], ("--beam",)),
    "translate --beam 100000": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en", "--beam", "100000"], ("--beam",)
    ),
    "attention --layer 0": Case(["attention", "{run}", *ONE, "--out", "{tmp}/p", "--layer", "0"], ("give 1 to",)),
    "attention --layer 99": Case(["attention", "{run}", *ONE, "--out", "{tmp}/p", "--layer", "99"], ("give 1 to",)),
    "attention --head 99": Case(["attention", "{run}", *ONE, "--out", "{tmp}/p", "--head", "99"], ("heads 0 to",)),
    # 6. late crashes, now found before step 1
    "model.max_len below the data's lengths": Case(
        ["train", "{recipe}", "--out", "{tmp}/r", "--set", "model.max_len=6"], ("model.max_len is 6",)
    ),
    "an early-stopping metric the task lacks": Case(
        ["train", "{recipe}", "--out", "{tmp}/r", "--set", "train.early_stop_metric=accuracy"], ("does not apply",)
    ),
    "patience without validation data": Case(
        ["train", "{recipe}", "--out", "{tmp}/r", "--set", "data.valid=''", "--set", "train.patience=2"],
        ("no validation data",),
    ),
    # 7. environment and damaged files
    "an unknown device": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en", "--device", "tpu"], ("unknown device",)
    ),
    "--device cuda without a GPU": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en", "--device", "cuda"],
        ("no CUDA GPU",),
        marks=[pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")],
    ),
    "a corrupt tokenizer": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en"],
        ("SentencePiece",),
        setup=_write("{run}/tokenizer.model", b"\x00garbage"),
    ),
    "corrupt weights": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en"],
        ("cannot read weights",),
        setup=_write("{run}/best.safetensors", b"\x00garbage"),
    ),
    "score --tokenize bogus": Case(
        ["score", "--hyp", "{tmp}/text.en", "--ref", "{tmp}/text.en", "--tokenize", "bogus"],
        ("invalid choice",),
        code=2,
    ),
    "a damaged metrics.jsonl": Case(["plot", "{run}", "--out", "{tmp}/c.png"], ("metrics.jsonl:",), setup=_bad_metrics),
    "plot --out x.txt": Case(["plot", "{run}", "--out", "{tmp}/x.txt"], (".png, .svg or .pdf",)),
    "plot over a user's picture": Case(
        ["plot", "{run}", "--out", "{tmp}/mine.png"],
        ("not drawn by transduce",),
        setup=_write("{tmp}/mine.png", b"\x89PNG user picture"),
        keep=("{tmp}/mine.png",),
    ),
    "classify train with a missing file": Case(
        ["classify", "train", "{cls_recipe}", "--out", "{tmp}/c", "--set", "data.train='{tmp}/nope.tsv'"],
        ("no such file",),
        absent=("{tmp}/c",),
    ),
    "train with a missing corpus into the user's empty folder": Case(
        ["train", "{recipe}", "--out", "{tmp}/mine", "--set", "data.train='{tmp}/nope'"],
        ("no such file",),
        empty=("{tmp}/mine",),
    ),
    "train with a missing corpus into a new nested folder": Case(
        ["train", "{recipe}", "--out", "{tmp}/new/deeper/r", "--set", "data.train='{tmp}/nope'"],
        ("no such file",),
        absent=("{tmp}/new",),
    ),
    "classify train with a null label": Case(
        ["classify", "train", "{cls_recipe}", "--out", "{tmp}/c", "--set", "data.train='{tmp}/null.jsonl'"],
        ("null.jsonl:2", "label"),
        setup=_null_label,
        absent=("{tmp}/c",),
    ),
    "translate --exact with the torch engine": Case(
        ["translate", "{run}", "--exact", "--input", "{tmp}/text.en"], ("--exact applies to --engine ctranslate2",)
    ),
    "translate --patience with the ctranslate2 engine": Case(
        ["translate", "{run}", "--engine", "ctranslate2", "--patience", "1", "--input", "{tmp}/text.en"],
        ("--patience applies to --engine torch",),
    ),
    "translate with a negative --patience": Case(
        ["translate", "{run}", "--patience", "-1", "--input", "{tmp}/text.en"], ("--patience must be between 0",)
    ),
    "translate a missing input file": Case(["translate", "{run}", "--input", "{tmp}/nope.en"], ("no such file",)),
    "an unknown shipped recipe": Case(["train", "nonsense", "--out", "{tmp}/r"], ("multi30k",)),
    "resume without a recipe where there is no run": Case(["train", "--out", "{tmp}/empty"], ("no run to resume",)),
    "evaluate a weights file outside any run": Case(
        ["evaluate", "{tmp}/w.safetensors", "--src", "{corpus}/test.en", "--ref", "{corpus}/test.xx"],
        ("w.safetensors: not inside a run directory",),
        setup=_copy_weights_out,
    ),
    # 8. runs and caches of an earlier format (outputs.FORMAT): refused, not read through upgrade branches
    "resume a run of an earlier format": Case(
        ["train", "--out", "{run}"], EARLIER_RUN, setup=_earlier_format("{run}"), keep=("{run}/config.json",)
    ),
    "translate with a run of an earlier format": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en"], EARLIER_RUN, setup=_earlier_format("{run}")
    ),
    "train on prepared data of an earlier format": Case(
        ["train", "{recipe}", "--out", "{tmp}/r", "--set", "data.prepared='{tmp}/old'"],
        EARLIER_DATA,
        setup=_earlier_format("{tmp}/old", copy_of="{run}/data"),
        absent=("{tmp}/r",),
    ),
    "prepare into prepared data of an earlier format": Case(
        [*PREPARE, "--out", "{tmp}/old"],
        EARLIER_DATA,
        setup=_earlier_format("{tmp}/old", copy_of="{run}/data"),
        keep=("{tmp}/old/summary.json",),
    ),
    # issue 65, 2a: a test split is named by its file name, and a name that is taken is refused, not replaced
    "prepare --test named like the training split": Case(
        [*PREPARE, "--test", "{corpus}/train", "--out", "{tmp}/d"],
        ("data.test: ", "would be named 'train', the name of the train split"),
        absent=("{tmp}/d",),
    ),
    "prepare two test sets of one name": Case(
        [*PREPARE, "--test", "{corpus}/test", "--test", "{tmp}/other/test", "--out", "{tmp}/d"],
        ("would both be named 'test'", "rename one"),
        setup=lambda e: shutil.copytree(e.corpus, e.tmp / "other"),
        absent=("{tmp}/d",),
    ),
    # issue 65, 2c: a run's logs are never written through a link out of the run
    "resume a run whose train.log links outside it": Case(
        ["train", "--out", "{run}", "--set", "train.max_steps=1000"],
        ("train.log: a symbolic link", "remove the link"),
        setup=lambda e: (
            (e.tmp / "outside.txt").write_text("the user's\n"),
            (e.run / "train.log").unlink(missing_ok=True),
            (e.run / "train.log").symlink_to(e.tmp / "outside.txt"),
        ),
        keep=("{tmp}/outside.txt",),
    ),
    # issue 65, 13: weights with NaN values are refused on load, naming the file and the tensor
    "translate with NaN weights": Case(
        ["translate", "{tmp}/nan/averaged.safetensors", "--input", "{tmp}/text.en"],
        ("averaged.safetensors: ", "holds NaN or infinite values"),
        setup=_nan_weights,
    ),
    # issue 65, severe 1: a run's config.json meets the settings' bounds (the flags' own: --beam's 1-64) and the memory
    # estimate wherever it is read; the costly ones are refused before anything is allocated
    "a run's config.json with decode.beam 1000": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en"],
        ("decode.beam must be between 1 and 64, got 1000",),
        setup=_run_setting("decode", "beam", 1000),
    ),
    "a run's config.json with decode.alpha NaN": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en"],
        ("decode.alpha must be a finite number, got nan",),
        setup=_run_setting("decode", "alpha", float("nan")),
    ),
    "a run's config.json with decode.max_len_a -5": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en"],
        ("decode.max_len_a must be between 0 and 100, got -5",),
        setup=_run_setting("decode", "max_len_a", -5.0),
    ),
    "a run's config.json with decode.max_len_b -100": Case(
        ["evaluate", "{run}", "--src", "{corpus}/test.en", "--ref", "{corpus}/test.xx"],
        ("decode.max_len_b must be between 0 and 1,000,000, got -100",),
        setup=_run_setting("decode", "max_len_b", -100),
    ),
    "a run's config.json with a huge model.vocab_size": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en"],
        ("model.vocab_size = 1,000,000,000,000: the model needs at least", "of memory (parameters", "this machine's"),
        setup=_run_setting("model", "vocab_size", 10**12),
    ),
    "a run's config.json with a huge model.max_len": Case(
        ["export", "ctranslate2", "{run}", "--out", "{tmp}/ct2"],
        ("model.max_len = 1,000,000,000,000: the model needs at least",),
        setup=_run_setting("model", "max_len", 10**12),
        absent=("{tmp}/ct2",),
    ),
    "an export whose manifest says decode.beam 1000": Case(
        ["translate", "{tmp}/ct2", "--engine", "ctranslate2", "--input", "{tmp}/text.en"],
        ("decode.beam must be between 1 and 64, got 1000",),
        setup=_export_with_beam(1000),
    ),
    "a run's config.json nested thousands of levels deep": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en"],
        ("config.json: cannot read the run's config (nested too deeply)",),
        setup=_write("{run}/config.json", b'{"model": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ),
    "serve a run whose config.json is nested thousands of levels deep": Case(
        ["serve", "{run}", "--port", "0"],
        ("config.json: cannot read the run's config (nested too deeply)",),
        setup=_write("{run}/config.json", b'{"model": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ),
    "a tokenizer.json nested thousands of levels deep": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en"],
        ("tokenizer.json: cannot read the tokenizer's settings (nested too deeply)",),
        setup=_write("{run}/tokenizer.json", b"[" * 100_000 + b"]" * 100_000),
    ),
    "a tokenizer.json whose lowercase is the string 'false'": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en"],
        ("tokenizer.json: \"lowercase\" must be true or false, got 'false'",),
        setup=_tokenizer_setting("lowercase", "false"),
    ),
    "train --set model.n_layers=99999999999": _refused_setting(
        "model.n_layers=99999999999", "model.n_layers = 99,999,999,999: training needs at least", "parameters"
    ),
    "train --set train.max_tokens=10**12": _refused_setting(
        "train.max_tokens=1000000000000", "train.max_tokens = 1,000,000,000,000: training needs at least"
    ),
    "train --set model.d_model huge": _refused_setting("model.d_model=4194304", "model.d_model = 4,194,304"),
    # issue 65, values accepted that should be refused: each before data preparation, naming the setting
    "train.peak_lr=-1": _refused_setting("train.peak_lr=-1", "train.peak_lr must be above 0, got -1"),
    "train.max_minutes=nan": _refused_setting("train.max_minutes=nan", "train.max_minutes must be a finite number"),
    "train.max_minutes=-1": _refused_setting("train.max_minutes=-1", "train.max_minutes must be at least 0, got -1"),
    "train.clip_norm=nan": _refused_setting("train.clip_norm=nan", "train.clip_norm must be a finite number"),
    "train.lr_scale=nan": _refused_setting("train.lr_scale=nan", "train.lr_scale must be a finite number"),
    "train.seed=-1": _refused_setting("train.seed=-1", "train.seed must be between 0 and 4,294,967,295, got -1"),
    "train.adam_eps=nan": _refused_setting("train.adam_eps=nan", "train.adam_eps must be a finite number"),
    "train.adam_beta1=nan": _refused_setting("train.adam_beta1=nan", "train.adam_beta1 must be a finite number"),
    "train.adam_beta1=1": _refused_setting("train.adam_beta1=1.0", "train.adam_beta1 must be in [0, 1), got 1.0"),
    "train.weight_decay=nan": _refused_setting("train.weight_decay=nan", "train.weight_decay must be a finite"),
    "decode.alpha=inf": _refused_setting("decode.alpha=inf", "decode.alpha must be a finite number, got inf"),
    "decode.max_len_a=nan": _refused_setting("decode.max_len_a=nan", "decode.max_len_a must be a finite number"),
    "decode.beam=1000": _refused_setting("decode.beam=1000", "decode.beam must be between 1 and 64, got 1000"),
    "train.valid_beam=65": _refused_setting("train.valid_beam=65", "train.valid_beam must be between 1 and 64"),
    "a metric the task lacks is named before the data is read": Case(
        [
            "train",
            "{recipe}",
            "--out",
            "{tmp}/r",
            "--set",
            "train.early_stop_metric=f1",
            "--set",
            "data.train='{tmp}/nope'",
        ],
        ("train.early_stop_metric 'f1' does not apply",),
        absent=("{tmp}/r",),
    ),
    "prepare --max-ratio nan": Case(
        [*PREPARE, "--max-ratio", "nan", "--out", "{tmp}/d"],
        ("--max-ratio must be a finite number, got nan",),
        absent=("{tmp}/d",),
    ),
    "prepare --max-tokens 0": Case(
        [*PREPARE, "--max-tokens", "0", "--out", "{tmp}/d"], ("--max-tokens must be at least 1, got 0",)
    ),
    "translate --seed -1": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en", "--sampling-topk", "0", "--seed", "-1"],
        ("--seed must be between 0 and 4,294,967,295, got -1",),
    ),
    "translate --temperature inf": Case(
        ["translate", "{run}", "--input", "{tmp}/text.en", "--sampling-topk", "0", "--temperature", "inf"],
        ("--temperature must be a finite number, got inf",),
    ),
    # issue 65 item 10: counts below what they can be, refused before anything is made, naming the flag
    "prepare --vocab-sample 10": Case(
        [*PREPARE, "--vocab-sample", "10", "--out", "{tmp}/d"], ("--vocab-sample must be at least 101", "got 10")
    ),
    "prepare --vocab-sample 0": Case(
        [*PREPARE, "--vocab-sample", "0", "--out", "{tmp}/d"], ("--vocab-sample must be at least 101", "got 0")
    ),
    "prepare --workers -1": Case([*PREPARE, "--workers", "-1", "--out", "{tmp}/d"], ("--workers must be at least 0",)),
    "train with data.vocab_sample = 50": Case(
        ["train", "{recipe}", "--out", "{tmp}/r", "--set", "data.vocab_sample=50"],
        ("data.vocab_sample must be at least 101, got 50",),
        absent=("{tmp}/r",),
    ),
    # issue 65 item 8: the data.prepared folder of a run being resumed, moved or deleted
    "resume a run whose data.prepared folder is gone": Case(
        ["train", "--out", "{run}", "--set", "train.max_steps=1000"],
        ("gone: the prepared data this run trains on (data.prepared) is missing", "--set data.prepared=NEW"),
        setup=lambda e: (e.run / "config.json").write_text(
            json.dumps(
                {
                    **(c := json.loads((e.run / "config.json").read_text())),
                    "data": {**c["data"], "prepared": str(e.tmp / "gone")},
                }
            )
        ),
        keep=("{run}/config.json",),
    ),
    "train on a data.prepared folder that does not exist": Case(
        ["train", "{recipe}", "--out", "{tmp}/r", "--set", "data.prepared='{tmp}/gone'"],
        ("gone: no such folder (data.prepared names a folder made by `transduce prepare`)",),
        absent=("{tmp}/r",),
    ),
    # issue 65 item 7: a run given to another task's command says what it is and which commands take it
    "translate a classifier run": Case(
        ["translate", "{tmp}/other", "--input", "{tmp}/text.en"],
        ("other: a classification run, not a translation run", "`transduce classify predict`"),
        setup=_run_of_task("classification"),
    ),
    "attention on a classifier run": Case(
        ["attention", "{tmp}/other", *ONE, "--out", "{tmp}/pics"],
        ("a classification run, not a translation run",),
        setup=_run_of_task("classification"),
        absent=("{tmp}/pics",),
    ),
    "export a parsing run": Case(
        ["export", "ctranslate2", "{tmp}/other", "--out", "{tmp}/ct2"],
        ("other: a parsing run, not a translation run", "`transduce parse`"),
        setup=_run_of_task("parsing"),
        absent=("{tmp}/ct2",),
    ),
    "translate with a CTranslate2 export, no engine": Case(
        ["translate", "{tmp}/ct2", "--input", "{tmp}/text.en"], CT2_EXPORT, setup=_exported
    ),
    "serve a CTranslate2 export, no engine": Case(["serve", "{tmp}/ct2", "--port", "0"], CT2_EXPORT, setup=_exported),
    # issue 65 item 13: refused before a picture is written
    "attention --token 99": Case(
        ["attention", "{run}", *ONE, "--out", "{tmp}/pics", "--token", "99"],
        ("--token 99: the sentence has",),
        absent=("{tmp}/pics",),
    ),
    "invalid UTF-8 in score": Case(
        ["score", "--hyp", "{tmp}/bad.txt", "--ref", "{tmp}/text.en"],
        ("bad.txt:1", "--errors replace"),
        setup=_write("{tmp}/bad.txt", b"\xff\xfe\n"),
    ),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=c.marks) for n, c in CASES.items()])
def test_bad_input_is_one_line_and_destroys_nothing(name, env, capsys):
    case = CASES[name]
    if case.setup:
        case.setup(env)
    fmt = lambda s: s.format(**vars(env))
    sentinels = [put_sentinel(Path(fmt(folder))) for folder in case.sentinels]
    for folder in case.empty:
        Path(fmt(folder)).mkdir(parents=True)
    before = {p: Path(fmt(p)).read_bytes() for p in case.keep}
    result = transduce(capsys, *map(fmt, case.argv))
    assert_one_line_error(result, *map(fmt, case.needles), code=case.code)
    assert_kept(*sentinels)
    for p, data in before.items():
        assert Path(fmt(p)).read_bytes() == data, f"{fmt(p)} was changed"
    for p in case.absent:
        assert not Path(fmt(p)).exists(), f"{fmt(p)} was left behind"
    if case.argv[0] == "prepare":  # nothing beside the output either: no work folder, no lock file
        assert not [p.name for p in env.tmp.glob(".*") if p.name.startswith((".partial-", ".tmp-", ".d."))]
    for p in case.empty:
        assert Path(fmt(p)).is_dir() and not list(Path(fmt(p)).iterdir()), f"{fmt(p)} was removed or written into"


# Cases that need more than one command ------------------------------------------------------------------------------
def test_resume_refuses_a_training_file_whose_contents_changed(env, capsys, tmp_path):
    corpus = tmp_path / "c2"
    shutil.copytree(env.corpus, corpus)
    recipe = tiny_recipe(tmp_path / "r2.toml", corpus, steps=2, save_every=2)
    assert transduce(capsys, "train", recipe, "--out", tmp_path / "r").code == 0
    with open(corpus / "train.xx", "a") as f:
        f.write("ONE MORE LINE\n")
    with open(corpus / "train.en", "a") as f:
        f.write("one more line\n")
    tokenizer = (tmp_path / "r" / "tokenizer.model").read_bytes()
    result = transduce(capsys, "train", recipe, "--out", tmp_path / "r", "--set", "train.max_steps=4")
    assert_one_line_error(result, f"{corpus / 'train.en'}: its contents changed")
    assert (tmp_path / "r" / "tokenizer.model").read_bytes() == tokenizer
    assert (tmp_path / "r" / "data" / "summary.json").is_file()  # the cache is kept, not re-prepared


def test_a_second_training_into_a_locked_run_is_refused(env, capsys):
    from transduce.outputs import exclusive

    with exclusive(env.run):  # as another process training there would hold it
        result = transduce(capsys, "train", "--out", env.run, "--set", "train.max_steps=300")
    assert_one_line_error(result, "another process")
    assert transduce(capsys, "train", "--out", env.run).code == 0  # free again: resuming a finished run is a no-op


@pytest.mark.parametrize("errno, needle", [(28, "the disk is full"), (30, "read-only file system")])
def test_a_full_or_read_only_disk_is_one_line(env, capsys, monkeypatch, errno, needle):
    import transduce.outputs as outputs

    def refuse(parent, prefix, create):  # every temporary file and folder of ours is made there
        raise OSError(errno, os.strerror(errno), str(parent))

    monkeypatch.setattr(outputs, "new_beside", refuse)
    before = sorted(p.name for p in env.run.iterdir())
    assert_one_line_error(transduce(capsys, "average", env.run, "--last", "2"), needle)
    assert_one_line_error(transduce(capsys, *[a.format(**vars(env)) for a in PREPARE], "--out", env.tmp / "d"), needle)
    assert sorted(p.name for p in env.run.iterdir()) == before


def test_our_own_outputs_are_replaced_and_nothing_beside_them_is_touched(env, capsys):
    argv = [a.format(**vars(env)) for a in PREPARE]
    beside = put_sentinel(env.tmp / "outer")
    out = env.tmp / "outer" / "prepared"
    assert transduce(capsys, *argv, "--out", out).code == 0
    assert json.loads((out / "transduce-manifest.json").read_text())["kind"] == "data"
    assert transduce(capsys, *argv[:-1], "70", "--out", out).code == 0  # other options: prepared again, in place
    assert json.loads((out / "summary.json").read_text())["vocab_size"] == 70
    assert sorted(p.name for p in out.parent.iterdir()) == [SENTINEL, "prepared"]  # no temporary left behind
    assert_kept(beside)
    first = transduce(capsys, "average", env.run, "--last", "2")
    assert first.code == 0 and transduce(capsys, "average", env.run, "--last", "3").code == 0
    assert (
        json.loads((env.run / "averaged.json").read_text())["averaged"][0]
        == sorted(p.name for p in (env.run / "checkpoints").iterdir())[-3]
    )


def test_relative_paths_are_found_under_transduce_data(env, capsys, monkeypatch):
    monkeypatch.setenv("TRANSDUCE_DATA", str(env.corpus.parent))
    rel = env.corpus.name
    result = transduce(
        capsys, "evaluate", env.run, "--src", f"{rel}/test.en", "--ref", f"{rel}/test.xx", "--beam", "1", "--quiet"
    )
    assert result.code == 0 and "BLEU" in result.out
    assert transduce(capsys, "score", "--hyp", f"{rel}/test.xx", "--ref", f"{rel}/test.xx").code == 0


def test_errors_replace_reads_invalid_utf8(env, capsys):
    (env.tmp / "bad.txt").write_bytes(b"the dog \xff sees\n")
    (env.tmp / "ref.txt").write_text("the dog sees\n")
    result = transduce(
        capsys, "score", "--hyp", env.tmp / "bad.txt", "--ref", env.tmp / "ref.txt", "--errors", "replace"
    )
    assert result.code == 0 and "BLEU" in result.out


def test_score_of_empty_translations_is_bleu_0_and_a_file_of_no_lines_is_refused(env, capsys):
    """An untrained model's output, 20 empty lines, is a real hypothesis file: BLEU 0, not "the file is empty"
    (issue 65 item 13); a file of no lines at all is refused by the line counts."""
    (env.tmp / "hyp.txt").write_text("\n" * 20)
    (env.tmp / "ref.txt").write_text("the dog sees a cat\n" * 20)
    result = transduce(capsys, "score", "--hyp", env.tmp / "hyp.txt", "--ref", env.tmp / "ref.txt")
    assert result.code == 0 and result.out.startswith("BLEU = 0.00 "), result.out + result.err
    (env.tmp / "none.txt").write_bytes(b"")
    result = transduce(capsys, "score", "--hyp", env.tmp / "none.txt", "--ref", env.tmp / "ref.txt")
    assert_one_line_error(result, "none.txt has 0 lines but", "ref.txt has 20")


def test_shipped_recipes_load_by_name_from_any_directory(env):
    from transduce.config import load_config, shipped_recipes

    assert {"demo", "multi30k", "wmt14-base", "wmt14-big", "imdb"} <= set(shipped_recipes())
    assert not (env.work / "recipes").exists()
    assert load_config("multi30k").data.train == load_config("multi30k.toml").data.train == "multi30k/train"


def test_importing_never_sets_the_umask():
    """os.umask changes the whole process (another thread creating a file meanwhile gets the mode set): importing
    transduce's writers must not call it, as the old import-time read of the umask did."""
    probe = (
        "import os; calls = []; real = os.umask; os.umask = lambda m: calls.append(m) or real(m); "
        "import transduce.outputs, transduce.training.checkpoint, transduce.cli; print(calls)"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


def test_run_files_follow_the_umask(tmp_path, toy_corpus, capsys):
    old = os.umask(0o027)
    try:
        recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=2, save_every=2)
        assert transduce(capsys, "train", recipe, "--out", tmp_path / "run").code == 0
    finally:
        os.umask(old)
    run = tmp_path / "run"
    modes = {
        p.relative_to(run).as_posix(): p.stat().st_mode & 0o777
        for p in run.rglob("*")
        if p.is_file() and p.name != ".transduce.lock"
    }
    assert modes["config.json"] == modes["metrics.jsonl"], modes
    assert modes["metrics.jsonl"] == modes["checkpoints/step-00000002/model.safetensors"]
    assert set(modes.values()) == {0o640}, modes
    assert (run / "checkpoints" / "step-00000002").stat().st_mode & 0o777 == 0o750


def test_errors_from_a_real_process_have_no_traceback(env):
    proc = subprocess.run(
        [sys.executable, "-m", "transduce", "average", str(env.run), "--last", "-3"], capture_output=True, text=True
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "transduce", "translate", str(env.run), "--beam", "0"],
        capture_output=True,
        text=True,
        input="a dog\n",
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# The property: every command that writes, pointed at a folder holding a sentinel and at ".", keeps the sentinel ------
WRITERS = {
    "prepare": lambda e, out: [a.format(**vars(e)) for a in PREPARE] + ["--out", out],
    "train": lambda e, out: ["train", e.recipe, "--out", out],
    "classify train": lambda e, out: ["classify", "train", e.cls_recipe, "--out", out],
    "average": lambda e, out: ["average", e.run, "--last", "2", "--output", out],
    "attention": lambda e, out: ["attention", e.run, *ONE, "--out", out],
    "plot": lambda e, out: ["plot", e.run, "--out", out],
    "evaluate --output": lambda e, out: [
        "evaluate",
        e.run,
        "--src",
        e.corpus / "test.en",
        "--ref",
        e.corpus / "test.xx",
        "--beam",
        "1",
        "--quiet",
        "--output",
        out,
    ],
    "demo": lambda e, out: ["demo", "--out", out, "--set", "train.max_steps=2"],
    "export": lambda e, out: ["export", "ctranslate2", e.run, "--out", out],
}


@pytest.mark.parametrize("target", ["folder", "."])
@pytest.mark.parametrize("command", list(WRITERS))
def test_no_writing_command_destroys_a_sentinel(command, target, env, capsys):
    from transduce.cli import build_parser

    if command == "export" and "export" not in build_parser()._subparsers._group_actions[0].choices:
        pytest.skip("no export command yet")
    folder = env.tmp / "users-folder" if target == "folder" else env.work
    sentinel = put_sentinel(folder)
    (folder / "notes.gz").write_bytes(gzip.compress(b"more of the user's data\n"))
    before = sorted(p.name for p in folder.iterdir())
    result = transduce(capsys, *WRITERS[command](env, str(folder) if target == "folder" else "."))
    assert_one_line_error(result)
    assert_kept(sentinel)
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_resume_without_its_data_cache_is_refused_and_a_refused_start_can_be_retried(env, capsys, tmp_path):
    recipe = tiny_recipe(tmp_path / "r3.toml", env.corpus, steps=2, save_every=2)
    refused = transduce(capsys, "train", recipe, "--out", tmp_path / "r", "--set", "model.max_len=6")
    assert_one_line_error(refused, "model.max_len is 6")
    assert not (tmp_path / "r" / "checkpoints").exists()
    assert transduce(capsys, "train", recipe, "--out", tmp_path / "r").code == 0  # retried with the fix: it starts
    shutil.rmtree(tmp_path / "r" / "data")
    result = transduce(capsys, "train", recipe, "--out", tmp_path / "r", "--set", "train.max_steps=4")
    assert_one_line_error(result, "prepared data is missing")


def test_a_metrics_line_torn_by_a_kill_does_not_stop_a_resume(env, capsys, tmp_path):
    recipe = tiny_recipe(tmp_path / "r4.toml", env.corpus, steps=2, save_every=2)
    assert transduce(capsys, "train", recipe, "--out", tmp_path / "r").code == 0
    with open(tmp_path / "r" / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "st')
    assert transduce(capsys, "train", recipe, "--out", tmp_path / "r", "--set", "train.max_steps=4").code == 0
    lines = (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
    assert all(json.loads(line)["step"] <= 4 for line in lines)


def test_attention_refuses_to_draw_an_own_output_over_the_piece_limit():
    from transduce.cli.pictures import _check_own_output
    from transduce.config import ConfigError

    long = SimpleNamespace(target_pieces=["<s>"] + ["a"] * 100)
    with pytest.raises(ConfigError, match="own output for --sentence has 100 pieces"):
        _check_own_output(long, given=False)
    _check_own_output(long, given=True)  # a given --target was checked before decoding, with its own message
    _check_own_output(SimpleNamespace(target_pieces=["<s>"] + ["a"] * 99), given=False)


# issue 65: one table of bounds, and a memory estimate before anything is allocated --------------------------------
SECTIONS = {
    "model": ("ModelConfig", "ParserModelConfig"),
    "data": ("DataConfig", "ParseDataConfig", "ClassifyDataConfig"),
    "train": ("TrainConfig",),
    "decode": ("DecodeConfig", "ParseDecodeConfig"),
    "head": ("HeadConfig",),
}


def test_every_number_a_run_config_holds_has_its_bounds_in_the_one_table():
    import dataclasses
    import typing

    import transduce.config as config
    from transduce.config.bounds import BOUNDS

    missing = []
    for section, classes in SECTIONS.items():
        for name in classes:
            cls = getattr(config, name)
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                numeric = {int, float} & {hints[f.name], *typing.get_args(hints[f.name])}
                if numeric and f"{section}.{f.name}" not in BOUNDS:
                    missing.append(f"{section}.{f.name}")
    assert not missing, missing


def test_a_flag_and_its_setting_share_one_bound(env, capsys):
    from transduce.config import ConfigError, DecodeConfig

    flag = transduce(capsys, "translate", env.run, "--input", env.tmp / "text.en", "--beam", "65")
    assert_one_line_error(flag, "--beam must be between 1 and 64, got 65")
    with pytest.raises(ConfigError, match=r"^decode.beam must be between 1 and 64, got 65$"):
        DecodeConfig(beam=65)
    with pytest.raises(ConfigError, match=r"^decode.nbest must be between 1 and 64, got 0$"):
        DecodeConfig(nbest=0)


def test_the_memory_estimate_is_a_lower_bound_and_refuses_before_allocating(monkeypatch):
    from transduce import Transformer
    from transduce.config import ConfigError, HeadConfig, ModelConfig, memory
    from transduce.model.classifier import TransformerClassifier

    tiny = dict(vocab_size=50, n_layers=1, d_model=16, d_ff=32, n_heads=2, max_len=20)
    for variant in ({}, {"tie_embeddings": False}, {"positional": "learned"}, {"n_decoder_layers": 2}):
        config = ModelConfig(**{**tiny, **variant})
        assert memory.model_shape(config).parameters() <= Transformer(config).num_parameters(), variant
    head = HeadConfig(pooling="flatten", n_classes=2)
    shape = memory.model_shape(
        ModelConfig(**tiny), decoder=False, head=memory.head_weights(ModelConfig(**tiny), head, 20)
    )
    classifier = TransformerClassifier(ModelConfig(**tiny), head, max_len=20)
    assert shape.parameters() <= sum(p.numel() for p in classifier.parameters())

    def never(*args, **kwargs):
        raise AssertionError("allocated before the estimate refused")

    monkeypatch.setattr(torch.nn.Embedding, "__init__", never)
    with pytest.raises(ConfigError, match=r"^model.vocab_size = 1,000,000,000,000: the model needs at least 58.2 TiB"):
        Transformer(ModelConfig(**{**tiny, "vocab_size": 10**12}))
    with pytest.raises(ConfigError, match=r"^model.n_encoder_layers = 10,000,000,000: the model needs at least"):
        Transformer(ModelConfig(**{**tiny, "n_encoder_layers": 10**10}))
    with pytest.raises(ConfigError, match=r"^model.d_model = 1,048,576: .* more than GPU cuda:0's 80.0 GiB available$"):
        memory.check_fits(
            memory.model_shape(ModelConfig(d_model=2**20, n_heads=1)), available=80 << 30, where="GPU cuda:0"
        )


def test_a_training_that_cannot_fit_is_refused_before_its_data_is_prepared(env, capsys, monkeypatch):
    from transduce.config import memory

    monkeypatch.setattr(memory, "machine_memory", lambda: 8 << 20)  # a machine of 8 MiB
    result = transduce(capsys, "train", env.recipe, "--out", env.tmp / "r", "--set", "train.max_tokens=100000")
    assert_one_line_error(result, "train.max_tokens = 100,000: training needs at least", "this machine's 8.0 MiB")
    assert not (env.tmp / "r").exists()


def test_a_thread_count_above_the_cores_is_refused_at_start_and_on_resume(env, capsys):
    """Issue 76: train.num_threads 100,000 crashed inside libgomp (SIGSEGV), 300 was a MemoryError traceback."""
    from transduce.device import usable_cores

    too_many = usable_cores() + 1
    result = transduce(capsys, "train", env.recipe, "--out", env.tmp / "r", "--set", f"train.num_threads={too_many}")
    assert_one_line_error(result, f"train.num_threads = {too_many}", f"the {usable_cores()} cores")
    assert not (env.tmp / "r").exists()
    config = json.loads((env.run / "config.json").read_text())
    config["train"]["num_threads"] = 100_000  # a run's config.json holding such a value: its resume is refused alike
    (env.run / "config.json").write_text(json.dumps(config))
    assert_one_line_error(transduce(capsys, "train", "--out", env.run), "train.num_threads = 100000")


def test_any_allowed_temperature_samples_a_translation(env):
    """Issue 76: --temperature 1e-45 sent every log-probability to -inf and every translation came back empty; as T
    goes to 0 sampling becomes the argmax, so the smallest T gives greedy search's output."""
    from transduce.decoding.translator import Translator

    lines = (env.corpus / "test.en").read_text().splitlines()[:12]
    translator = Translator.from_run(env.run)
    greedy = translator.translate(lines, beam=1)
    coldest = translator.translate(lines, sampling_topk=0, temperature=1e-45, seed=3)
    assert all(coldest) and coldest == greedy
