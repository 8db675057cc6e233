"""transduce: the Transformer of "Attention Is All You Need", from raw text to sacreBLEU, EVALB and a server.

The public Python API:

    from transduce import Translator, Classifier, Parser, train, load_config

    translator = Translator.from_run("runs/m30k")           # a run directory, or a weights file inside one
    translator.translate(["A dog runs."])                   # -> ["Ein Hund rennt."]
    translator.translate_nbest(["A dog runs."], nbest=4)    # -> [[Translation(text, score, tokens), ...]]
    translator.translate(["A dog runs. It barks."], split="sentences")   # a paragraph, split into sentences
    translator.translate_nbest(["A dog runs."], alignment=True)[0][0].alignment   # -> [(0, 0), (1, 1), ...]
    translator.translate_document("<p>A <b>dog</b> runs.</p>", "html")   # also "xml", "srt", "vtt", "text"
    Classifier.from_run("runs/imdb").predict(["A fine film."])
    Parser.from_run("runs/gum").parse(["The dog barks ."])  # -> ["(ROOT (S (NP (DT The) (NN dog)) ...))"]
    train(load_config("multi30k", ["train.max_steps=2000"]), "runs/m30k")   # or train("multi30k", "runs/m30k")

Names are imported on first use, so `import transduce` stays light.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from .config import Config, ConfigError, DataConfig, DecodeConfig, ModelConfig, TrainConfig, load_config

__version__ = "0.1.0"
__all__ = [
    "Classifier",
    "Config",
    "DataConfig",
    "DecodeConfig",
    "ModelConfig",
    "Parser",
    "TrainConfig",
    "Transformer",
    "Translator",
    "load_config",
    "train",
]

_LAZY = {
    "Translator": "transduce.decoding.translator",
    "Classifier": "transduce.decoding.classifier",
    "Parser": "transduce.decoding.parser",
    "Transformer": "transduce.model",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'transduce' has no attribute {name!r}")


def train(config: Any, run_dir: str | Path, *, overrides: list[str] | None = None, quiet: bool = False) -> dict:
    """Train (or resume) in `run_dir`. `config`: a config object (load_config), or a recipe's path or shipped name.

    Returns {"step", "stopped", "best", "config"}."""
    import os

    from .config import task_name
    from .tasks import train as train_task

    if not isinstance(run_dir, (str, os.PathLike)) or not str(run_dir):
        raise TypeError(f"run_dir must be a folder's path (a str or a Path), got {run_dir!r}")
    if overrides is not None and (isinstance(overrides, str) or not isinstance(overrides, (list, tuple))):
        raise TypeError(f"overrides must be a list of 'section.key=value' strings, got {overrides!r}")
    if isinstance(config, (str, Path)):
        config = load_config(config, overrides or [])
    elif overrides:
        raise TypeError("overrides apply to a recipe name or path; a config object is already resolved")
    else:
        try:
            task_name(config)
        except ConfigError:
            raise TypeError(
                f"config must be a run config (load_config) or a recipe's path or name, got {config!r:.60}"
            ) from None
    return train_task(config, run_dir, quiet=quiet)
