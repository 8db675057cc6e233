"""Files that are not what they seem (the reliability issue, continued): an output given as a symbolic link, a
UTF-8 byte-order mark at the start of a text file, NaN in a checkpoint, a disk that fills while an output is
written. Each is one line on stderr naming the file, and nothing the user has is deleted or overwritten.

A full disk is simulated as tests/test_reliability.py does: the write that would fail raises errno 28, with the
file name the real call gives (none for f.write; the source for shutil.copyfile, whose sendfile error names it).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import tiny_recipe
from test_data import write_corpus
from test_reliability import PREPARE, assert_one_line_error, transduce

from transduce.training.checkpoint import checkpoint_dirs

LINK = "is a symbolic link"
BOM = b"\xef\xbb\xbf"


@pytest.fixture
def env(tmp_path, trained_run, monkeypatch):
    """A copy of the trained tiny run (tests damage it), its corpus, a recipe on that corpus, a working folder."""
    run, corpus = trained_run
    shutil.copytree(run, tmp_path / "run", ignore=shutil.ignore_patterns(".transduce.lock"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    recipe = tiny_recipe(tmp_path / "recipe.toml", corpus, steps=4, save_every=2)
    return SimpleNamespace(tmp=tmp_path, run=tmp_path / "run", corpus=corpus, recipe=recipe, work=work)


def prepare_argv(env) -> list[str]:
    return [a.format(corpus=env.corpus) for a in PREPARE]


def never(what: str):
    """A stand-in for the work a refused command must not begin."""

    def called(*args, **kwargs):
        raise AssertionError(f"{what} began before the output was refused")

    return called


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# Symbolic links as outputs -------------------------------------------------------------------------------------------
FOLDER_OUTPUTS = {  # command -> (its arguments before --out, the work it must not begin)
    "prepare": (PREPARE, "transduce.data.parallel.split_inputs"),  # reads and digests every input
    "train": (["train", "{recipe}"], "transduce.tasks.translation.TranslationTask.prepare"),  # prepares the data
    "export huggingface": (["export", "huggingface", "{run}"], "transduce.export.huggingface.load_weights"),
    "export ctranslate2": (["export", "ctranslate2", "{run}"], "transduce.export.ctranslate2.load_weights"),
    "import huggingface": (["import", "huggingface", "{tmp}"], "transduce.export.hf_import.read_weights"),
    "attention": (["attention", "{run}", "--src", "a b"], "transduce.cli.pictures._attention_source"),
}


@pytest.mark.parametrize("command", list(FOLDER_OUTPUTS))
def test_a_link_to_an_empty_folder_as_out_is_refused_before_any_work(command, env, capsys, monkeypatch):
    """It gave "Not a directory" after the work (the link was renamed as if it were the folder); now refused up
    front, in one line naming it; the folder it points to stays empty, and nothing is left beside it."""
    if command == "export ctranslate2":
        pytest.importorskip("ctranslate2")
    argv, work = FOLDER_OUTPUTS[command]
    target, link = env.tmp / "empty", env.tmp / "out"
    target.mkdir()
    link.symlink_to(target)
    before = sorted(p.name for p in env.tmp.iterdir())
    monkeypatch.setattr(work, never(work))
    args = [a.format(corpus=env.corpus, recipe=env.recipe, run=env.run, tmp=env.tmp) for a in argv]
    assert_one_line_error(transduce(capsys, *args, "--out", link), f"{link}: {LINK}")
    assert link.is_symlink() and os.readlink(link) == str(target) and not any(target.iterdir())
    assert sorted(p.name for p in env.tmp.iterdir()) == before  # no .tmp-, .old-, .partial- or lock left


@pytest.mark.parametrize("command", ["prepare", "export huggingface"])
def test_a_link_to_an_earlier_output_of_ours_is_refused_and_kept(command, env, capsys):
    """It moved the link, dangling, into a hidden .old-out-* folder; now the link and the output it points to stay
    as they were."""
    argv = prepare_argv(env) if command == "prepare" else ["export", "huggingface", env.run]
    earlier, link = env.tmp / "earlier", env.tmp / "out"
    assert transduce(capsys, *argv, "--out", earlier).code == 0
    kept = tree(earlier)
    link.symlink_to(earlier)
    before = sorted(p.name for p in env.tmp.iterdir())
    assert_one_line_error(transduce(capsys, *argv, "--out", link), f"{link}: {LINK}")
    assert link.is_symlink() and tree(earlier) == kept
    assert sorted(p.name for p in env.tmp.iterdir()) == before


def test_a_link_as_a_single_file_output_is_refused_and_never_written_through(env, capsys):
    """average --output, evaluate --output, align --out and plot --out: a link (to our own file, or dangling) is
    refused before anything is written; the file it points to is untouched, and no file appears where it points."""
    assert transduce(capsys, "average", env.run, "--last", "2").code == 0
    averaged = (env.run / "averaged.safetensors").read_bytes()
    weights = env.tmp / "w.safetensors"
    weights.symlink_to(env.run / "averaged.safetensors")
    result = transduce(capsys, "average", env.run, "--last", "3", "--output", weights)
    assert_one_line_error(result, f"{weights}: {LINK}")
    assert (env.run / "averaged.safetensors").read_bytes() == averaged
    side = env.tmp / "v.json"
    side.symlink_to(env.run / "averaged.json")  # the weights' side file is an output too
    result = transduce(capsys, "average", env.run, "--last", "3", "--output", env.tmp / "v.safetensors")
    assert_one_line_error(result, f"{side}: {LINK}")
    assert not (env.tmp / "v.safetensors").exists()

    dangling = env.tmp / "hyps.txt"
    dangling.symlink_to(env.tmp / "elsewhere.txt")
    src, ref = env.corpus / "test.en", env.corpus / "test.xx"
    result = transduce(capsys, "evaluate", env.run, "--src", src, "--ref", ref, "--output", dangling, "--quiet")
    assert_one_line_error(result, f"{dangling}: {LINK}")
    result = transduce(capsys, "align", "--src", src, "--tgt", ref, "--out", dangling)
    assert_one_line_error(result, f"{dangling}: {LINK}")
    assert dangling.is_symlink() and not (env.tmp / "elsewhere.txt").exists()

    picture = env.tmp / "curves.png"
    assert transduce(capsys, "plot", env.run, "--out", picture).code == 0
    drawn = picture.read_bytes()
    link = env.tmp / "link.png"
    link.symlink_to(picture)
    assert_one_line_error(transduce(capsys, "plot", env.run, "--out", link), f"{link}: {LINK}")
    assert link.is_symlink() and picture.read_bytes() == drawn


# Byte-order marks -----------------------------------------------------------------------------------------------------
def test_read_lines_drops_a_byte_order_mark_only_at_the_start_of_a_file(tmp_path):
    from transduce.data import read_lines
    from transduce.data.text import decode_lines

    path = tmp_path / "a.txt"
    path.write_bytes(BOM + "one\n\ufefftwo \ufeff\n".encode())
    assert read_lines(path) == ["one", "\ufefftwo \ufeff"]  # U+FEFF elsewhere is text, kept
    path.write_bytes(BOM + BOM + b"one\n")
    assert read_lines(path) == ["\ufeffone"]  # the one mark, not every U+FEFF after it
    assert decode_lines(BOM + b"x\n", "f", first_line=3) == ["\ufeffx"]  # a later block is not a file's start
    path.write_bytes(BOM + b"\n")
    with pytest.raises(ValueError, match="the file is empty"):
        read_lines(path)


def test_score_and_translate_read_a_file_with_a_byte_order_mark_as_without(env, capsys):
    """score --hyp kept the mark inside the first word (a silently lower BLEU); translate translated it."""
    ref = env.corpus / "test.xx"
    marked = env.tmp / "marked.xx"
    marked.write_bytes(BOM + ref.read_bytes())
    plain = transduce(capsys, "score", "--hyp", ref, "--ref", ref)
    assert plain.code == 0 and plain.out.startswith("BLEU = 100.00 ")
    assert transduce(capsys, "score", "--hyp", marked, "--ref", ref).out == plain.out
    assert transduce(capsys, "score", "--hyp", ref, "--ref", marked).out == plain.out
    (env.tmp / "in.en").write_text("the dog sees a cat\n")
    (env.tmp / "marked.en").write_bytes(BOM + b"the dog sees a cat\n")
    outputs = [
        transduce(capsys, "translate", env.run, "--input", env.tmp / n, "--quiet") for n in ("in.en", "marked.en")
    ]
    assert outputs[0].code == 0 and outputs[1].out == outputs[0].out


def test_parse_input_with_a_byte_order_mark_reaches_the_parser_without_it(env, capsys, monkeypatch):
    """It was kept inside the first leaf; the parser is stood in for: what parse reads is what is checked."""
    import transduce.cli.parsing as parsing

    seen = []

    def parse_command(run, lines, **kwargs):
        seen.extend(lines)
        return [], None

    monkeypatch.setattr(parsing, "parse_command", parse_command)
    (env.tmp / "words.txt").write_bytes(BOM + b"The dog barks .\nIt runs .\n")
    transduce(capsys, "parse", env.run, "--input", env.tmp / "words.txt")
    assert seen == ["The dog barks .", "It runs ."]


def test_prepare_drops_a_byte_order_mark_at_the_start_of_each_corpus_file(tmp_path):
    """Line files (the first chunk's first line), the text subword sampling reads again by offset, JSON Lines
    (where the mark made the first row "not a JSON object") and a recipe (tomllib refused it)."""
    from transduce.config import DataConfig, load_config
    from transduce.data import prepare
    from transduce.data.tokenizer import Tokenizer
    from transduce.data.training_text import TrainingText

    plain, marked = tmp_path / "plain", tmp_path / "marked"
    for root in (plain, marked):
        root.mkdir()
        write_corpus(root, "train", 300, seed=0)
        write_corpus(root, "valid", 20, seed=1)
    for name in ("train.en", "train.xx", "valid.en", "valid.xx"):
        (marked / name).write_bytes(BOM + (marked / name).read_bytes())
    outs = []
    for root in (plain, marked):
        config = DataConfig(train=str(root / "train"), valid=str(root / "valid"), src="en", tgt="xx", vocab_size=60)
        prepare(config, root / "out", log=lambda _: None)
        outs.append(root / "out")
    for name in ("train.src.ids.npy", "train.tgt.ids.npy", "valid.src.ids.npy"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    vocabularies = [Tokenizer(out / "tokenizer.model") for out in outs]  # (the files differ: they hold their path)
    assert len({tuple(t.id_to_piece(i) for i in range(t.vocab_size)) for t in vocabularies}) == 1
    assert (outs[0] / "valid.src.txt").read_bytes() == (outs[1] / "valid.src.txt").read_bytes()
    summary = json.loads((outs[1] / "summary.json").read_text())
    first = TrainingText(outs[1], summary).pairs(np.array([0, 1]))
    assert first[0][0] == (plain / "train.en").read_text().splitlines()[0] and "\ufeff" not in first[1][0]

    rows = [
        {"en": s, "xx": t} for s, t in zip(*((plain / f"train.{x}").read_text().splitlines() for x in "en xx".split()))
    ]
    (tmp_path / "c.jsonl").write_bytes(BOM + "".join(json.dumps(r) + "\n" for r in rows).encode())
    config = DataConfig(train=str(tmp_path / "c.jsonl"), src="en", tgt="xx", vocab_size=60)
    prepare(config, tmp_path / "jsonl", log=lambda _: None)
    assert (tmp_path / "jsonl" / "train.src.ids.npy").read_bytes() == (outs[0] / "train.src.ids.npy").read_bytes()

    (tmp_path / "r.toml").write_bytes(BOM + b"[train]\nmax_steps = 7\n")
    assert load_config(tmp_path / "r.toml").train.max_steps == 7


# NaN in checkpoints ---------------------------------------------------------------------------------------------------
def _poison(path: Path, prefix: str = "") -> str:
    """Put one NaN into the first floating tensor of the safetensors file `path` whose name starts with `prefix`."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), "pt") as f:
        metadata, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    name = next(k for k in sorted(tensors) if k.startswith(prefix) and tensors[k].is_floating_point())
    tensors[name].view(-1)[0] = float("nan")
    save_file(tensors, str(path), metadata=metadata)
    return name


def test_average_refuses_a_checkpoint_with_nan_naming_it_and_the_tensor(env, capsys):
    damaged = checkpoint_dirs(env.run)[-2] / "model.safetensors"
    name = _poison(damaged)
    result = transduce(capsys, "average", env.run, "--last", "3")
    assert_one_line_error(result, f"{damaged}: ", name, "NaN or infinite")
    assert not (env.run / "averaged.safetensors").exists() and not (env.run / "averaged.json").exists()


def test_a_resume_refuses_nan_in_the_optimizer_state_naming_the_file(env, capsys):
    """It was accepted: the first step made every weight NaN, and the run stopped naming this very checkpoint as
    the last good one."""
    last = checkpoint_dirs(env.run)[-1]
    name = _poison(last / "optimizer.safetensors", "state.")
    result = transduce(capsys, "train", "--out", env.run, "--set", "train.max_steps=260")
    assert_one_line_error(result, f"{last / 'optimizer.safetensors'}: ", name, "NaN or infinite", "move")
    assert checkpoint_dirs(env.run)[-1] == last


# A full disk names the file -------------------------------------------------------------------------------------------
def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as f.write raises it: no file name


COPYFILE = shutil.copyfile  # the real one, whatever a test has put in its place


def _copy_filling(when):
    """shutil.copyfile that fills the disk where `when(destination)`: its error names the source, as sendfile's."""

    def copyfile(src, dst, *args, **kwargs):
        if when(Path(dst)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src), None, str(dst))
        return COPYFILE(src, dst, *args, **kwargs)

    return copyfile


