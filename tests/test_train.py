import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import ROOT, run_cli, run_torchrun, tiny_recipe
from safetensors.torch import load_file

from transduce.config import ConfigError, TrainConfig, load_config
from transduce.data.batching import make_batches
from transduce.model import cpu_speed
from transduce.model.cpu_speed import keep_freed_memory
from transduce.tasks import train
from transduce.training.checkpoint import average_checkpoints, checkpoint_dirs
from transduce.training.loop import TrainingError
from transduce.training.loss import label_smoothed_nll
from transduce.training.optim import inverse_sqrt_lr, learning_rate, linear_decay_lr, noam_lr


def test_noam_schedule_is_equation_3():
    for step in (1, 10, 3999, 4000, 4001, 100_000):
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert noam_lr(step, d_model=512, warmup_steps=4000) == pytest.approx(expected)
    peak = max(noam_lr(s, d_model=512, warmup_steps=4000) for s in range(1, 10000))
    assert peak == pytest.approx(noam_lr(4000, d_model=512, warmup_steps=4000))
    assert noam_lr(100, d_model=512, warmup_steps=4000, scale=2.0) == pytest.approx(
        2 * noam_lr(100, d_model=512, warmup_steps=4000)
    )


def test_inverse_sqrt_schedule():
    assert inverse_sqrt_lr(50, peak_lr=1e-3, warmup_steps=100) == pytest.approx(5e-4)
    assert inverse_sqrt_lr(100, peak_lr=1e-3, warmup_steps=100) == pytest.approx(1e-3)
    assert inverse_sqrt_lr(400, peak_lr=1e-3, warmup_steps=100) == pytest.approx(5e-4)


def test_linear_decay_schedule():
    assert linear_decay_lr(50, peak_lr=1e-3, warmup_steps=100, total_steps=1100) == pytest.approx(5e-4)
    assert linear_decay_lr(100, peak_lr=1e-3, warmup_steps=100, total_steps=1100) == pytest.approx(1e-3)
    assert linear_decay_lr(600, peak_lr=1e-3, warmup_steps=100, total_steps=1100) == pytest.approx(5e-4)
    assert linear_decay_lr(1100, peak_lr=1e-3, warmup_steps=100, total_steps=1100) == 0.0
    config = load_config(
        None, ["train.lr_schedule=linear", "train.peak_lr=0.002", "train.warmup_steps=10", "train.max_steps=110"]
    ).train
    assert learning_rate(60, config, d_model=512) == pytest.approx(1e-3)


MALLOC_PROBE = """
import ctypes, json
from transduce.model.cpu_speed import freed_memory_kept

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2

def mapped(size):
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    grew = libc.mallinfo2().hblks - before
    libc.free(block)
    return grew

default = mapped(16 << 20)
with freed_memory_kept() as applied:
    kept = [mapped(16 << 20), mapped(64 << 20)]
after = [mapped(16 << 20), mapped(16 << 20)]
with freed_memory_kept(False) as skipped:
    off = mapped(16 << 20)
print(json.dumps([default, applied, *kept, *after, skipped, off]))
"""


def test_malloc_setting_keeps_blocks_below_32_mb_off_mmap():
    """What keep_freed_memory sets, observed in a fresh process (mallinfo2's hblks counts mapped blocks): by default
    glibc maps a 16 MB block (its pages are faulted in anew every time); inside freed_memory_kept, 16 MB comes from
    the heap and is reused, while 64 MB (above the 32 MB threshold set) is still mapped. After it, the 128 KB
    defaults are back: one more 16 MB block comes from the heap's kept top, whose free now trims it, and the next is
    mapped again (glibc's dynamic threshold, raised by the first free, would take it from the heap)."""
    import platform

    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        assert keep_freed_memory() is False
        return
    proc = subprocess.run([sys.executable, "-c", MALLOC_PROBE], capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout) == [1, True, 0, 1, 0, 1, False, 1]


