"""The task registry: one line per task, keyed by a recipe's `task` name, the one table every layer reads.

An entry names the task's run config (the class the config loader builds), its `Task` (what tasks.train runs),
its predictor (what a run directory loads: `from_run(path, *, device=...)`) and, if it is served, its
serving.app.TaskSpec. Everything above config/ is named by "module:Name" and imported only when asked for
(`load`): `import transduce` stays light, and this bottom layer imports nothing above it
(docs/architecture.md's layering; tests/test_layout.py resolves every name). Adding a task: its modules, and a line
here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from .classification import ClassifierRunConfig
from .parsing import ParsingRunConfig
from .sections import Config, ConfigError


@dataclass(frozen=True, kw_only=True)
class TaskEntry:
    run_config: type  # the frozen dataclass of the run's config (config/)
    task: str  # "module:Class" of its training/task.py Task (tasks/)
    predictor: str  # "module:Class" of what a run directory loads (decoding/)
    serving: str | None = None  # "module:NAME" of its serving.app.TaskSpec; None: not served


# In this order in docs/options.md and in error messages; a recipe without a `task` key is the first.
TASKS: dict[str, TaskEntry] = {
    "translation": TaskEntry(
        run_config=Config,
        task="transduce.tasks.translation:TranslationTask",
        predictor="transduce.decoding.translator:Translator",
        serving="transduce.serving.app:TRANSLATION",
    ),
    "classification": TaskEntry(
        run_config=ClassifierRunConfig,
        task="transduce.tasks.classification:ClassificationTask",
        predictor="transduce.decoding.classifier:Classifier",
        serving="transduce.serving.app:CLASSIFICATION",
    ),
    "parsing": TaskEntry(
        run_config=ParsingRunConfig,
        task="transduce.tasks.parsing:ParsingTask",
        predictor="transduce.decoding.parser:Parser",
        serving="transduce.serving.app:PARSING",
    ),
}
DEFAULT_TASK = next(iter(TASKS))


def entry(name: str) -> TaskEntry:
    """The registry's entry for a task name; an unknown one is refused naming the known ones."""
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r} (known: {', '.join(TASKS)})")
    return TASKS[name]


def load(reference: str) -> Any:
    """The object a "module:Name" reference of the registry names (its module imported now)."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)
