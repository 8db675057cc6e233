"""What can be checked on CPU of the GPU work (issue 16): bounded batch shapes, and no host synchronisation inside
a training update (on CUDA every .item(), float(tensor), bool(tensor) or .tolist() waits for the GPU)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
from conftest import tiny_recipe

from transduce.config import load_config
from transduce.data import collate
from transduce.data.corpus import padded_width
from transduce.tasks.translation import TranslationTask
from transduce.training.distributed import Ranks
from transduce.training.loop import Session
from transduce.training.runlog import RunLog


@pytest.fixture
def task(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, dropout=0.0)
    config = load_config(recipe, ["train.pad_multiple=8"])
    return TranslationTask.prepare(config, tmp_path / "run", main=True, log=lambda _: None, barrier=lambda: None)


def test_padded_width_rounds_up_within_the_limit():
    assert [padded_width(n, 8, None) for n in (1, 8, 9, 17)] == [8, 8, 16, 24]
    assert padded_width(61, 8, 64) == 64 and padded_width(62, 8, 63) == 63 and padded_width(63, 8, 60) == 63
    assert padded_width(13, 1, None) == 13


def test_padded_batches_have_bounded_shapes_and_the_same_loss(task):
    corpus = task.corpus
    widths = set()
    torch.manual_seed(0)
    model = task.build_model().eval()
    for indices in task.batches(max_tokens=task.config.train.max_tokens, seed=1, epoch=0)[:12]:
        plain, padded = collate(corpus, indices), task.collate(indices)
        assert padded.src.size(1) % 8 == 0 and padded.tgt_in.size(1) % 8 == 0
        widths |= {padded.src.size(1), padded.tgt_in.size(1)}
        assert (padded.n_tokens, padded.n_real) == (plain.n_tokens, plain.n_real)
        assert torch.equal(padded.target, plain.target)  # the same target tokens, at other flat positions
        losses = [task.loss(model, b, contextlib.nullcontext)[0] for b in (plain, padded)]
        assert torch.allclose(losses[0], losses[1], rtol=1e-5)
    assert widths <= {8, 16, 24, 32}  # toy sentences: at most 9 words + EOS


def test_a_training_update_never_synchronises_with_the_host(task, tmp_path, monkeypatch):
    run = Session.start(
        task, task.config.train, tmp_path / "run", Ranks(), torch.device("cpu"), RunLog(tmp_path / "run", enabled=False)
    )
    groups = [[ix] for ix in task.batches(max_tokens=task.config.train.max_tokens, seed=1, epoch=0)[:3]]
    assert run.update(groups[0])  # the first update outside the check (lazy initialisation may read values)

    def host_sync(self, *args, **kwargs):
        raise AssertionError("a tensor value was read on the host inside the training update")

    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        monkeypatch.setattr(torch.Tensor, name, host_sync)
    for group in groups[1:]:
        assert run.update(group)
    monkeypatch.undo()
    assert run.state.step == 3 and np.isfinite(float(run.window["loss"]))


def test_cudnn_attention_is_a_train_option_that_leaves_the_cpu_alone(tmp_path, toy_corpus):
    """train.cudnn_attention (issue 16) is read from a recipe; on CPU neither it nor pick_device touches torch's
    global cuDNN-attention switch (tests/test_cuda.py checks what they do on CUDA)."""
    from transduce.config import ConfigError
    from transduce.device import pick_device

    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus)
    assert load_config(recipe, ["train.cudnn_attention=true"]).train.cudnn_attention is True
    assert load_config(recipe, []).train.cudnn_attention is False
    with pytest.raises(ConfigError):
        load_config(recipe, ["train.cudnn_attention=maybe"])
    saved = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        for flag in (True, False):
            torch.backends.cuda.enable_cudnn_sdp(flag)
            config = load_config(recipe, [f"train.cudnn_attention={str(not flag).lower()}"])
            task = TranslationTask.prepare(
                config, tmp_path / f"run-{flag}", main=True, log=lambda _: None, barrier=lambda: None
            )
            Session.start(
                task,
                config.train,
                tmp_path / f"run-{flag}",
                Ranks(),
                pick_device("cpu"),
                RunLog(tmp_path, enabled=False),
            )
            assert torch.backends.cuda.cudnn_sdp_enabled() is flag
    finally:
        torch.backends.cuda.enable_cudnn_sdp(saved)


def test_a_run_leaves_tf32_and_cudnn_attention_as_it_found_them(tmp_path, toy_corpus, monkeypatch):
    """Issue 61 item 5: a training run on CUDA turns TF32 on (unless train.precision is 'fp32') and cuDNN's attention
    as train.cudnn_attention says, where it starts (`_wrap`); train_task puts the process-wide flags back when the
    run ends, whether it returns or fails. On CPU `_wrap` touches neither, so here it is made to switch them as on
    CUDA; the flags themselves can be read and set on any build."""
    from transduce.tasks import train
    from transduce.training import loop

    def switches() -> tuple[bool, bool, bool]:
        return (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.cudnn_sdp_enabled(),
        )

    def set_switches(flags: tuple[bool, bool, bool]) -> None:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags[:2]
        torch.backends.cuda.enable_cudnn_sdp(flags[2])

    real_wrap, during = loop._wrap, []

    def wrap_as_on_cuda(*args):
        wrapped = real_wrap(*args)
        set_switches((True, True, True))
        during.append(switches())
        return wrapped

    monkeypatch.setattr(loop, "_wrap", wrap_as_on_cuda)
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=2, save_every=2)
    saved = switches()
    try:
        for n, before in enumerate([(False, False, False), (False, True, False)]):
            set_switches(before)
            assert train(load_config(recipe), tmp_path / f"run{n}", quiet=True)["step"] == 2
            assert during[-1] == (True, True, True) and switches() == before
        with pytest.raises(loop.TrainingError):  # a learning rate beyond float32: the run fails after it switched them
            train(load_config(recipe, ["train.lr_scale=1e300"]), tmp_path / "failed", quiet=True)
        assert len(during) == 3 and switches() == before
    finally:
        set_switches(saved)