def test_logits_workspace_gives_the_same_loss_and_gradients():
    from transduce import ModelConfig, Transformer

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=40, d_model=16, d_ff=32, n_heads=2, n_layers=2, dropout=0.0)
    plain, spaced = Transformer(config), Transformer(config)
    spaced.load_state_dict(plain.state_dict())
    cpu_speed.apply(spaced, workspace_rows=50)  # reserved for 50 rows: never regrown here
    assert spaced.state_dict().keys() == plain.state_dict().keys()
    src, tgt = torch.randint(4, 40, (3, 7)), torch.randint(4, 40, (3, 6))
    tgt[1, 4:] = 0
    target = torch.randint(4, 40, (3, 6)).reshape(-1)
    positions = tgt.reshape(-1).ne(0).nonzero().squeeze(1)
    results, storage = [], set()
    for model in (plain, spaced):
        for _ in range(2):  # the second call reuses the workspace
            model.zero_grad()
            logits = model(src, tgt, positions)
            if model is spaced:
                storage.add(logits.data_ptr())
            loss, _ = label_smoothed_nll(logits, target[positions], eps=0.1, pad_id=0, reuse_logits=True)
            loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    workspace = spaced.output.workspace
    assert workspace is not None and workspace.numel() == 50 * 40
    assert storage == {workspace.data_ptr()}
    assert torch.allclose(results[0][0], results[1][0], atol=1e-6)
    for a, b in zip(results[0][1], results[1][1]):
        assert torch.allclose(a, b, atol=1e-6)


def test_label_smoothing_zero_is_nll_and_matches_torch():
    torch.manual_seed(0)
    logits, target = torch.randn(5, 7, 11), torch.randint(1, 11, (5, 7))
    target[0, 4:] = 0
    loss, nll = label_smoothed_nll(logits, target, eps=0.0, pad_id=0)
    expected = torch.nn.functional.cross_entropy(logits.view(-1, 11), target.view(-1), ignore_index=0, reduction="sum")
    assert torch.allclose(loss, expected) and torch.allclose(nll, expected)
    loss, nll = label_smoothed_nll(logits, target, eps=0.1, pad_id=0)
    smoothed = torch.nn.functional.cross_entropy(
        logits.view(-1, 11), target.view(-1), ignore_index=0, reduction="sum", label_smoothing=0.1
    )
    assert torch.allclose(loss, smoothed, atol=1e-5) and torch.allclose(nll, expected)
    assert loss > nll  # smoothing penalises the confident (random) model more


# Parameters of each shipped translation recipe's model with a vocabulary of 1000, counted by hand (post-LN, tied
# embeddings, sinusoidal positions): V*d + N * (4(d^2 + d) + FFN + 2*2d) + N * (8(d^2 + d) + FFN + 3*2d), where
# FFN = 2*d*d_ff + d_ff + d. demo (N 2, d 128, d_ff 256): 128,000 + 2 * 132,480 + 2 * 198,784; multi30k (N 3, d 256,
# d_ff 1024): 256,000 + 3 * 789,760 + 3 * 1,053,440; wmt14-base: Table 3's 63,082,496 less (37000 - 1000) * 512.
RECIPE_PARAMETERS = {
    "demo": 790_528,
    "multi30k": 5_785_600,
    "multi30k-60min": 5_785_600,
    "multi30k-multilingual": 5_785_600,
    "multi30k-bf16-pair": 5_785_600,
    "tatoeba-en-de": 5_785_600,
    "wmt14-base": 44_650_496,
}


