import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_data import write_corpus

ROOT = Path(__file__).resolve().parent.parent

# A tiny model that trains in seconds on the toy corpus of test_data.write_corpus.
TINY_RECIPE = """
[model]
n_layers = 1
d_model = 32
d_ff = 64
n_heads = 4
dropout = {dropout}
max_len = 64

[data]
train = "{root}/train"
valid = "{root}/valid"
src = "en"
tgt = "xx"
vocab_size = 100

[train]
device = "cpu"  # the same path on a GPU machine (bit-exact resume is a CPU property); tests/test_cuda.py asks for CUDA
precision = "fp32"  # not "auto": its timing trial may pick either (tests/test_precision.py tests it)
max_steps = {steps}
max_tokens = 300
warmup_steps = 20
lr_scale = 0.1  # Eq. 3 peaks near 0.03 for d_model 32 and warmup 20: too hot for post-LN
valid_every = {valid_every}
valid_max_sentences = 20
save_every = {save_every}
keep_last = 10
log_every = 5
seed = 3
num_threads = 1

[decode]
beam = 2
max_len_b = 10
"""


def shared_data(name: str) -> Path:
    """A corpus under TRANSDUCE_DATA; the test skips, saying why, where it is not there."""
    root = os.environ.get("TRANSDUCE_DATA")
    if not root:
        pytest.skip("TRANSDUCE_DATA not set")
    path = Path(root) / name
    if not path.exists():
        pytest.skip(f"{path} missing")
    return path


@pytest.fixture
def toy_corpus(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root, "train", 600, seed=0)
    write_corpus(root, "valid", 40, seed=1)
    return root


def tiny_recipe(path: Path, corpus: Path, *, steps=40, save_every=10, valid_every=1000, dropout=0.1) -> Path:
    path.write_text(
        TINY_RECIPE.format(root=corpus, steps=steps, save_every=save_every, valid_every=valid_every, dropout=dropout)
    )
    return path


def run_cli(*args, check=True, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "transduce", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=kw.pop("cwd", None),
        **kw,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"transduce {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def run_torchrun(*args, port: int, processes: int = 2) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node N -m transduce ARGS` on CPU (gloo), one thread a rank; fails the test if it fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes)]
        + ["--master-port", str(port), "-m", "transduce", *args],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def train_toy_run(
    tmp: Path, steps: int, *, n_train: int = 600, n_test: int = 30, settings: tuple[str, ...] = ()
) -> tuple[Path, Path]:
    """A tiny model (2 layers, d_model 64) trained for `steps` updates on the toy corpus: (run, corpus).
    `settings`: more `--set` overrides of the tiny recipe."""
    corpus = tmp / "corpus"
    corpus.mkdir()
    write_corpus(corpus, "train", n_train, seed=0)
    write_corpus(corpus, "valid", 40, seed=1)
    write_corpus(corpus, "test", n_test, seed=2)
    recipe = tiny_recipe(tmp / "recipe.toml", corpus, steps=steps, save_every=50, valid_every=125)
    shape = ["model.d_model=64", "model.d_ff=128", "model.n_layers=2", *settings]
    run_cli("train", str(recipe), "--out", str(tmp / "run"), *[arg for s in shape for arg in ("--set", s)])
    return tmp / "run", corpus


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """A tiny run directory trained for a few hundred steps on the toy corpus (shared by inference tests)."""
    return train_toy_run(tmp_path_factory.mktemp("trained"), steps=250)


def untrained_classifier(tokenizer_path: Path, labels: list[str]):
    """An untrained classifier on a run's tokenizer: enough to exercise serving routes and the page."""
    import torch

    from transduce.config import ClassifierRunConfig, HeadConfig, ModelConfig
    from transduce.data.tokenizer import Tokenizer
    from transduce.decoding.classifier import Classifier
    from transduce.model.classifier import TransformerClassifier

    torch.manual_seed(0)
    tokenizer = Tokenizer(tokenizer_path)
    config = ClassifierRunConfig(
        model=ModelConfig(
            vocab_size=tokenizer.vocab_size, n_layers=1, d_model=16, d_ff=32, n_heads=2, max_len=32, dropout=0.0
        ),
        head=HeadConfig(n_classes=len(labels)),
    )
    model = TransformerClassifier(config.model, config.head, max_len=config.data.max_len).eval()
    return Classifier(model, tokenizer, labels, config)


def make_run(root: Path, tokenizer: Path, *, seed: int = 0, perturb: bool = False, **model) -> Path:
    """A run directory holding a randomly initialised model (Xavier / N(0, d^-0.5), see model.init_parameters);
    `perturb`: its biases and LayerNorms random too (an export must carry them, not their initial values)."""
    import torch

    from transduce.config import Config, ModelConfig, save_config
    from transduce.data.tokenizer import Tokenizer
    from transduce.model import Transformer
    from transduce.training.checkpoint import save_weights

    torch.manual_seed(seed)
    shape = {"d_model": 32, "d_ff": 64, "n_heads": 4, "n_layers": 1, "dropout": 0.0, "max_len": 64, **model}
    config = Config(model=ModelConfig(vocab_size=Tokenizer(tokenizer).vocab_size, **shape))
    root.mkdir(parents=True)
    save_config(config, root / "config.json")
    Tokenizer(tokenizer).copy_to(root / "tokenizer.model")
    network = Transformer(config.model)
    if config.model.output_bias:  # a bias that changes the outputs (training would learn one; zero at the start)
        torch.nn.init.normal_(network.output.bias, std=0.5)
    if perturb:
        with torch.no_grad():
            for name, p in network.named_parameters():
                if "norm" in name or name.endswith("bias"):
                    p.add_(torch.randn_like(p) * 0.1)
    save_weights(network, root / "best.safetensors")
    return root
