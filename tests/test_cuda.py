"""The GPU path against the CPU path (issue 16): `pytest -m cuda`, skipped where no CUDA device is present.

Tolerances: float32 on both sides agrees to rounding (relative 1e-4 on a batch's loss, 1e-3 on each gradient and on
the weights after four Adam updates; TF32 is off, as with train.precision = "fp32"); bf16 autocast on CUDA against
float32 on the CPU within 3e-2 relative (bf16 keeps 8 significant bits). Decoding in float32 must give identical
token sequences on both devices.
"""

from __future__ import annotations

import contextlib
import copy
import subprocess
import sys

import pytest
import torch
from conftest import run_cli, tiny_recipe

from transduce.config import load_config
from transduce.decoding.translator import Translator
from transduce.tasks import train
from transduce.tasks.translation import TranslationTask
from transduce.training.distributed import Ranks
from transduce.training.loop import Session
from transduce.training.runlog import RunLog

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


@pytest.fixture(autouse=True)
def full_float32():
    """Keep TF32 off around each test (training in bf16 turns it on for the process)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def make_task(tmp_path, corpus, *overrides):
    recipe = tiny_recipe(tmp_path / "r.toml", corpus, dropout=0.0)
    config = load_config(recipe, ["train.pad_multiple=8", *overrides])
    return TranslationTask.prepare(config, tmp_path / "run", main=True, log=lambda _: None, barrier=lambda: None)


def index_groups(task, n):
    """The first n updates' batches of epoch 0, as the sentence-index groups that Session.update takes."""
    return [[ix] for ix in task.batches(max_tokens=task.config.train.max_tokens, seed=1, epoch=0)[:n]]


def batches(task, n):
    return [task.collate(ix) for (ix,) in index_groups(task, n)]


def zero_in_exact_arithmetic(name: str) -> bool:
    """The keys' bias adds q.b to every score of a query's row, and softmax ignores a constant added to a row: its
    gradient is 0 but for rounding (1e-7 here), so no relative comparison applies to it, and Adam turns that
    rounding into full-size steps of either sign."""
    return name.endswith("k_proj.bias")


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def test_loss_and_gradients_match_the_cpu(tmp_path, toy_corpus):
    task = make_task(tmp_path, toy_corpus)
    torch.manual_seed(0)
    cpu = task.build_model().train()
    gpu = copy.deepcopy(cpu).cuda()
    for batch in batches(task, 3):
        losses = []
        for model, b in ((cpu, batch), (gpu, batch.to(torch.device("cuda")))):
            model.zero_grad()
            loss, nll = task.loss(model, b, contextlib.nullcontext)
            loss.backward()
            losses.append((loss, nll))
        assert relative(losses[1][0], losses[0][0]) < 1e-4 and relative(losses[1][1], losses[0][1]) < 1e-4
        for (name, p), q in zip(cpu.named_parameters(), gpu.parameters()):
            if zero_in_exact_arithmetic(name):
                assert q.grad.abs().max() < 1e-5 and p.grad.abs().max() < 1e-5, name
            else:
                assert relative(q.grad, p.grad) < 1e-3, name


def test_bf16_autocast_loss_is_close_to_float32_on_the_cpu(tmp_path, toy_corpus):
    task = make_task(tmp_path, toy_corpus)
    torch.manual_seed(0)
    cpu = task.build_model().eval()
    gpu = copy.deepcopy(cpu).cuda()
    bf16 = lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    for batch in batches(task, 3):
        with torch.no_grad():
            ref, _ = task.loss(cpu, batch, contextlib.nullcontext)
            on_gpu = batch.to(torch.device("cuda"))
            low, _ = task.loss(gpu, on_gpu, bf16)
            full, _ = task.loss(gpu, on_gpu, contextlib.nullcontext)
        assert low.dtype == torch.float32 and torch.isfinite(low)
        assert relative(low, ref) < 3e-2
        assert relative(low, full) > 1e-6  # autocast did take effect: bf16 rounding shows in the loss


def start(task, tmp_path, device: str) -> Session:
    return Session.start(
        task, task.config.train, tmp_path / device, Ranks(), torch.device(device), RunLog(tmp_path, enabled=False)
    )