def test_recipes_parse_and_build(tmp_path):
    import tomllib

    from transduce.model import Transformer

    built = {}
    for recipe in sorted((ROOT / "recipes").glob("*.toml")):
        raw = tomllib.loads(recipe.read_text())
        if raw.get("task", "translation") != "translation":  # classifier and parser recipes: their own tests
            continue
        config = load_config(recipe)
        assert config.train.max_steps == raw["train"]["max_steps"], recipe.name
        assert (config.model.d_model, config.model.n_layers) == (raw["model"]["d_model"], raw["model"]["n_layers"])
        if config.model.d_model <= 512:
            model = Transformer(config.model.__class__(**{**config.model.__dict__, "vocab_size": 1000}))
            built[recipe.stem] = model.num_parameters()
    assert built == RECIPE_PARAMETERS
    base = load_config(ROOT / "recipes" / "wmt14-base.toml")
    assert (base.model.d_model, base.model.n_layers, base.train.warmup_steps, base.decode.beam) == (512, 6, 4000, 4)
    big = load_config(ROOT / "recipes" / "wmt14-big.toml")
    assert (big.model.d_model, big.model.dropout, big.train.max_steps) == (1024, 0.3, 300_000)


def test_demo_uses_the_shipped_recipe(tmp_path):
    from transduce.demo import demo_config

    shipped = load_config("demo")  # by name: package data, found from any directory
    config = demo_config(tmp_path / "task", ["train.max_steps=7"])
    assert (config.model, config.decode) == (shipped.model, shipped.decode)
    assert config.data.train == str(tmp_path / "task" / "train") and config.train.max_steps == 7
    assert config.train.warmup_steps == shipped.train.warmup_steps == 400


