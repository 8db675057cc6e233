"""Fine-tuning a translation run (train.init_from): what the new run takes from the run it starts from.

NEW keeps RUN's model settings (a recipe that asks for another shape is refused, naming the setting; dropout may
change) and RUN's vocabulary: NEW's corpus is encoded with RUN's SentencePiece model (copied into NEW first, so that
NEW's config and a resume need nothing of RUN but its prepared data when that is read in place), or, when NEW trains
on the very data RUN was prepared from, RUN's prepared folder is read in place as data.prepared (memory-mapped, never
written): no vocabulary learned, nothing encoded again. The weights come in at the loop's first start
(training/init_from.py). A resumed fine-tune takes all this from its own config.json, not from RUN.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from ..config import Config, ConfigError, DataConfig, ModelConfig, read_config
from ..data import DataError
from ..data.inputs import split_inputs, with_tokenizer
from ..data.marian import load_tokenizer
from ..data.prepared import open_prepared
from ..data.tokenizer import Tokenizer
from ..runs import check_tokenizer
from ..training.init_from import RECORD, source_run

# the model settings a fine-tune may set otherwise than RUN: regularisation only (no weight's shape, nor what the
# trained weights compute, depends on them)
FREE_MODEL_SETTINGS = ("dropout", "attention_dropout", "activation_dropout")
# which attention gives word links and how it is read: no translation weight changes with them, so a fine-tune may
# set them (guided alignment fine-tuned onto a run; model.alignment_head adds a head, trained from scratch); one the
# recipe leaves at its default keeps RUN's
ALIGNMENT_SETTINGS = (
    "alignment_layer",
    "alignment_heads",
    "full_context_alignment",
    "alignment_links",
    "alignment_head",
)
TOKENIZER = "tokenizer.model"


def fine_tune_config(config: Config, run_dir: Path, *, frozen: bool, main: bool, log: Callable[[str], None]) -> Config:
    """`config` with RUN's model settings and tokenizer when it fine-tunes (train.init_from, or a resumed run that
    started as a fine-tune: NEW/init-from.json); `config` itself otherwise."""
    if frozen:
        if not (run_dir / RECORD).is_file():
            if config.train.init_from:
                raise ConfigError(
                    f"train.init_from: {run_dir} has trained from its own start (no {RECORD}); "
                    "fine-tune into a new --out"
                )
            return config
        base, base_dir = read_config(run_dir / "config.json", Config), run_dir  # NEW's own: RUN is not read again
        config = _resumed_init_from(config, base, run_dir)
    elif config.train.init_from:
        source, _ = source_run(config.train.init_from, out=run_dir, task="translation")
        base, base_dir = read_config(source / "config.json", Config), source
    else:
        return config
    model = adopt_model(config.model, base.model, base_dir)
    if model.alignment_head and not base.model.alignment_head and not config.train.guided_alignment:
        raise ConfigError(
            "model.alignment_head: a head new to this run learns from guided alignment only: set "
            "train.guided_alignment (and an align file)"
        )
    data = _adopt_data(config.data, base.data, base_dir, run_dir, fresh=not frozen, main=main, log=log)
    return config.replace(model=model, data=data)


def _resumed_init_from(config: Config, base: Config, run_dir: Path) -> Config:
    """A resumed fine-tune keeps the train.init_from it started with (its config.json): an --init-from that names
    another run is refused (the weights came from the first, NEW/init-from.json); none, or the same, is taken."""
    started = base.train.init_from
    given = config.train.init_from
    if given and started and Path(given).expanduser().absolute() != Path(started).expanduser().absolute():
        raise ConfigError(
            f"train.init_from {given}: {run_dir} was started from {started} ({run_dir / RECORD}); resume it without "
            "--init-from (or with the same), or fine-tune into a new --out"
        )
    return config.replace(train=dataclasses.replace(config.train, init_from=started or given))


def adopt_model(recipe: ModelConfig, base: ModelConfig, where: Path) -> ModelConfig:
    """RUN's model settings with the recipe's dropouts and the alignment settings it asks for. Another recipe
    setting that differs from RUN's and from the default (a recipe that asks for another value) is refused, naming
    it."""
    default = type(recipe)()
    asked = [
        f"model.{f.name} {getattr(recipe, f.name)!r} (the run has {getattr(base, f.name)!r})"
        for f in dataclasses.fields(recipe)
        if f.name not in FREE_MODEL_SETTINGS + ALIGNMENT_SETTINGS
        and getattr(recipe, f.name) != getattr(base, f.name)
        and getattr(recipe, f.name) != getattr(default, f.name)
    ]
    if asked:
        raise ConfigError(
            f"train.init_from {where}: a fine-tune keeps the model of the run it starts from, but the recipe asks "
            f"for {', '.join(asked)}; leave those settings out (only the dropouts and the alignment settings may "
            "change)"
        )
    asked_alignment = {k: getattr(recipe, k) for k in ALIGNMENT_SETTINGS if getattr(recipe, k) != getattr(default, k)}
    return dataclasses.replace(base, **{k: getattr(recipe, k) for k in FREE_MODEL_SETTINGS}, **asked_alignment)


def _adopt_data(
    recipe: DataConfig,
    base: DataConfig,
    base_dir: Path,
    run_dir: Path,
    *,
    fresh: bool,
    main: bool,
    log: Callable[[str], None],
) -> DataConfig:
    """The recipe's data on RUN's vocabulary: a data.prepared folder given is checked to hold it; RUN's own
    prepared data when the recipe names the same files and encoding options; else the recipe's corpus encoded with
    RUN's tokenizer, copied to NEW/tokenizer.model."""
    check_tokenizer(base_dir)  # RUN's vocabulary is the one its weights were trained with
    tokenizer = load_tokenizer(base_dir / TOKENIZER)
    if recipe.prepared:
        prepared = open_prepared(recipe.prepared)
        if prepared.tokenizer.signature() != tokenizer.signature():
            raise DataError(
                f"{recipe.prepared}: prepared with another vocabulary than {base_dir / TOKENIZER}; prepare it with "
                f"`transduce prepare ... --tokenizer {base_dir}`"
            )
        return recipe
    if not fresh and base.prepared:  # resumed: the data it started on, RUN's folder read in place
        return dataclasses.replace(recipe, prepared=base.prepared)
    if fresh:
        folder = Path(base.prepared) if base.prepared else base_dir / "data"
        if _holds(folder, recipe, tokenizer):
            log(f"data: the run's own data, read in place from {folder} (nothing encoded again)")
            return dataclasses.replace(recipe, prepared=str(folder))
    own = run_dir / TOKENIZER
    if fresh and main:
        tokenizer.copy_to(own)
    data, _ = with_tokenizer(dataclasses.replace(recipe, tokenizer=str(base_dir / TOKENIZER)))
    return dataclasses.replace(data, tokenizer=str(own.absolute()))


def _corpora(options: dict) -> list[tuple]:
    """data.corpora's weights, tags, align files and joins as a summary or a config holds them, comparable."""
    keys = (("weight", 1.0), ("tag", ""), ("align", ""), ("join", 1))
    return [tuple(c.get(k, default) for k, default in keys) for c in options.get("corpora", ())]


def _holds(folder: Path, recipe: DataConfig, tokenizer: Tokenizer) -> bool:
    """Whether the prepared `folder` is the recipe's corpus (its files, its encoding options) in `tokenizer`'s ids."""
    try:
        prepared = open_prepared(folder)
        files = {split: [str(p) for one in inputs for p in one.pair] for split, inputs in split_inputs(recipe).items()}
    except DataError:
        return False
    options = prepared.summary.get("options", {})
    if any(options.get(k) != getattr(recipe, k) for k in ("src", "tgt", "max_len", "max_ratio", "errors")):
        return False
    if options.get("valid_tag", "") != recipe.valid_tag or _corpora(options) != _corpora(dataclasses.asdict(recipe)):
        return False
    if files != {split: info.get("files") for split, info in prepared.summary["splits"].items()}:
        return False
    return prepared.tokenizer.signature() == tokenizer.signature()
