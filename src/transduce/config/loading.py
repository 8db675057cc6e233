"""Reading configs: TOML recipes (a path or a shipped recipe's name) with `--set section.key=value` overrides, and a
run's saved config.json. Unknown keys and wrong types are refused with the offending key named (no silent ignore).

Which run config a recipe builds is its top-level `task` key (default "translation"): the task registry
(registry.py) names its class, as it names the Task that trains it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from pathlib import Path

from . import registry
from .sections import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

# a recipe's `task` -> the frozen dataclass of its run config: a view of the registry, not a second table
RUN_CONFIGS: dict[str, type] = {name: task.run_config for name, task in registry.TASKS.items()}


def _coerce(value, annotation, key: str):
    """Check `value` against a field's type annotation; ints are accepted for floats, lists for tuples."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, key)
            except ConfigError:
                pass
        raise ConfigError(f"{key}: expected {annotation}, got {value!r}")
    if origin is tuple:
        (item_type, _) = typing.get_args(annotation)
        if isinstance(value, (str, dict)):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return tuple(_coerce(v, item_type, key) for v in value)
    if dataclasses.is_dataclass(annotation):  # a table of its own ([[data.corpora]])
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a table of keys, got {value!r}")
        return _build_section(annotation, value, key)
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported type {annotation}")  # pragma: no cover


def build_section(cls, values: dict, section: str):
    """One section's dataclass from its keys (a recipe's table, or JSON a run or a prepared folder recorded), each
    value checked against its field's type (lists become tuples, tables their dataclasses)."""
    return _build_section(cls, values, section)


def _build_section(cls, values: dict, section: str):
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in values
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]  # fmt: skip
    if missing:
        raise ConfigError(f"{section}: {missing[0]} is required")
    for key, value in values.items():
        if key not in names:
            raise ConfigError(f"unknown key {section}.{key} (known: {', '.join(sorted(names))})")
        kwargs[key] = _coerce(value, hints[key], f"{section}.{key}")
    return cls(**kwargs)


def task_config_class(task: str | None):
    """The config class of a task name ("translation" when None): a recipe's top-level `task` key chooses it."""
    return registry.entry(task or registry.DEFAULT_TASK).run_config


def task_name(config) -> str:
    """The task a config object trains (the inverse of task_config_class)."""
    for name, task in registry.TASKS.items():
        if isinstance(config, task.run_config):
            return name
    raise ConfigError(f"no task trains a {type(config).__name__}")


def config_from_dict(raw: dict, cls=None):
    """Build a run config from nested dicts: its class is `cls`, else the one its top-level `task` key names
    (translation's Config when absent). A `task` key that disagrees with `cls` is refused."""
    raw = dict(raw)
    task = raw.pop("task", None)
    if task is not None and not isinstance(task, str):
        raise ConfigError(f"task must be a string, got {task!r}")
    if cls is None:
        cls = task_config_class(task)
    elif task is not None and task_config_class(task) is not cls:
        raise ConfigError(f"this is a {task} recipe; it cannot configure a {cls.__name__}")
    known = {f.name: typing.get_type_hints(cls)[f.name] for f in dataclasses.fields(cls)}
    sections = {}
    for name, values in raw.items():
        if name not in known:
            raise ConfigError(f"unknown section [{name}] (known: {', '.join(known)})")
        if not isinstance(values, dict):
            raise ConfigError(f"[{name}] must be a table of keys")
        sections[name] = _build_section(known[name], values, name)
    return cls(**sections)


def parse_override(text: str) -> tuple[str, str, object]:
    """'train.max_steps=2000' -> ('train', 'max_steps', 2000). Values are TOML; a bare word is a string."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"--set expects section.key=value, got {text!r}")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return section, key, value


def recipes_folder() -> Path:
    """The recipes shipped inside the package (package data), so `transduce train multi30k` works anywhere."""
    return Path(__file__).resolve().parent.parent / "recipes"


def shipped_recipes() -> list[str]:
    return sorted(p.stem for p in recipes_folder().glob("*.toml"))


def find_recipe(recipe: str | Path) -> Path:
    """A recipe file as given, else a shipped recipe by name ("multi30k" or "multi30k.toml")."""
    path = Path(recipe)
    if path.exists() or len(path.parts) > 1:
        return path
    shipped = recipes_folder() / (path.name if path.suffix == ".toml" else f"{path.name}.toml")
    if shipped.is_file():
        return shipped
    raise ConfigError(f"{recipe}: no such recipe file, and not a shipped recipe ({', '.join(shipped_recipes())})")


def load_config(recipe: str | Path | None = None, overrides: typing.Sequence[str] = (), cls=None):
    """Read a TOML recipe (a path, or a shipped recipe's name; the defaults when None), then apply
    `section.key=value` overrides. The recipe's top-level `task` key (default "translation") picks the config
    class unless `cls` is given."""
    raw: dict = {}
    if recipe is not None:
        path = find_recipe(recipe)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError(f"{path}: cannot read recipe ({err.strerror})") from None
        try:
            raw = tomllib.loads(text.removeprefix("\ufeff"))  # a byte-order mark an editor put there is no TOML
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{path}: not valid TOML: {err}") from None
    return apply_overrides(raw, overrides, cls)


def apply_overrides(raw: dict, overrides: typing.Sequence[str], cls=None):
    if isinstance(overrides, str) or not all(isinstance(text, str) for text in overrides):
        raise TypeError(f"overrides must be a list of 'section.key=value' strings, got {overrides!r}")
    raw = {k: dict(v) if isinstance(v, dict) else v for k, v in raw.items()}
    for text in overrides:
        section, key, value = parse_override(text)
        raw.setdefault(section, {})[key] = value
    return config_from_dict(raw, cls)


def save_config(config, path: Path) -> None:
    """RUN/config.json: the task's name, then the resolved sections."""
    from ..outputs import atomic_write_text

    raw = {"task": task_name(config), **dataclasses.asdict(config)}
    atomic_write_text(path, json.dumps(raw, indent=2, allow_nan=False) + "\n")  # NaN is not JSON (never held)


def read_config_dict(path: Path) -> dict:
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path}: cannot read the run's config ({err})") from None
    except RecursionError:  # JSON nested thousands of levels deep: no run's config is
        raise ConfigError(f"{path}: cannot read the run's config (nested too deeply)") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: not a run config (a JSON object of sections)")
    return raw


def read_config(path: Path, cls=None):
    """A run's saved config.json (its `task` key picks the class unless `cls` is given)."""
    return config_from_dict(read_config_dict(path), cls)