def test_unknown_keys_and_wrong_types_are_refused(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text("[train]\nmax_step = 10\n")
    with pytest.raises(ConfigError, match="unknown key train.max_step"):
        load_config(recipe)
    recipe.write_text("[train]\nmax_steps = 'ten'\n")
    with pytest.raises(ConfigError, match="train.max_steps: expected an integer"):
        load_config(recipe)
    with pytest.raises(ConfigError, match="unknown section"):
        load_config(None, ["optim.lr=1"])
    config = load_config(None, ["train.max_steps=7", "model.norm_first=true", "data.src=fr", "train.lr_scale=2"])
    assert (config.train.max_steps, config.model.norm_first, config.data.src, config.train.lr_scale) == (
        7,
        True,
        "fr",
        2.0,
    )


def test_cli_refuses_bad_recipe_and_unknown_command(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text("[model]\nd_model = 30\nn_heads = 4\n")
    proc = run_cli("train", str(recipe), "--out", str(tmp_path / "run"), check=False)
    assert proc.returncode == 1 and "divisible" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("frobnicate", check=False)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr and proc.stderr.count("\n") == 1


def test_training_logs_saves_and_does_nothing_when_finished(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=30, save_every=10, valid_every=15)
    result = train(load_config(recipe), tmp_path / "run", quiet=True)
    assert result["step"] == 30
    run = tmp_path / "run"
    assert [p.name for p in checkpoint_dirs(run)] == ["step-00000010", "step-00000020", "step-00000030"]
    for name in ("config.json", "tokenizer.model", "best.safetensors", "train.log", "data/summary.json"):
        assert (run / name).is_file(), name
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train_records] == [5, 10, 15, 20, 25, 30]
    assert train_records[-1]["loss"] < train_records[0]["loss"]
    assert all(
        {"lr", "loss", "nll", "ppl", "tokens", "tokens_per_s", "padding_efficiency", "elapsed"} <= r.keys()
        for r in train_records
    )
    finished = next(ln for ln in (run / "train.log").read_text().splitlines() if ln.startswith("finished"))
    assert f"; {sum(r['tokens'] for r in train_records):,} target tokens in" in finished  # windows: every update
    valid = [r for r in records if r["kind"] == "valid"]
    assert [r["step"] for r in valid] == [15, 30] and "valid_bleu" in valid[0]
    step_lines = [ln for ln in (run / "train.log").read_text().splitlines() if ln.startswith("step ")]
    assert sum("padding efficiency" in ln for ln in step_lines) == 6
    again = train(load_config(recipe), run, quiet=True)
    assert again["step"] == 30 and len(checkpoint_dirs(run)) == 3
    assert "nothing to do" in (run / "train.log").read_text()


def test_resuming_with_another_model_is_refused(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=5, save_every=5)
    train(load_config(recipe), tmp_path / "run", quiet=True)
    with pytest.raises(ConfigError, match="model.d_model"):
        train(load_config(recipe, ["model.d_model=64"]), tmp_path / "run", quiet=True)
    with pytest.raises(ConfigError, match="vocab_size"):
        train(load_config(recipe, ["model.vocab_size=99"]), tmp_path / "other", quiet=True)


def _final_weights(run: Path) -> dict:
    return load_file(str(checkpoint_dirs(run)[-1] / "model.safetensors"))


def test_killed_and_resumed_run_equals_uninterrupted_run(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=120, save_every=10)
    run_cli("train", str(recipe), "--out", str(tmp_path / "straight"))

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "transduce", "train", str(recipe), "--out", str(tmp_path / "killed")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ckpt = tmp_path / "killed" / "checkpoints" / "step-00000030"
    deadline = time.time() + 120
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = int(checkpoint_dirs(tmp_path / "killed")[-1].name.split("-")[1])
    assert 30 <= killed_at < 120, "the kill must land in the middle of training"
    resumed = run_cli("train", str(recipe), "--out", str(tmp_path / "killed"))
    assert "resumed from" in resumed.stderr

    a, b = _final_weights(tmp_path / "straight"), _final_weights(tmp_path / "killed")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    log_a = [json.loads(ln) for ln in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    log_b = [json.loads(ln) for ln in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log_a] == [r["step"] for r in log_b]
    assert [r.get("loss") for r in log_a] == [r.get("loss") for r in log_b]
    assert sum("loss" in r for r in log_a) == 24


def test_ctrl_c_saves_a_checkpoint_and_exits_cleanly(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=100000, save_every=100000)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "transduce", "train", str(recipe), "--out", str(tmp_path / "run")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.time() + 120
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2) and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "Traceback" not in err and "interrupted at step" in err
    (ckpt,) = checkpoint_dirs(tmp_path / "run")
    assert int(ckpt.name.split("-")[1]) >= 10


def test_nan_loss_stops_naming_the_step_and_keeps_good_checkpoints(tmp_path, toy_corpus, monkeypatch):
    import transduce.tasks.translation as train_module  # where the loss is computed

    calls = {"n": 0}
    real = train_module.label_smoothed_nll

    def poisoned(logits, target, **kw):
        calls["n"] += 1
        loss, nll = real(logits, target, **kw)
        return (loss * float("nan"), nll) if calls["n"] >= 13 else (loss, nll)

    monkeypatch.setattr(train_module, "label_smoothed_nll", poisoned)
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=40, save_every=5)
    with pytest.raises(TrainingError, match=r"at step 13\b.*step-00000010"):
        train(load_config(recipe), tmp_path / "run", quiet=True)
    dirs = checkpoint_dirs(tmp_path / "run")
    assert [d.name for d in dirs] == ["step-00000005", "step-00000010"]
    for d in dirs:
        assert all(torch.isfinite(t).all() for t in load_file(str(d / "model.safetensors")).values())


def test_average_is_the_elementwise_mean(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=15, save_every=5)
    train(load_config(recipe), tmp_path / "run", quiet=True)
    proc = run_cli("average", str(tmp_path / "run"), "--last", "3")
    assert "averaged" in proc.stdout
    averaged = load_file(str(tmp_path / "run" / "averaged.safetensors"))
    parts = [load_file(str(d / "model.safetensors")) for d in checkpoint_dirs(tmp_path / "run")]
    for name, tensor in averaged.items():
        assert torch.allclose(tensor, sum(p[name] for p in parts) / 3, atol=1e-6)
    assert average_checkpoints(checkpoint_dirs(tmp_path / "run")[-1:])[name].equal(parts[-1][name])
    proc = run_cli("average", str(tmp_path / "run"), "--last", "9", check=False)
    assert proc.returncode == 1 and "only 3" in proc.stderr