def test_a_full_disk_while_the_tokenizer_is_copied_names_the_copy(env, capsys, monkeypatch):
    """prepare's copy into its output and a run's own copy named their source (the .partial folder, RUN/data)."""
    out = env.tmp / "d"
    monkeypatch.setattr(shutil, "copyfile", _copy_filling(lambda dst: dst.name == "tokenizer.model"))
    result = transduce(capsys, *prepare_argv(env), "--out", out)
    assert_one_line_error(result, f"{out / 'tokenizer.model'}: No space left", "the disk is full")
    run = env.tmp / "new-run"
    monkeypatch.setattr(shutil, "copyfile", _copy_filling(lambda dst: dst.parent == run))
    result = transduce(capsys, "train", env.recipe, "--out", run)
    assert_one_line_error(result, f"{run / 'tokenizer.model'}: No space left", "the disk is full")


def test_a_full_disk_while_an_export_is_written_names_it(env, capsys, monkeypatch):
    import transduce.export.huggingface as huggingface

    out = env.tmp / "hf"
    monkeypatch.setattr(huggingface, "_save_tokenizer", _full)
    result = transduce(capsys, "export", "huggingface", env.run, "--out", out)
    assert_one_line_error(result, f"{out}: No space left", "the disk is full")
    assert not out.exists() and not [p for p in env.tmp.iterdir() if p.name.startswith(".tmp-")]
    if _has("ctranslate2"):  # its spec copies the tokenizer in with shutil.copy
        monkeypatch.setattr(shutil, "copyfile", _copy_filling(lambda dst: dst.name == "tokenizer.model"))
        out = env.tmp / "ct2"
        result = transduce(capsys, "export", "ctranslate2", env.run, "--out", out)
        assert_one_line_error(result, f"{out / 'tokenizer.model'}: No space left", "the disk is full")


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_a_full_disk_while_pictures_or_translations_are_written_names_the_file(env, capsys, monkeypatch):
    from matplotlib.figure import Figure

    monkeypatch.setattr(Figure, "savefig", _full)
    picture = env.tmp / "curves.png"
    assert_one_line_error(transduce(capsys, "plot", env.run, "--out", picture), f"{picture}: No space left")
    pictures = env.tmp / "attention"
    result = transduce(capsys, "attention", env.run, "--src", "the dog", "--out", pictures)
    assert_one_line_error(result, f"{pictures}{os.sep}", ".png: No space left", "the disk is full")

    real = Path.write_text

    def write_text(self, *args, **kwargs):
        if self.name.startswith(".hyps.txt."):  # atomic_write's temporary for hyps.txt
            _full()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    hyps = env.tmp / "hyps.txt"
    src, ref = env.corpus / "test.en", env.corpus / "test.xx"
    result = transduce(
        capsys, "evaluate", env.run, "--src", src, "--ref", ref, "--output", hyps, "--beam", "1", "--quiet"
    )
    assert_one_line_error(result, f"{hyps}: No space left", "the disk is full")
    assert not hyps.exists() and not [p for p in env.tmp.iterdir() if p.name.startswith(".hyps")]


