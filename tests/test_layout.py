"""The layering of docs/architecture.md, checked on the source: no import (at the top of a module, inside a function,
or for type checking only) runs from a lower layer up to a higher one, and the registries agree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "transduce"

# lowest first; a module may import its own layer and those below it
LAYERS = (
    ("outputs", "metrics"),
    ("config",),
    ("device",),
    ("model", "data"),
    ("hf", "documents", "terminology", "runs"),
    ("training", "decoding"),
    ("tasks", "export"),
    ("serving", "plot", "demo", "options_reference"),
    ("cli",),
    ("__init__", "__main__"),
)
# imports across packages of one layer, each with its reason; any other is refused like an upward one
ALLOWED = {
    ("data.treebank", "decoding.constraints"): "TargetVocab.constraint() builds the tree constraint over its ids",
}


def _module(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def _is_module(dotted: str) -> bool:
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path) -> set[str]:
    """Every transduce module `path` imports, relative to the package ("data.trees"; "__init__" for transduce)."""
    module = _module(path)
    package = [] if module == "__init__" else module.split(".")[: None if path.name == "__init__.py" else -1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
            elif (node.module or "").startswith("transduce"):
                base = node.module.removeprefix("transduce").lstrip(".")
            else:
                continue
            for alias in node.names:  # `from . import evalb` imports a module; `from .x import name` imports x
                dotted = f"{base}.{alias.name}" if base else alias.name
                found.add(dotted if _is_module(dotted) else base)
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("transduce.") for a in node.names if a.name.startswith("transduce.")}
    return {name or "__init__" for name in found}


def _layer(module: str) -> int:
    top = module.split(".")[0]
    return next(i for i, names in enumerate(LAYERS) if top in names)


def _allowed(source: str, target: str) -> bool:
    return any(
        (source == s or source.startswith(s + ".")) and (target == t or target.startswith(t + ".")) for s, t in ALLOWED
    )


def test_no_import_runs_up_a_layer():
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        if "static" in path.parts:
            continue
        source = _module(path)
        for target in _imports(path):
            if target.split(".")[0] == source.split(".")[0]:
                continue  # within one package
            up = _layer(target) > _layer(source)
            across = _layer(target) == _layer(source)
            if (up or across) and not _allowed(source, target):
                wrong.append(f"{source} -> {target}")
    assert not wrong, "imports against docs/architecture.md's layering:\n" + "\n".join(sorted(wrong))


MAX_LINES = 500  # docs/architecture.md: a file over about 500 lines is split by role


def test_no_source_file_is_over_500_lines():
    """Every file under src/ (Python or not: recipes and the server's static files too) has at most MAX_LINES
    lines; build output (__pycache__, *.egg-info) is not source."""
    root = SRC.parent
    over = []
    for path in sorted(root.rglob("*")):
        built = any(part == "__pycache__" or part.endswith(".egg-info") for part in path.relative_to(root).parts)
        if path.is_file() and not built:
            with path.open("rb") as f:
                count = sum(1 for _ in f)
            if count > MAX_LINES:
                over.append(f"{path.relative_to(root.parent)}: {count} lines")
    assert not over, f"files over {MAX_LINES} lines (split them by concern):\n" + "\n".join(over)


MAX_FUNCTION_LINES = 60  # docs/architecture.md's style rule


def test_no_function_is_over_60_lines():
    """Every function and method under src/transduce, from its `def` (decorators aside) to its last line, docstring
    and comments included, has at most MAX_FUNCTION_LINES lines."""
    over = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                count = (node.end_lineno or node.lineno) - node.lineno + 1
                if count > MAX_FUNCTION_LINES:
                    over.append(f"{path.relative_to(SRC.parent)}:{node.lineno} {node.name}: {count} lines")
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (name a part of them):\n" + "\n".join(over)


def test_every_module_has_a_layer():
    for path in SRC.rglob("*.py"):
        _layer(_module(path))  # StopIteration names a module LAYERS does not place


def test_every_name_in_the_task_registry_resolves():
    """One table (config/registry.py) names each task's parts; each "module:Name" in it must import and be what
    the entry says, and the loader's, the trainer's and the server's views are that table."""
    from transduce.config import RUN_CONFIGS, registry, task_config_class
    from transduce.serving.app import TaskSpec, served_tasks
    from transduce.tasks import TASKS, task_class

    assert TASKS is registry.TASKS and RUN_CONFIGS == {n: e.run_config for n, e in registry.TASKS.items()}
    for name, entry in registry.TASKS.items():
        assert task_class(name).name == name and task_config_class(name) is entry.run_config
        assert callable(registry.load(entry.predictor).from_run)
        assert entry.serving is None or isinstance(registry.load(entry.serving), TaskSpec)
    assert list(served_tasks()) == [n for n, e in registry.TASKS.items() if e.serving is not None]


def test_importing_transduce_imports_no_task():
    """The registry names tasks by string: loading the config loader (or the package) imports none of them."""
    import subprocess
    import sys

    probe = "import sys, transduce, transduce.config; print(sorted(m for m in sys.modules if '.tasks' in m))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"


# what only parsing has: its pointer (model/pointer.py, decoding/parser.py) and its trees
PARSING_NAMES = re.compile(r"\b(word_pos|pointer\w*|pars(?:e|er|ing)\w*|trees?|constituents?|leaf)\b", re.IGNORECASE)


def test_the_papers_model_and_the_search_know_no_parsing():
    """model/transformer.py, decoding/search.py and decoding/ensemble.py hold no parsing name, in code or comments
    (DESIGN: nothing in model/ knows about tasks): the word pointer is a subclass beside the Transformer
    (model/pointer.py), and the parser hands it its positions through the cache (decoding/parser.py's
    PointerGuide). The ensemble may name the command that ensembles parsers (`transduce parse --ensemble`)."""
    for name in ("model/transformer.py", "decoding/search.py", "decoding/ensemble.py"):
        found = set(PARSING_NAMES.findall((SRC / name).read_text(encoding="utf-8")))
        if name == "decoding/ensemble.py":
            found -= {"parse", "parser", "parsers", "parsing"}
        assert not found, f"{name} names {sorted(found)}"


def test_what_opens_a_run_imports_nothing_from_training():
    """Predictors, exports and the server open runs through runs.py (issue 75 item 5), never through training/."""
    wrong = []
    for package in ("decoding", "export", "serving"):
        for path in sorted((SRC / package).rglob("*.py")):
            wrong += [f"{_module(path)} -> {t}" for t in _imports(path) if t.split(".")[0] == "training"]
    assert not wrong, "\n".join(wrong)