def test_ddp_two_processes_equal_one_process_with_accumulation(tmp_path, toy_corpus):
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=6, save_every=6, dropout=0.0)
    run_cli("train", str(recipe), "--out", str(tmp_path / "single"), "--set", "train.accumulate=2")
    # the DDP run has a time limit: rank 0's clock is then broadcast after every update (without changing a weight)
    run_torchrun("train", str(recipe), "--out", str(tmp_path / "ddp"), "--set", "train.max_minutes=60", port=29517)
    a, b = _final_weights(tmp_path / "single"), _final_weights(tmp_path / "ddp")
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-5), name
    # the updates did move the weights (the comparison is not between two untouched initialisations)
    torch.manual_seed(3)
    from transduce.config import read_config
    from transduce.model import Transformer

    init = Transformer(read_config(tmp_path / "ddp" / "config.json").model).state_dict()
    assert any(not torch.allclose(init[n], b[n], atol=1e-3) for n in b)
    records = [json.loads(ln) for ln in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [5, 6]  # rank 0 alone logs
    # each rank draws from its own generator, and the checkpoint keeps both states for an exact resume
    from safetensors.torch import load_file

    rng = load_file(str(tmp_path / "ddp" / "checkpoints" / "step-00000006" / "optimizer.safetensors"))
    assert not torch.equal(rng["rng.torch"], rng["rng.torch.rank1"])


def test_ddp_ranks_draw_their_own_batches_subwords(tmp_path, toy_corpus):
    """With train.subword_sampling each rank re-segments the batches it collates (the batches themselves come from
    the prepared lengths, the same on every rank): two processes train, and no epoch-sized draw is written."""
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=6, save_every=3, dropout=0.0)
    sampled = ["--set", "train.subword_sampling=0.3", "--set", "train.max_tokens=1500", "--set", "train.log_every=1"]
    run_torchrun("train", str(recipe), "--out", str(tmp_path / "ddp"), *sampled, port=29518)
    records = [json.loads(ln) for ln in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses)
    assert not list((tmp_path / "ddp").glob("subwords/epoch-*"))


def test_each_rank_gets_its_own_seed():
    from transduce.training.distributed import rank_seed

    seeds = {rank_seed(3, rank, step) for rank in range(8) for step in (0, 1000)}
    assert len(seeds) == 16 and rank_seed(3, 0, 0) == 3


def test_out_of_memory_batches_are_skipped_and_repeated_ones_stop(tmp_path, toy_corpus, monkeypatch):
    import transduce.training.loop as train_module

    real, calls = train_module._accumulate, {"n": 0}

    def flaky(*args, fail_on=(3, 4)):
        calls["n"] += 1
        if calls["n"] in fail_on:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(*args)

    monkeypatch.setattr(train_module, "_accumulate", flaky)
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=10, save_every=10)
    result = train(load_config(recipe), tmp_path / "run", quiet=True)
    assert result["step"] == 10 and calls["n"] == 12  # two batches skipped, ten updates made
    trainer = json.loads((checkpoint_dirs(tmp_path / "run")[-1] / "trainer.json").read_text())
    assert trainer["oom_skips"] == 2
    assert (tmp_path / "run" / "train.log").read_text().count("out of GPU memory") == 2

    calls["n"] = 0
    monkeypatch.setattr(train_module, "_accumulate", lambda *a: flaky(*a, fail_on=(2, 3, 4)))
    with pytest.raises(TrainingError, match="3 updates in a row"):
        train(load_config(recipe), tmp_path / "run2", quiet=True)


