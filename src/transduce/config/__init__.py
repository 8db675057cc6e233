"""Configuration: every run's config is a frozen dataclass of sections, validated whole before step 1.

- sections.py: the shared `model` and `train` sections (the paper's base model as defaults), translation's
  `data` and `decode` sections and its run config, `Config`;
- parsing.py, classification.py: the other tasks' run configs;
- registry.py: the task registry, one line per task (its run config, Task, predictor and server spec);
- bounds.py: the one table of every number's bounds (the sections' __post_init__ and the command-line flags read it)
  and the check of a section's types, finiteness and bounds; memory.py: what a model and a training batch need in
  memory, refused before anything is allocated; errors.py: ConfigError;
- loading.py: TOML recipes, `--set section.key=value` overrides, a run's config.json; a recipe's `task` key picks
  the run config (from the registry; RUN_CONFIGS is its view name -> class).

This package is the bottom layer: it imports nothing else of transduce but outputs.py (docs/architecture.md).
"""

from .classification import POOLINGS, ClassifierRunConfig, ClassifyDataConfig, HeadConfig
from .loading import (
    RUN_CONFIGS,
    apply_overrides,
    build_section,
    config_from_dict,
    find_recipe,
    load_config,
    parse_override,
    read_config,
    read_config_dict,
    recipes_folder,
    save_config,
    shipped_recipes,
    task_config_class,
    task_name,
)
from .parsing import ParseDataConfig, ParseDecodeConfig, ParserModelConfig, ParsingRunConfig, TreeCorpusConfig
from .sections import (
    MBR_UTILITIES,
    Config,
    ConfigError,
    CorpusConfig,
    DataConfig,
    DecodeConfig,
    ModelConfig,
    TrainConfig,
    check_patience,
    check_sampling,
)

__all__ = [
    "MBR_UTILITIES",
    "POOLINGS",
    "RUN_CONFIGS",
    "ClassifierRunConfig",
    "ClassifyDataConfig",
    "Config",
    "ConfigError",
    "CorpusConfig",
    "DataConfig",
    "DecodeConfig",
    "HeadConfig",
    "ModelConfig",
    "ParseDataConfig",
    "ParseDecodeConfig",
    "ParserModelConfig",
    "ParsingRunConfig",
    "TrainConfig",
    "TreeCorpusConfig",
    "apply_overrides",
    "build_section",
    "check_patience",
    "check_sampling",
    "config_from_dict",
    "find_recipe",
    "load_config",
    "parse_override",
    "read_config",
    "read_config_dict",
    "recipes_folder",
    "save_config",
    "shipped_recipes",
    "task_config_class",
    "task_name",
]