def test_names_file_gives_the_destination_of_a_write(tmp_path):
    """The rules themselves: no name or a temporary's -> the destination; a copy's (source, then destination) -> its
    destination; an error that names a file already inside it, or another file (a work folder's chunk), kept."""
    from transduce.outputs import names_file

    out, temp = tmp_path / "out", tmp_path / ".tmp-out-1234abcd"

    def raised(err: OSError, **kw) -> OSError:
        with pytest.raises(OSError) as caught, names_file(out, **kw):
            raise err
        return caught.value

    assert raised(OSError(errno.ENOSPC, "full")).filename == str(out)
    assert raised(OSError(errno.EACCES, "no", str(temp / "a" / "b")), temp=temp).filename == str(out / "a" / "b")
    assert raised(OSError(errno.ENOSPC, "full", "/src/x", None, str(temp / "x")), temp=temp).filename == str(out / "x")
    assert raised(OSError(errno.ENOSPC, "full", "/work/chunk-3")).filename == "/work/chunk-3"  # its own, kept
    assert raised(OSError(errno.ENOSPC, "full", str(out / "inner"))).filename == str(out / "inner")
    assert raised(OSError(errno.ENOENT, "missing", "/src/x")).filename == "/src/x"  # the input's, kept
    assert raised(OSError(errno.EIO, "io"), only_full=True).filename is None
    assert isinstance(raised(OSError(errno.EPIPE, "pipe")), BrokenPipeError)  # its kind kept (cli's exit 0)