def test_fused_label_smoothing_gradient_is_exact(monkeypatch):
    from transduce.training.loss import _SmoothedCrossEntropy

    torch.manual_seed(1)
    logits = torch.randn(7, 9, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 9, (7,))
    weight = torch.tensor([1, 1, 0, 1, 1, 1, 0], dtype=torch.float64)
    for eps in (0.0, 0.1, 0.3):

        def smoothed(z, eps=eps):
            return _SmoothedCrossEntropy.apply(z, target, weight, eps, False)[0]

        assert torch.autograd.gradcheck(smoothed, (logits,))
    # reuse_logits=True works in place on the logits (exp in the forward, gradient in the backward): same results
    # as the checked path, which leaves its input alone; chunking by rows is exercised with a 3-row chunk
    monkeypatch.setattr("transduce.training.loss._CHUNK_ELEMENTS", 27)
    for eps in (0.0, 0.1):
        results = []
        for reuse in (False, True):
            before = logits.detach().clone()
            z = before.clone().requires_grad_(True)
            work = z * 1.0  # a non-leaf, as the model's output is
            loss, nll = _SmoothedCrossEntropy.apply(work, target, weight, eps, reuse)
            loss.backward()
            assert torch.equal(work, before) is not reuse  # only the reusing path overwrites its input
            results.append((loss.detach(), nll, z.grad))
        for a, b in zip(*results):
            assert torch.allclose(a, b, atol=1e-12)


def test_training_projects_only_real_target_positions():
    import numpy as np

    from transduce.config import ModelConfig
    from transduce.data import ParallelCorpus, TokenArrays, collate
    from transduce.model import Transformer

    corpus = ParallelCorpus(TokenArrays.from_lists([[5, 6, 7], [8]]), TokenArrays.from_lists([[9], [10, 11, 12]]))
    batch = collate(corpus, np.array([0, 1]))
    assert batch.positions.tolist() == [0, 1, 4, 5, 6, 7] and batch.target.tolist() == [9, 3, 10, 11, 12, 3]
    model = Transformer(ModelConfig(vocab_size=20, n_layers=1, d_model=16, d_ff=32, n_heads=2, dropout=0.0)).eval()
    full = model(batch.src, batch.tgt_in).reshape(-1, 20)
    assert torch.allclose(model(batch.src, batch.tgt_in, batch.positions), full[batch.positions], atol=1e-6)
    loss, _ = label_smoothed_nll(full, batch.tgt_out, eps=0.1, pad_id=0)
    loss_sel, _ = label_smoothed_nll(model(batch.src, batch.tgt_in, batch.positions), batch.target, eps=0.1, pad_id=0)
    assert torch.allclose(loss, loss_sel, atol=1e-5)


def test_subword_sampling_draws_per_batch_and_resumes_exactly(tmp_path, toy_corpus):
    """train.subword_sampling: each batch's pairs are segmented anew as they are collated (other pieces than the
    prepared ones, the same text), read from the training files; the batches are those of the prepared lengths.
    Within one process SentencePiece repeats a seeded draw, so there a run stopped and resumed equals a straight
    run; nothing epoch-sized is written."""
    from transduce.tasks import task_class

    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=40, save_every=10)
    sampled = ["train.subword_sampling=0.3", "train.max_tokens=1500"]  # short epochs
    config = load_config(recipe, sampled)
    task = task_class("translation").prepare(
        config, tmp_path / "probe", main=True, log=lambda _: None, barrier=lambda: None
    )
    prepared = task.data.splits["train"]
    some = np.arange(5, 45)
    a, b = task.sampled_pairs(some, 1, 0), task.sampled_pairs(some, 1, 1)
    assert not np.array_equal(a.src.ids, b.src.ids)
    assert a.src.ids.size > sum(len(prepared.src[i]) for i in some)  # dropout splits merges: more pieces
    texts = task.data.texts("train")[0]
    assert task.data.tokenizer.decode([a.src[i].tolist() for i in range(len(some))]) == [texts[i] for i in some]
    batches = task.batches(max_tokens=1500, seed=1, epoch=0)
    unsampled = make_batches(prepared.src_lengths, prepared.tgt_lengths, max_tokens=1500, seed=1, epoch=0)
    assert all(np.array_equal(x, y) for x, y in zip(batches, unsampled)) and len(batches) == len(unsampled)
    cut = task.collate(batches[0])  # drawn, then cut again by the drawn lengths: each part within max_tokens
    assert sum(part.src.shape[0] for part in cut) == len(batches[0])
    assert all(part.src.numel() <= 1500 and part.tgt_in.numel() <= 1500 for part in cut if part.src.shape[0] > 1)

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(config, straight, quiet=True)
    train(load_config(recipe, [*sampled, "train.max_steps=25"]), resumed, quiet=True)
    train(config, resumed, quiet=True)
    x, y = _final_weights(straight), _final_weights(resumed)
    assert all(torch.equal(x[k], y[k]) for k in x)
    plain = tmp_path / "plain"
    train(load_config(recipe, ["train.max_tokens=1500"]), plain, quiet=True)
    unsampled_weights = _final_weights(plain)
    assert any(not torch.equal(unsampled_weights[k], x[k]) for k in x)  # the option changes what is learnt
    assert not list(straight.glob("subwords/epoch-*")) and not (plain / "subwords").exists()