def test_training_updates_match_the_cpu_in_float32(tmp_path, toy_corpus):
    task = make_task(tmp_path, toy_corpus, "train.precision=fp32")
    groups = index_groups(task, 4)
    runs, start_weights = {}, {}
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        runs[device] = start(task, tmp_path, device)
        start_weights[device] = [p.detach().cpu().clone() for p in runs[device].model.parameters()]
        for group in groups:
            assert runs[device].update(group)
    cpu, gpu = runs["cpu"].model, runs["cuda"].model
    assert next(gpu.parameters()).is_cuda and runs["cuda"].state.step == 4
    compared = 0
    named = zip(cpu.named_parameters(), gpu.named_parameters(), strict=True)
    pairs = zip(named, start_weights["cpu"], start_weights["cuda"], strict=True)
    for ((name, p), (other, q)), p0, q0 in pairs:
        assert name == other and torch.equal(p0, q0)  # the same initial weights on both devices
        if not zero_in_exact_arithmetic(name):
            assert relative(q, p) < 1e-3, name
            # four updates move a weight by ~1e-3 at most: compare the moves themselves too (Adam's first steps are
            # ~lr * sign(gradient), so a gradient that rounding flips would show here)
            assert relative(q.detach().cpu() - q0, p.detach() - p0) < 2e-2, name
            compared += 1
    assert compared > 10


def test_a_training_update_on_cuda_never_waits_for_the_gpu(tmp_path, toy_corpus):
    """CUDA's own check: torch.cuda.set_sync_debug_mode("error") raises on any host synchronisation (a value read,
    a blocking copy, nonzero, a stream synchronise)."""
    task = make_task(tmp_path, toy_corpus)
    run = start(task, tmp_path, "cuda")
    groups = index_groups(task, 4)
    assert run.update(groups[0])  # lazy initialisation (cuBLAS handles, autocast caches) outside the check
    torch.cuda.set_sync_debug_mode("error")
    try:
        for group in groups[1:]:
            assert run.update(group)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert run.state.step == 4 and torch.isfinite(torch.as_tensor(run.window["loss"])).all()


def test_cudnn_attention_is_off_on_cuda_unless_the_recipe_asks(tmp_path, toy_corpus):
    """pick_device turns cuDNN's attention off (it plans a kernel per new shape); train.cudnn_attention = true turns
    it back on for a training run, and only for that run."""
    from transduce.device import pick_device

    saved = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        assert pick_device("cuda").type == "cuda" and not torch.backends.cuda.cudnn_sdp_enabled()
        task = make_task(tmp_path, toy_corpus, "train.cudnn_attention=true")
        run = start(task, tmp_path, "cuda")
        assert torch.backends.cuda.cudnn_sdp_enabled()
        assert run.update(index_groups(task, 1)[0])
        (tmp_path / "default").mkdir()
        default = make_task(tmp_path / "default", toy_corpus)
        start(default, tmp_path / "default", "cuda")
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        recipe = tiny_recipe(tmp_path / "t.toml", toy_corpus, steps=2, save_every=2)
        config = load_config(recipe, ["train.device=cuda", "train.cudnn_attention=true"])
        assert train(config, tmp_path / "trained", quiet=True)["step"] == 2
        assert not torch.backends.cuda.cudnn_sdp_enabled()  # the run's setting ends with the run
    finally:
        torch.backends.cuda.enable_cudnn_sdp(saved)


@pytest.mark.parametrize("beam", [1, 4])
def test_decoding_on_cuda_gives_the_cpu_outputs(trained_run, beam):
    run, corpus = trained_run
    sentences = (corpus / "test.en").read_text().splitlines()[:30]
    outputs = {}
    for device in ("cpu", "cuda"):
        translator = Translator.from_run(run, device=device)
        assert translator.device.type == device
        outputs[device] = translator.translate_nbest(sentences, beam=beam, alpha=0.6, nbest=1)
    assert [[t.text for t in n] for n in outputs["cuda"]] == [[t.text for t in n] for n in outputs["cpu"]]
    for a, b in zip(outputs["cuda"], outputs["cpu"]):
        assert a[0].score == pytest.approx(b[0].score, abs=1e-3)


def test_train_and_translate_end_to_end_on_cuda_in_bf16(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=60, save_every=30, valid_every=30)
    overrides = ["train.device=cuda", "train.precision=bf16", "train.pad_multiple=8"]
    run_cli("train", str(recipe), "--out", str(tmp_path / "run"), *[a for o in overrides for a in ("--set", o)])
    metrics = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert "valid_loss" in metrics and "device cuda" in (tmp_path / "run" / "train.log").read_text()
    out = run_cli("translate", str(tmp_path / "run"), "--device", "cuda", input="a b c\n\n").stdout
    assert out.count("\n") == 2 and out.split("\n")[1] == ""


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="DDP on CUDA needs two GPUs (NCCL: one rank per GPU)")
def test_ddp_on_two_gpus_trains(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=10, save_every=10)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "transduce"]
        + ["train", str(recipe), "--out", str(tmp_path / "run"), "--set", "train.device=cuda"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (tmp_path / "run" / "train.log").read_text()
    assert "world size 2" in log and "finished at step 10" in log