def test_first_ctrl_c_waits_for_the_update_a_second_interrupts_at_once():
    """The loop's SIGINT handler only notes the first Ctrl-C (a KeyboardInterrupt raised inside a finalizer would
    be dropped by Python and the run would go on); the loop stops at the next update boundary; a second one raises."""
    from transduce.training.loop import _CtrlC

    ctrl_c = _CtrlC()
    ctrl_c.check()  # nothing requested: no exception
    ctrl_c(signal.SIGINT, None)
    assert ctrl_c.requested
    with pytest.raises(KeyboardInterrupt):
        ctrl_c.check()
    with pytest.raises(KeyboardInterrupt):
        ctrl_c(signal.SIGINT, None)


def test_nan_weights_are_never_saved_as_the_best(tmp_path, toy_corpus):
    """A learning rate beyond float32's range (1e300 x Eq. 3; a NaN one is refused as a setting) turns the weights
    infinite at the first update while that update's loss was finite: the first validation stops training instead
    of saving them as best.safetensors (or as a checkpoint)."""
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=10, save_every=5, valid_every=1)
    config = load_config(recipe, ["train.lr_scale=1e300", "train.valid_bleu=false", "train.early_stop_metric=loss"])
    with pytest.raises(TrainingError, match=r"weights hold NaN or infinite values at step 1; stopped without saving"):
        train(config, tmp_path / "run", quiet=True)
    assert not (tmp_path / "run" / "best.safetensors").exists() and not checkpoint_dirs(tmp_path / "run")


@pytest.mark.parametrize(
    "wording",
    [
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left" })',
        # what safetensors 0.8.0 raises on a full disk (seen on a 64 KB tmpfs, 2026-12-02; issue 65, item 9)
        "Error while serializing: I/O error: No space left on device (os error 28)",
    ],
)
def test_a_full_disk_while_saving_a_checkpoint_is_one_line_and_keeps_the_last_one(
    tmp_path, toy_corpus, monkeypatch, capsys, wording
):
    """safetensors reports a full disk as its own SafetensorError, in one wording or another: it reaches the user as
    the one-line disk error, and the checkpoint saved before stays whole."""
    from safetensors import SafetensorError

    from transduce.cli import main
    from transduce.training import checkpoint

    real, calls = checkpoint.save_file, {"n": 0}

    def full_on_the_second(tensors, filename, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise SafetensorError(wording)
        return real(tensors, filename, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save_file", full_on_the_second)
    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=10, save_every=5)
    capsys.readouterr()
    assert main(["train", str(recipe), "--out", str(tmp_path / "run")]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "step-00000010/optimizer.safetensors: No space left on device (the disk is full)" in err[0]
    [kept] = checkpoint_dirs(tmp_path / "run")
    assert kept.name == "step-00000005" and (kept / "optimizer.safetensors").is_file()
    assert not list((tmp_path / "run" / "checkpoints").glob(".tmp-*"))


def test_demo_into_another_run_is_refused_before_writing(trained_run, capsys):
    """`demo --out RUN` where RUN holds another training: one line, and nothing is written into it (it used to
    generate 5.5 MB of demo data there before training refused the run)."""
    from transduce.cli import main

    run, _ = trained_run
    before = sorted(p.name for p in run.iterdir())
    assert main(["demo", "--out", str(run)]) == 1
    err = capsys.readouterr().err
    assert "holds another run, not a demo" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in run.iterdir()) == before


def test_the_forecast_says_where_the_time_budget_ends_the_run():
    from transduce.training.optim import forecast

    def tc(**kw):
        return TrainConfig(lr_schedule="linear", peak_lr=1e-3, warmup_steps=100, max_steps=2400, **kw)

    line, warn = forecast(50, 2.0, 30.0, 2400, tc(), 256)  # no budget: how long the rest takes
    assert not warn and "2,350 updates left to 2,400 take about 20 minutes" in line
    line, warn = forecast(50, 2.0, 30.0, 2400, tc(max_minutes=30), 256)  # 50 + 2 x 1770 s > 2400
    assert not warn and "within the budget of train.max_minutes 30" in line
    line, warn = forecast(50, 1.0, 30.0, 2400, tc(max_minutes=30), 256)  # 50 + 1770 = 1820 of 2400
    assert warn and line.startswith("warning:") and "about update 1,820 of the schedule's 2,400 (76%)" in line
    assert "still at 25% of its peak" in line and "train.lr_clock" in line  # (2400 - 1820) / 2300 of the peak
    line, warn = forecast(50, 1.0, 30.0, 2400, tc(max_minutes=30, lr_clock=True), 256)
    assert not warn and "about update 1,820" in line and "to 0 by the clock" in line
    noam = TrainConfig(warmup_steps=100, max_steps=2400, max_minutes=30)
    line, warn = forecast(50, 1.0, 30.0, 2400, noam, 256)
    assert warn and "lower train.max_steps" in line
    # the budget ends inside the warm-up (issue 65 item 11: step 294 of a 2,000-step warm-up was "brought to 0")
    for clock in (True, False):
        warm = TrainConfig(
            lr_schedule="linear", peak_lr=1e-3, warmup_steps=2000, max_steps=20000, max_minutes=5, lr_clock=clock
        )
        line, warn = forecast(50, 1.0, 60.0, 20000, warm, 256)  # 50 + 240 = 290
        assert warn and "about update 290" in line and "inside the warm-up of train.warmup_steps 2,000" in line
        assert "still rising" in line and "all the same" not in line


def test_training_logs_the_forecast_after_its_first_updates(tmp_path, toy_corpus):
    from transduce.training.optim import FORECAST_AFTER

    recipe = tiny_recipe(tmp_path / "r.toml", toy_corpus, steps=FORECAST_AFTER + 5, save_every=100)
    train(load_config(recipe, ["train.max_minutes=600"]), tmp_path / "run", quiet=True)
    log = (tmp_path / "run" / "train.log").read_text(encoding="utf-8")
    assert f"update {FORECAST_AFTER + 5} comes in about" in log and "within the budget of train.max_minutes 600" in log


def test_every_shipped_recipe_with_a_time_budget_decays_by_the_clock():
    import tomllib

    capped = 0
    for recipe in sorted((ROOT / "recipes").glob("*.toml")):
        train_table = tomllib.loads(recipe.read_text(encoding="utf-8")).get("train", {})
        if train_table.get("max_minutes"):
            capped += 1
            assert train_table.get("lr_clock") is True, recipe.name
    assert capped >= 3  # multi30k-60min, multi30k-bf16-pair, gum-parse
